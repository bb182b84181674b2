"""training/progress.py: where training stands, the stopping rule, the progress line and the
signals that stop a run between updates."""

from __future__ import annotations

import io
import os
import signal
import sys
import time

import pytest

from lookback.config import TrainConfig, from_dict
from lookback.explain.curves import history, read_metrics
from lookback.training import progress as progress_module
from lookback.training.progress import Progress, progress_line, stop_reason, stop_signals, valid_due
from lookback.training.train import Trainer

from ..helpers import tiny_train_config


@pytest.mark.parametrize(
    ("train", "progress", "reason"),
    [
        ({}, {}, None),
        ({"max_steps": 10}, {"step": 10}, "train.max_steps 10 reached"),
        ({"max_steps": 10}, {"step": 9}, None),
        ({"max_epochs": 2}, {"epoch": 2}, "train.max_epochs 2 done"),
        ({"early_stopping": 3}, {"bad_validations": 3}, "early stopping"),
        ({"early_stopping": 0}, {"bad_validations": 30}, None),
        ({"time_limit": 1.5}, {"seconds": 90.0}, "time limit of 1.5 minutes"),
        ({"time_limit": 1.5}, {"seconds": 89.9}, None),
    ],
)
def test_the_stopping_rule(train, progress, reason):
    got = stop_reason(TrainConfig(**train), Progress(**progress))
    assert got == reason if reason is None else reason in got


@pytest.mark.parametrize(
    ("minutes", "step", "seconds", "validated_at", "due"),
    [
        (0, 1000, 0.0, 0.0, True),  # every valid_every = 500 updates
        (0, 999, 1e6, 0.0, False),  # no clock cadence: updates only
        (3, 7, 180.2, 179.9, True),  # 3:00 passed during this update
        (3, 7, 359.0, 180.2, False),
        (3, 7, 361.0, 180.2, True),
        (3, 501, 360.5, 350.0, True),  # a validation by updates at 5:50 does not move the one at 6:00
        (3, 501, 362.0, 360.5, False),
    ],
)
def test_validation_comes_every_valid_every_updates_and_at_every_valid_minutes(
    minutes, step, seconds, validated_at, due
):
    cfg = TrainConfig(valid_every=500, valid_minutes=minutes)
    assert valid_due(cfg, Progress(step=step, seconds=seconds, validated_at=validated_at)) is due


def test_a_run_validates_on_its_clock_and_a_resumed_run_keeps_its_last_validation_time(tmp_path):
    # valid_minutes of 1e-9 (60 ns): every update crosses a multiple, so every update validates
    raw = tiny_train_config(tmp_path, train={"max_steps": 5, "valid_every": 1000, "valid_minutes": 1e-9})
    Trainer(from_dict(raw)).train()
    last = history(read_metrics(tmp_path / "run"), "valid")[-1]
    trainer = Trainer(from_dict(raw | {"train": raw["train"] | {"max_steps": 7}}), resume=True)
    assert trainer.progress.validated_at == pytest.approx(last["seconds"], abs=0.01)  # from the checkpoint
    trainer.train()
    steps = [r["step"] for r in history(read_metrics(tmp_path / "run"), "valid")]
    assert steps == [1, 2, 3, 4, 5, 6, 7]
    raw = tiny_train_config(tmp_path / "off", train={"max_steps": 5, "valid_every": 1000})
    Trainer(from_dict(raw)).train()
    off = history(read_metrics(tmp_path / "off" / "run"), "valid")
    assert [r["step"] for r in off] == [5]  # without valid_minutes: the last update's only


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_line_by_hand():
    p = Progress(step=600, epoch=2, seconds=330.0)
    line = progress_line(TrainConfig(max_steps=2400), p, 3.14159, 3456.7)
    # 1,800 updates to go at 0.55 s each: 990 s
    assert line == "step 600/2400  epoch 2  loss 3.142  3,457 tokens/s  5:30 elapsed, about 16:30 left"
    line = progress_line(TrainConfig(max_steps=0, time_limit=120), p, 2.0, 10.0)
    assert line.endswith("5:30 elapsed, about 1:54:30 left")  # the time limit, 7,200 s, less 330
    both = progress_line(TrainConfig(max_steps=2400, time_limit=10), p, 2.0, 10.0)
    assert both.endswith("about 4:30 left")  # whichever limit comes first
    assert progress_line(TrainConfig(max_steps=0), p, 2.0, 10.0).endswith("  5:30 elapsed")


@pytest.mark.parametrize("terminal", [False, True])
def test_without_a_terminal_training_logs_progress_lines_instead_of_a_bar(
    tmp_path, monkeypatch, caplog, terminal
):
    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)  # where tqdm draws its bar, if on a terminal
    monkeypatch.setattr(progress_module, "LINE_EVERY", 0.0)  # every log line, not every minute
    raw = tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 4, "log_every": 2})
    with caplog.at_level("INFO", logger="lookback.training.train"):
        Trainer(from_dict(raw)).train()
    lines = [r.message for r in caplog.records if r.message.startswith("step ")]
    if terminal:
        assert not lines and "4/4" in stderr.getvalue()  # the bar
    else:
        assert [line.split()[1] for line in lines] == ["2/4", "4/4"] and not stderr.getvalue()
        assert all("tokens/s" in line and "elapsed, about" in line for line in lines)


def test_the_first_signal_is_noted_and_a_second_stops_at_once():
    before = signal.getsignal(signal.SIGTERM)
    with stop_signals() as caught:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the handler runs between bytecodes of the main thread
        assert caught == ["SIGTERM"]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
    assert signal.getsignal(signal.SIGTERM) is before
