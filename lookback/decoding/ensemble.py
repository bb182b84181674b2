"""Ensembles: several trained models translate as one.

At every step each member reads the same source and the same output so far,
and the ensemble's distribution over the next token is the mean of theirs:

    P(y_t | y_<t, x) = 1/N sum_n P_n(y_t | y_<t, x)

(the usual NMT ensemble, e.g. Sutskever et al. 2014; Joey NMT, fairseq and
Marian average probabilities the same way). Its attention weights are the
mean of the members' that have attention. `Ensemble` looks like a `Seq2Seq`
to search.py: `encode`, and a decoder with `init_state`, a step and `out`,
so greedy and beam search run on it unchanged. Members must share the
tokenizers (Translator.ensemble checks).

Legend: B batch, S source length, T steps, V target vocabulary, N members.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..model.decoder import SOFT, DecoderOutput, Look
from ..model.seq2seq import Seq2Seq


class Members(tuple):
    """One value per member (encoder outputs, decoder states), reordered together."""

    def index_select(self, idx: Tensor) -> Members:
        return Members(x.index_select(idx) for x in self)


class EnsembleDecoder(nn.Module):
    def __init__(self, models: list[Seq2Seq]):
        super().__init__()
        self.members = nn.ModuleList(m.decoder for m in models)
        self.attends = any(d.attends for d in self.members)  # then the mean of the members' alphas
        self.out = self.members[0].out  # search reads V from it

    def init_state(self, enc: Members) -> Members:
        return Members(d.init_state(e) for d, e in zip(self.members, enc, strict=True))

    def forward(self, y_prev: Tensor, enc: Members, state: Members, look: Look = SOFT) -> DecoderOutput:
        """T steps of every member on y_prev (B, T), each looking as `look` says; logits are log of
        the mean probability."""
        outs = [d(y_prev, e, s, look=look) for d, e, s in zip(self.members, enc, state, strict=True)]
        logp = torch.stack([o.logits.float().log_softmax(-1) for o in outs])  # (N, B, T, V)
        logits = logp.logsumexp(0) - math.log(len(outs))  # (B, T, V) log 1/N sum_n P_n
        alphas = [o.alpha.float() for o in outs if o.alpha is not None]  # (B, T, S) each
        alpha = torch.stack(alphas).mean(0) if alphas else None
        first = outs[0]  # s, c and ~s are each member's own: the first's stand for them
        return first._replace(e=None, alpha=alpha, logits=logits, state=Members(o.state for o in outs))


class Ensemble(nn.Module):
    """Models that translate as one: the mean of their next-token distributions."""

    def __init__(self, models: list[Seq2Seq]):
        super().__init__()
        if len({m.decoder.out.out_features for m in models}) > 1:
            raise ValueError("the members of an ensemble need the same target vocabulary")
        self.models = nn.ModuleList(models)
        self.decoder = EnsembleDecoder(models)

    def encode(self, src: Tensor, src_len: Tensor) -> Members:
        return Members(m.encode(src, src_len) for m in self.models)
