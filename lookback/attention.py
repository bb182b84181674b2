"""Attention: a dynamic context c_t for every decoder step.

The three steps of the lecture notes (Appendix B), for decoder state s_t and
encoder states h_1 .. h_S:

    (1) score      e_{t,i}   = score(s_t, h_i)
    (2) normalise  alpha_{t,i} = exp(e_{t,i}) / sum_j exp(e_{t,j})   (real tokens only)
    (3) combine    c_t       = sum_i alpha_{t,i} h_i

Every scoring function is a small module with one interface: `keys(h)` does
the part that depends only on the encoder (once per sentence, not once per
step) and `forward(s, keys)` returns the scores e. Steps (2) and (3) are
shared by all of them in `attend`, the one place where padding is masked.

Legend: B batch, T decoder steps, S source length, D decoder state size,
He encoder state size, A additive attention size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Score(nn.Module):
    """score(s, h) -> e. Subclasses give the formula in their docstring; every one is built
    from the sizes of s (dec_size), h (enc_size) and, for additive, its own layer."""

    def __init__(self, dec_size: int = 0, enc_size: int = 0, attention_size: int = 0):
        super().__init__()

    def keys(self, h: Tensor) -> Tensor:
        """Precompute what depends on the encoder alone: (B, S, He) -> (B, S, *)."""
        return h

    def forward(self, s: Tensor, keys: Tensor) -> Tensor:
        """Scores e of shape (B, T, S) for queries s (B, T, D)."""
        raise NotImplementedError


class DotScore(Score):
    """Dot product (Luong et al. 2015, eq. 8): e = s . h. Needs D == He."""

    def forward(self, s: Tensor, keys: Tensor) -> Tensor:
        return s @ keys.transpose(1, 2)  # (B, T, D) x (B, D, S) -> (B, T, S)


class GeneralScore(Score):
    """Multiplicative, 'general' (Luong et al. 2015, eq. 8): e = s W h."""

    def __init__(self, dec_size: int, enc_size: int, attention_size: int = 0):
        super().__init__()
        self.W = nn.Linear(enc_size, dec_size, bias=False)

    def keys(self, h: Tensor) -> Tensor:
        return self.W(h)  # (B, S, He) -> (B, S, D): W h once per sentence

    def forward(self, s: Tensor, keys: Tensor) -> Tensor:
        return s @ keys.transpose(1, 2)  # (B, T, D) x (B, D, S) -> (B, T, S)


class AdditiveScore(Score):
    """Additive (Bahdanau et al. 2015, A.1.2): e = v . tanh(W s + U h)."""

    def __init__(self, dec_size: int, enc_size: int, attention_size: int):
        super().__init__()
        self.W = nn.Linear(dec_size, attention_size, bias=False)
        self.U = nn.Linear(enc_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)

    def keys(self, h: Tensor) -> Tensor:
        return self.U(h)  # (B, S, He) -> (B, S, A): U h once per sentence

    def forward(self, s: Tensor, keys: Tensor) -> Tensor:
        Ws = self.W(s)  # (B, T, D) -> (B, T, A)
        hidden = torch.tanh(Ws.unsqueeze(2) + keys.unsqueeze(1))  # -> (B, T, S, A)
        return self.v(hidden).squeeze(-1)  # -> (B, T, S)


SCORES: dict[str, type[Score]] = {"dot": DotScore, "general": GeneralScore, "additive": AdditiveScore}


def build_score(kind: str, dec_size: int, enc_size: int, attention_size: int) -> Score:
    """The scoring module named by `model.attention`."""
    return SCORES[kind](dec_size, enc_size, attention_size)


def attend(e: Tensor, h: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
    """Steps (2) and (3): softmax over the real source tokens, then the weighted sum.

    Args:
        e: scores (B, T, S).
        h: encoder states (B, S, He).
        src_mask: (B, S) bool, True at real tokens; padding gets weight 0.

    Returns:
        c: contexts (B, T, He), and alpha: weights (B, T, S), each row summing to 1.
    """
    e = e.float().masked_fill(~src_mask.unsqueeze(1), float("-inf"))  # float32 even under autocast
    alpha = torch.softmax(e, dim=-1)
    c = alpha.to(h.dtype) @ h  # (B, T, S) x (B, S, He) -> (B, T, He)
    return c, alpha
