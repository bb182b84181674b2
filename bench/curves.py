"""Plot time to quality: validation BLEU against training minutes, from bench result files.

    python -m bench curves results/bench/RESULT.json [MORE.json ...] -o results/bench/time_to_quality.png
    python -m bench curves before=A.json after=B.json -o docs/plot.png   # names in the legend
    python -m bench curves A.json B.json --systems recipe --ylim 45 58 -o docs/zoom.png

One line per system and result file (its configuration in the label, after the
file's name if one is given), with the CPU or GPU of the run in the title; a
curve already drawn from an earlier file (a Joey run reused with --joey-from)
is drawn once. The figures themselves are in the JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lookback.figures import save_figure

from .common import read_json


def named(arg: str) -> tuple[str, str]:
    """'NAME=PATH' -> (NAME, PATH); a plain path has no name."""
    name, sep, path = arg.partition("=")
    return (name, path) if sep and not Path(arg).exists() else ("", arg)


def lines(
    results: list[tuple[str, dict]], systems: list[str] | None = None
) -> list[tuple[str, list[float], list[float]]]:
    """(label, minutes, BLEU) for every curve in the named result records, each curve once;
    only those of the named systems if any are named."""
    out, seen = [], set()
    for name, record in results:
        for system, tasks in record["systems"].items():
            if systems and system not in systems:
                continue
            curve = ((tasks.get("train") or {}).get("figures") or {}).get("curve")
            points = tuple((p["seconds"], p["bleu"]) for p in curve or ())
            if not points or (system, points) in seen:
                continue
            seen.add((system, points))
            recipe = (record.get("settings") or {}).get("recipe")
            label = f"{system}, {record['config']}"
            if system == "recipe" and recipe:  # its own config file, not the named configuration
                label = f"recipe, {Path(recipe['path']).name}"
            label = f"{name}: {label}" if name else label
            out.append((label, [s / 60 for s, _ in points], [b for _, b in points]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench curves", description=__doc__.splitlines()[0])
    ap.add_argument(
        "results", nargs="+", help="result JSON files written by python -m bench headline (or NAME=FILE)"
    )
    ap.add_argument("-o", "--output", required=True, help="the plot (.png or .svg)")
    ap.add_argument("--systems", nargs="+", metavar="SYSTEM", help="draw only these (joey, lookback, recipe)")
    ap.add_argument("--ylim", nargs=2, type=float, metavar=("LOW", "HIGH"), help="the BLEU range shown")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = [(name, read_json(path)) for name, path in map(named, args.results)]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drawn = lines(results, args.systems)
    if not drawn:
        ap.error(f"no curve of {' or '.join(args.systems or ['any system'])} in the result files")
    for label, minutes, bleu in drawn:
        ax.plot(minutes, bleu, marker="o", label=label)
    machines = {r["machine"].get("gpu") or r["machine"]["cpu_model"] for _, r in results}
    ax.set_xlabel("training minutes (validation time left out)")
    ax.set_ylabel("validation BLEU, greedy")
    ax.set_title(f"Time to quality on {', '.join(sorted(machines))}")
    if args.ylim:
        ax.set_ylim(*args.ylim)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    save_figure(fig, args.output)  # a PNG in 256 colours, as lookback writes its plots
    print(f"wrote {args.output}")
    return 0
