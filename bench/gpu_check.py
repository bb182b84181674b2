"""python -m bench gpu-check: lookback on an NVIDIA GPU, checked in one command, in under 10 minutes.

    python -m bench gpu-check                       # writes results/bench/<date>_<time>_gpu_check.json
    python -m bench gpu-check --plan                # prints the steps' commands; runs nothing
    python -m bench gpu-check --steps train bench --updates 200 -o OUT.json

Three steps, and a fourth on request, each a child process with its own time limit (a step that
fails or runs out of time is recorded with the end of its log, and the next one runs; each step's
whole log is kept beside the JSON, as `<json stem>_<step>.log`):

1. **tests** (5 minutes): the test folders whose code has a CUDA path (training, the model,
   decoding, the explanations, the device and the translator). Their models are on
   `train.device: auto`, so on a GPU they train and decode there.
2. **train** (1.5 minutes): the README's main job (`configs/quickstart.yaml`) for `--updates`
   updates on the GPU in bf16 (cuDNN's GRU; `torch.backends.cudnn`'s version is recorded), then
   its validation BLEU; target tokens/s from its log.
3. **bench** (3 minutes): `python -m bench headline --device cuda --quick --configs feed`: lookback and Joey
   NMT on the same batches, on this GPU (Joey's environment comes from
   `bench/peers/setup_joey.sh`, which needs the network once; without it Joey's figures are
   recorded as missed, with the reason). Speed only: 30 s leave both models untrained. With
   `--trained MINUTES` it trains each tool at its own recipe instead, lookback's main job
   (`--recipe configs/quickstart.yaml`) against Joey's best recurrent recipe (`--joey-best
   peer`, 40 sentences), MINUTES each, then tests both on test_2016_flickr at greedy and beam 5:
   quality beside speed.
4. **compiled** (4 minutes, only when `--steps` names it): step 2 again with `train.compile=true`
   (torch.compile, inductor's CUDA backend, compiled once for dynamic shapes), the same updates,
   seed and batches: its tokens/s and last loss beside step 2's, its extra seconds the compile's.

The JSON holds the GPU, its driver, CUDA, cuDNN, torch, the CPU and its flags, and every
step's figures, status, seconds and command. Without a CUDA GPU it stops at once with one line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from .common import cpu_flags, cpu_kernels, cpu_model, shown, write_json
from .prepare import REPO

STEPS = ("tests", "train", "bench", "compiled")
DEFAULT_STEPS = STEPS[:3]  # under 10 minutes; `compiled` on request
LIMITS = {"tests": 300, "train": 90, "bench": 180, "compiled": 240}
# seconds: 9.5 minutes for the default steps; on an H100 the tests took 106 s (7 failing early)
# to over 120, on an H200 with 657 of them over 180 (65% done at 180 s, the rest 48 s more); the
# main job's 300 updates 24 s, the bench 89-113 s
CUDA_TESTS = [
    "tests/training",
    "tests/model",
    "tests/decoding",
    "tests/explain",  # gradients in eval mode: the diagnostics and the attributions
    "tests/test_device.py",
    "tests/test_translator.py",
]
CONFIG = "configs/quickstart.yaml"


# each tool at its own recipe: Joey's best recurrent recipe (bench/README.md) and lookback's main job
RECIPES = ["--only", "joey_best", "--joey-best", "peer", "--joey-set", "batch_sentences=40"]
RECIPES += ["--recipe", CONFIG]


def bench_limit(trained: float) -> float:
    """The bench step's time limit: 3 minutes for the speed-only run; two trainings of `trained`
    minutes and 2.5 minutes beside (data, the GEMM peak, validations, the test decodes)."""
    return 2 * trained * 60 + 150 if trained else LIMITS["bench"]


def commands(updates: int, work: Path, trained: float = 0.0) -> dict[str, list[str]]:
    """Each step's command line (`work`: a folder for the run and the bench's results; `trained`:
    minutes of training each for the bench's two recipes, 0 for its 30-second speed-only run)."""
    py = sys.executable
    sets = [
        "train.device=cuda",
        "train.precision=bf16",
        f"train.max_steps={updates}",
        f"train.valid_every={updates}",
        f"train.run_dir={work / 'run'}",
        "train.time_limit=0",
    ]
    compiled = [*sets[:4], f"train.run_dir={work / 'compiled'}", sets[5], "train.compile=true"]
    train = [py, "-m", "lookback", "train", CONFIG]
    bench = ["--device", "cuda", "--configs", "feed", "--results-dir", str(work / "bench")]
    if trained:
        clock = ["--budget-minutes", f"{trained:g}", "--validate-every-minutes", f"{trained / 3:g}"]
        bench += [*RECIPES, *clock]
    else:
        bench.insert(2, "--quick")
    return {
        # addopts cleared: nbmake (notebooks) need not be installed there
        "tests": [py, "-m", "pytest", "-q", "--maxfail=10", "--tb=short", "-o", "addopts="]
        + ["-m", "not slow", *CUDA_TESTS],
        "train": [*train, *[a for s in sets for a in ("--set", s)]],
        "bench": [py, "-m", "bench", "headline", *bench],
        "compiled": [*train, *[a for s in compiled for a in ("--set", s)]],
    }


def run_step(name: str, cmd: list[str], limit: float, log: Path) -> dict[str, Any]:
    """Run one step's command with its time limit; its status, seconds and the end of its log."""
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        try:
            rc = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=limit).returncode
            status = "passed" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {limit:g} s"
    text = log.read_text(encoding="utf-8", errors="replace")
    return {
        "status": status,
        "seconds": round(time.perf_counter() - start, 1),
        "command": shlex.join(shown(c) if c.startswith(str(REPO)) else c for c in cmd),
        "log_tail": text[-3000:],
        "figures": FIGURES[name](text, log.parent),
    }


def test_figures(text: str, _work: Path) -> dict[str, int]:
    """pytest's summary line as numbers: {"passed": 120, "failed": 1, ...}."""
    lines = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    if not lines:
        return {}
    counts = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed)", lines[-1])
    return {word: int(n) for n, word in counts}


def train_figures(_text: str, work: Path, run: str = "run") -> dict[str, Any]:
    """From the run's metrics.jsonl (work/run): updates, the last logged tokens/s and training loss,
    the last validation BLEU."""
    metrics = work / run / "metrics.jsonl"
    if not metrics.exists():
        return {}
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    out: dict[str, Any] = {}
    for r in records:
        if "tokens_per_s" in r:
            out["target_tokens_per_s"] = r["tokens_per_s"]
            if "loss" in r:
                out["train_loss"] = r["loss"]
        if "bleu" in r:
            out["valid_bleu"], out["updates"] = r["bleu"], r.get("step")
    return out


def bench_figures(_text: str, work: Path) -> dict[str, Any]:
    """The bench's own results file (its figures and ratios), as it wrote it."""
    found = sorted((work / "bench").glob("*.json"))
    if not found:
        return {}
    result = json.loads(found[-1].read_text(encoding="utf-8"))
    return {"figures": result.get("figures"), "ratios": result.get("ratios")}


def compiled_figures(text: str, work: Path) -> dict[str, Any]:
    """The compiled run's figures, as the train step's."""
    return train_figures(text, work, "compiled")


FIGURES = {"tests": test_figures, "train": train_figures, "bench": bench_figures}
FIGURES["compiled"] = compiled_figures


def gpu() -> dict[str, Any]:
    """The GPU, its driver and the CUDA libraries torch runs on."""
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        driver = None
    return {
        "name": props.name,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "driver": driver,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "bf16": torch.cuda.is_bf16_supported(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench gpu-check", description=__doc__.split("\n")[0])
    ap.add_argument(
        "-o", "--output", type=Path, help="results JSON (default: results/bench/STAMP_gpu_check.json)"
    )
    steps = "which (default: tests train bench; compiled on request)"
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=list(DEFAULT_STEPS), help=steps)
    ap.add_argument("--updates", type=int, default=300, help="the main job's training updates (default 300)")
    ap.add_argument(
        "--trained",
        type=float,
        default=0.0,
        metavar="MINUTES",
        help="the bench step trains lookback's main job and Joey's best recipe this long each, then tests "
        "both (default 0: 30 s each of the like-for-like config, speed only)",
    )
    ap.add_argument("--plan", action="store_true", help="print each step's command and limit; run nothing")
    args = ap.parse_args(argv)
    if not 1 <= args.updates <= 100_000:
        ap.error(f"--updates must be between 1 and 100,000, not {args.updates}")
    if not 0 <= args.trained <= 60:
        ap.error(f"--trained must be between 0 and 60 minutes, not {args.trained:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    output = args.output or REPO / "results" / "bench" / f"{stamp}_gpu_check.json"
    with tempfile.TemporaryDirectory(prefix="lookback-gpu-check-") as tmp:
        work = Path(tmp)
        cmds = commands(args.updates, work, args.trained)
        limits = {**LIMITS, "bench": bench_limit(args.trained)}
        if args.plan:
            for name in args.steps:
                print(f"{name} (at most {limits[name]:g} s): {shlex.join(cmds[name])}")
            return 0
        if not torch.cuda.is_available():
            error = "this torch sees no CUDA GPU (torch.cuda.is_available() is False)"
            print(f"bench.gpu_check: error: {error}", file=sys.stderr)
            return 2
        result: dict[str, Any] = {
            "stamp": stamp,
            "gpu": gpu(),
            "cpu": cpu_model(),
            "cpu_flags": cpu_flags(),
            "cpu_kernels": cpu_kernels(),
            "torch": torch.__version__,
            "environment": {k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "CUBLAS_"))},
            "trained_minutes": args.trained,
            "steps": {},
        }
        output.parent.mkdir(parents=True, exist_ok=True)
        for name in args.steps:
            print(f"gpu_check: {name} (at most {limits[name]:g} s)", file=sys.stderr, flush=True)
            step = run_step(name, cmds[name], limits[name], work / f"{name}.log")
            whole = output.with_name(f"{output.stem}_{name}.log")  # the whole log, beside the JSON
            shutil.copyfile(work / f"{name}.log", whole)
            step["log"] = shown(whole)
            result["steps"][name] = step
            done = f"{step['status']} in {step['seconds']} s; {step['figures']}"
            print(f"gpu_check: {name}: {done}", file=sys.stderr)
            write_json(output, result)  # after every step: a check cut short keeps what it has
    print(f"gpu_check: wrote {shown(output)}", file=sys.stderr)
    return 0 if all(s["status"] == "passed" for s in result["steps"].values()) else 1
