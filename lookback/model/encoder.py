"""The encoder: embeddings, then an RNN that reads the source into states h_i.

Notes, Appendix A:  x_i = Embed(w_i);  h_i = RNN_enc(x_i, h_{i-1}).
A bidirectional encoder reads both ways and concatenates: h_i = [fwd_i; bwd_i].
With `model.layer_norm` each h_i is then layer-normalised (Ba et al. 2016),
so the scores and contexts read states of one scale (a `final` fixed
context c stays the RNN's last state; a `mean` one averages the normalised h).

Legend: B batch, S source length, E embedding size, H hidden size per
direction, He = H x directions, L layers.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..config import ModelConfig
from ..data.tokenizer import PAD
from . import bptt
from .dropout import Dropout, drop_words

RNNS = {"rnn": nn.RNN, "gru": nn.GRU, "lstm": nn.LSTM}


class EncoderOutput(NamedTuple):
    """All the decoder needs of the source; it travels through search unchanged."""

    h: Tensor  # (B, S, He) encoder states h_i
    src_mask: Tensor  # (B, S) bool, True at real tokens
    c: Tensor  # (B, He) the fixed-size context: final state or mean of h (model.context)
    keys: Tensor | None = None  # (B, S, *) attention keys, precomputed once (e.g. U h)
    self_alpha: Tensor | None = None  # (B, L, H, S, S) a transformer encoder's self-attention weights

    def index_select(self, idx: Tensor) -> EncoderOutput:
        """Pick (or repeat) sentences along the batch, e.g. to give each beam a copy."""
        return EncoderOutput(*(t.index_select(0, idx) if t is not None else None for t in self))


class Encoder(nn.Module):
    def __init__(self, vocab_size: int, cfg: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        layers = dict(
            num_layers=cfg.enc_layers, batch_first=True, dropout=cfg.dropout if cfg.enc_layers > 1 else 0
        )
        self.rnn = RNNS[cfg.cell](cfg.emb_size, cfg.hidden_size, bidirectional=cfg.bidirectional, **layers)
        self.dropout = Dropout(cfg.dropout)
        self.word_dropout = cfg.word_dropout
        self.context = cfg.context
        self.directions = 2 if cfg.bidirectional else 1
        self.out_size = cfg.enc_out_size
        self.norm = nn.LayerNorm(self.out_size) if cfg.layer_norm else nn.Identity()  # model.layer_norm

    def forward(
        self, src: Tensor, src_len: Tensor, x: Tensor | None = None, written: bool = False
    ) -> EncoderOutput:
        """Read a padded batch src (B, S) whose true lengths are src_len (B,). `x` (B, S, E), when
        given, stands in for the embeddings of src (attribution.py differentiates through it).
        `written`: a GRU or LSTM it covers runs with its backward written out (bptt.recurrence),
        or, an LSTM over a batch mostly of real tokens, each way on padded input (`each_way`):
        the same maths."""
        B, S = src.shape
        src_mask = src != PAD
        x = self.embed(src) if x is None else x  # (B, S) -> (B, S, E)
        x = self.dropout(drop_words(x, self.word_dropout, self.training))
        written = written and bptt.reads(self.rnn)
        if written and isinstance(self.rnn, nn.LSTM) and src_len.sum() >= EACH_WAY_FILL * B * S:
            h, last = each_way(self.rnn, x, src_len)  # (B, S, He), zero at the padding
        else:  # packing makes each direction start and stop at the sentence's real ends
            packed = pack_padded_sequence(x, src_len.cpu(), batch_first=True, enforce_sorted=False)
            out, last = bptt.recurrence(self.rnn, packed) if written else self.rnn(packed)
            h, _ = pad_packed_sequence(out, batch_first=True, total_length=S)  # (B, S, He)
        h = self.norm(h)  # model.layer_norm: each h_i to mean 0, variance 1, then a gain and a bias
        if isinstance(last, tuple):  # LSTM: (hidden, memory cell)
            last = last[0]
        if self.context == "final":
            # last: (L * dirs, B, H); the top layer's forward end and backward end -> (B, He)
            top = last.view(-1, self.directions, B, last.size(-1))[-1]
            c = top.transpose(0, 1).reshape(B, self.out_size)
        else:  # mean of all real encoder states, as one of the notes suggests
            c = (h * src_mask.unsqueeze(-1)).sum(1) / src_len.to(h.dtype).unsqueeze(-1)
        return EncoderOutput(h, src_mask, c)


EACH_WAY_FILL = 0.8  # `each_way` where at least this share of the B x S positions is real (below: packed)


def each_way(rnn: nn.LSTM, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """A one-layer LSTM's states h (B, S, K H), zero at the padding, and last states h_n (K, B, H)
    for padded x (B, S, E) of these lengths, each direction one call on the padded batch; the
    backward direction reads each sentence reversed within its length, so that in both the
    padding only ever follows a sentence and never reaches its states.

    On a CPU, torch runs an LSTM on padded input through oneDNN's fused LSTM and a packed one
    step by step in its own operators. In lookback's batches, sentences of about one length, the
    two padded calls are faster than the packed steps, written out or not; where a fifth or
    more of the positions are padding they are not (docs/performance.md)."""
    (B, S, E), K, H = x.shape, 1 + rnn.bidirectional, rnn.hidden_size
    t, L = torch.arange(S, device=x.device), lengths.to(x.device).unsqueeze(1)  # (S,), (B, 1)
    real = t < L  # (B, S)
    back = torch.where(real, L - 1 - t, t).unsqueeze(-1)  # (B, S, 1): position t read from the end
    zero = x.new_zeros(1, B, H)  # h_0 = c_0 = 0
    ends = (torch.arange(B, device=x.device), L[:, 0] - 1)  # each sentence's last real position
    states, last = [], []
    for k in range(K):
        names = [f"{w}_l0{'_reverse' * k}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        x_k = x if k == 0 else x.gather(1, back.expand(-1, -1, E))  # each sentence reversed
        h_k, _, _ = torch.ops.aten.lstm.input(  # nn.LSTM's own call: (B, S, H), one way
            x_k, [zero, zero], [getattr(rnn, n) for n in names], True, 1, 0.0, rnn.training, False, True
        )
        last.append(h_k[ends])  # (B, H): after each sentence's last real token
        states.append(h_k if k == 0 else h_k.gather(1, back.expand(-1, -1, H)))  # back in order
    return torch.cat(states, -1).masked_fill(~real.unsqueeze(-1), 0.0), torch.stack(last)
