"""Learning-rate schedules: warm-up and the four shapes by hand, in training, and across a resume."""

from __future__ import annotations

import json

import pytest
import torch

from lookback import train as train_module
from lookback.config import ConfigError, TrainConfig, from_dict
from lookback.schedule import lr_at
from lookback.train import Trainer

from .helpers import tiny_train_config


def test_warm_up_then_each_shape_by_hand():
    warm = [lr_at(TrainConfig(lr=1.0, warmup=4, schedule="constant"), t) for t in (1, 2, 3, 4, 5, 100)]
    assert warm == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    plateau = TrainConfig(lr=1.0, warmup=4)  # the default shape: ReduceLROnPlateau after the warm-up
    assert [lr_at(plateau, t) for t in (2, 4, 5)] == [0.5, 1.0, None]
    assert lr_at(TrainConfig(lr=1.0), 1) is None  # no warm-up: plateau from the start
    inv = TrainConfig(lr=1.0, warmup=4, schedule="inverse_sqrt")
    assert [lr_at(inv, t) for t in (2, 4, 16, 64)] == [0.5, 1.0, 0.5, 0.25]  # sqrt(4 / t) after 4
    cos = TrainConfig(lr=1.0, min_lr=0.1, warmup=4, max_steps=14, schedule="cosine")
    assert lr_at(cos, 4) == pytest.approx(1.0) and lr_at(cos, 14) == pytest.approx(0.1)
    assert lr_at(cos, 9) == pytest.approx(0.55)  # halfway: min_lr + (lr - min_lr) / 2
    assert lr_at(cos, 2) == pytest.approx(0.5)  # warming up


def test_cosine_needs_an_end():
    with pytest.raises(ConfigError) as err:
        from_dict({"train": {"schedule": "cosine", "max_steps": 0}})
    assert "train.schedule: cosine decays until train.max_steps, so it needs max_steps > warmup" in str(
        err.value
    )


@pytest.mark.parametrize("schedule", ["cosine", "inverse_sqrt", "plateau"])
def test_training_follows_the_schedule_and_a_resumed_run_matches_a_straight_one(
    tmp_path, monkeypatch, schedule
):
    train = {
        "max_steps": 20,
        "valid_every": 10,
        "log_every": 5,
        "schedule": schedule,
        "warmup": 6,
        "lr": 0.01,
    }
    straight = Trainer(from_dict(tiny_train_config(tmp_path / "a", train=train)))
    straight.train()
    records = [json.loads(x) for x in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["lr"] for r in records if r["kind"] == "train"}
    cfg = straight.cfg.train
    expected = {t: lr_at(cfg, t) for t in (5, 10, 15, 20)}  # the rate of each logged update
    if schedule == "plateau":  # ReduceLROnPlateau after the warm-up: train.lr until BLEU stalls
        expected = {5: lr_at(cfg, 5), 10: 0.01}
        logged = {t: lr for t, lr in logged.items() if t <= 10}
    assert logged == pytest.approx(expected)

    # the same run stopped after 10 updates (max_steps, on which cosine depends, unchanged) and resumed
    real = train_module.stop_reason
    monkeypatch.setattr(
        train_module, "stop_reason", lambda c, p: real(c, p) or ("halfway" if p.step >= 10 else None)
    )
    Trainer(from_dict(tiny_train_config(tmp_path / "b", train=train))).train()
    monkeypatch.setattr(train_module, "stop_reason", real)
    resumed = Trainer(from_dict(tiny_train_config(tmp_path / "b", train=train)), resume=True)
    assert resumed.progress.step == 10
    resumed.train()
    for (name, a), b in zip(
        straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
