"""Training never loses work: signals, NaN losses, full disks and damaged checkpoints (issue 6).

Each test drives the real training loop on the tiny toy config: a subprocess
for signals, in-process runs with one fault injected for the rest.
"""

import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from lookback.cli import main
from lookback.config import from_dict
from lookback.model.seq2seq import Seq2Seq
from lookback.training import checkpoint as checkpoint_module
from lookback.training.checkpoint import RunDirError, load_checkpoint
from lookback.training.train import Trainer

from ..helpers import tiny_train_config


def _config(tmp_path: Path, name: str, **train) -> tuple[Path, Path]:
    raw = tiny_train_config(tmp_path / name, train={"max_steps": 150, "valid_every": 10, **train})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path, tmp_path / name / "run"


def _same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """An uninterrupted 150-update run: what every interrupted run must end as."""
    config, run_dir = _config(tmp_path_factory.mktemp("straight"), "straight")
    assert main(["train", str(config)]) == 0
    return run_dir


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_between_updates_with_a_checkpoint_and_resume_is_exact(tmp_path, straight, signum):
    config, run_dir = _config(tmp_path, "signalled")
    proc = subprocess.Popen(
        [sys.executable, "-m", "lookback", "train", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (run_dir / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(random.Random(signum).uniform(0.0, 0.3))  # some update after the first checkpoint
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    name = signal.Signals(signum).name
    stopped = load_checkpoint(run_dir / "last.pt")["progress"]["step"]
    assert f"{name} at step {stopped}: saving" in err and "Traceback" not in err
    assert 10 <= stopped < 150
    assert main(["train", str(config), "--resume"]) == 0
    assert load_checkpoint(run_dir / "last.pt")["progress"]["step"] == 150
    assert _same_weights(run_dir / "last.pt", straight / "last.pt")


def _nan_on(monkeypatch, calls: set[int]) -> None:
    """Make the loss NaN on the given calls of Seq2Seq.loss (counted from 1)."""
    real, count = Seq2Seq.loss, [0]

    def loss(self, *args, **kwargs):
        count[0] += 1
        value = real(self, *args, **kwargs)
        return value * float("nan") if count[0] in calls else value

    monkeypatch.setattr(Seq2Seq, "loss", loss)


def test_a_nan_loss_is_skipped_and_counted(tmp_path, monkeypatch, caplog):
    raw = tiny_train_config(tmp_path, train={"max_steps": 12, "valid_every": 100})
    trainer = Trainer(from_dict(raw))
    _nan_on(monkeypatch, {3, 5})  # training calls only: no validation before step 12
    with caplog.at_level(logging.WARNING):
        progress = trainer.train()
    assert progress.step == 12 and progress.skipped == 2
    assert sum("is not finite" in r.message and "skipped" in r.message for r in caplog.records) == 2
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    assert state["progress"]["skipped"] == 2
    assert all(torch.isfinite(w).all() for w in state["model"].values())


def test_a_skipped_update_leaves_the_weights_as_they_were(tmp_path, monkeypatch):
    raw = tiny_train_config(tmp_path, train={"max_steps": 1, "valid_every": 100})
    trainer = Trainer(from_dict(raw))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    _nan_on(monkeypatch, {1})
    trainer.train()
    after = trainer.model.state_dict()
    assert trainer.progress.skipped == 1
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_nan_loss_stops_the_run_when_asked_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    config, run_dir = _config(tmp_path, "nan", max_steps=20, valid_every=4, nonfinite="stop")
    # validation calls the loss too (once per validation batch): count only what training does
    real = Seq2Seq.loss
    steps = [0]

    def loss(self, *args, **kwargs):
        value = real(self, *args, **kwargs)
        if self.training:
            steps[0] += 1
            if steps[0] == 6:
                return value * float("nan")
        return value

    monkeypatch.setattr(Seq2Seq, "loss", loss)
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lookback: error: update 6 is not finite (loss nan")
    assert str(run_dir / "last.pt") in err[0]
    state = load_checkpoint(run_dir / "last.pt")
    assert state["progress"]["step"] == 4  # the last validation before the fault
    assert all(torch.isfinite(w).all() for w in state["model"].values())


def test_too_little_disk_space_is_found_before_training(tmp_path, monkeypatch, capsys):
    config, run_dir = _config(tmp_path, "full")
    Usage = type("Usage", (), {"free": 200_000})
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", lambda p: Usage)
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "0 MB free, but its checkpoints need about" in err[0]
    assert not (run_dir / "last.pt").exists() and not (run_dir / "metrics.jsonl").exists()


def test_an_unwritable_run_directory_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    config, _ = _config(tmp_path, "unwritable", run_dir=str(blocker / "run"))
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"train.run_dir {blocker / 'run'} is not writable" in err[0]
    config, _ = _config(tmp_path, "a_file_itself", run_dir=str(blocker))
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lookback: error: train.run_dir {blocker} is a file, not a directory; choose another"]
    assert blocker.read_text() == "not a directory"


def test_a_failed_checkpoint_write_stops_and_leaves_the_old_checkpoints(tmp_path, monkeypatch):
    raw = tiny_train_config(tmp_path, train={"max_steps": 8, "valid_every": 4})
    Trainer(from_dict(raw)).train()
    run_dir = tmp_path / "run"
    good = (run_dir / "last.pt").read_bytes()

    def disk_full(state, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    raw["train"]["max_steps"] = 12
    trainer = Trainer(from_dict(raw), resume=True)
    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(RunDirError, match="No space left on device"):
        trainer.train()
    assert (run_dir / "last.pt").read_bytes() == good
    assert load_checkpoint(run_dir / "last.pt")["progress"]["step"] == 8
    assert not list(run_dir.glob(".*.tmp"))


def test_resume_falls_back_to_the_previous_checkpoint_when_the_last_is_damaged(tmp_path, caplog):
    raw = tiny_train_config(tmp_path, train={"max_steps": 12, "valid_every": 4})
    Trainer(from_dict(raw)).train()
    straight = load_checkpoint(tmp_path / "run" / "last.pt")

    other = tmp_path / "other"
    raw_b = tiny_train_config(other, train={"max_steps": 8, "valid_every": 4})
    Trainer(from_dict(raw_b)).train()
    last, prev = other / "run" / "last.pt", other / "run" / "prev.pt"
    assert load_checkpoint(prev)["progress"]["step"] == 4  # last.pt before the newest
    last.write_bytes(last.read_bytes()[:1000])  # a damaged newest checkpoint
    raw_b["train"]["max_steps"] = 12
    with caplog.at_level(logging.WARNING):
        Trainer(from_dict(raw_b), resume=True).train()
    assert any("resuming from prev.pt instead" in r.message for r in caplog.records)
    resumed = load_checkpoint(last)
    assert resumed["progress"]["step"] == 12
    assert all(torch.equal(straight["model"][k], resumed["model"][k]) for k in straight["model"])
