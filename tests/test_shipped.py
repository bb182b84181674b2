"""The shipped configs work by name from any directory, and `lookback quickstart` is the main job:
train, translate three sentences, score the test set; run again, it continues or reports."""

import pytest

from lookback.cli import main
from lookback.cli.quickstart import SENTENCES
from lookback.config import SHIPPED, ConfigError, find_config, load_config, shipped_configs
from lookback.study.run import load_study
from lookback.study.tune import load_search

from .helpers import tiny_train_config


def test_every_shipped_config_loads_by_its_name_from_another_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: the names must come from the package
    names = shipped_configs()
    assert {"quickstart", "tiny", "study/reverse"} <= set(names)
    for name in names:
        path = find_config(name)
        assert path == SHIPPED / f"{name}.yaml"
        if name.startswith("study/"):
            assert load_study(name).models
        elif name.startswith("tune/"):
            assert load_search(name).space
        else:
            assert load_config(name) == load_config(path)


def test_the_repository_paths_and_the_names_give_the_same_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main_job = load_config("quickstart")
    assert load_config("quickstart.yaml") == main_job
    assert load_config("configs/quickstart.yaml") == main_job  # the README's path, from anywhere
    assert main_job.train.run_dir == "runs/quickstart" and main_job.model.dropout == 0.2
    assert main_job.train.label_smoothing == 0.1  # docs/recipe.md run 48


def test_a_file_that_exists_is_read_before_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quickstart").write_text("train:\n  lr: 0.125\n", encoding="utf-8")
    assert load_config("quickstart").train.lr == 0.125


def test_an_unknown_config_name_is_one_line_with_a_did_you_mean(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="did you mean 'quickstart'"):
        find_config("quickstrat")
    assert main(["train", "quickstrat"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("lookback: error: quickstrat: no such config file")
    assert "lookback configs lists them" in err


def test_lookback_configs_lists_each_shipped_config_with_its_first_comment(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line and not line[0].isdigit()}
    assert set(shipped_configs()) <= set(rows)
    assert "synthetic reverse task" in rows["synth_reverse"]


def tiny_quickstart_sets(tmp_path) -> list[str]:
    """--set flags that turn the main job into a seconds-long run on the toy corpus."""
    raw = tiny_train_config(tmp_path)
    raw["train"] |= {"warmup": 5, "max_steps": 30, "valid_every": 30, "time_limit": 0.0}
    raw["train"].pop("run_dir")  # the main job's own: runs/quickstart, under the current directory
    sets = []
    for section, values in raw.items():
        for key, value in values.items():
            sets += ["--set", f"{section}.{key}={value}"]
    return sets


def test_quickstart_trains_translates_scores_and_then_reports_the_same_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    sets = tiny_quickstart_sets(tmp_path)
    assert main(["quickstart", *sets]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "runs" / "quickstart" / "last.pt").is_file()
    assert "== translating a few sentences (beam 5)" in out
    assert all(sentence in out for sentence in SENTENCES)
    assert ", beam 5" in out and "\nBLEU " in out
    first = (tmp_path / "runs" / "quickstart" / "last.pt").read_bytes()
    assert main(["quickstart", *sets]) == 0  # a second run finds the finished run and reports it
    assert (tmp_path / "runs" / "quickstart" / "last.pt").read_bytes() == first
    assert out.split("== translating")[1] == capsys.readouterr().out.split("== translating")[1]
