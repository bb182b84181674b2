"""Learning-rate schedules: warm-up and the four shapes by hand, in training, and across a resume."""

from __future__ import annotations

import json

import pytest
import torch

from lookback.config import ConfigError, TrainConfig, from_dict
from lookback.errors import CheckpointError
from lookback.training import train as train_module
from lookback.training.schedule import LearningRate, lr_at
from lookback.training.train import Trainer

from ..helpers import tiny_train_config


def test_warm_up_then_each_shape_by_hand():
    constant = TrainConfig(lr=1.0, warmup=4, schedule="constant")
    assert [lr_at(constant, t, 0.0) for t in (1, 2, 3, 4, 5, 100)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    plateau = TrainConfig(lr=1.0, warmup=4)  # the default shape: ReduceLROnPlateau after the warm-up
    assert [lr_at(plateau, t, 0.0) for t in (2, 4, 5)] == [0.5, 1.0, None]
    assert lr_at(TrainConfig(lr=1.0), 1, 0.0) is None  # no warm-up: plateau from the start
    inv = TrainConfig(lr=1.0, warmup=4, schedule="inverse_sqrt")
    assert [lr_at(inv, t, 0.0) for t in (2, 4, 16, 64)] == [0.5, 1.0, 0.5, 0.25]  # sqrt(4 / t) after 4
    cos = TrainConfig(lr=1.0, min_lr=0.1, warmup=4, max_steps=14, time_limit=10, schedule="cosine")
    assert lr_at(cos, 4, 0.0) == pytest.approx(1.0) and lr_at(cos, 14, 0.0) == pytest.approx(0.1)
    assert lr_at(cos, 9, 0.0) == pytest.approx(0.55)  # halfway: min_lr + (lr - min_lr) / 2
    assert lr_at(cos, 2, 0.0) == pytest.approx(0.5)  # warming up
    assert lr_at(cos, 9, 599.0) == pytest.approx(0.55)  # max_steps set: by updates, whatever the clock


def test_cosine_without_max_steps_runs_on_the_clock_to_the_time_limit():
    cos = TrainConfig(lr=1.0, min_lr=0.1, warmup=4, time_limit=10, schedule="cosine")  # 600 s
    # the update number does not matter after the warm-up; the seconds of training do
    assert [lr_at(cos, t, 0.0) for t in (5, 5000)] == pytest.approx([1.0, 1.0])
    assert lr_at(cos, 50, 300.0) == pytest.approx(0.55)  # half the time: halfway down
    assert lr_at(cos, 50, 150.0) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + 0.5**0.5))  # cos(pi / 4)
    assert lr_at(cos, 50, 600.0) == pytest.approx(0.1)  # the floor when the time limit stops it
    assert lr_at(cos, 50, 900.0) == pytest.approx(0.1)  # and no lower (a resumed, extended run)
    assert lr_at(cos, 2, 300.0) == pytest.approx(0.5 * 0.55)  # the warm-up scales it still


@pytest.mark.parametrize(
    "train",
    [{"max_steps": 0}, {"max_steps": 100, "warmup": 100}, {"max_steps": 50, "warmup": 100, "time_limit": 5}],
)
def test_cosine_needs_an_end(train):
    with pytest.raises(ConfigError) as err:
        from_dict({"train": {"schedule": "cosine", **train}})
    assert (
        "train.schedule: cosine decays until train.max_steps or, without it, train.time_limit, "
        f"so it needs max_steps > warmup ({train.get('warmup', 0)}) or a time limit"
    ) in str(err.value)
    from_dict({"train": {"schedule": "cosine", "time_limit": 5}})  # a time limit alone is an end
    from_dict({"train": {"schedule": "cosine", "max_steps": 101, "warmup": 100}})


def test_training_sets_the_rate_on_its_clock_which_a_resumed_run_continues(tmp_path, monkeypatch):
    """The trainer gives the schedule its training time: from 0, rising, and after a resume
    from the time the checkpoint kept, not from 0 again."""
    calls: list[tuple[int, float]] = []
    real_before_update = LearningRate.before_update

    def spy(self, step, seconds):
        calls.append((step, seconds))
        real_before_update(self, step, seconds)

    monkeypatch.setattr(LearningRate, "before_update", spy)
    train = {"max_steps": 0, "valid_every": 6, "schedule": "cosine", "time_limit": 60}  # by the clock
    stop_at = [6]
    real = train_module.stop_reason
    monkeypatch.setattr(
        train_module, "stop_reason", lambda c, p: real(c, p) or ("stop" if p.step >= stop_at[0] else None)
    )
    first = Trainer(from_dict(tiny_train_config(tmp_path, train=train)))
    first.train()
    assert [s for s, _ in calls] == list(range(1, 7)) and calls[0][1] == 0.0
    seconds = [x for _, x in calls]
    assert seconds == sorted(seconds) and seconds[-1] > 0
    saved = first.progress.seconds
    stop_at[0], calls[:] = 12, []
    resumed = Trainer(from_dict(tiny_train_config(tmp_path, train=train)), resume=True)
    resumed.train()
    assert [s for s, _ in calls] == list(range(7, 13))
    assert calls[0][1] == pytest.approx(saved) and calls[0][1] > seconds[-1]  # the clock goes on


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
    expected = {t: lr_at(cfg, t, 0.0) for t in (5, 10, 15, 20)}  # the rate of each logged update
    if schedule == "plateau":  # ReduceLROnPlateau after the warm-up: train.lr until BLEU stalls
        expected = {5: lr_at(cfg, 5, 0.0), 10: 0.01}
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


@pytest.mark.parametrize("schedule", ["cosine", "plateau"])
def test_general_scores_w_learns_at_its_own_rate_and_resumes_exactly(tmp_path, monkeypatch, schedule):
    """GeneralScore.lr_scale: W at a hundredth of the rate, through warm-up and schedule, across
    a resume; train.attention_lr overrides it (1: one rate for all, as before)."""
    train = {"max_steps": 12, "valid_every": 6, "log_every": 3, "schedule": schedule, "warmup": 4, "lr": 0.01}
    config = lambda folder, **more: from_dict(  # noqa: E731
        tiny_train_config(tmp_path / folder, train={**train, **more}, model={"attention": "general"})
    )
    straight = Trainer(config("a"))
    rest, own = straight.optimizer.param_groups
    assert own["params"] == [straight.model.decoder.score.W.weight] and own["lr_scale"] == 0.01
    straight.train()
    assert own["lr"] == pytest.approx(rest["lr"] * 0.01) and rest["lr"] > 0
    real = train_module.stop_reason
    halfway = lambda c, p: real(c, p) or ("half" if p.step >= 6 else None)  # noqa: E731
    monkeypatch.setattr(train_module, "stop_reason", halfway)
    Trainer(config("b")).train()
    monkeypatch.setattr(train_module, "stop_reason", real)
    resumed = Trainer(config("b"), resume=True)
    resumed.train()
    pairs = zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True)
    for (name, a), b in pairs:
        assert torch.equal(a, b), name
    one = Trainer(config("c", attention_lr=1.0, max_steps=5))
    assert len(one.optimizer.param_groups) == 1
    one.train()
    additive = Trainer(from_dict(tiny_train_config(tmp_path / "d", train=train)))
    assert len(additive.optimizer.param_groups) == 1  # additive learns at the rate
    # a checkpoint of one group does not resume into two: one line that says what to do
    with pytest.raises(CheckpointError, match="resume with --set train.attention_lr=1"):
        Trainer(config("c", max_steps=5), resume=True, accept_changes=True)
