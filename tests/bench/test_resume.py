"""A bench run killed mid-training goes on with `python -m bench headline ... --resume RUN_DIR` (issue 39:
Joey's best recipe needs about 4 hours of an AVX2-only CPU, longer than a session): the batch
plan from a checkpoint on, Joey's checkpoint of weights, optimiser, scheduler and random
generators, and the command line's checks. Joey itself is not needed: a torch model stands in
for its model, with the optimiser and plateau scheduler Joey's TrainManager holds."""

from __future__ import annotations

import itertools
import types

import pytest
import torch

import bench.headline as bench_main
from bench.common import epoch_batches, epochs_after, read_json, write_json
from bench.headline import finished, parse_args, write_spec
from bench.peers.joey import _load_checkpoint, _save_checkpoint
from bench.processes import keep_earlier_log

from .test_timing import offline_bench


@pytest.mark.parametrize("done", [0, 3, 4, 5, 9])
def test_the_plan_after_a_checkpoint_is_the_rest_of_the_plan(done):
    n, size, seed = 10, 3, 7  # four batches an epoch, the last of one pair
    whole = [b for epoch in range(4) for b in epoch_batches(n, size, seed, epoch)]
    assert [len(b) for b in whole[:4]] == [3, 3, 3, 1]
    rest = list(
        itertools.islice((b for plan in epochs_after(n, size, seed, done) for b in plan), len(whole) - done)
    )
    assert rest == whole[done:]


class Trainer(types.SimpleNamespace):
    """What _save_checkpoint reads of Joey's TrainManager: its optimiser and scheduler."""


def setup(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.1, patience=0)
    return model, Trainer(optimizer=optimizer, scheduler=scheduler)


def train(model, trainer, steps: int) -> None:
    for _ in range(steps):  # dropout draws from torch's generator: it must go on where it was
        loss = model(torch.ones(5, 4)).pow(2).mean()
        loss.backward()
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
    trainer.scheduler.step(1.0)  # a validation that does not improve: the rate falls after patience 0


def test_a_joey_checkpoint_goes_on_exactly_as_the_run_it_was_taken_from(tmp_path):
    path = tmp_path / "resume.pt"
    model, trainer = setup()
    train(model, trainer, 3)
    train(model, trainer, 3)  # the plateau scheduler has cut the rate once
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    progress = {"steps": 6, "seconds": 12.5, "curve": [{"steps": 3, "bleu": 1.0}]}
    _save_checkpoint(path, model, trainer, [1e-2, 1e-3], progress)
    train(model, trainer, 4)
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    resumed, resumed_trainer = setup(seed=123)  # another process: other weights, other draws
    rates, got = _load_checkpoint(path, resumed, resumed_trainer)
    assert rates == [1e-2, 1e-3] and got == progress
    assert resumed_trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    train(resumed, resumed_trainer, 4)
    for a, b in zip(uninterrupted, resumed.parameters(), strict=True):
        assert torch.equal(a, b)  # the same Adam moments, rate and dropout masks
    assert not path.with_name("resume.pt.tmp").exists()


def test_a_truncated_checkpoint_is_named_in_one_line(tmp_path):
    path = tmp_path / "resume.pt"
    model, trainer = setup()
    _save_checkpoint(path, model, trainer, [], {"steps": 0})
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(RuntimeError) as error:
        _load_checkpoint(path, *setup())
    message = str(error.value)
    assert str(path) in message and "not a checkpoint" in message and "\n" not in message


def test_resume_needs_the_same_command(tmp_path):
    spec = {"config": "feed", "budget_s": 900.0, "out_dir": str(tmp_path)}
    path = tmp_path / "spec.json"
    write_spec(path, spec, None)  # the first run
    assert read_json(path) == spec
    write_spec(path, spec, tmp_path)  # the same command again, --resume
    assert read_json(path) == {**spec, "resume": True}  # the children go on from their checkpoints
    write_spec(path, spec, tmp_path)  # and again: "resume" is not a difference
    with pytest.raises(SystemExit) as stop:
        write_spec(path, {**spec, "budget_s": 1800.0}, tmp_path)
    assert str(stop.value) == f"bench: --resume: {path} was written by another command (budget_s differ)"
    with pytest.raises(SystemExit, match="spec.joey_best.json is missing"):
        write_spec(tmp_path / "spec.joey_best.json", spec, tmp_path)


def test_only_a_finished_measurement_is_kept(tmp_path):
    done, failed, torn = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    write_json(done, {"system": "joey_best", "task": "train", "error": None, "figures": {}})
    write_json(failed, {"system": "joey_best", "task": "train", "error": "no result (exit -9)"})
    torn.write_text('{"system": "jo', encoding="utf-8")
    assert finished(done)
    assert not finished(failed) and not finished(torn) and not finished(tmp_path / "none.json")


def test_the_command_line_checks_the_run_folder(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--resume", str(tmp_path / "2026-11-27_204000")])
    assert "--resume" in (err := capsys.readouterr().err) and "no such run folder" in err
    assert parse_args(["--resume", str(tmp_path)]).resume == tmp_path


def test_a_resumed_run_keeps_what_finished_and_measures_the_rest_again(tmp_path, monkeypatch):
    offline_bench(bench_main, tmp_path, monkeypatch)
    monkeypatch.setattr(bench_main, "gemm_peak", lambda device: None)
    calls = []

    def run_child(system, task, spec_path, out_dir, timeout, venv):
        """Joey's training is killed the first time (no result); everything else finishes."""
        spec = read_json(spec_path)
        calls.append((system, task, spec.get("resume", False)))
        killed = system == "joey_best" and task == "train" and not spec.get("resume")
        result = {"system": system, "task": task, "error": "no result (exit -9)" if killed else None}
        write_json(out_dir / f"{system}.{task}.json", result)
        return result

    monkeypatch.setattr(bench_main, "run_child", run_child)
    argv = ["--only", "joey_best", "--joey-best", "peer", "--recipe", "--configs", "feed"]
    argv += ["--work-dir", str(tmp_path / "work"), "--results-dir", str(tmp_path / "results")]
    plan = bench_main.make_plan(bench_main.parse_args(argv))
    run_dir = plan.runs_root
    (run_dir / "feed").mkdir(parents=True)
    _, first = bench_main.measure(plan, "feed", run_dir / "feed")
    assert first["joey_best"]["translate"]["error"] == "training failed"
    assert calls == [
        ("joey_best", "train", False),
        ("recipe", "train", False),
        ("recipe", "translate", False),
    ]

    calls.clear()
    again = bench_main.make_plan(bench_main.parse_args([*argv, "--resume", str(run_dir)]))
    assert again.runs_root == run_dir and again.stamp == run_dir.name  # the same files, the same JSON name
    _, second = bench_main.measure(again, "feed", run_dir / "feed")
    assert calls == [("joey_best", "train", True), ("joey_best", "translate", True)]  # the recipe: kept
    assert (
        second["recipe"]["translate"]["error"] is None and second["joey_best"]["translate"]["error"] is None
    )

    changed = bench_main.make_plan(
        bench_main.parse_args([*argv, "--budget-minutes", "60", "--resume", str(run_dir)])
    )
    with pytest.raises(SystemExit, match="budget_s differ"):
        bench_main.measure(changed, "feed", run_dir / "feed")


def test_each_sittings_log_is_kept(tmp_path):
    log = tmp_path / "joey_best.train.log"
    keep_earlier_log(log)  # none yet: nothing to keep
    for sitting in ("first", "second", "third"):
        keep_earlier_log(log)
        log.write_text(sitting)
    assert log.read_text() == "third"
    assert [(tmp_path / f"joey_best.train.log.{n}").read_text() for n in (1, 2)] == ["first", "second"]
