"""Plot time to quality: validation BLEU against training minutes, from bench result files.

    python -m bench.curves bench/results/RESULT.json [MORE.json ...] -o docs/time_to_quality.png

One line per system and result file (its configuration in the label), with the
CPU or GPU of the run in the title; the figures themselves are in the JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import read_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.curves", description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="result JSON files written by python -m bench")
    ap.add_argument("-o", "--output", required=True, help="the plot (.png or .svg)")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    machines = set()
    for path in args.results:
        record = read_json(path)
        m = record["machine"]
        machines.add(m.get("gpu") or m["cpu_model"])
        for system, tasks in record["systems"].items():
            curve = ((tasks.get("train") or {}).get("figures") or {}).get("curve")
            if curve:
                minutes = [p["seconds"] / 60 for p in curve]
                recipe = (record.get("settings") or {}).get("recipe")
                label = f"{system}, {record['config']}"
                if system == "recipe" and recipe:  # its own config file, not the named configuration
                    label = f"recipe, {Path(recipe['path']).name}"
                ax.plot(minutes, [p["bleu"] for p in curve], marker="o", label=label)
    ax.set_xlabel("training minutes (validation time left out)")
    ax.set_ylabel("validation BLEU, greedy")
    ax.set_title(f"Time to quality on {', '.join(sorted(machines))}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
