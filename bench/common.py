"""What both systems' measurement scripts share; the standard library only.

`bench/peers/joey.py` runs inside Joey NMT's own virtual environment, where
lookback is not installed, and imports this module by path. So it imports
no torch and no lookback at its top: the batch plan that both systems train
on, the timed training loop, peak memory and result files.

The batch plan is the one batching both systems implement identically:
each epoch a seeded permutation of the training pairs (Python's own
`random`, so the two interpreters draw the same one), cut into consecutive
batches of `batch_size` sentences, the last shorter batch kept. Joey NMT
calls this `batch_type: sentence` (its default, and the peer's setup);
lookback gets it from bench/lookback_run.py.
"""

from __future__ import annotations

import itertools
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any


def permutation(n: int, seed: int, epoch: int) -> list[int]:
    """The order of the n training pairs in `epoch`: the same list in every interpreter."""
    order = list(range(n))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Consecutive batches of `batch_size` pairs of this epoch's permutation; the last may be shorter."""
    order = permutation(n, seed, epoch)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def epochs_after(n: int, batch_size: int, seed: int, done: int) -> Iterator[list[list[int]]]:
    """Each epoch's batches, from the one after the first `done` updates on (a run that goes on
    from a checkpoint); the first epoch yielded is cut to the batches not yet trained on."""
    per_epoch = -(-n // batch_size)  # the last batch may be shorter
    first = done // per_epoch
    for epoch in itertools.count(first):
        plan = epoch_batches(n, batch_size, seed, epoch)
        yield plan[done % per_epoch :] if epoch == first else plan


def timed_training(
    batches: Iterator[Any],
    step: Callable[[Any], int],
    sentences: Callable[[Any], int],
    budget_s: float,
    warmup_steps: int,
    max_steps: int = 0,
    validate: Callable[[], float] | None = None,
    validate_every_s: float = 0.0,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train until `budget_s` seconds of training have passed (or `max_steps` updates).

    Args:
        batches: yields the next batch; fetching (padding, tensors) is timed too.
        step: one update (forward, backward, clip, optimiser step) on a batch;
            returns the real target tokens of the batch (with </s>). It must not
            return before the update is done (on a GPU: synchronise, e.g. by
            reading the loss as a float).
        sentences: the number of sentence pairs in a batch.
        warmup_steps: first updates left out of the throughput figures.
        max_steps: stop after this many updates (0: no limit).
        validate: returns validation BLEU; called after the first update past every
            `validate_every_s` seconds of training, and at the end. Its own time is left
            out of the training clock (and of the budget), so both systems' curves are of
            training time alone.
        checkpoint: called after each validation but the last with the loop's progress (updates,
            training clock, throughput counts, curve: plain JSON), for the caller to save beside
            its weights and optimiser, so that a killed run can go on. Its time is left out of
            the clock too, and recorded in the curve's point as `checkpoint_seconds`.
        resume: the progress an earlier process gave `checkpoint` last: the loop goes on from
            there (its clock, updates, counts and curve), and `batches` must start at the
            update after progress["steps"].

    Returns:
        Steps, seconds and the throughput after warm-up; with `validate`, also `curve`:
        one {"seconds", "steps", "bleu", "validate_seconds"} per validation.
    """
    progress = resume or {"steps": 0, "tokens": 0, "sentences": 0, "seconds": 0.0, "curve": []}
    steps, tokens, sents = progress["steps"], progress["tokens"], progress["sentences"]
    processes = progress.get("processes", 0) + 1  # this one included
    start = time.perf_counter() - progress["seconds"]  # the training clock goes on where it stopped
    paused = 0.0  # seconds spent validating (and checkpointing) in this process
    # on the training clock: seconds since start - paused
    warm_at = 0.0 if warmup_steps == 0 else progress.get("warm_at")
    now = time.perf_counter()
    curve: list[dict[str, float]] = [dict(p) for p in progress["curve"]]

    def check(last: bool = False) -> None:
        nonlocal paused
        t0 = time.perf_counter()
        bleu = validate()
        took = time.perf_counter() - t0
        curve.append({"seconds": t0 - start - paused, "steps": steps, "bleu": bleu, "validate_seconds": took})
        paused += took
        if checkpoint and not last:
            t1 = time.perf_counter()
            checkpoint(
                {
                    "steps": steps,
                    "tokens": tokens,
                    "sentences": sents,
                    "seconds": curve[-1]["seconds"],  # no training since the validation began
                    "warm_at": warm_at,
                    "curve": [dict(p) for p in curve],
                    "processes": processes,
                }
            )
            curve[-1]["checkpoint_seconds"] = time.perf_counter() - t1
            paused += curve[-1]["checkpoint_seconds"]

    for batch in batches:
        n_tokens = step(batch)
        steps += 1
        now = time.perf_counter()
        if steps == warmup_steps:
            warm_at = now - start - paused
        elif steps > warmup_steps:
            tokens += n_tokens
            sents += sentences(batch)
        trained = now - start - paused
        if trained >= budget_s or (max_steps and steps >= max_steps):
            break
        if validate and validate_every_s and trained >= validate_every_s * (len(curve) + 1):
            check()
    trained = now - start - paused
    if validate:
        check(last=True)  # the end of the curve
    measured = trained - warm_at if warm_at is not None and steps > warmup_steps else 0.0
    figures = {
        "steps": steps,
        "seconds": trained,
        "warmup_steps": warmup_steps,
        "measured_steps": max(steps - warmup_steps, 0),
        "measured_seconds": measured,
        "measured_target_tokens": tokens,
        "target_tokens_per_s": tokens / measured if measured else None,
        "sentences_per_s": sents / measured if measured else None,
        "steps_per_s": (steps - warmup_steps) / measured if measured else None,
        "processes": processes,  # more than 1: resumed from a checkpoint
    }
    if validate:
        figures["curve"] = curve
    return figures


def median_call_seconds(run: Callable[[], Any], calls: int, repeats: int, warmup: int) -> float:
    """Seconds a call of `run`: the median of `repeats` timings of `calls` calls, after `warmup`
    untimed calls (the first ones allocate and choose kernels)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def counted_flops(run: Callable[[], Any]) -> tuple[Any, int]:
    """`run()`'s result and the FLOPs of its matrix products (forward and backward, 2 per
    multiply-add), counted by torch.utils.flop_counter; elementwise work is not counted.
    cuDNN is off while counting: its fused RNN is one operator the counter has no formula
    for, so on a GPU the recurrences' products would go uncounted."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.backends.cudnn.flags(enabled=False):
        result = run()
    return result, counter.get_total_flops()


def matmul_flops_per_token(step: Callable[[Any], int], batches: Iterable[Any]) -> float | None:
    """FLOPs of the matrix products per target token of `step` (which returns a batch's target
    tokens) over `batches`. Run it after the timed training: the counter slows what it counts."""
    tokens, flops = counted_flops(lambda: sum(step(batch) for batch in batches))
    return flops / tokens if tokens else None


def minutes_to(curve: list[dict[str, float]], bleu: float) -> float | None:
    """Training minutes at the first validation at or above `bleu`; None if none reached it."""
    return next((p["seconds"] / 60 for p in curve if p["bleu"] >= bleu), None)


def run_measurement(
    system: str, tasks: dict[str, Callable[[dict], dict]], argv: list[str], **extra: Any
) -> int:
    """`SCRIPT TASK SPEC.json RESULT.json`, the main of both systems' measurement scripts: run
    one task on the spec, then write its figures, or how it failed (every run's JSON is kept,
    misses included), with the process's peak memory. `extra` goes into the result."""
    task, spec_path, out_path = argv
    spec = read_json(spec_path)
    set_threads_env(spec["threads"])
    import torch  # both systems' environments have it; this module's top imports none

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    result: dict[str, Any] = {"system": system, "task": task, "error": None, **extra}
    try:
        result["figures"] = tasks[task](spec)
    except Exception as exc:  # recorded, not raised
        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    result["peak_rss_bytes"] = peak_rss_bytes()
    result["torch_threads"] = torch.get_num_threads()
    write_json(Path(out_path), result)
    return 0 if result["error"] is None else 1


def timed_translation(translate: Callable[[], list[str]], refs: list[str], out: Path) -> dict[str, Any]:
    """One timed call that translates the test set: its speed and sacreBLEU (default settings,
    with the signature); the hypotheses are written to `out`."""
    import sacrebleu  # both systems' environments have it; this module's top imports none

    hyps, seconds = timed(translate)
    bleu = sacrebleu.metrics.BLEU()
    Path(out).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    return {
        "seconds": seconds,
        "sentences_per_s": len(hyps) / seconds,
        "bleu": bleu.corpus_score(hyps, [refs]).score,
        "bleu_signature": str(bleu.get_signature()),
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """(fn(), seconds it took)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def read_lines(path: Path) -> list[str]:
    return Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def cpu_model() -> str:
    """The CPU's model name, as lookback's log gives it (imported here: the peer never calls this)."""
    from lookback.device import cpu_name

    return cpu_name()


def cpu_flags() -> list[str]:
    """The CPU flags that decide fp32, bf16 and int8 speed on x86 (lookback's list; imported here:
    the peer never calls this)."""
    from lookback.device import cpu_flags

    return cpu_flags()


def cpu_kernels() -> str:
    """The vector instructions PyTorch's CPU kernels use in this process (lookback's, imported
    here: the peer never calls this); ATEN_CPU_CAPABILITY can lower them below the flags'."""
    from lookback.device import kernels

    return kernels()


def set_threads_env(threads: int) -> None:
    """Ask the math libraries for `threads` threads (0: leave their defaults)."""
    if threads:
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(threads)


REPO = Path(__file__).resolve().parent.parent


def shown(path: str | Path) -> str:
    """`path` as a results file records it: relative to the repository when inside it, so that a
    committed file names no machine's folders."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def machine_record(prog: str, argv: list[str] | None, **fields: Any) -> dict[str, Any]:
    """A results JSON's head: the command as typed, the CPU, its flags and the versions; then `fields`."""
    from lookback.device import cpu_name

    args = argv if argv is not None else sys.argv[1:]
    head = {"command": f"python -m {prog} " + " ".join(args), "cpu": cpu_name(), "cpu_flags": cpu_flags()}
    return {**head, "versions": versions(), **fields}


def write_json(path: Path, data: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "lookback"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "device": device,
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_flags": cpu_flags(),  # fp32, bf16 and int8 speeds depend on them
        "cpu_kernels": cpu_kernels(),  # ... and on the kernels torch picks (ATEN_CPU_CAPABILITY)
        "platform": platform.platform(),
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
    }
    return info


def versions() -> dict[str, Any]:
    import importlib.metadata as md

    out: dict[str, Any] = {"python": platform.python_version(), "lookback_commit": git_commit()}
    for name in ("torch", "sacrebleu", "sentencepiece", "onnxruntime"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:  # onnxruntime is an extra
            out[name] = None
    return out
