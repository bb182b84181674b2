"""Plots as files: every figure lookback writes goes through `save_figure`.

A PNG is written in 256 colours (Pillow's median cut, which matplotlib already depends on): a
line plot needs no more, and the file is about a third of matplotlib's own. Committed plots stay
small that way (results/README.md). Any other suffix (.svg, .pdf) is matplotlib's as it is.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """Write a matplotlib figure to `path`; a .png in 256 colours."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        fig.savefig(path, dpi=dpi)
        return
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    image = Image.open(buf).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(path, format="PNG", optimize=True)


def seed_groups(names: list[str]) -> dict[str, tuple[str, Any, bool]]:
    """Runs that differ only in their seed (a study's MODEL@CELL#SEED) drawn as one: run name ->
    (its group, the group's colour, whether it is the group's first run and so labels it).

    A study of six models, two cells and three seeds has 36 runs: its plots show a legend of
    12 entries, each group's seeds in one colour (matplotlib's cycle of 10, or tab20's 20 where
    there are more groups)."""
    group_of = {name: name.partition("#")[0] for name in names}
    first: dict[str, str] = {}  # group -> the run that labels it, groups in the order first seen
    for name, group in group_of.items():
        first.setdefault(group, name)
    if len(first) <= 10:
        palette = [f"C{i}" for i in range(10)]
    else:
        import matplotlib

        palette = [matplotlib.colormaps["tab20"](i) for i in range(20)]
    colour = {group: palette[i % len(palette)] for i, group in enumerate(first)}
    return {n: (g, colour[g], first[g] == n) for n, g in group_of.items()}


def legend_beside(fig: Any, ax: Any, width: float = 0.24) -> tuple[float, float, float, float]:
    """One legend for the figure in its right `width`, from `ax`'s labelled lines; returns the
    rectangle left for the plots, for `fig.tight_layout(rect=...)`."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="center left", bbox_to_anchor=(1 - width, 0.5), fontsize="small", frameon=False
    )
    return (0, 0, 1 - width, 1)
