"""Config: defaults, validation with dotted keys, did-you-mean, overrides, saved and reloaded."""

import dataclasses
import re
from pathlib import Path

import pytest

from lookback.config import (
    Config,
    ConfigError,
    DecodeConfig,
    from_dict,
    load_config,
    save_config,
    search_width,
)
from lookback.decoding.significance import family
from lookback.study.run import Study, load_study

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))
STUDIES = sorted((Path(__file__).parent.parent / "configs" / "study").glob("*.yaml"))


def test_defaults_are_valid():
    cfg = from_dict({})
    assert cfg.model.attention == "additive" and cfg.train.lr == 1e-3


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_load_and_come_back_from_a_runs_config_yaml(path, tmp_path):
    cfg = load_config(path)
    save_config(cfg, tmp_path / "config.yaml")  # as a run directory keeps it
    assert load_config(tmp_path / "config.yaml") == cfg


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.name)
def test_shipped_studies_load_with_every_model_config(path):
    study = load_study(path)
    assert isinstance(study, Study) and Path(study.base).exists()  # base: relative to the study file
    configs = study.configs()
    assert configs and all(isinstance(cfg, Config) for cfg in configs.values())
    for name, cfg in configs.items():  # each model is the base with its own overrides applied
        for key, value in (study.models[family(name).split("@")[0]] or {}).items():
            section, field = key.split(".")
            assert getattr(getattr(cfg, section), field) == value, (name, key)


def test_one_policy_for_more_hypotheses_than_the_beam():
    """The beam is raised to hold nbest; it is never lowered, and nbest is never cut."""
    assert search_width(5, 1) == 5
    assert search_width(5, 5) == 5
    assert search_width(2, 4) == 4
    assert search_width(1, 1) == 1


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
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'missing.yaml'}: no such config file"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=rf"^{tmp_path}: a directory, not a config file"):
        load_config(tmp_path)


def test_saved_config_round_trips(tmp_path):
    cfg = load_config(None, ["model.attention=general", "train.seed=9"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg


# Every section, every key: the promise that a bad value is refused with file, key and expectation.

SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
NUMERIC = [
    (section, f.name, f.type)
    for section, cls in ((f.name, type(getattr(Config(), f.name))) for f in dataclasses.fields(Config))
    for f in dataclasses.fields(cls)
    if f.type in ("int", "float")
]


def _problems(tmp_path: Path, text: str) -> list[str]:
    """The lines of the ConfigError that the YAML `text` gives, each checked to name the file."""
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    return [line.removeprefix(f"{path}: ") for line in lines]


@pytest.mark.parametrize(
    "yaml_text, problem",
    [
        ("data: {src_lang: ''}", "data.src_lang: got '', expected a non-empty string"),
        ("data: {train: 3}", "data.train: got 3, expected a string"),
        ("data: {max_len: 0}", "data.max_len: got 0, expected an integer >= 1"),
        ("tokenizer: {kind: bpe}", "tokenizer.kind: got 'bpe', expected one of sentencepiece, word"),
        ("tokenizer: {vocab_size: 4}", "tokenizer.vocab_size: got 4, expected an integer >= 8"),
        ("tokenizer: {joint: 'yes'}", "tokenizer.joint: got 'yes', expected true or false"),
        ("model: {hidden_size: 2.5}", "model.hidden_size: got 2.5, expected an integer"),
        ("model: {dropout: 1.0}", "model.dropout: got 1.0, expected a number in [0, 1)"),
        ("model: {attend_from: next}", "model.attend_from: got 'next', expected one of current, previous"),
        ("train: {lr: .inf}", "train.lr: got inf, expected a finite number"),
        ("train: {seed: -1}", "train.seed: got -1, expected an integer in [0, 2**32)"),
        ("train: {threads: 5000}", "train.threads: got 5000, expected an integer in [0, 1024]"),
        ("train: {run_dir: ' '}", "train.run_dir: got ' ', expected a directory (a non-empty string)"),
        ("decode: {beam: 0}", "decode.beam: got 0, expected an integer >= 1"),
        ("decode: {length_penalty: .nan}", "decode.length_penalty: got nan, expected a finite number"),
        ("decode: {max_ratio: fast}", "decode.max_ratio: got 'fast', expected a number"),
    ],
)
def test_each_section_names_file_key_and_expectation(tmp_path, yaml_text, problem):
    assert _problems(tmp_path, yaml_text + "\n") == [problem]


@pytest.mark.parametrize(
    "yaml_text, problem",
    [
        ("data: {src_lnag: en}", "data.src_lnag: unknown key (did you mean 'src_lang'?)"),
        ("tokenizer: {vocab_sise: 8}", "tokenizer.vocab_sise: unknown key (did you mean 'vocab_size'?)"),
        ("model: {hiden_size: 8}", "model.hiden_size: unknown key (did you mean 'hidden_size'?)"),
        ("train: {max_step: 8}", "train.max_step: unknown key (did you mean 'max_steps'?)"),
        ("decode: {beems: 8}", "decode.beems: unknown key (did you mean 'beam'?)"),
        ("trian: {}", "trian: unknown key (did you mean 'train'?)"),
        (
            "decode: {zzz: 1}",  # nothing close: the valid keys
            f"decode.zzz: unknown key (valid: {', '.join(f.name for f in dataclasses.fields(DecodeConfig))})",
        ),
    ],
)
def test_unknown_keys_suggest_the_nearest_valid_key(tmp_path, yaml_text, problem):
    assert _problems(tmp_path, yaml_text + "\n") == [problem]


@pytest.mark.parametrize("section", SECTIONS)
def test_every_key_checks_its_type(section):
    """A mapping is the wrong type for every leaf key: each one must say so (a key without a check fails)."""
    fields = [f.name for f in dataclasses.fields(type(getattr(Config(), section)))]
    with pytest.raises(ConfigError) as err:
        from_dict({section: {name: {"a": 1} for name in fields}})
    lines = str(err.value).splitlines()
    assert [line.split(": ")[1] for line in lines] == [f"{section}.{name}" for name in fields]
    assert all(": got {'a': 1}, expected " in line for line in lines)


@pytest.mark.parametrize("section, key, kind", NUMERIC, ids=[f"{s}.{k}" for s, k, _ in NUMERIC])
def test_every_number_has_a_range(section, key, kind):
    """-1 is out of range for every numeric key; a key added without a range check fails here."""
    with pytest.raises(ConfigError, match=rf"^config: {section}\.{key}: got -1(\.0)?, expected "):
        from_dict({section: {key: -1}})
    if kind == "float":
        for bad in (float("nan"), float("inf"), 10**400):
            with pytest.raises(ConfigError, match=rf"^config: {section}\.{key}: got .*, expected a finite"):
                from_dict({section: {key: bad}})


def test_a_section_that_is_not_a_mapping(tmp_path):
    assert _problems(tmp_path, "model: 3\ntrain: [1]\n") == [
        "model: expected a mapping, got int",
        "train: expected a mapping, got list",
    ]
    assert _problems(tmp_path, "- model\n") == ["expected a mapping of sections at the top level"]
    assert _problems(tmp_path, "0\n") == ["expected a mapping of sections at the top level"]


def test_yaml_pitfalls_are_caught(tmp_path):
    """Duplicate keys (PyYAML keeps the last silently), 1e-3 (a string to YAML 1.1), bytes, nesting."""
    twice = tmp_path / "twice.yaml"
    twice.write_text("train:\n  lr: 0.1\nmodel: {}\ntrain:\n  seed: 2\n", encoding="utf-8")
    expected = f"{twice}:4: key 'train' is given twice in one mapping; delete one of them"
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}$"):
        load_config(twice)
    path = tmp_path / "sci.yaml"
    path.write_text("train:\n  lr: 1e-3\n  min_lr: 5E-6\n", encoding="utf-8")
    cfg = load_config(path)
    assert (cfg.train.lr, cfg.train.min_lr) == (1e-3, 5e-6)
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes(b"train:\n  run_dir: caf\xe9\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(latin1))}:2: not UTF-8 text \(byte 0xe9\)$"):
        load_config(latin1)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(deep)


def test_problem_lines_stay_short(tmp_path):
    lines = _problems(tmp_path, f"model: {{cell: {'x' * 500}}}\ntrain: {{lr: 1{'0' * 400}}}\n")
    assert len(lines) == 2 and all(len(line) < 120 for line in lines)
    assert lines[1].startswith("train.lr: got 1000") and lines[1].endswith("..., expected a finite number")


def test_bad_config_stops_before_any_work(tmp_path, capsys):
    """`lookback train` with a bad config: one line per problem, exit 2, no run directory made."""
    from lookback.cli import main

    run_dir = tmp_path / "run"
    path = tmp_path / "bad.yaml"
    path.write_text(f"train: {{run_dir: {run_dir}, lr: 0}}\nmodel: {{cel: gru}}\n", encoding="utf-8")
    assert main(["train", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"lookback: error: {path}: model.cel: unknown key (did you mean 'cell'?)",
        f"lookback: error: {path}: train.lr: got 0.0, expected a number > 0",
    ]
    assert not run_dir.exists()
    with pytest.raises(ConfigError):  # --debug: the exception, with its traceback
        main(["--debug", "train", str(path)])
