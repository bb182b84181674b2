"""Batches: length-bucketed, sized by tokens, padded, with masks derived from padding.

Sentences of similar length go together so that little of a batch is
padding; a batch holds as many sentences as fit in `max_tokens` padded
positions. The order is a pure function of (seed, epoch), so a resumed run
sees exactly the batches an uninterrupted one would.

Legend: B batch, S source length, T target length (with <s> or </s>).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .tokenizer import BOS, EOS, PAD

POOL = 100  # batches' worth of sentences sorted together: random enough, little padding


@dataclass
class Batch:
    src: Tensor  # (B, S) source ids, PAD after the end
    src_len: Tensor  # (B,) real source lengths
    tgt_in: Tensor  # (B, T) <s> y_1 .. y_n: the decoder's previous tokens (teacher forcing)
    tgt_out: Tensor  # (B, T) y_1 .. y_n </s>: what it must predict

    @property
    def n_tokens(self) -> int:
        """Real target tokens, the unit of the loss and of tokens/s."""
        return int((self.tgt_out != PAD).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_len, self.tgt_in, self.tgt_out)))


def pad(seqs: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Pad id lists into (B, max len) with their lengths (B,)."""
    lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long)
    out = torch.full((len(seqs), int(lengths.max())), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
    return out, lengths


def collate(pairs: list[tuple[list[int], list[int]]]) -> Batch:
    """One batch from (source ids, target ids) pairs, without <s>/</s>."""
    src, src_len = pad([s for s, _ in pairs])
    tgt_in, _ = pad([[BOS, *t] for _, t in pairs])
    tgt_out, _ = pad([[*t, EOS] for _, t in pairs])
    return Batch(src, src_len, tgt_in, tgt_out)


def token_batches(
    lengths: list[tuple[int, int]], max_tokens: int, seed: int | None = None, epoch: int = 0
) -> list[list[int]]:
    """Group sentence indices into batches of at most `max_tokens` padded positions.

    Args:
        lengths: (source, target) length of each sentence pair.
        max_tokens: bound on batch size x longest sequence in the batch (a
            longer single sentence still gets a batch of its own).
        seed: shuffle with this seed (and `epoch`); None keeps length order
            without shuffling, for evaluation.

    Returns:
        Lists of indices into `lengths`.
    """
    n = len(lengths)
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=gen).tolist()
    else:
        order = list(range(n))

    def size(i: int) -> int:
        return max(lengths[i][0], lengths[i][1] + 1)  # +1: <s> or </s>

    batches: list[list[int]] = []
    pool_size = n if seed is None else max(1, POOL * max_tokens // 20)
    for start in range(0, n, pool_size):
        pool = sorted(order[start : start + pool_size], key=lambda i: (size(i), lengths[i]))
        batch: list[int] = []
        longest = 0
        for i in pool:
            longest_if_added = max(longest, size(i))
            if batch and longest_if_added * (len(batch) + 1) > max_tokens:
                batches.append(batch)
                batch, longest_if_added = [], size(i)
            batch.append(i)
            longest = longest_if_added
        if batch:
            batches.append(batch)
    if gen is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
    return batches
