"""Guided alignment: a loss that pulls attention toward the diagonal early in training.

An attention model first learns the target language and only later where to
look (docs/recipe.md); until then alpha is close to uniform. Guided
alignment (Chen et al. 2016; in Marian, OpenNMT-py and fairseq with
alignments from a word aligner) adds to the cross-entropy J a second
cross-entropy, between a prior alignment g and the model's weights:

    J_guide = -sum_t sum_i g_ti log alpha_ti        over the real target steps t

With no aligner at hand the prior is the proportional diagonal, which fits
language pairs with mostly monotone word order (En-Fr, En-De): g_t is a
Gaussian over source positions i, centred on d_t = (t + 1/2) S / T - 1/2 (the
diagonal that diagnostics.py measures against) with a standard deviation of SIGMA tokens,
and normalised over the S real source tokens. Its weight falls linearly
from train.guide at the first update to 0 at update train.guide_updates
(`guide_at`), so the model is nudged to look and then left free to reorder.

Legend: B batch, S source length, T target length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import TrainConfig
from ..data.tokenizer import PAD

SIGMA = 1.0  # tokens: wide enough for local reordering (adjective after noun), narrow enough to point


def diagonal(src_len: Tensor, tgt_out: Tensor) -> Tensor:
    """d (B, T): the proportional diagonal's source position (t + 1/2) S / T - 1/2 at each target
    step t, for real lengths S (src_len) and T (the non-PAD tokens of tgt_out)."""
    B, T = tgt_out.shape
    S_b = src_len.view(B, 1).float()  # (B, 1)
    T_b = (tgt_out != PAD).sum(1, keepdim=True).float().clamp_min(1)  # (B, 1)
    t = torch.arange(T, device=tgt_out.device).view(1, T).float()
    return (t + 0.5) * S_b / T_b - 0.5


def diagonal_prior(src_len: Tensor, tgt_out: Tensor, S: int) -> Tensor:
    """g (B, T, S): for each target step, a Gaussian over the real source positions around d_t."""
    d = diagonal(src_len, tgt_out)  # (B, T)
    i = torch.arange(S, device=tgt_out.device).view(1, 1, S).float()
    g = -0.5 * ((i - d.unsqueeze(-1)) / SIGMA) ** 2  # (B, T, S) log of the unnormalised Gaussian
    g = g.masked_fill(i >= src_len.view(-1, 1, 1), float("-inf"))  # no weight on padding
    return g.softmax(-1)


def guided_loss(alpha: Tensor, src_len: Tensor, tgt_out: Tensor) -> Tensor:
    """J_guide, summed over the real target steps of tgt_out (B, T), for alpha (B, T, S)."""
    g = diagonal_prior(src_len, tgt_out, alpha.size(-1))  # (B, T, S)
    log_alpha = alpha.float().clamp_min(1e-9).log()  # padding columns have g = 0
    per_step = -(g * log_alpha).sum(-1)  # (B, T)
    return per_step[tgt_out != PAD].sum()


def guide_at(cfg: TrainConfig, step: int) -> float:
    """The weight of J_guide at update `step` (1-based): train.guide falling linearly to 0."""
    if not cfg.guide or step > cfg.guide_updates:
        return 0.0
    return cfg.guide * (1 - (step - 1) / cfg.guide_updates)
