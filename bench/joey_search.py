"""python -m bench joey-search: Joey NMT's own recipe searched for its best, on validation BLEU only.

    python -m bench joey-search --plan                 # the points and their commands; runs nothing
    python -m bench joey-search                        # runs every point not yet done, then the table
    python -m bench joey-search --points peer,iwslt    # some points (each 30 minutes by default)
    python -m bench joey-search --table                # the table of the points done so far

Issue 39 asks for Joey at its best: its learning rate, schedule and batch size, searched as
lookback's recipe was. Each point is one `python -m bench headline --only joey_best` run (Joey alone on
the machine, the same data, tokenizer, model and clock as the headline bench) with its results
in `results/bench/joey_search/POINT/`; a point whose results are there is not run again, so the
search can stop and go on in a later session. The choice reads the validation BLEU of the
model at the end of the budget (the one the bench then tests) and nothing else: each JSON
also holds test figures, which the search never reads.

The table (`summary.md` and `summary.json` beside the points) names the chosen point; give it
to the headline run as `--joey-best RECIPE --joey-set KEY=VALUE ...`, as its line says.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import shown, write_json
from .prepare import REPO
from .settings import joey_recipe

RESULTS = REPO / "results" / "bench" / "joey_search"
KNOBS = (
    "lr",
    "batch_sentences",
    "schedule",
    "decrease_factor",
    "patience",
    "normalization",
    "hidden_dropout",
)
TRANSFORMER_KNOBS = ("warmup", "layers", "dropout")  # a transformer recipe's own
CONFIG = "feed"  # Joey's default, input feeding, and the peer file's set-up

# name -> (Joey recipe, --joey-set overrides): the peer file's recipe and one knob moved at a
# time (learning rate both ways, a smaller batch, no schedule), the peer recipe with Joey's
# defaults for the two settings the peer file does not state (the loss summed over each
# sentence before the clip, no dropout before the attentional layer), and Joey's own IWSLT recipe
POINTS: dict[str, tuple[str, list[str]]] = {
    "peer": ("peer", []),
    "peer_lr2e-3": ("peer", ["lr=0.002"]),
    "peer_lr5e-4": ("peer", ["lr=0.0005"]),
    "peer_batch40": ("peer", ["batch_sentences=40"]),
    "peer_constant": ("peer", ["schedule=constant"]),
    "iwslt": ("iwslt", []),
    "peer_joey_defaults": ("peer", ["normalization=batch", "hidden_dropout=0"]),
    # the two that gained, together
    "peer_batch40_joey_defaults": ("peer", ["batch_sentences=40", "normalization=batch", "hidden_dropout=0"]),
}
# --transformer: Joey's Transformer for small data (settings.JOEY_RECIPES "transformer") on the
# attention-only model's 12-minute clock, where its own 4,000 warm-up updates are more than the
# clock makes: its recipe as shipped, then the peak rate both ways at a warm-up the clock allows,
# a shorter warm-up, a shallower model (more updates) and a bigger batch
TRANSFORMER_POINTS: dict[str, tuple[str, list[str]]] = {
    "tf": ("transformer", []),
    "tf_lr1e-3_w1000": ("transformer", ["lr=0.001", "warmup=1000"]),
    "tf_lr5e-4_w1000": ("transformer", ["lr=0.0005", "warmup=1000"]),
    "tf_lr2e-3_w1000": ("transformer", ["lr=0.002", "warmup=1000"]),
    "tf_lr1e-3_w300": ("transformer", ["lr=0.001", "warmup=300"]),
    "tf_lr1e-3_w1000_2layers": ("transformer", ["lr=0.001", "warmup=1000", "layers=2"]),
    "tf_lr1e-3_w1000_batch160": ("transformer", ["lr=0.001", "warmup=1000", "batch_sentences=160"]),
    # Joey's Transformer trains in fp32 at about 1,000 target tokens/s on a 2-core Zen 4 (half the
    # GEMM peak, 95 MFLOP a target token): some 500 updates of 80 sentences in 12 minutes, so a
    # warm-up of 1,000 never ends. These warm up in 300, or take twice the updates of half the size.
    "tf_lr2e-3_w300": ("transformer", ["lr=0.002", "warmup=300"]),
    "tf_lr1e-3_w300_batch40": ("transformer", ["lr=0.001", "warmup=300", "batch_sentences=40"]),
    # 2e-3 after 300 led the first five points (20.42): the grid's edge, so one point past it
    "tf_lr4e-3_w300": ("transformer", ["lr=0.004", "warmup=300"]),
    # 40 sentences (885 updates) beat 80 (445-516) by 11.7: smaller batches, and 40 at 2e-3
    "tf_lr1e-3_w300_batch20": ("transformer", ["lr=0.001", "warmup=300", "batch_sentences=20"]),
    "tf_lr2e-3_w300_batch40": ("transformer", ["lr=0.002", "warmup=300", "batch_sentences=40"]),
}
TRANSFORMER_RESULTS = REPO / "results" / "bench" / "joey_search_transformer"


def command(name: str, budget_minutes: float, results: Path, extra: list[str]) -> list[str]:
    """The bench run of point `name`."""
    recipe, sets = {**POINTS, **TRANSFORMER_POINTS}[name]
    return [
        sys.executable, "-m", "bench", "headline", "--only", "joey_best", "--joey-best", recipe,
        *[a for s in sets for a in ("--joey-set", s)],
        "--configs", CONFIG, "--budget-minutes", f"{budget_minutes:g}",
        "--results-dir", str(results / name), *extra,
    ]  # fmt: skip


def result_of(folder: Path) -> dict[str, Any] | None:
    """The point's bench result, if it finished with a validation curve; else None."""
    for path in sorted(folder.glob(f"*_{CONFIG}.json"), reverse=True):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        train = (record.get("systems", {}).get("joey_best") or {}).get("train") or {}
        if record.get("status") == "ok" and (train.get("figures") or {}).get("curve"):
            return record | {"path": shown(path)}
    return None


def row(name: str, record: dict[str, Any]) -> dict[str, Any]:
    """One point's line of the table: its recipe, and its validation figures only."""
    recipe = joey_recipe(*{**POINTS, **TRANSFORMER_POINTS}[name])
    train = record["systems"]["joey_best"]["train"]["figures"]
    curve = train["curve"]
    best = max(curve, key=lambda p: p["bleu"])
    return {
        "point": name,
        "recipe": {k: recipe[k] for k in KNOBS}
        | ({k: recipe[k] for k in TRANSFORMER_KNOBS} if recipe["arch"] == "transformer" else {}),
        "updates": train["steps"],
        "target_tokens_per_s": train["target_tokens_per_s"],
        "valid_bleu_end": curve[-1]["bleu"],
        "valid_bleu_best": best["bleu"],
        "minute_of_best": best["seconds"] / 60,
        "cpu": record["machine"].get("cpu_model"),
        "cpu_flags": record["machine"].get("cpu_flags"),
        "results": record["path"],
    }


def table(results: Path, points: dict[str, tuple[str, list[str]]] = POINTS) -> dict[str, Any]:
    """Every point done so far, and the one chosen: the highest validation BLEU at the end."""
    rows = [row(n, r) for n in points if (r := result_of(results / n)) is not None]
    chosen = max(rows, key=lambda r: r["valid_bleu_end"], default=None)
    summary: dict[str, Any] = {"config": CONFIG, "rows": rows, "chosen": chosen and chosen["point"]}
    if chosen:
        recipe, sets = points[chosen["point"]]
        summary["headline_flags"] = shlex.join(
            ["--joey-best", recipe, *[a for s in sets for a in ("--joey-set", s)]]
        )
    return summary


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"Joey NMT's recipe search (config {summary['config']}), judged on validation BLEU (greedy, "
        "all 1,014 pairs of val) of the model at the end of the budget; test figures are not read.",
        "",
        "| point | lr | batch | schedule | loss divided by, dropout (RNN: the attentional layer's) | updates "
        "| target tokens/s | validation BLEU, end | best (minute) | CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["rows"]:
        rec = r["recipe"]
        schedule = rec["schedule"]
        if schedule == "plateau":
            schedule += f" x{rec['decrease_factor']:g} after {rec['patience']}"
        elif schedule == "warmupinversesquareroot":
            schedule = (
                f"warm-up {rec['warmup']:,}, then 1/sqrt(step); {rec['layers']} + {rec['layers']} layers"
            )
        mark = " (chosen)" if r["point"] == summary["chosen"] else ""
        flags = [f for f in r["cpu_flags"] or [] if f.startswith(("avx512", "amx")) or f == "avx2"]
        lines.append(
            f"| {r['point']}{mark} | {rec['lr']:g} | {rec['batch_sentences']} | {schedule} | "
            f"{rec['normalization']}, {rec.get('dropout', rec['hidden_dropout']):g} | {r['updates']:,} | "
            f"{r['target_tokens_per_s']:,.0f} | {r['valid_bleu_end']:.2f} | "
            f"{r['valid_bleu_best']:.2f} ({r['minute_of_best']:.0f}) | {r['cpu']}, "
            f"{', '.join(flags)} |"
        )
    if summary["chosen"]:
        lines += ["", f"The headline run takes `{summary['headline_flags']}`."]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench joey-search", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--transformer",
        action="store_true",
        help=f"Joey's Transformer recipe's points ({', '.join(TRANSFORMER_POINTS)}) on a 12-minute "
        f"clock, into {shown(TRANSFORMER_RESULTS)}",
    )
    ap.add_argument("--points", help=f"comma-separated, of {', '.join(POINTS)} (default: all)")
    ap.add_argument(
        "--budget-minutes", type=float, help="training minutes a point (default 30; --transformer 12)"
    )
    ap.add_argument("--results-dir", type=Path, help=f"default {shown(RESULTS)}")
    ap.add_argument("--plan", action="store_true", help="print each point's command; run nothing")
    ap.add_argument("--table", action="store_true", help="only write and print the table of the points done")
    ap.add_argument("--quick", action="store_true", help="smoke run: the bench's --quick for every point")
    args = ap.parse_args(argv)
    args.point_set = TRANSFORMER_POINTS if args.transformer else POINTS
    if args.budget_minutes is None:
        args.budget_minutes = 12.0 if args.transformer else 30.0
    if args.results_dir is None:
        args.results_dir = TRANSFORMER_RESULTS if args.transformer else RESULTS
    names = args.points.split(",") if args.points else list(args.point_set)
    unknown = [n for n in names if n not in args.point_set]
    if unknown:
        ap.error(f"--points: {', '.join(unknown)} is not a point; the points: {', '.join(args.point_set)}")
    if not 0 < args.budget_minutes <= 600:
        ap.error(f"--budget-minutes must be above 0 and at most 600, not {args.budget_minutes:g}")
    args.names = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    extra = ["--quick"] if args.quick else []
    failed = []
    for name in [] if args.table else args.names:
        done = result_of(args.results_dir / name)
        if args.plan:
            cmd = command(name, args.budget_minutes, args.results_dir, extra)
            print(f"{name}{' (done)' if done else ''}: {shlex.join(cmd)}")
            continue
        if done:
            print(f"joey_search: {name} is done ({done['path']})", file=sys.stderr)
            continue
        print(f"joey_search: {name} ...", file=sys.stderr, flush=True)
        cmd = command(name, args.budget_minutes, args.results_dir, extra)
        if subprocess.run(cmd, cwd=REPO).returncode != 0 or result_of(args.results_dir / name) is None:
            failed.append(name)
    if args.plan:
        return 0
    summary = table(args.results_dir, args.point_set)
    write_json(args.results_dir / "summary.json", summary)
    (args.results_dir / "summary.md").write_text(markdown(summary), encoding="utf-8")
    print(markdown(summary), end="")
    if failed:
        print(f"joey_search: no result from {', '.join(failed)} (see its output above)", file=sys.stderr)
    return 1 if failed else 0
