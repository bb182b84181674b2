"""Training curves from metrics.jsonl (lookback curves) and TensorBoard logging (train.tensorboard)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lookback.cli import main
from lookback.config import ConfigError, from_dict
from lookback.explain.curves import history, plot_curves, read_metrics
from lookback.training.train import train

from ..helpers import tiny_train_config


def _write(run: Path, records: list[dict], tail: str = "") -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8"
    )
    return run


def _rec(kind: str, step: int, seconds: float, **values) -> dict:
    return {"kind": kind, "step": step, "epoch": 0, "seconds": seconds, **values}


def test_history_keeps_the_run_as_it_finally_went_after_a_resume():
    """Logged 100, 200, 300; killed; resumed from the checkpoint at 200, which logs 300 and 400 again."""
    records = [
        _rec("train", 100, 10, loss=5.0),
        _rec("train", 200, 20, loss=4.0),
        _rec("valid", 200, 22, bleu=3.0),
        _rec("train", 300, 30, loss=3.5),  # lost with the kill: the checkpoint is at 200
        _rec("train", 300, 31, loss=3.4),
        _rec("train", 400, 41, loss=3.0),
        _rec("valid", 400, 43, bleu=9.0),
    ]
    assert [(r["step"], r["loss"]) for r in history(records, "train")] == [
        (100, 5.0),
        (200, 4.0),
        (300, 3.4),
        (400, 3.0),
    ]
    assert [r["bleu"] for r in history(records, "valid")] == [3.0, 9.0]


def test_read_metrics_skips_a_cut_last_line_and_names_a_bad_one(tmp_path):
    run = _write(tmp_path / "a", [_rec("train", 50, 5, loss=6.0)], tail='{"kind": "tra')
    assert len(read_metrics(run)) == 1  # killed while writing its last line
    bad = _write(tmp_path / "b", [_rec("train", 50, 5, loss=6.0)])
    (bad / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"metrics.jsonl: line 2 is not JSON$"):
        read_metrics(bad)
    with pytest.raises(ValueError, match=r"no such file \(is .*nothing a run directory\?\)"):
        read_metrics(tmp_path / "nothing")


def test_curves_of_two_runs_are_drawn_by_updates_and_by_minutes(tmp_path, capsys):
    fast = _write(tmp_path / "fast", [_rec("train", s, s / 10, loss=6 - s / 100) for s in (50, 100, 150)])
    slow = _write(tmp_path / "slow", [_rec("train", s, s, loss=6 - s / 200) for s in (50, 100)])
    with open(fast / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(_rec("valid", 150, 16, bleu=12.5)) + "\n")
    out = tmp_path / "curves.png"
    assert main(["curves", f"fast={fast}", str(slow), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    import matplotlib.pyplot as plt

    captured = {}
    real = plt.Figure.savefig

    def keep(fig, *args, **kwargs):  # look at the drawn lines before the figure is closed
        captured["axes"] = fig.axes
        return real(fig, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plt.Figure, "savefig", keep)
        plot_curves({"fast": fast, "slow": slow}, tmp_path / "c.svg")
    loss_by_updates, loss_by_minutes, bleu_by_updates, bleu_by_minutes = captured["axes"]
    lines = {line.get_label(): line for line in loss_by_minutes.get_lines()}
    assert list(lines["fast"].get_xdata()) == pytest.approx([50 / 600, 100 / 600, 150 / 600])  # seconds / 60
    assert list(lines["slow"].get_ydata()) == pytest.approx([5.75, 5.5])
    assert [list(x.get_xdata()) for x in bleu_by_updates.get_lines()] == [[150], []]  # slow has no validation
    assert (tmp_path / "c.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_tensorboard_logs_what_metrics_jsonl_logs(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    raw = tiny_train_config(
        tmp_path, train={"max_steps": 20, "valid_every": 10, "log_every": 5, "tensorboard": True}
    )
    run = train(from_dict(raw))
    records = read_metrics(run)
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    losses = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert losses == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in history(records, "train")]
    assert [e.step for e in events.Scalars("valid/bleu")] == [10, 20]


def test_tensorboard_without_the_package_is_one_line_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard now raises ImportError
    raw = tiny_train_config(tmp_path, train={"max_steps": 2, "tensorboard": True})
    with pytest.raises(
        ConfigError, match=r"^train.tensorboard: true needs the tensorboard package: pip install"
    ):
        train(from_dict(raw))
    assert not list(Path(raw["train"]["run_dir"]).glob("*.pt"))


def test_a_gzipped_log_reads_as_the_plain_one(tmp_path):
    import gzip

    lines = [json.dumps({"kind": "valid", "step": s, "bleu": b}) for s, b in ((100, 1.5), (200, 3.0))]
    plain = tmp_path / "metrics.jsonl"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "metrics.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    assert read_metrics(tmp_path / "metrics.jsonl.gz") == read_metrics(plain) == read_metrics(tmp_path)
