"""Training curves of several runs on one figure, from their metrics.jsonl.

    lookback curves RUN_A RUN_B [NAME=RUN_C] -o curves.png

Four panels: training loss and validation BLEU (greedy), each against updates
and against wall-clock minutes of training. Updates compare what a recipe
learns per step; minutes compare what it costs, which is what a user waits
for. A run that was stopped and resumed from a checkpoint logged again the
updates after that checkpoint: `history` keeps the records that the resumed
run wrote, so each curve is the run as it finally went.
"""

from __future__ import annotations

import gzip
import json
import lzma
from pathlib import Path

from ..figures import save_figure


def read_metrics(run_dir: str | Path) -> list[dict]:
    """The records of a run directory's metrics.jsonl (or of that file, named itself, compressed
    when its name ends in .gz or .xz, as results/ keeps them), in order; a clear error if it has
    none or a line is not JSON (a last line cut short by a kill, without its newline, is skipped)."""
    path = Path(run_dir)
    path = path if path.name.endswith((".jsonl", ".jsonl.gz", ".jsonl.xz")) else path / "metrics.jsonl"
    unzip = {".gz": gzip.decompress, ".xz": lzma.decompress}.get(path.suffix, bytes)
    try:
        text = unzip(path.read_bytes()).decode("utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (is {run_dir} a run directory?)") from None
    lines = text.splitlines()
    cut = not text.endswith("\n")  # each record is written with its newline: without one, cut short
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if cut and i == len(lines):  # the last line, half written when the run was killed
                break
            raise ValueError(f"{path}: line {i} is not JSON") from None
    return records


def records_of(source: str | Path | list[dict]) -> list[dict]:
    """A run's records: `source` itself where it is them, else read from it (read_metrics)."""
    return source if isinstance(source, list) else read_metrics(source)


def history(records: list[dict], kind: str) -> list[dict]:
    """The records of one kind ("train" or "valid") as the run finally went: a record whose step
    is not past the last one kept (a resume from an earlier checkpoint) replaces those from its
    step on."""
    kept: list[dict] = []
    for r in records:
        if r.get("kind") != kind:
            continue
        while kept and kept[-1]["step"] >= r["step"]:
            kept.pop()
        kept.append(r)
    return kept


def plot_curves(runs: dict[str, str | Path], path: str | Path, title: str | None = None) -> None:
    """Training loss and validation BLEU of each run against updates and minutes, saved by
    `path`'s suffix (PNG, SVG or PDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5), sharey="row")
    for i, (name, run_dir) in enumerate(runs.items()):
        records = read_metrics(run_dir)
        colour = f"C{i % 10}"
        for row, (kind, key) in enumerate((("train", "loss"), ("valid", "bleu"))):
            points = [r for r in history(records, kind) if key in r]
            steps = [r["step"] for r in points]
            minutes = [r["seconds"] / 60 for r in points]
            values = [r[key] for r in points]
            marker = "o" if kind == "valid" else None
            axes[row][0].plot(steps, values, color=colour, marker=marker, ms=3, label=name)
            axes[row][1].plot(minutes, values, color=colour, marker=marker, ms=3, label=name)
    axes[0][0].set_ylabel("training loss (nats per token)")
    axes[1][0].set_ylabel("validation BLEU, greedy")
    axes[1][0].set_xlabel("updates")
    axes[1][1].set_xlabel("minutes of training")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(title or "Training curves")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
