"""A study on Ray (fanout.py): the same outputs as the serial study, each run holding what its
config declares, a killed task resumed. On a local Ray instance of 2 CPUs, started once for the
module (some seconds): marked slow."""

import importlib.util
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from lookback.config import from_dict
from lookback.explain.curves import read_metrics
from lookback.study import fanout
from lookback.study.run import load_study, run_study

from ..helpers import require
from .studies import kept_evaluations, read_results, tiny_study


def test_a_run_holds_the_cpus_and_gpu_its_config_declares():
    def cfg(**train):
        return from_dict({"train": train})

    assert fanout.holds(cfg(threads=2, device="cpu"), node_cpus=16, gpus=4) == {"num_cpus": 2, "num_gpus": 0}
    assert fanout.holds(cfg(threads=0, device="cpu"), node_cpus=16, gpus=0)["num_cpus"] == 16  # all cores
    assert fanout.holds(cfg(threads=4, device="cuda"), node_cpus=16, gpus=0)["num_gpus"] == 1
    assert fanout.holds(cfg(threads=4, device="auto"), node_cpus=16, gpus=2)["num_gpus"] == 1
    assert fanout.holds(cfg(threads=4, device="auto"), node_cpus=16, gpus=0)["num_gpus"] == 0


@pytest.fixture(scope="module")
def local_ray():
    require(importlib.util.find_spec("ray"), "no ray: pip install 'lookback[ray]'")
    import ray

    fanout.start("local", cpus=2)
    yield ray
    ray.shutdown()


def _outputs(out: Path) -> dict:
    """run -> test -> beam -> its outputs, as the study kept them."""
    return {
        run: {spec: {k: v["outputs"] for k, v in t.items() if "outputs" in v} for spec, t in tests.items()}
        for run, tests in ((r, e["tests"]) for r, e in kept_evaluations(out).items())
    }


@pytest.mark.slow
def test_a_study_on_ray_gives_the_serial_studys_outputs(tmp_path, local_ray):
    path = tiny_study(tmp_path)  # two models, 1 thread each
    serial = load_study(path)
    run_study(serial)
    on_ray = load_study(path)
    on_ray.out_dir = str(tmp_path / "on_ray")
    run_study(on_ray, ray="local")  # Ray is started: the fixture's 2 CPUs, one run on each

    assert _outputs(tmp_path / "on_ray") == _outputs(tmp_path / "out")
    serial_models, ray_models = (read_results(tmp_path / o)["models"] for o in ("out", "on_ray"))
    assert ray_models.keys() == serial_models.keys() == {"none", "additive"}
    assert all(m["train_seconds"] > 0 for m in ray_models.values())
    learning = read_results(tmp_path / "on_ray")["learning"]
    assert {r["model"] for r in learning} == {"none", "additive"}  # the tasks' training logs came back
    assert (tmp_path / "on_ray" / "report.md").read_text(encoding="utf-8").startswith("# Study: tiny")

    # finished runs are kept: run again, nothing trains (the logs do not grow) and nothing changes
    logs = {n: len(read_metrics(tmp_path / "on_ray" / "runs" / n)) for n in ("none", "additive")}
    run_study(on_ray, ray="local")
    assert {n: len(read_metrics(tmp_path / "on_ray" / "runs" / n)) for n in logs} == logs
    assert _outputs(tmp_path / "on_ray") == _outputs(tmp_path / "out")


def _ray_workers_running(task: str) -> list[int]:
    """The pids of the Ray worker processes now running the task named `task` (their title)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            title = cmdline.read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:  # gone meanwhile
            continue
        if title.startswith(f"ray::{task}"):
            pids.append(int(cmdline.parent.name))
    return pids


@pytest.mark.slow
def test_a_killed_ray_task_runs_again_and_its_training_resumes(tmp_path, local_ray):
    require(Path("/proc/self/cmdline").exists(), "no /proc to find the Ray worker by")
    path = tiny_study(tmp_path, max_steps=400, valid_every=100)  # last.pt every 100 updates
    study = load_study(path)
    log = tmp_path / "out" / "runs" / "additive" / "metrics.jsonl"
    thread = threading.Thread(target=run_study, args=(study,), kwargs={"only": ["additive"], "ray": "local"})
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and time.monotonic() < deadline and thread.is_alive():
        # past the first checkpoint (step 100) and logged beyond it: kill the worker there
        steps = [r["step"] for r in read_metrics(log) if r.get("kind") == "train"] if log.exists() else []
        workers = _ray_workers_running("lookback additive")
        if steps and 110 <= steps[-1] < 400 and workers:
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.02)
    thread.join(timeout=300)
    assert killed is not None, "the run ended before the test could kill its worker"
    assert not thread.is_alive()

    steps = [r["step"] for r in read_metrics(log) if r.get("kind") == "train"]
    assert steps[-1] == 400  # Ray ran the task again, and the run finished
    # resumed from last.pt (step 100), not from the start: the updates after it were logged again
    assert steps.count(10) == 1 and any(steps.count(s) == 2 for s in range(110, 400, 10))
    assert "additive" in kept_evaluations(tmp_path / "out")
