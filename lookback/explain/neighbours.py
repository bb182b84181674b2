"""Nearest words: in a learned embedding table (the notes' "cat is near dog"), and among the
encoder's states of a word in its sentences (the notes' "bank": one static vector against
context-aware states).

cos(u, v) = u . v / (|u| |v|). `neighbours` compares a word's embedding with every row of the
source (encoder) or target (decoder) embedding table: one answer, whatever the sentence.
`contextual` compares the encoder state h_i of the word in a sentence with its states h_j in
the sentences of a corpus where it occurs: "bank" by a river and "bank" with money get different
states, so different nearest occurrences, while their embedding stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..data.batch import pad
from ..data.tokenizer import SPECIALS, UNK
from ..decoding.translate import evaluating


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


@dataclass
class Occurrence:
    sentence: str  # a corpus sentence that holds the word
    cosine: float  # cos(h of the word there, h of the word in the query sentence)


@dataclass
class Contextual:
    """`contextual`'s answer: the word's state in its sentence and its nearest states elsewhere."""

    word: str
    sentence: str  # the query sentence
    pieces: list[str]  # the word's pieces (its state: the mean of their h_i)
    state_size: int  # numbers in h_i
    nearest: list[Occurrence]  # the occurrences in the corpus, most similar first
    farthest: list[Occurrence]  # the least similar, least first
    occurrences: int  # occurrences of the word in the corpus's sentences (the query's left out)
    sentences: int  # corpus sentences read
    static: list[tuple[str, float]] = field(default_factory=list)  # the embedding's neighbours


def find(ids: list[int], word: list[int]) -> int | None:
    """Where the pieces `word` first occur in `ids`, or None."""
    n = len(word)
    return next((i for i in range(len(ids) - n + 1) if ids[i : i + n] == word), None)


@torch.no_grad()
def states(translator, sentences: list[str], batch_size: int = 64) -> list[Tensor]:
    """The encoder states h (S_i, He) of each sentence, as the model reads it (translator.source_ids)."""
    encoder = getattr(translator.model, "encoder", None)
    if encoder is None:
        raise ValueError("contextual states need one PyTorch model, not an ensemble or an export")
    ids = translator.source_ids(sentences)
    out: list[Tensor] = [torch.empty(0, 0)] * len(ids)
    order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: -len(ids[i]))
    with evaluating(translator.model):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            src, src_len = pad([ids[i] for i in chunk])
            h = (
                encoder(src.to(translator.device), src_len.to(translator.device)).h.float().cpu()
            )  # (B, S, He)
            for row, i in enumerate(chunk):
                out[i] = h[row, : len(ids[i])]
    return out


def word_ids(translator, word: str) -> list[int]:
    """The source pieces of `word`, as it reads inside a sentence; a one-line error if it has none."""
    ids = translator.src_tok.encode(word.strip())
    if not ids:
        raise ValueError(f"{word!r} has no tokens")
    if UNK in ids:
        raise ValueError(f"{word!r} is not in the source vocabulary (it reads as <unk>)")
    return ids


def contextual(translator, word: str, sentence: str, corpus: list[str], k: int = 5) -> Contextual:
    """The encoder state of `word` in `sentence` (the mean of its pieces' h_i), and the k nearest
    and k farthest of its states in the sentences of `corpus` that hold it, by cosine."""
    ids = word_ids(translator, word)
    query_ids = translator.source_ids([sentence])[0]
    at = find(query_ids, ids)
    if at is None:
        raise ValueError(f"{word!r} is not in {sentence!r} (its pieces {translator.src_tok.pieces(ids)})")
    found = [
        (s, x)
        for s, x in zip(corpus, translator.source_ids(corpus), strict=True)
        if s.strip() != sentence.strip()
    ]
    found = [(s, where) for s, x in found if (where := find(x, ids)) is not None]
    hs = states(translator, [sentence] + [s for s, _ in found])
    query = hs[0][at : at + len(ids)].mean(0)  # (He,)
    others = [h[where : where + len(ids)].mean(0) for h, (_, where) in zip(hs[1:], found, strict=True)]
    sims = cosine(query, torch.stack(others)).tolist() if others else []  # (N,)
    ranked = sorted(
        (Occurrence(s, c) for (s, _), c in zip(found, sims, strict=True)), key=lambda o: -o.cosine
    )
    return Contextual(
        word=word,
        sentence=sentence,
        pieces=translator.src_tok.pieces(ids),
        state_size=query.numel(),
        nearest=ranked[:k],
        farthest=ranked[::-1][:k],
        occurrences=len(found),
        sentences=len(corpus),
        static=neighbours(translator, word, "source", k)[1],
    )


def format_contextual(c: Contextual) -> str:
    """contextual() as text: the nearest and farthest occurrences, then the static neighbours."""
    how = "" if len(c.pieces) == 1 else f" (the mean of its pieces {' '.join(c.pieces)})"
    lines = [
        f"{c.word!r}{how} in {c.sentence!r}: an encoder state h of {c.state_size} numbers",
        f"its states in the {c.occurrences} other sentences of {c.sentences:,} that hold it, by cosine:",
    ]
    if not c.nearest:
        lines.append("  (none: give a --corpus where the word occurs)")
    lines += [f"  {o.cosine:7.3f}  {o.sentence}" for o in c.nearest]
    if len(c.farthest) and c.occurrences > len(c.nearest):
        lines.append("  ...")
        lines += [f"  {o.cosine:7.3f}  {o.sentence}" for o in c.farthest[::-1] if o not in c.nearest]
    static = ", ".join(f"{piece} {sim:.2f}" for piece, sim in c.static)
    lines.append(f"its embedding's nearest pieces, the same in every sentence: {static}")
    return "\n".join(lines)
