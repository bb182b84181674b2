"""Config: defaults, validation with dotted keys, did-you-mean, overrides, saved and reloaded."""

from pathlib import Path

import pytest

from lookback.config import Config, ConfigError, from_dict, load_config, save_config

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


def test_defaults_are_valid():
    cfg = from_dict({})
    assert cfg.model.attention == "additive" and cfg.train.lr == 1e-3


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    assert isinstance(load_config(path), Config)


def test_every_problem_is_reported_at_once_with_its_dotted_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "model:\n  atention: dot\n  hidden_size: big\n  dropout: 1.5\ntrain:\n  lr: -1\ndecoder: {}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert len(lines) == 5
    assert all(line.startswith(f"{path}: ") for line in lines)
    text = str(err.value)
    assert "model.atention: unknown key (did you mean 'attention'?)" in text
    assert "model.hidden_size: got 'big', expected an integer" in text
    assert "model.dropout: got 1.5, expected a number in [0, 1)" in text
    assert "train.lr: got -1.0, expected a number > 0" in text
    assert "decoder: unknown key (did you mean 'decode'?)" in text


def test_choices_and_booleans_are_checked():
    with pytest.raises(ConfigError, match=r"model.cell: got 'transformer', expected one of rnn, gru, lstm"):
        from_dict({"model": {"cell": "transformer"}})
    with pytest.raises(ConfigError, match="model.bidirectional: got 'yes please', expected true or false"):
        from_dict({"model": {"bidirectional": "yes please"}})
    with pytest.raises(ConfigError, match="decode.nbest: 6 is more than decode.beam"):
        from_dict({"decode": {"nbest": 6, "beam": 5}})


def test_overrides_are_yaml_scalars(tmp_path):
    cfg = load_config(
        None,
        [
            "train.lr=5e-4",
            "model.cell=lstm",
            "model.bidirectional=false",
            "train.max_steps=7",
            "data.multi30k_dir=/data/m30k",
        ],
    )
    assert cfg.train.lr == 5e-4 and cfg.model.cell == "lstm"
    assert cfg.model.bidirectional is False and cfg.train.max_steps == 7
    assert cfg.data.multi30k_dir == "/data/m30k"
    with pytest.raises(ConfigError, match="train.lrr: unknown key"):
        load_config(None, ["train.lrr=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(None, ["train.lr"])


def test_yaml_errors_name_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("model:\n  cell: gru\n   bad: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{path}:\d+: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(None, ["model.attention=general", "train.seed=9"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
