"""torchrun: two CPU processes train as one process does on the union of their batches.

Two ranks with one batch each per update must make the updates of one
process that sums two batches per update (`train.accumulate: 2`): the same
global batch, the same mean loss per token. The two-process runs are real
`torchrun --nproc_per_node 2 --standalone -m lookback train` launches (gloo),
started once for the module: an uninterrupted run, and a run stopped at
max_steps and resumed under torchrun.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lookback import device
from lookback.config import from_dict
from lookback.training import distributed
from lookback.training.checkpoint import load_checkpoint
from lookback.training.distributed import Ranks
from lookback.training.train import Trainer

from ..helpers import tiny_train_config

ROOT = Path(__file__).resolve().parents[2]
STEPS = 12


def torchrun(config: Path, *args: str) -> subprocess.CompletedProcess:
    """`torchrun --nproc_per_node 2 -m lookback train CONFIG ARGS` on this machine's CPU."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]
    command += ["-m", "lookback", "train", str(config), *args]
    done = subprocess.run(command, env=env, cwd=config.parent, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def raw_config(tmp: Path, name: str, **train) -> dict:
    raw = tiny_train_config(tmp)  # 300 toy pairs: five batches of <= 400 tokens an epoch
    raw["train"].update({"run_dir": str(tmp / name), "max_steps": STEPS, "valid_every": 6, "log_every": 1})
    raw["train"].update(train)
    return raw


def write_config(tmp: Path, name: str, **train) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp, name, **train)), encoding="utf-8")
    return path


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run_dir / "last.pt")["model"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two ranks straight to STEPS; two ranks stopped at STEPS / 2 (kept in "half") and resumed to STEPS."""
    tmp = tmp_path_factory.mktemp("distributed")
    straight = torchrun(write_config(tmp, "straight"))
    torchrun(write_config(tmp, "stopped", max_steps=STEPS // 2))
    shutil.copytree(tmp / "stopped", tmp / "half")
    resumed = torchrun(tmp / "stopped.yaml", "--set", f"train.max_steps={STEPS}", "--resume")
    folders = {name: tmp / name for name in ("straight", "stopped", "half")}
    return {"tmp": tmp, **folders, "log": straight.stderr, "resumed_log": resumed.stderr}


@pytest.mark.slow  # the module's torchrun launches take about 25 s on 2 cores
def test_two_processes_train_as_one_process_on_the_union_of_their_batches(runs):
    one = Trainer(from_dict(raw_config(runs["tmp"], "one", accumulate=2)))
    one.train()
    two, ref = records(runs["straight"], "train"), records(one.run.path, "train")
    assert [r["step"] for r in two] == [r["step"] for r in ref] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in ref], rel=1e-5)
    assert [r["epoch"] for r in two] == [r["epoch"] for r in ref]
    valid_two, valid_one = records(runs["straight"], "valid"), records(one.run.path, "valid")
    assert [r["loss"] for r in valid_two] == pytest.approx([r["loss"] for r in valid_one], rel=1e-5)
    a, b = weights(runs["straight"]), weights(one.run.path)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6)
    assert ref[-1]["loss"] < ref[0]["loss"]  # it learned something, so the comparison means something


@pytest.mark.slow  # the module's torchrun launches take about 25 s on 2 cores
def test_only_rank_0_writes(runs):
    lines = (runs["straight"] / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(set(lines)) == STEPS + 2  # a line per step and two validations, once each
    names = {p.name for p in runs["straight"].iterdir()}
    assert {"config.yaml", "tokenizer.json", "metrics.jsonl", "best.pt", "last.pt"} <= names
    assert runs["log"].count("validation at step 6:") == 1  # rank 1 logs warnings only
    assert runs["log"].count("model: ") == 1
    state = load_checkpoint(runs["straight"] / "last.pt")
    assert state["world_size"] == 2
    cpu = [r["cpu"] for r in state["rank_rng"]]
    assert len(cpu) == 2 and not torch.equal(*cpu)  # each rank its own dropout stream


@pytest.mark.slow
def test_a_resumed_two_process_run_ends_where_an_uninterrupted_one_does(runs):
    assert "resumed from step 6" in runs["resumed_log"]
    a, b = weights(runs["straight"]), weights(runs["stopped"])
    assert all(torch.equal(a[k], b[k]) for k in a)
    steps = [r["step"] for r in records(runs["stopped"], "train")]
    assert steps == list(range(1, STEPS + 1))  # the resumed run appends, with no step twice
    losses = [r["loss"] for r in records(runs["straight"], "train")]
    assert [r["loss"] for r in records(runs["stopped"], "train")] == losses


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process_with_the_same_global_batch(runs, caplog):
    raw = raw_config(runs["tmp"], "half", accumulate=2)
    with caplog.at_level("WARNING"):
        one = Trainer(from_dict(raw), resume=True)
    assert "trained with 2 process(es) x accumulate 1, and goes on with 1 x 2" in caplog.text
    assert one.progress.step == STEPS // 2
    one.train()
    a, b = weights(runs["straight"]), {k: v.clone() for k, v in one.model.state_dict().items()}
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_two_processes_train_from_a_token_store_as_from_memory(runs):
    """data.store under torchrun: rank 0 builds the store, both read it, and the run is the same."""
    tmp = runs["tmp"]
    raw = raw_config(tmp, "stored")
    raw["data"].update({"store": True, "cache_dir": str(tmp / "cache")})
    raw["data"]["train"] = str(tmp / "data" / "train")  # the files the straight run trained on
    path = tmp / "stored.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    torchrun(path)
    assert len(list((tmp / "cache").iterdir())) == 1
    losses = [r["loss"] for r in records(runs["straight"], "train")]
    assert [r["loss"] for r in records(tmp / "stored", "train")] == losses
    a, b = weights(runs["straight"]), weights(tmp / "stored")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_update_needs_enough_batches_in_an_epoch(tmp_path):
    trainer = Trainer(from_dict(raw_config(tmp_path, "run", accumulate=6)))  # five batches an epoch
    with pytest.raises(ValueError, match=r"makes 5 batches per epoch, fewer than the 6 of one update"):
        trainer.train()


def test_without_torchrun_there_is_no_process_group(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert (distributed.rank(), distributed.world_size(), distributed.is_main()) == (0, 1, True)
    assert distributed.init(torch.device("cpu")) == torch.device("cpu")
    assert not torch.distributed.is_initialized()
    assert distributed.Ranks().sum([3, 0.5]) == [3, 0.5]
    assert device.threads_per_process() == 0  # train.threads 0: torch's default, all cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert device.threads_per_process() == max(1, device.cores() // 2)


def test_one_process_is_its_own_majority():
    ranks = Ranks()
    assert ranks.main and ranks.any("SIGINT") and not ranks.any(None)
    assert ranks.sum([1.0, 2.0]) == [1.0, 2.0]
    assert ranks.from_main(lambda: [3.0, 4.0], 2) == [3.0, 4.0]
    assert ranks.gather_rng(torch.device("cpu")) == []
