"""python -m bench compiled: the training update by torch.compile against eager, on the same batches.

    python -m bench compiled -o results/bench/STAMP_compiled.json [--config configs/quickstart.yaml]
        [--precisions fp32 bf16] [--updates 60] [--rounds 2] [--threads 2]

For each precision, eager and compiled (`train.compile=true`: the loss, forward and backward,
by inductor's CPU backend, once for dynamic shapes) in turn, `--rounds` times, each in a fresh
process and from the same initial weights on the same batches (the config's first 10 +
`--updates` updates): the first 10 updates' seconds (compiling happens in the first, inside
the training clock), target tokens/s over the rest, the summed loss. Then one pair with dropout
off, whose summed losses must agree to rounding: with dropout on they differ, as inductor draws
its own random masks. Needs $LOOKBACK_MULTI30K for the main job's data; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from .common import cpu_flags, cpu_kernels, cpu_model, shown, write_json
from .prepare import REPO

CONFIG = "configs/quickstart.yaml"
WARMUP = 10  # untimed updates first: the compiled run compiles in the first


def one(config: str, precision: str, compiled: bool, updates: int, threads: int, sets: list[str]) -> dict:
    """One run in this process: a fresh Trainer, WARMUP + `updates` updates; its figures."""
    from lookback.config import load_config
    from lookback.training.train import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        fixed = [
            f"train.precision={precision}",
            f"train.threads={threads}",
            f"train.compile={str(compiled).lower()}",
        ]
        trainer = Trainer(load_config(config, [*sets, *fixed, f"train.run_dir={tmp}/run"]))
        plan = iter(trainer.plan)
        batches = [next(plan) for _ in range(WARMUP + updates)]
        start = time.perf_counter()
        for bs in batches[:WARMUP]:
            trainer.train_step(*bs)
        first = time.perf_counter() - start
        start = time.perf_counter()
        losses = [trainer.train_step(*bs) for bs in batches[WARMUP:]]
        seconds = time.perf_counter() - start
    tokens = sum(b.n_tokens for bs in batches[WARMUP:] for b in bs)
    return {
        "precision": precision,
        "compiled": compiled,
        "first_updates_seconds": round(first, 2),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "loss_sum": sum(losses),
    }


def in_process(args: argparse.Namespace, precision: str, compiled: bool, sets: list[str]) -> dict:
    """`one` in a fresh Python process: no compiled code or kernel cache carried from run to run."""
    cmd = [sys.executable, "-m", "bench", "compiled", "--one", precision, str(compiled).lower()]
    cmd += ["--config", args.config, "--updates", str(args.updates), "--threads", str(args.threads)]
    cmd += [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"bench.compiled: {' '.join(cmd[3:])} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict[str, Any]:
    """Per precision: the median tokens/s and first-updates seconds of each side, and their ratio."""
    out: dict[str, Any] = {}
    for precision in dict.fromkeys(r["precision"] for r in runs):
        side = {
            name: [r for r in runs if r["precision"] == precision and r["compiled"] is flag]
            for name, flag in (("eager", False), ("compiled", True))
        }
        rate = {k: median(r["target_tokens_per_s"] for r in v) for k, v in side.items()}
        out[precision] = {
            "eager_tokens_per_s": rate["eager"],
            "compiled_tokens_per_s": rate["compiled"],
            "compiled_over_eager": round(rate["compiled"] / rate["eager"], 3),
            "compile_extra_seconds": round(
                median(r["first_updates_seconds"] for r in side["compiled"])
                - median(r["first_updates_seconds"] for r in side["eager"]),
                1,
            ),
        }
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench compiled", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", type=Path, help="results JSON (required unless --one)")
    ap.add_argument("--config", default=CONFIG, help=f"the training config (default {CONFIG})")
    ap.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    ap.add_argument("--updates", type=int, default=60, help="timed updates after 10 untimed (default 60)")
    ap.add_argument(
        "--rounds", type=int, default=2, help="eager and compiled runs of each precision (default 2)"
    )
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key (repeatable)")  # fmt: skip
    ap.add_argument("--one", nargs=2, metavar=("PRECISION", "COMPILED"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if not 1 <= args.updates <= 10_000 or not 1 <= args.rounds <= 10:
        ap.error(f"--updates must be 1-10,000 and --rounds 1-10, not {args.updates} and {args.rounds}")
    if args.one is None and args.output is None:
        ap.error("-o/--output is required")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.one:
        precision, compiled = args.one
        print(
            json.dumps(one(args.config, precision, compiled == "true", args.updates, args.threads, args.sets))
        )
        return 0
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    runs = []
    for precision in args.precisions:
        for _ in range(args.rounds):
            for compiled in (False, True):
                runs.append(in_process(args, precision, compiled, args.sets))
                r = runs[-1]
                say(f"{precision} {'compiled' if compiled else 'eager'}: {r['target_tokens_per_s']:,.0f} "
                    f"target tokens/s, first {WARMUP} updates {r['first_updates_seconds']} s")  # fmt: skip
    no_dropout = [*args.sets, "model.dropout=0"]
    check = [in_process(args, args.precisions[0], c, no_dropout) for c in (False, True)]
    result = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cpu_kernels": cpu_kernels(),
        "threads": args.threads,
        "config": shown(args.config),
        "sets": args.sets,
        "updates": args.updates,
        "warmup_updates": WARMUP,
        "runs": runs,
        "summary": summary(runs),
        "without_dropout": {
            "precision": args.precisions[0],
            "eager_loss_sum": check[0]["loss_sum"],
            "compiled_loss_sum": check[1]["loss_sum"],
            "relative_difference": abs(check[1]["loss_sum"] - check[0]["loss_sum"])
            / abs(check[0]["loss_sum"]),
        },
    }
    write_json(args.output, result)
    for precision, s in result["summary"].items():
        ratio, extra = s["compiled_over_eager"], s["compile_extra_seconds"]
        say(f"{precision}: compiled {ratio}x eager; compiling {extra} s")
    say(f"wrote {shown(args.output)}")
    return 0
