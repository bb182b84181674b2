"""python -m bench table RESULT.json: the README's result table, from one bench invocation.

    python -m bench headline --recipe --joey-best peer --joey-best-budget-minutes 75 --budget-minutes 5 \\
        --recipe-budget-minutes 30 --configs feed --decoding
    python -m bench table results/bench/STAMP_cpu_feed.json

Two blocks, each lookback against Joey NMT on the same machine in the same run: like for like
(the same model and batches: training speed, memory, the share of the CPU's fp32 GEMM peak)
and each tool at its own recommended set-up (lookback's recipe against Joey's best recipe:
time to Joey's final validation BLEU, test BLEU, decoding speed with those weights). A figure
the run lacks prints as "-"; a run whose Joey figures came from another run (--joey-from) is
refused, as a headline must not mix days.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .common import read_json

LIKE_FOR_LIKE = [  # (row, figure in the record, format)
    ("training, target tokens/s", "training, target tokens/s", "{:,.0f}"),
    ("training, share of the fp32 GEMM peak", "training, share of the fp32 GEMM peak", "{:.0%}"),
    ("training, matrix-product MFLOP per target token", "training, MFLOP per target token", "{:.1f}"),
    ("training, peak RSS (GB)", "training, peak RSS (GB)", "{:.2f}"),
]
OWN_RECIPE = [
    ("training minutes", None, "{:g}"),
    ("updates", "training, updates in the budget", "{:,.0f}"),
    ("validation BLEU at the end (greedy)", "validation BLEU at the end", "{:.2f}"),
    ("minutes to Joey's final validation BLEU", "minutes to joey_best's final validation BLEU", "{:.0f}"),
    ("test BLEU, greedy", "BLEU greedy, after the budget", "{:.2f}"),
    ("test BLEU, beam 5", "BLEU beam 5, after the budget", "{:.2f}"),
]
LOWER_IS_BETTER = {"training, peak RSS (GB)", "minutes to Joey's final validation BLEU"}


def cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def quoted(label: str) -> str:
    return f'"{label}"'


def ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine is not None and theirs else "-"


def decoding_rows(record: dict[str, Any]) -> list[tuple[str, float | None, float | None]]:
    """(row, lookback, Joey) for decoding at each thread count: PyTorch fp32 and the fastest
    of lookback's int8 / ONNX Runtime combinations, against Joey, each with its BLEU."""
    rows = (record.get("decoding") or {}).get("rows") or []
    joey_name = (record.get("decoding") or {}).get("systems", {}).get("joey", "joey")
    out = []
    for threads in sorted({r["threads"] for r in rows}):
        at = [r for r in rows if r["threads"] == threads]
        joey = next((r for r in at if r["name"] == joey_name), None)
        fp32 = next((r for r in at if r["name"] == "lookback torch"), None)
        others = [r for r in at if r["name"].startswith("lookback") and r is not fp32]
        fastest = max(others, key=lambda r: r["beam5_sentences_per_s"] or 0, default=None)
        fastest_label = fastest and fastest["name"].removeprefix("lookback ")
        for label, mine in (("PyTorch fp32", fp32), (fastest_label, fastest)):
            if mine is None:
                continue
            for beam, name in ((1, "greedy"), (5, "beam 5")):
                key = f"beam{beam}_sentences_per_s"
                out.append(
                    (
                        f"decoding {name}, sentences/s, {threads} thread(s), lookback {label} "
                        f"(BLEU {cell(mine[f'beam{beam}_bleu'], '{:.2f}')} vs "
                        f"{cell((joey or {}).get(f'beam{beam}_bleu'), '{:.2f}')})",
                        mine[key],
                        (joey or {}).get(key),
                    )
                )
    return out


def markdown(record: dict[str, Any]) -> str:
    """The two blocks of the README's table, with the machine and the file under them."""
    s = record["settings"]
    if s.get("joey_from"):
        raise ValueError(f"Joey's figures come from {s['joey_from']}, not this run: no headline")
    figures = record["figures"]
    lines = ["| figure | lookback | Joey NMT | lookback / Joey |", "|---|--:|--:|--:|"]

    def add(label: str, mine: float | None, theirs: float | None, fmt: str) -> None:
        lines.append(f"| {label} | {cell(mine, fmt)} | {cell(theirs, fmt)} | {ratio(mine, theirs)} |")

    lines.append("| **like for like**: the same model and batches, fp32 | | | |")
    for label, key, fmt in LIKE_FOR_LIKE:
        values = figures.get(key) or {}
        add(label, values.get("lookback"), values.get("joey"), fmt)
    best = s.get("joey_best") or {}
    lines.append(
        f"| **each at its own recipe**: lookback's `{Path((s.get('recipe') or {}).get('path', '-')).name}`, "
        f"Joey's `{best.get('name', '-')}` recipe | | | |"
    )
    minutes = (
        s["recipe_budget_s"] / 60 if s.get("recipe_budget_s") else None,
        s["joey_best_budget_s"] / 60 if s.get("joey_best_budget_s") else None,
    )
    for label, key, fmt in OWN_RECIPE:
        values = figures.get(key) or {}
        mine, theirs = minutes if key is None else (values.get("recipe"), values.get("joey_best"))
        add(label, mine, theirs, fmt)
    for label, mine, theirs in decoding_rows(record):
        add(label, mine, theirs, "{:,.1f}")
    m = record["machine"]
    torch = (record.get("versions") or {}).get("lookback_env", {}).get("torch")
    lines += [
        "",
        f"{m.get('cpu_model') or m.get('gpu')}, {m.get('cpu_cores')} cores, flags "
        f"{', '.join(m.get('cpu_flags') or []) or '-'}; torch {torch}; {record['created'][:10]}; "
        f"`{record['path']}`. Lower is better for lookback in the ratios of "
        f"{' and '.join(map(quoted, sorted(LOWER_IS_BETTER)))}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench table", description=__doc__.split("\n")[0])
    ap.add_argument(
        "result", type=Path, help="a results JSON of python -m bench headline (results/bench/...)"
    )
    args = ap.parse_args(argv)
    try:
        print(markdown(read_json(args.result)), end="")
    except (OSError, ValueError, KeyError) as exc:
        print(f"bench.headline: {args.result}: {exc}", file=sys.stderr)
        return 1
    return 0
