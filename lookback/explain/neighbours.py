"""Nearest words in a learned embedding table: the notes' "cat is near dog".

cos(u, v) = u . v / (|u| |v|), between a query word's embedding and every
row of the source (encoder) or target (decoder) embedding table.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..data.tokenizer import SPECIALS, UNK


def cosine(query: Tensor, table: Tensor) -> Tensor:
    """Cosine similarity of query (E,) with every row of table (N, E) -> (N,)."""
    return (table @ query) / (table.norm(dim=-1) * query.norm()).clamp_min(1e-12)


@torch.no_grad()
def neighbours(
    translator, word: str, side: str = "source", k: int = 10
) -> tuple[list[str], list[tuple[str, float]]]:
    """The k pieces nearest to `word` in the source or target embedding table.

    A word that the tokenizer splits into several pieces is represented by
    the mean of their embeddings. Returns (the pieces of `word`, [(piece, cos)]).
    """
    if side not in ("source", "target"):
        raise ValueError(f"side must be 'source' or 'target', not {side!r}")
    tok = translator.src_tok if side == "source" else translator.tgt_tok
    embed = translator.model.encoder.embed if side == "source" else translator.model.decoder.embed
    ids = tok.encode(word.strip())
    if not ids:
        raise ValueError(f"{word!r} has no tokens")
    if UNK in ids:
        raise ValueError(f"{word!r} is not in the {side} vocabulary (it reads as <unk>)")
    table = embed.weight.float()  # (V, E)
    sims = cosine(table[ids].mean(0), table)  # (V,)
    sims[: len(SPECIALS)] = float("-inf")  # <pad>, <unk>, <s>, </s> are not words
    sims[ids] = float("-inf")
    best, order = sims.topk(min(k, int(torch.isfinite(sims).sum())))
    return tok.pieces(ids), [(tok.id_to_piece(int(i)), float(s)) for s, i in zip(best, order, strict=True)]


def format_neighbours(word: str, pieces: list[str], near: list[tuple[str, float]], side: str) -> str:
    """neighbours() as text: the query, then one line per neighbour with its cosine similarity."""
    how = "" if len(pieces) == 1 else f" (the mean of its pieces {' '.join(pieces)})"
    lines = [f"nearest to {word!r}{how} in the {side} embeddings, by cosine similarity:"]
    lines += [f"  {sim:7.3f}  {piece}" for piece, sim in near]
    return "\n".join(lines)
