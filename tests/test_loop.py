"""The units the training loop is made of, each on its own: the update plan, the run directory,
the ranks, the stopping rule and the signals; and the loop's own bookkeeping."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time

import pytest
import torch

from lookback.config import ConfigError, TrainConfig, from_dict
from lookback.data.batch import UpdatePlan, curriculum_batches, token_batches
from lookback.training import progress as progress_module
from lookback.training.checkpoint import RunDir, load_checkpoint
from lookback.training.distributed import Ranks
from lookback.training.progress import Progress, progress_line, stop_reason, stop_signals
from lookback.training.train import Trainer

from .helpers import tiny_train_config

PAIRS = [([i + 4] * (1 + i % 3), [i + 4] * (1 + i % 2)) for i in range(10)]


def fixed_batches(epoch: int) -> list[list[int]]:
    """Five batches of two pairs; the order changes with the epoch."""
    order = list(range(10))[epoch % 10 :] + list(range(10))[: epoch % 10]
    return [order[i : i + 2] for i in range(0, 10, 2)]


def firsts(batches) -> list[int]:
    """The first source token of every pair in an update's batches, to name them."""
    return [int(x) for b in batches for x in b.src[:, 0]]


def take(plan: UpdatePlan, n: int) -> list[list[int]]:
    updates = iter(plan)
    return [firsts(next(updates)) for _ in range(n)]


def test_the_plan_rolls_over_with_the_last_update_of_an_epoch_and_drops_what_cannot_fill_one():
    plan = UpdatePlan(PAIRS, fixed_batches, per_update=2)  # 5 batches: 2 updates, the 5th left out
    updates = iter(plan)
    first = firsts(next(updates))
    assert sorted(first) == [4, 5, 6, 7] and (plan.epoch, plan.batch) == (0, 2)
    next(updates)
    assert (plan.epoch, plan.batch) == (1, 0)  # points past the update it just gave
    assert sorted(firsts(next(updates))) == [5, 6, 7, 8]  # epoch 1 starts at pair 1


def test_a_plan_started_at_a_saved_position_goes_on_as_the_uninterrupted_one():
    straight = take(UpdatePlan(PAIRS, fixed_batches, per_update=2), 7)
    plan = UpdatePlan(PAIRS, fixed_batches, per_update=2)
    head = take(plan, 3)
    resumed = UpdatePlan(PAIRS, fixed_batches, per_update=2, epoch=plan.epoch, batch=plan.batch)
    assert head + take(resumed, 4) == straight
    # a position at the end of an epoch (saved before the plan rolled over eagerly) starts the next
    at_end = UpdatePlan(PAIRS, fixed_batches, per_update=2, epoch=0, batch=4)
    assert take(at_end, 1) == straight[2:3]


def test_a_length_curriculum_keeps_short_targets_in_its_first_epochs_and_then_all():
    lengths = [(3, 1 + i % 12) for i in range(120)]  # target lengths 1 .. 12
    staged = [[b.tolist() for b in curriculum_batches(lengths, 40, 7, [4, 8], epoch)] for epoch in range(3)]
    for epoch, limit in ((0, 4), (1, 8)):
        seen = sorted(i for b in staged[epoch] for i in b)
        assert seen == [i for i, (_, t) in enumerate(lengths) if t <= limit]  # each short pair once
    assert staged[2] == [b.tolist() for b in token_batches(lengths, 40, 7, 2)]  # after it: the usual epoch
    again = [b.tolist() for b in curriculum_batches(lengths, 40, 7, [4, 8], 0)]
    assert staged[0] == again  # seeded: a resume sees the same
    with pytest.raises(ValueError, match="train.curriculum: no training pair has at most 0 target tokens"):
        curriculum_batches(lengths, 40, 7, [0], 0)
    with pytest.raises(
        ConfigError, match=r"train.curriculum: got \[10, 0\], expected a list of integers >= 1"
    ):
        from_dict({"train": {"curriculum": [10, 0]}})


def test_the_ranks_share_each_update_and_together_see_what_one_process_sees():
    one = take(UpdatePlan(PAIRS, fixed_batches, per_update=2), 4)
    ranks = [take(UpdatePlan(PAIRS, fixed_batches, per_update=2, rank=r, world=2), 4) for r in (0, 1)]
    for update, (a, b) in enumerate(zip(*ranks, strict=True)):
        assert len(a) == len(b) == 2 and sorted(a + b) == sorted(one[update])


def test_a_plan_whose_epoch_cannot_fill_one_update_says_so():
    with pytest.raises(ValueError, match="makes 5 batches per epoch, fewer than the 6 of one update"):
        take(UpdatePlan(PAIRS, fixed_batches, per_update=6, world=2), 1)


def test_the_run_directory_keeps_the_previous_last_and_writes_nothing_off_the_main_rank(tmp_path):
    run = RunDir(tmp_path / "run")
    run.prepare(resume=False)
    for step in (1, 2):
        run.save("last", {"model": {"w": torch.full((2,), float(step))}, "config": {}, "step": step})
    run.log({"step": 2})
    run.close()
    assert load_checkpoint(run.last)["step"] == 2 and load_checkpoint(run.prev)["step"] == 1
    assert json.loads((run.path / "metrics.jsonl").read_text()) == {"step": 2}
    with pytest.raises(FileExistsError, match="pass --resume"):
        run.prepare(resume=False)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        RunDir(tmp_path / "empty").prepare(resume=True)
    other = RunDir(tmp_path / "rank1", writes=False)
    other.save("last", {"model": {}, "config": {}})
    other.log({"step": 1})
    assert not (tmp_path / "rank1").exists()


def test_one_process_is_its_own_majority():
    ranks = Ranks()
    assert ranks.main and ranks.any("SIGINT") and not ranks.any(None)
    assert ranks.sum([1.0, 2.0]) == [1.0, 2.0]
    assert ranks.from_main(lambda: [3.0, 4.0], 2) == [3.0, 4.0]
    assert ranks.gather_rng(torch.device("cpu")) == []


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


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


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


def records(run: RunDir, kind: str) -> list[dict]:
    lines = (run.path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_the_last_update_of_the_last_epoch_is_validated_once(tmp_path):
    raw = tiny_train_config(tmp_path, train={"max_steps": 0, "max_epochs": 1, "log_every": 1})
    n = len(Trainer(from_dict(raw)).plan.epoch_batches(0))  # updates in one epoch, one batch each
    raw = tiny_train_config(tmp_path / "b", train={"max_steps": 0, "max_epochs": 1, "valid_every": n})
    trainer = Trainer(from_dict(raw))
    assert trainer.train().step == n
    assert [r["step"] for r in records(trainer.run, "valid")] == [n]


def test_tokens_per_second_leave_out_the_validation_pauses(tmp_path, monkeypatch):
    raw = tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2, "log_every": 4})
    trainer = Trainer(from_dict(raw))
    real = Trainer._evaluate
    monkeypatch.setattr(Trainer, "_evaluate", lambda self: (time.sleep(2.0), real(self))[1])
    trainer.train()
    (line,) = records(trainer.run, "train")
    assert line["seconds"] > 2.0  # the validation at step 2 slept inside the window ...
    tokens = sum(b.n_tokens for b in _first_updates(trainer, 4))
    assert line["tokens_per_s"] > tokens / 2.0  # ... but the rate counts the updates alone


def _first_updates(trainer: Trainer, n: int):
    plan = UpdatePlan(trainer.plan.pairs, trainer.plan.epoch_batches)
    updates = iter(plan)
    return [b for _ in range(n) for b in next(updates)]


def test_resume_refuses_a_change_that_breaks_an_exact_resume_unless_asked(tmp_path, caplog):
    Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2}))).train()
    changed = tiny_train_config(tmp_path, train={"max_steps": 8, "valid_every": 2, "seed": 7})
    changed["model"]["dropout"] = 0.2
    with pytest.raises(ConfigError) as err:
        Trainer(from_dict(changed), resume=True)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    assert "model.dropout: 0.0 -> 0.2" in lines[0] and "train.seed: 1 -> 7" in lines[1]
    assert all("--accept-changes" in line for line in lines)
    trainer = Trainer(from_dict(changed), resume=True, accept_changes=True)
    assert trainer.train().step == 8
    saved = load_checkpoint(trainer.run.last)["config"]
    assert saved["train"]["seed"] == 7
    assert "seed: 7" in (trainer.run.path / "config.yaml").read_text()


def test_a_changed_learning_rate_and_schedule_apply_on_resume(tmp_path):
    Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 4, "valid_every": 2}))).train()
    raw = tiny_train_config(
        tmp_path, train={"max_steps": 8, "valid_every": 2, "log_every": 2, "lr": 0.002, "lr_patience": 5}
    )
    trainer = Trainer(from_dict(raw), resume=True)  # no refusal: lr and schedule may change
    assert trainer.optimizer.param_groups[0]["lr"] == 0.002
    assert trainer.lr.plateau.patience == 5
    trainer.train()
    assert records(trainer.run, "train")[-1]["lr"] == 0.002


def test_the_cli_refuses_a_changed_resume_in_one_line_per_key_until_told(tmp_path, capsys):
    import yaml

    from lookback.cli import main

    raw = tiny_train_config(tmp_path, train={"max_steps": 2, "valid_every": 2})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["train", str(path)]) == 0
    more = ["--set", "train.max_steps=4", "--set", "train.max_tokens=300"]
    assert main(["train", str(path), "--resume", *more]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.max_tokens: 400 -> 300" in err[0] and "--accept-changes" in err[0]
    assert main(["train", str(path), "--accept-changes"]) == 2  # only with --resume
    assert main(["train", str(path), "--resume", "--accept-changes", *more]) == 0
    assert load_checkpoint(tmp_path / "run" / "last.pt")["progress"]["step"] == 4
