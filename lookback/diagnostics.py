"""How attention behaves: statistics of the weights alpha, for watching a model learn to look.

An attention model first learns the target language and only later where to
look in the source; until then its weights are close to uniform. Two numbers
make that moment visible (training logs them at every validation, on the
first `train.probe` validation pairs, teacher-forced):

- entropy: H(alpha_t) = -sum_i alpha_ti log alpha_ti, over log S, the entropy
  of uniform weights over the S real source tokens: 1 when alpha is uniform,
  0 when it puts all its weight on one token. The mean over target steps.
- diagonal: the weight within one token of the proportional diagonal, the
  source position (t + 1/2) S / T - 1/2 of target step t out of T; for
  language pairs with mostly monotone word order (En-Fr, En-De) it rises as
  the model learns to align. Uniform weights put about 3 / S there.

Legend: B batch, S source length, T target length.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .batch import collate
from .guided import diagonal
from .model import Seq2Seq
from .tokenizer import PAD


def attention_stats(alpha: Tensor, src_len: Tensor, tgt_out: Tensor) -> dict[str, float]:
    """Mean normalised entropy and diagonal weight of alpha (B, T, S) over the real target steps
    (tgt_out != PAD); sources of one token, whose weights have no choice, are left out."""
    B, T, S = alpha.shape
    S_b = src_len.view(B, 1).float()  # (B, 1) real source lengths
    steps = (tgt_out != PAD) & (S_b > 1)  # (B, T) real steps of sources with a choice
    alpha = alpha.float()
    entropy = -(alpha * alpha.clamp_min(1e-12).log()).sum(-1) / S_b.clamp_min(2).log()  # (B, T): 1 = uniform
    d = diagonal(src_len, tgt_out)  # (B, T)
    i = torch.arange(S, device=alpha.device).view(1, 1, S).float()
    band = ((i - d.unsqueeze(-1)).abs() <= 1.0) & (i < S_b.unsqueeze(-1))  # (B, T, S)
    near = (alpha * band).sum(-1)  # (B, T) weight near the diagonal
    n = steps.sum().clamp_min(1)
    return {
        "alpha_entropy": float(entropy[steps].sum() / n),
        "alpha_diagonal": float(near[steps].sum() / n),
    }


@torch.no_grad()
def probe(model: Seq2Seq, pairs: list, device: torch.device) -> dict[str, float]:
    """attention_stats of `model`, teacher-forced on (source ids, target ids) pairs; {} without
    attention."""
    if model.decoder.score is None or not pairs:
        return {}
    model.eval()
    batch = collate(pairs).to(device)
    out = model(batch.src, batch.src_len, batch.tgt_in)
    return attention_stats(out.alpha, batch.src_len, batch.tgt_out)
