"""Scheduled sampling: train on the model's own previous tokens some of the time.

Teacher forcing (notes, Appendix A.3) always feeds the true previous word
y*_{t-1}; at inference the decoder is fed its own guesses, which it never saw
in training (exposure bias). Bengio et al. (2015) flip a coin at every step of
every sentence: with probability eps_i feed the truth, else a token sampled
from the model's own P(y_{t-1} | ...), and let eps_i fall over the updates i:

    none             eps_i = ratio                           (1: teacher forcing, exactly)
    linear           eps_i = max(ratio, 1 - i / k)           falls to the floor in k updates
    exponential      eps_i = max(ratio, k^i)                 0 < k < 1
    inverse_sigmoid  eps_i = max(ratio, k / (k + exp(i / k)))   k >= 1

`ratio` is `train.teacher_forcing` and `k` is `train.sampling_k`.

Two ways to draw the model's tokens:

- in two passes (the default; Duckworth et al. 2019, "Parallel scheduled
  sampling"; Mihaylova & Martins 2019): a teacher-forced pass without
  gradient gives the model's distribution at every step at once; the inputs
  are mixed from the truth and draws from it, and a second pass over the
  mixed inputs, like teacher forcing, gives the loss. Each draw conditions on
  the true prefix, not on earlier draws, and both passes run the RNN over the
  whole target in one call where the decoder allows it (decoder.py);
- one step at a time (`train.stepwise`; Bengio et al. 2015, as inference
  runs): each draw conditions on the tokens fed before it, draws included.

With eps = 1 both are teacher forcing exactly: nothing is drawn.

Legend: B batch, T target steps, V target vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..data.tokenizer import PAD
from .decoder import DecoderOutput, DecoderState
from .encoder import EncoderOutput


def truth_probability(update: int, ratio: float, decay: str = "none", k: float = 5000.0) -> float:
    """eps_i, the probability of feeding the true previous token at update i (from 0)."""
    if decay == "none":
        return ratio
    if decay == "linear":
        eps = 1.0 - update / k
    elif decay == "exponential":
        eps = k**update
    elif decay == "inverse_sigmoid":
        eps = k / (k + math.exp(min(update / k, 700.0)))  # exp overflows past 709
    else:
        raise ValueError(f"unknown sampling decay {decay!r}")
    return max(ratio, eps)


def mixed_inputs(decoder, tgt_in: Tensor, enc: EncoderOutput, state: DecoderState, eps: float) -> Tensor:
    """The decoder inputs of two-pass scheduled sampling (B, T): <s>, then at each later step the
    true token y*_{t-1} with probability eps, else one drawn from the model's P(y_{t-1} | y*_<t-1, x)
    of a teacher-forced first pass without gradient. Padding stays padding.

    The coins are tossed first, and only the steps that lost theirs reach the output layer and
    the draw: W_o and the softmax over V are most of a pass's cost, and at eps = 0.75 three
    steps in four keep the truth."""
    if eps >= 1:
        return tgt_in
    truth = tgt_in[:, 1:]  # (B, T-1)
    drawn = (torch.rand(truth.shape, device=truth.device) >= eps) & (truth != PAD)  # (B, T-1)
    if not drawn.any():
        return tgt_in
    with torch.no_grad():
        first = decoder(tgt_in[:, :-1], enc, state, project=False)  # the states of steps 1 .. T-1
        p = torch.softmax(decoder.project(first.s_tilde[drawn]).float(), dim=-1)  # (N, V), N drawn
        guess = torch.multinomial(p, 1).squeeze(1)  # (N,)
    mixed = truth.masked_scatter(drawn, guess.to(truth.dtype))  # in order: the drawn steps, row by row
    return torch.cat([tgt_in[:, :1], mixed], 1)


def sampled_forward(
    decoder, tgt_in: Tensor, enc: EncoderOutput, state: DecoderState, eps: float
) -> DecoderOutput:
    """Bengio et al.'s scheduled sampling, exactly (`train.stepwise`).

    Run the decoder over tgt_in (B, T) = <s> y*_1 .. y*_{T-1} one step at a time, feeding at
    each step after the first the true token with probability eps, else one sampled from the
    step before's output distribution (detached: no gradient flows through the choice).
    The output has the logits (B, T, V) of every step."""
    steps, y = [], tgt_in[:, :1]  # <s>
    for t in range(tgt_in.size(1)):
        out = decoder(y, enc, state)
        steps.append(out)
        state = out.state
        if t + 1 < tgt_in.size(1):
            truth = tgt_in[:, t + 1 : t + 2]  # (B, 1)
            if eps >= 1:
                y = truth
                continue
            p = torch.softmax(out.logits[:, -1].detach().float(), dim=-1)  # (B, V)
            guess = torch.multinomial(p, 1)  # (B, 1)
            y = torch.where(torch.rand(truth.shape, device=truth.device) < eps, truth, guess)
    return DecoderOutput.cat(steps)
