"""Local attention: each step attends to a window of 2D + 1 source states, not to all S.

Luong, Pham & Manning (2015), section 3.2. At output step t the decoder picks
a centre p_t and scores only h_{p_t - D} .. h_{p_t + D}:

    local_m (monotonic)   p_t = t                                 the t-th output looks at the t-th input
    local_p (predictive)  p_t = S sigmoid(v_p . tanh(W_p s_t))    S: the sentence's real length (eq. 9)
                          alpha_{t,i} ~ align(s_t, h_i) exp(-(i - p_t)^2 / (2 sigma^2))  (eq. 10)
                          sigma = D / 2

Positions are counted from 0. The Gaussian enters as a prior on the scores,
e_{t,i} - (i - p_t)^2 / (2 sigma^2), before the model's normaliser: under
softmax that is softmax(e) times the Gaussian, renormalised so that the
weights still sum to 1 (Luong leave the product unnormalised). p_t gets its
gradient through the Gaussian; the window's integer bounds have none.

The cost: scores and the weighted sum touch 2D + 1 states per step instead
of S, so a step's attention grows with D, not with the source length. The
weights are written back into a full (T, S) row, zero outside the window, so
that plots, traces and the loss see the same matrix as for global attention.

Legend: B batch, Q queries per sentence (beams x steps), S source length,
W = 2D + 1 window, D decoder state size, He encoder state size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LocalWindow(nn.Module):
    """Where each query looks: `kind` local_m or local_p, half-width D (`model.window_size`)."""

    def __init__(self, kind: str, half_width: int, dec_size: int):
        super().__init__()
        self.kind, self.D = kind, half_width
        if kind == "local_p":
            self.W_p = nn.Linear(dec_size, dec_size, bias=False)
            self.v_p = nn.Linear(dec_size, 1, bias=False)

    def centre(self, s: Tensor, steps: Tensor, lengths: Tensor) -> Tensor:
        """p_t (B, Q), float, for queries s (B, Q, D) at output positions `steps` (B, Q);
        `lengths` (B,) are the real source lengths S."""
        S = lengths.float().unsqueeze(1)  # (B, 1)
        if self.kind == "local_m":
            return torch.minimum(steps.float(), S - 1)  # p_t = t, kept on the sentence
        return S * torch.sigmoid(self.v_p(torch.tanh(self.W_p(s)))).squeeze(-1).float()  # (B, Q), in (0, S)

    def window(self, p: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The positions round(p_t) - D .. round(p_t) + D of each query, (B, Q, W), and which of
        them fall on a real source token (B, Q, W) bool."""
        offsets = torch.arange(-self.D, self.D + 1, device=p.device)  # (W,)
        idx = p.detach().round().long().unsqueeze(-1) + offsets  # (B, Q, W)
        inside = (idx >= 0) & (idx < lengths.view(-1, 1, 1))
        return idx, inside

    def prior(self, p: Tensor, idx: Tensor) -> Tensor | None:
        """local_p's log Gaussian -(i - p_t)^2 / (2 sigma^2), sigma = D / 2, (B, Q, W); local_m: None."""
        if self.kind == "local_m":
            return None
        sigma = self.D / 2
        return -((idx.to(p.dtype) - p.unsqueeze(-1)) ** 2) / (2 * sigma**2)


def gather(x: Tensor, idx: Tensor) -> Tensor:
    """Rows of x (B, S, *) at window positions idx (B, Q, W), clamped onto [0, S): (B, Q, W, *)."""
    B, S = x.shape[:2]
    batch = torch.arange(B, device=x.device).view(B, 1, 1)
    return x[batch, idx.clamp(0, S - 1)]


def scatter(x: Tensor, idx: Tensor, inside: Tensor, S: int, fill: float) -> Tensor:
    """Window values x (B, Q, W) back into full rows (B, Q, S), `fill` outside the window.

    Positions outside the sentence go to a spare column S, dropped at the end,
    so that they never overwrite a real one."""
    B, Q, _ = x.shape
    where = idx.masked_fill(~inside, S)  # (B, Q, W)
    full = x.new_full((B, Q, S + 1), fill)
    return full.scatter(2, where, x)[..., :S]
