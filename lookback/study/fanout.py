"""A study's runs fanned out over Ray: `lookback study FILE --ray [ADDRESS]`.

Each run of the study (a model, its grid cell, its seed) is one Ray task that trains it
(resuming what is there) and evaluates it, and holds what its config declares: `train.threads`
CPUs (0, all cores, holds every CPU of the smallest machine, so a run that wants a whole machine
gets one) and one GPU when `train.device` is cuda, or auto on a cluster that has GPUs. Ray then
runs as many at once as the machines hold, and never two on the same cores.

A task whose worker dies (a kill, a lost machine) is run again by Ray, and its training
resumes from the run's last.pt, exactly where it was (training/train.py). As each task ends,
its evaluation is kept in the study's evaluations.json.xz, so a killed study loses at most
the runs under way; run it again and the finished ones are neither trained nor evaluated.
The report is then written as a serial study writes it (run.py), from the same evaluations.

On a cluster, every machine needs lookback, the data at the same path (LOOKBACK_MULTI30K is
passed on) and, for a task run again elsewhere to resume, the study's folder on a shared
file system; without one, a task that was run again trains from the start.

Ray is an optional extra (`pip install 'lookback[ray]'`); without `--ray` a study runs its
models one after another in this process, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..config import Config, ConfigError

logger = logging.getLogger(__name__)

RETRIES = 3  # times Ray runs a task again whose worker died, each time resuming its run


@dataclass
class Outcome:
    """What a task brings back: its training seconds (None when not trained), its evaluation
    and its metrics.jsonl records (for the learning table, where the driver cannot see the
    run directory)."""

    seconds: float | None
    evaluation: dict | None
    records: list[dict]


def require_ray():
    """The ray module, or a one-line error saying how to get it (before any work)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "Ray is not installed: pip install 'lookback[ray]' (a study without --ray runs here)"
        ) from None
    return ray


def start(address: str, cpus: int | None = None) -> None:
    """Connect to the Ray cluster at `address` ('auto': the one this machine belongs to,
    'ray://HOST:PORT': a remote one), or with address 'local' start a local instance with
    `cpus` CPUs (None: all of them). Quiet, without its dashboard."""
    ray = require_ray()
    if ray.is_initialized():
        return
    if address == "local":
        ray.init(num_cpus=cpus, include_dashboard=False, logging_level=logging.WARNING)
    else:
        env = {k: os.environ[k] for k in ("LOOKBACK_MULTI30K",) if k in os.environ}
        ray.init(
            address=address,
            runtime_env={"env_vars": env} if env else None,
            logging_level=logging.WARNING,
        )


def cluster() -> tuple[int, float]:
    """The CPUs of the smallest live machine of the Ray cluster, and the GPUs of all of them."""
    ray = require_ray()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = int(min(n["Resources"].get("CPU", 1) for n in nodes)) if nodes else 1
    return node_cpus, ray.cluster_resources().get("GPU", 0)


def holds(cfg: Config, node_cpus: int, gpus: float) -> dict[str, float]:
    """The resources a run's task holds: train.threads CPUs (0: a whole machine's, node_cpus)
    and one GPU when the run trains on one (cuda; auto where the cluster has `gpus`)."""
    t = cfg.train
    gpu = t.device == "cuda" or (t.device == "auto" and gpus > 0)
    return {"num_cpus": t.threads or node_cpus, "num_gpus": 1 if gpu else 0}


def in_worker(cwd: str) -> None:
    """A Ray worker set up as the driver: in its folder (the relative paths of a study or a
    search), with its log lines."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.chdir(cwd)


def _task(run: Callable[..., Outcome], cwd: str, args: tuple[Any, ...]) -> Outcome:
    """One run in a Ray worker, set up as the driver."""
    in_worker(cwd)
    return run(*args)


def fan_out(
    run: Callable[..., Outcome],
    configs: dict[str, Config],
    args: Callable[[str, Config], tuple[Any, ...]],
    keep: Callable[[str, Outcome], None],
) -> dict[str, Outcome]:
    """Run `run(*args(name, cfg))` for every run of `configs` as a Ray task holding what its
    config declares (`holds`), its train.threads set to the CPUs it holds, and `keep` each
    outcome as its task ends, in the order they end. A run that fails with an error does not
    stop the others: the study stops after them, naming it."""
    ray = require_ray()
    node_cpus, gpus = cluster()
    task = ray.remote(max_retries=RETRIES)(_task)
    pending = {}
    for name, cfg in configs.items():
        need = holds(cfg, node_cpus, gpus)
        cfg = replace(cfg, train=replace(cfg.train, threads=int(need["num_cpus"])))
        ref = task.options(name=f"lookback {name}", **need).remote(run, os.getcwd(), args(name, cfg))
        pending[ref] = name
        logger.info("study: %s queued on Ray (%d CPUs, %d GPU)", name, need["num_cpus"], need["num_gpus"])
    outcomes, failed = {}, []
    while pending:
        [ref], _ = ray.wait(list(pending), num_returns=1)
        name = pending.pop(ref)
        try:
            outcomes[name] = ray.get(ref)
        except ray.exceptions.RayError as exc:
            failed.append(name)
            logger.error("study: %s failed on Ray: %s", name, str(exc).strip().splitlines()[-1])
            continue
        keep(name, outcomes[name])
        logger.info("study: %s done on Ray (%d of %d)", name, len(outcomes), len(configs))
    if failed:
        raise RuntimeError(
            f"study: {len(failed)} run(s) failed on Ray ({', '.join(failed)}); the others are kept, "
            "and the study run again goes on from them"
        )
    return outcomes
