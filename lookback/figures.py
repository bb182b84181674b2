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
