"""lookback tune (tune.py): search files checked as configs are, the tables and best.yaml from the
trials' run directories by hand, and a tiny search on a local Ray that finds a learning rate
far better than a bad default (marked slow: Ray Tune starts in some seconds)."""

import csv
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lookback.cli import main
from lookback.config import ConfigError, load_config
from lookback.data.synth import synth_corpus
from lookback.explain.curves import history, read_metrics
from lookback.study.tune import load_search, trial_rows, write_results

from ..helpers import require, tiny_train_config
from .studies import tiny_study


def _search_file(tmp_path, base_train=None, **search):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(tiny_train_config(tmp_path, train=base_train or {})), encoding="utf-8")
    raw = {
        "name": "tiny",
        "base": "base.yaml",
        "out_dir": str(tmp_path / "out"),
        "space": {"train.lr": {"log": [0.0001, 0.05]}, "model.dropout": {"range": [0.0, 0.3]}},
        "trials": 4,
        "grace": 10,
        "reduction": 2,
        **search,
    }
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def test_a_search_file_is_read_with_its_base_and_clock(tmp_path):
    search = load_search(_search_file(tmp_path))
    assert search.base == str(tmp_path / "base.yaml") and search.trials == 4
    assert search.clock() == ("updates", 40.0)  # the tiny config's max_steps, no time limit
    cfg = search.config({"train.lr": 0.002, "model.dropout": 0.1}, run_dir=str(tmp_path / "t1"))
    assert (cfg.train.lr, cfg.model.dropout, cfg.train.run_dir) == (0.002, 0.1, str(tmp_path / "t1"))
    timed = load_search(_search_file(tmp_path, base_train={"time_limit": 12}, grace=3))
    assert timed.clock() == ("minutes", 12.0)


def test_on_a_clock_in_minutes_a_trial_validates_at_every_rung(tmp_path):
    # rungs at 3 and 9 of 12 minutes: a trial validates at each multiple of 3 minutes, however
    # long its valid_every updates take; on a clock of updates valid_every alone decides
    timed = load_search(_search_file(tmp_path, base_train={"time_limit": 12}, grace=3))
    assert timed.config({}).train.valid_minutes == 3
    own = {"train.valid_minutes": 1}
    told = load_search(_search_file(tmp_path, base_train={"time_limit": 12}, grace=3, set=own))
    assert told.config({}).train.valid_minutes == 1  # the search file's own cadence is kept
    assert load_search(_search_file(tmp_path)).config({}).train.valid_minutes == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"space": {"train.lr": {"log": [0, 0.1]}}},
            "space.train.lr.log: expected [lo, hi] with 0 < lo < hi",
        ),
        (
            {"space": {"train.lr": {"uniform": [0, 1]}}},
            "space.train.lr: expected one of log, range, int, choice",
        ),
        (
            {"space": {"train.warmup": {"int": [10, 2.5]}}},
            "space.train.warmup.int: expected [lo, hi], integers",
        ),
        ({"space": {"train.rl": {"log": [0.001, 0.1]}}}, "train.rl"),  # the config names it
        ({"space": {"model.dropout": {"range": [0.0, 1.5]}}}, "highest values"),  # out of the key's range
        ({"space": {"train.run_dir": {"choice": ["a", "b"]}}}, "each trial has its own"),
        ({"grace": 40}, "grace: 40 updates is not less than a trial's 40"),
        ({"trials": 0}, "trials"),
        ({"trails": 3}, "did you mean 'trials'"),
    ],
)
def test_a_bad_search_file_is_one_line_naming_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError, match="search.yaml") as caught:
        load_search(_search_file(tmp_path, **change))
    assert message in str(caught.value)


def test_a_search_needs_a_clock(tmp_path):
    with pytest.raises(ConfigError, match="a trial needs a clock"):
        load_search(_search_file(tmp_path, base_train={"max_steps": 0}))


def _fake_trial(out, trial, lr, bleus, every=10):
    """A trial's run directory as the trainer leaves it: config.yaml and metrics.jsonl."""
    run = out / "trials" / trial
    run.mkdir(parents=True)
    cfg = load_config(None, [f"train.lr={lr}", "model.dropout=0.1"])
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()), encoding="utf-8")
    records = [
        {"step": every * (i + 1), "seconds": 6.0 * (i + 1), "kind": "valid", "bleu": b}
        for i, b in enumerate(bleus)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_the_trials_table_and_best_config_by_hand(tmp_path):
    search = load_search(_search_file(tmp_path))
    out = tmp_path / "out"
    _fake_trial(out, "a", 0.0001, [1.0])  # stopped by ASHA at 10 of 40 updates
    _fake_trial(out, "b", 0.01, [20.0, 35.5, 31.0, 34.0])  # the whole clock; best at step 20
    _fake_trial(out, "c", 0.002, [5.0, 9.0])
    rows = trial_rows(search, out)
    assert [r["trial"] for r in rows] == ["b", "c", "a"]  # best validation BLEU first
    best = rows[0]
    assert (best["bleu"], best["at_step"], best["updates"], best["stopped_early"]) == (35.5, 20, 40, False)
    assert rows[2]["stopped_early"] and rows[2]["updates"] == 10
    assert (best["train.lr"], best["model.dropout"]) == (0.01, 0.1)

    result = write_results(search, out, seconds=60.0, need={"num_cpus": 1, "num_gpus": 0})
    assert result["best"]["trial"] == "b" and result["clock"] == {"unit": "updates", "length": 40.0}
    assert load_config(out / "best.yaml").train.lr == 0.01  # the base with the best values
    with (out / "trials.csv").open(encoding="utf-8") as f:
        assert [r["trial"] for r in csv.DictReader(f)] == ["b", "c", "a"]
    assert "| b | 0.01 | 0.1 | 35.5 | 20 | 40 | False |" in (out / "trials.md").read_text(encoding="utf-8")
    assert (out / "curves.png").stat().st_size > 0
    assert (
        json.loads((out / "results.json").read_text(encoding="utf-8"))["trials"][0]["curve"][1]["bleu"]
        == 35.5
    )


def _reverse_search(tmp_path, trials: int) -> Path:
    """search.yaml in tmp_path: Adam's learning rate in [1e-5, 3e-2] for the reverse task (3-8
    symbols), a tiny GRU with attention (d = 32), 300 updates a trial on 1 thread, where a rate
    of 3e-3 to 1e-2 reaches a validation BLEU above 90 and the base's 1e-5 learns nothing; ASHA
    at 100 and 200 updates."""
    data = synth_corpus("reverse", tmp_path / "data", (3, 8), seed=1, sizes={"train": 2000, "val": 60})
    size = {"emb_size": 32, "hidden_size": 32, "dec_hidden_size": 32, "attention_size": 32}
    train_ = {"max_steps": 300, "valid_every": 100, "lr": 1e-5, "max_tokens": 1000, "valid_sample": 0}
    raw = tiny_train_config(tmp_path, train=train_, model=size)
    raw["data"] = {
        "src_lang": "src",
        "tgt_lang": "tgt",
        "train": str(data["train"]),
        "valid": str(data["val"]),
    }
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    search = {
        "name": "reverse",
        "base": "base.yaml",
        "out_dir": str(tmp_path / "out"),
        "space": {"train.lr": {"log": [1e-5, 3e-2]}},
        "trials": trials,
        "grace": 100,
        "reduction": 2,
    }
    (tmp_path / "search.yaml").write_text(yaml.safe_dump(search), encoding="utf-8")
    return tmp_path / "search.yaml"


def test_without_ray_the_commands_say_how_to_get_it_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails, as where it is not installed
    assert main(["tune", str(_search_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Ray is not installed: pip install 'lookback[ray]'" in err
    study = tiny_study(tmp_path / "study")
    assert main(["study", str(study), "--ray"]) == 2
    assert "Ray is not installed" in capsys.readouterr().err
    assert not (tmp_path / "study" / "out" / "runs").exists()  # said before any work


@pytest.mark.slow
def test_a_tiny_search_stopped_with_ctrl_c_goes_on_and_beats_a_bad_default(tmp_path):
    """`lookback tune --out DIR` with four trials of `_reverse_search`, on a local Ray of 2 CPUs (two
    at once), in a process of its own, interrupted (SIGINT, as Ctrl-C) once a trial has validated.
    Run again, it restores the search and ends with its four trials, those begun before the stop
    among them, and no fifth; the best learning rate is far better than the base's."""
    require(importlib.util.find_spec("ray"), "no ray: pip install 'lookback[ray]'")
    from lookback.training.train import train

    path = _reverse_search(tmp_path, trials=4)
    out = tmp_path / "elsewhere"  # --out over the file's out_dir
    command = [sys.executable, "-m", "lookback", "tune", str(path), "--out", str(out)]
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None:
        logs = out.glob("trials/*/metrics.jsonl")
        if any('"kind": "valid"' in p.read_text(encoding="utf-8") for p in logs):
            break
        time.sleep(0.1)
    assert first.poll() is None, "the search ended before the test could stop it"
    first.send_signal(signal.SIGINT)
    first.wait(timeout=120)
    begun = {p.name for p in (out / "trials").iterdir()}
    assert begun

    again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "tune reverse: 4 trials" in again.stdout and str(out / "best.yaml") in again.stdout
    assert not (tmp_path / "out").exists()
    result = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert begun <= {r["trial"] for r in result["trials"]} and len(result["trials"]) == 4
    assert result["trial_holds"] == {"num_cpus": 1, "num_gpus": 0}

    default = train(load_config(tmp_path / "base.yaml", [f"train.run_dir={tmp_path / 'default'}"]))
    default_bleu = max(r["bleu"] for r in history(read_metrics(default), "valid"))
    assert result["best"]["train.lr"] > 1e-3
    assert result["best"]["bleu"] > default_bleu + 20
    assert load_config(out / "best.yaml").train.lr == result["best"]["train.lr"]
