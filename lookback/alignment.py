"""The alignment matrix: attention weights as a heatmap, one row per output token.

Row t holds alpha_{t,1..S}, the weights output token t gave each source token
(the notes' "La" looks at "The", "zone" at "Area"). With SentencePiece the
tokens are pieces; `merge_words` joins them into words: a word's column is
the sum of its pieces' columns (rows still sum to 1), and a word's row is
the mean of its pieces' rows.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from .tokenizer import SPECIALS

WORD_START = "▁"  # SentencePiece marks the first piece of a word with it


def word_groups(pieces: list[str]) -> list[list[int]]:
    """Indices of the pieces of each word. Without any "▁" every piece is a word."""
    if not any(p.startswith(WORD_START) for p in pieces):
        return [[i] for i in range(len(pieces))]
    groups: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if piece.startswith(WORD_START) or piece in SPECIALS or not groups:  # </s>: a word of its own
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def _label(pieces: list[str], group: list[int]) -> str:
    return "".join(pieces[i] for i in group).replace(WORD_START, "") or WORD_START


def merge_words(
    attention: Tensor, src_tokens: list[str], tgt_tokens: list[str]
) -> tuple[Tensor, list[str], list[str]]:
    """(T, S) piece weights -> (words out, words in): sum over source pieces, mean over output pieces."""
    src_groups, tgt_groups = word_groups(src_tokens), word_groups(tgt_tokens)
    cols = torch.stack([attention[:, g].sum(1) for g in src_groups], 1)  # (T, S) -> (T, S_words)
    rows = torch.stack([cols[g].mean(0) for g in tgt_groups], 0)  # -> (T_words, S_words)
    return (
        rows,
        [_label(src_tokens, g) for g in src_groups],
        [_label(tgt_tokens, g) for g in tgt_groups],
    )


def plot_alignment(
    attention: Tensor,
    src_tokens: list[str],
    tgt_tokens: list[str],
    path: str | Path | None = None,
    title: str | None = None,
    words: bool = False,
):
    """Draw the (T, S) matrix with labelled axes; save it when `path` is given
    (PNG, SVG or PDF by its suffix). Returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if attention.shape != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(
            f"attention is {tuple(attention.shape)} but there are {len(tgt_tokens)} output "
            f"and {len(src_tokens)} source tokens"
        )
    note = "attention weights per subword piece"
    if words:
        attention, src_tokens, tgt_tokens = merge_words(attention, src_tokens, tgt_tokens)
        note = "pieces merged into words: source columns summed, output rows averaged"
    T, S = attention.shape
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * S + 2), max(3.0, 0.4 * T + 1.8)))
    ax.imshow(attention.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(S), src_tokens, rotation=60, ha="left", rotation_mode="anchor")
    ax.set_yticks(range(T), tgt_tokens)
    ax.xaxis.tick_top()
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if T * S <= 900:  # write the weights in the cells while they stay legible
        for t in range(T):
            for s in range(S):
                w = float(attention[t, s])
                if w >= 0.05:
                    color = "white" if w > 0.6 else "black"
                    ax.text(s, t, f"{w:.2f}".lstrip("0"), ha="center", va="center", fontsize=7, color=color)
    fig.suptitle(title or "alignment", fontsize=10)
    fig.text(0.5, 0.01, note, ha="center", fontsize=8, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    if path is not None:
        fig.savefig(path, dpi=150)
        plt.close(fig)
    return fig
