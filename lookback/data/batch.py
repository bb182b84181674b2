"""Batches: length-bucketed, sized by tokens, padded, with masks derived from padding.

Sentences of similar length go together so that little of a batch is
padding; a batch holds as many sentences as fit in `max_tokens` padded
positions. The order is a pure function of (seed, epoch), so a resumed run
sees exactly the batches an uninterrupted one would. `UpdatePlan` deals
them out, update by update, to the processes that train together.

Legend: B batch, S source length, T target length (with <s> or </s>).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .tokenizer import BOS, EOS, PAD, Tokenizer

logger = logging.getLogger(__name__)

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


@dataclass
class Corpus:
    pairs: list[tuple[list[int], list[int]]]  # token ids, no <s> / </s>
    src: list[str]  # raw text, for validation BLEU and samples
    tgt: list[str]


def encode_corpus(
    src: list[str],
    tgt: list[str],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    max_len: int | None = None,
    src_eos: bool = False,
) -> Corpus:
    """Tokenise a corpus; pairs longer than max_len tokens on either side are skipped.
    With `src_eos` every source ends with </s> (data.src_eos)."""
    pairs, keep = [], []
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        ids = (src_tok.encode(s), tgt_tok.encode(t))
        if ids[0] and ids[1] and (max_len is None or max(map(len, ids)) <= max_len):
            pairs.append((ids[0] + [EOS], ids[1]) if src_eos else ids)
            keep.append(i)
    if len(keep) < len(src):
        skipped = "skipped %d of %d pairs (empty after tokenisation, or over %s tokens)"
        logger.info(skipped, len(src) - len(keep), len(src), max_len)
    return Corpus(pairs, [src[i] for i in keep], [tgt[i] for i in keep])


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
    lengths: Sequence[tuple[int, int]] | np.ndarray, max_tokens: int, seed: int | None = None, epoch: int = 0
) -> list[np.ndarray]:
    """Group sentence indices into batches of at most `max_tokens` padded positions.

    Args:
        lengths: (source, target) length of each sentence pair: pairs, or an (n, 2) array.
        max_tokens: bound on batch size x longest sequence in the batch (a
            longer single sentence still gets a batch of its own).
        seed: shuffle with this seed (and `epoch`); None keeps length order
            without shuffling, for evaluation.

    Returns:
        Arrays of indices into `lengths` (8 bytes a pair: a plan for millions of pairs is small).
    """
    L = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)  # (n, 2)
    n = len(L)
    size = np.maximum(L[:, 0], L[:, 1] + 1)  # +1: <s> or </s>
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        order = torch.randperm(n, generator=gen).numpy()
    else:
        order = np.arange(n)
    batches: list[np.ndarray] = []
    pool_size = n if seed is None else max(1, POOL * max_tokens // 20)
    for start in range(0, n, pool_size):
        pool = order[start : start + pool_size]
        pool = pool[np.lexsort((L[pool, 1], L[pool, 0], size[pool]))]  # by size, then lengths; stable
        cuts, count, longest = [], 0, 0
        for k, length in enumerate(size[pool].tolist()):
            longest_if_added = max(longest, length)
            if count and longest_if_added * (count + 1) > max_tokens:
                cuts.append(k)
                count, longest_if_added = 0, length
            count += 1
            longest = longest_if_added
        batches.extend(np.split(pool, cuts))
    if gen is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]
    return batches


def curriculum_batches(
    lengths: Sequence[tuple[int, int]] | np.ndarray,
    max_tokens: int,
    seed: int,
    curriculum: list[int],
    epoch: int,
) -> list[np.ndarray]:
    """An epoch's batches under a length curriculum ("baby steps", Bengio et al. 2009; Spitkovsky
    et al. 2010): epoch i < len(curriculum) draws only from the pairs whose target has at most
    curriculum[i] tokens; later epochs from all. Short sentences first, whose attention has
    few places to look, then the rest."""
    if epoch >= len(curriculum):
        return token_batches(lengths, max_tokens, seed, epoch)
    L = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)
    keep = np.nonzero(L[:, 1] <= curriculum[epoch])[0]
    if not len(keep):
        raise ValueError(f"train.curriculum: no training pair has at most {curriculum[epoch]} target tokens")
    return [keep[batch] for batch in token_batches(L[keep], max_tokens, seed, epoch)]


@dataclass
class UpdatePlan:
    """This process's batches, update after update, epoch after epoch; where it stands is what
    a resumed run needs to see the same batches.

    Every process plans the same batches of an epoch; an update takes the
    next `per_update` (processes x train.accumulate) of them, process r its
    r-th, (r+N)-th, ... The epoch's last batches that cannot fill an update
    are left out, so that every process makes the same updates.
    """

    pairs: Sequence[tuple[list[int], list[int]]]  # token ids of the training corpus (a list, or a TokenStore)
    epoch_batches: Callable[[int], list[np.ndarray]]  # epoch -> its batches, as indices into pairs
    per_update: int = 1  # batches in one update, all processes together
    rank: int = 0  # this process
    world: int = 1  # processes
    epoch: int = 0  # the next update comes from this epoch ...
    batch: int = 0  # ... starting at this batch

    def __iter__(self) -> Iterator[list[Batch]]:
        """Yields this process's batches of each update; epoch and batch already point past it."""
        while True:
            epoch, batches = self.epoch, self.epoch_batches(self.epoch)
            if len(batches) < self.per_update:
                raise ValueError(
                    f"train.max_tokens makes {len(batches)} batches per epoch, fewer than the "
                    f"{self.per_update} of one update ({self.world} processes x train.accumulate "
                    f"{self.per_update // self.world}); lower train.max_tokens"
                )
            while self.epoch == epoch:
                first = self.batch
                self.batch += self.per_update
                if self.batch + self.per_update > len(batches):  # the next update would not fit
                    self.epoch, self.batch = epoch + 1, 0
                if first + self.per_update <= len(batches):
                    mine = batches[first + self.rank : first + self.per_update : self.world]
                    yield [collate([self.pairs[i] for i in idx]) for idx in mine]
