"""python -m bench transformer-peer: lookback's attention-only model and its main job beside Joey
NMT's Transformer, each at its own recipe, on one clock and one machine, in one run.

    python -m bench transformer-peer                                  # 3 x 12 minutes, then the tests
    python -m bench transformer-peer --joey-set lr=0.001 --joey-set warmup=1000   # Joey's best point
    python -m bench transformer-peer --system transformer=results/tune/transformer/best.yaml
    python -m bench transformer-peer --joey-from results/bench/joey_search_transformer/POINT \
        --joey-set ...                                                # Joey's run as the search left it
    python -m bench transformer-peer --quick                          # smoke run: 30 s each, 100 sentences

The systems, trained one after another on Multi30k En-Fr for the same minutes, then tested on
test_2016_flickr with the weights at the end of the clock, greedy and beam 5 (sacreBLEU, 13a,
cased, on detokenised output):

- `main`: the main job, configs/quickstart.yaml, as `lookback train` runs it (its own
  tokenizer, batches, schedule and precision: bf16 where the CPU runs it natively);
- `transformer`: lookback's attention-only config, configs/multi30k_en_fr_transformer.yaml, the
  same way;
- `joey_transformer`: Joey NMT 2.3.0's Transformer for small data, sized to the same parameter
  budget (bench/settings.py JOEY_RECIPES "transformer", with --joey-set changes), trained and
  tested by the headline harness (`python -m bench headline --only joey_best`): its own code,
  its own scheduler, fp32 (Joey's only CPU precision), its validation time left off its clock.
  lookback's clock counts its validations: if anything, lookback trains a little less.

`--system NAME=CONFIG` replaces a lookback system's config or adds one (a tuned best.yaml
beside the shipped one). A system whose result is in the work directory is not run again; a
lookback training cut short goes on from its last checkpoint (`lookback train --resume`), so a
killed run goes on when the same command is given again. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from . import settings
from .common import machine_record, read_json, shown, write_json
from .headline import figure
from .joey_search import result_of
from .prepare import REPO

SYSTEMS = {"main": "quickstart", "transformer": "multi30k_en_fr_transformer"}
JOEY = "joey_transformer"
QUICK_TEST = 100  # --quick: the first sentences of the test set


def lookback_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lookback", *args]


def run(cmd: list[str], log: Path) -> str:
    """Run `cmd` with its output appended to `log`; its stdout; a one-line error if it fails."""
    print(f"transformer-peer: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(cmd)}\n{out.stdout}{out.stderr}\n")
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"transformer-peer: {cmd[2:4]} failed ({out.returncode}): {tail}; see {log}")
    return out.stdout


def test_slice(work: Path) -> str:
    """--quick: the first QUICK_TEST pairs of test_2016_flickr, as a path prefix for --test."""
    from lookback.data.read import read_parallel

    src, ref = read_parallel(f"multi30k:{settings.TEST_SET}", settings.SRC_LANG, settings.TGT_LANG)
    prefix = work / f"test_{QUICK_TEST}"
    for lang, lines in ((settings.SRC_LANG, src), (settings.TGT_LANG, ref)):
        Path(f"{prefix}.{lang}").write_text("".join(x + "\n" for x in lines[:QUICK_TEST]), encoding="utf-8")
    return str(prefix)


def lookback_system(name: str, config: str, minutes: float, work: Path, test: str) -> dict[str, Any]:
    """Train a lookback config on the clock (going on from a cut-short run), then test it."""
    run_dir, log = work / name, work / f"{name}.log"
    train = ["train", config, "--set", f"train.run_dir={run_dir}", "--set", f"train.time_limit={minutes:g}"]
    if (run_dir / "last.pt").is_file():
        train.append("--resume")
    run(lookback_cmd(*train), log)
    tests = {}
    for beam in (1, 5):
        evaluate = ["evaluate", str(run_dir), "--checkpoint", "last", "--beam", str(beam), "--json"]
        evaluate += ["--test", test]
        seconds = time.perf_counter()
        report = json.loads(run(lookback_cmd(*evaluate), log))
        tests[f"beam{beam}"] = {
            "bleu": report["bleu"],
            "length_ratio": report["length_ratio"],
            "multi30k_bleu": report["multi30k_bleu"],  # lowercased, Moses-tokenised: the papers' protocol
            "seconds": time.perf_counter() - seconds,  # loading the model included
        }
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    valid = [r for r in records if r.get("kind") == "valid"]
    import torch

    from lookback.config import load_config
    from lookback.device import resolve_precision

    cfg = load_config(run_dir / "config.yaml")
    return {
        "config": shown(config) if Path(config).exists() else config,
        "commands": [shlex.join(["lookback", *train[:2]])],
        "updates": max((r["step"] for r in records), default=0),
        "training_minutes": max((r["seconds"] for r in records), default=0) / 60,
        "precision": resolve_precision(torch.device("cpu"), cfg.train.precision),  # auto, as trained
        "parameters": parameters(run_dir),
        "curve": [{"step": r["step"], "minutes": r["seconds"] / 60, "bleu": r["bleu"]} for r in valid],
        "valid_bleu_best": max((r["bleu"] for r in valid), default=None),
        "test": tests,
    }


def parameters(run_dir: Path) -> int | None:
    """The model's parameter count, from its last checkpoint; a tied matrix, saved under two
    names over one storage, counts once."""
    import torch

    state = torch.load(run_dir / "last.pt", map_location="cpu", weights_only=False)
    weights = state.get("model") if isinstance(state, dict) else None
    if not isinstance(weights, dict):
        return None
    unique = {t.untyped_storage().data_ptr(): t for t in weights.values() if isinstance(t, torch.Tensor)}
    return sum(t.numel() for t in unique.values())


def cmd_of(args: argparse.Namespace, folder: Path) -> list[str]:
    """The headline harness's run of Joey's Transformer recipe, alone."""
    return [
        sys.executable, "-m", "bench", "headline", "--only", settings.JOEY_BEST,
        "--joey-best", "transformer", *[a for s in args.joey_set for a in ("--joey-set", s)],
        "--configs", "feed", "--budget-minutes", f"{args.minutes:g}", "--results-dir", str(folder),
        *(["--quick"] if args.quick else []),
    ]  # fmt: skip


def joey_system(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Joey's Transformer through the headline harness (its own venv, code and scheduler); with
    --joey-from, the finished run of `joey-search --transformer`'s point (the same command), taken
    as it is and said so in the record (parse_args has checked that it is there)."""
    folder = args.joey_from or work / JOEY
    record = result_of(folder)
    if record is None:
        run(cmd_of(args, folder), work / f"{JOEY}.log")
        record = result_of(folder)
        if record is None:
            raise SystemExit(f"transformer-peer: Joey's run left no result in {folder}; see {JOEY}.log")
    joey = record["systems"][settings.JOEY_BEST]
    train = joey["train"]["figures"]
    return {
        "recipe": settings.joey_recipe("transformer", args.joey_set),
        "commands": [shlex.join(cmd_of(args, folder))],
        "taken_from": args.joey_from and shown(args.joey_from),  # None: trained in this run
        "results": record["path"],
        "updates": train["steps"],
        "training_minutes": train["seconds"] / 60,
        "precision": "fp32",
        "parameters": train.get("parameters"),
        "curve": [{"minutes": p["seconds"] / 60, "bleu": p["bleu"]} for p in train.get("curve", [])],
        "valid_bleu_best": max((p["bleu"] for p in train.get("curve", [])), default=None),
        "test": {f"beam{b}": {"bleu": figure(joey, ("translate", f"beam{b}", "bleu"))} for b in (1, 5)},
    }


def markdown(record: dict[str, Any]) -> str:
    """The run's table: each system's updates, parameters, validation and test BLEU."""
    flags = [f for f in record["cpu_flags"] if f.startswith(("avx512", "amx")) or f in ("avx2", "fma")]
    lines = [
        f"{record['minutes']:g} minutes of training each on {record['cpu']} ({', '.join(flags)}), "
        f"one after another; test: {record['test']}, the weights at the end of the clock.",
        "",
        "| system | precision | parameters (M) | updates | validation BLEU, best "
        "| test greedy | test beam 5 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in record["systems"].items():
        params = f"{s['parameters'] / 1e6:.2f}" if s.get("parameters") else "?"
        best = f"{s['valid_bleu_best']:.2f}" if s.get("valid_bleu_best") is not None else "?"
        lines.append(
            f"| {name} | {s['precision']} | {params} | {s['updates']:,} | {best} | "
            f"{s['test']['beam1']['bleu']:.2f} | {s['test']['beam5']['bleu']:.2f} |"
        )
    taken = [
        f"{name}: taken from {s['taken_from']}"
        for name, s in record["systems"].items()
        if s.get("taken_from")
    ]
    if taken:  # a joey-search point's run, the same command on the same clock
        lines += ["", "; ".join(taken) + " (the same command and clock)."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench transformer-peer", description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=12.0, help="training minutes per system (default 12)")
    ap.add_argument(
        "--system",
        action="append",
        default=[],
        metavar="NAME=CONFIG",
        help="a lookback system's config (a file or a shipped config's name); replaces or adds one",
    )
    ap.add_argument(
        "--joey-set", action="append", default=[], metavar="KEY=VALUE", help="change Joey's recipe"
    )
    ap.add_argument(
        "--test",
        default=f"multi30k:{settings.TEST_SET}",
        help="the test set of lookback's systems: a spec or a path prefix (default %(default)s; "
        "Joey's is the harness's, the same sentences)",
    )
    ap.add_argument("--skip-joey", action="store_true", help="lookback's systems only")
    ap.add_argument(
        "--joey-from",
        type=Path,
        metavar="POINT_DIR",
        help="take Joey's run from a finished `joey-search --transformer` point (its folder, e.g. "
        "results/bench/joey_search_transformer/tf_lr1e-3_w1000) instead of training it again: the same "
        "command on the same clock; give the point's --joey-set flags too (checked); recorded in the JSON",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path.home() / ".cache" / "lookback" / "transformer_peer",
        help="runs, logs and Joey's results (default ~/.cache/lookback/transformer_peer)",
    )
    ap.add_argument(
        "-o",
        "--output",
        type=Path,
        help="the results JSON (default results/bench/DATE_transformer_peer.json)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 30 s a system, 100 test sentences")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= 600:
        ap.error(f"--minutes must be above 0 and at most 600, not {args.minutes:g}")
    args.systems = dict(SYSTEMS)
    for item in args.system:
        name, sep, config = item.partition("=")
        if not sep or not name.isidentifier() or not config or name == JOEY:
            ap.error(f"--system {item!r}: expected NAME=CONFIG, NAME a word other than {JOEY}")
        args.systems[name] = config
    try:
        recipe = settings.joey_recipe("transformer", args.joey_set)
    except ValueError as exc:
        ap.error(str(exc))
    if args.joey_from:
        point = result_of(args.joey_from)
        if point is None:
            ap.error(f"--joey-from {args.joey_from}: no finished joey-search point there")
        if point["settings"]["budget_s"] != args.minutes * 60:
            ap.error(
                f"--joey-from {args.joey_from}: that point trained {point['settings']['budget_s'] / 60:g} "
                f"minutes, not {args.minutes:g}"
            )
        ran = {k: v for k, v in point["settings"]["joey_best"].items() if k != "name"}
        if ran != {k: v for k, v in recipe.items() if k != "name"}:
            differ = sorted(k for k in recipe if k != "name" and ran.get(k) != recipe[k])
            ap.error(
                f"--joey-from {args.joey_from}: that point ran another recipe ({', '.join(differ)} differ); "
                "give its --joey-set flags"
            )
    if args.quick:
        args.minutes = 0.5
        args.work_dir = args.work_dir / "quick"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    test = test_slice(work) if args.quick else args.test
    systems: dict[str, Any] = {}
    for name, config in args.systems.items():
        done = work / name / "transformer_peer.json"
        if done.is_file():
            print(f"transformer-peer: {name} is done ({done})", file=sys.stderr)
        else:
            write_json(done, lookback_system(name, config, args.minutes, work, test))
        systems[name] = read_json(done)
    if not args.skip_joey:
        systems[JOEY] = joey_system(args, work)
    record = machine_record(
        "bench transformer-peer",
        argv,
        minutes=args.minutes,
        test=test if not args.quick else f"{settings.TEST_SET}, first {QUICK_TEST}",
        systems=systems,
    )
    stamp = datetime.now().strftime("%Y-%m-%d_%H%M%S")
    folder = REPO / "results" / "bench" / ("quick" if args.quick else "")
    out = args.output or folder / f"{stamp}_transformer_peer.json"
    write_json(out, record)
    out.with_suffix(".md").write_text(markdown(record), encoding="utf-8")
    print(markdown(record), end="")
    print(f"transformer-peer: {shown(out)}", file=sys.stderr)
    return 0
