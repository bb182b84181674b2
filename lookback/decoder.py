"""The decoder: generates the target one token at a time from the source's states.

One decoder step, in the notes' names (Appendix A and B):

    s_0   = tanh(W_b c)                                  bridge from the fixed context c
    s_t   = RNN_dec([y_{t-1}; ...], s_{t-1})             the RNN input holds, by config,
              attention none:          the fixed context c (every step, Appendix A)
              attend_from: previous:   c_t = attend(score(s_{t-1}, h)), as in Bahdanau and
                                       the notes' h_i^d = g(y_{i-1}, h_{i-1}^d, c_i)
              input_feeding:           the previous attentional vector ~s_{t-1} (Luong 3.3)
    c_t   = attend(score(s_t, h))                        attend_from: current (Luong)
    ~s_t  = tanh(W_c [s_t; c_t])                         attentional vector (Luong eq. 5)
    P(y_t | y_<t, x) = softmax(W_o ~s_t)                 output distribution (Appendix A.2)

When no step needs the one before it (attend_from current, no input
feeding) teacher forcing runs the RNN over the whole target in one call and
attends with one batched matrix product; otherwise it steps.

Legend: B batch, T target steps, S source length, E embedding size,
D decoder state size, He encoder state size, L layers, V target vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from .attention import attend, build_score
from .config import ModelConfig
from .encoder import RNNS, EncoderOutput
from .tokenizer import PAD


class DecoderState(NamedTuple):
    """What one step hands the next: small, explicit, reordered for the beam in one place."""

    hidden: Tensor | tuple[Tensor, Tensor]  # (L, B, D) s_{t-1}; LSTM: (s, memory cell)
    feed: Tensor  # (B, D) the previous attentional vector ~s_{t-1} (zeros at the start)

    def index_select(self, idx: Tensor) -> DecoderState:
        if isinstance(self.hidden, tuple):
            hidden = tuple(x.index_select(1, idx) for x in self.hidden)
        else:
            hidden = self.hidden.index_select(1, idx)
        return DecoderState(hidden, self.feed.index_select(0, idx))

    def top(self) -> Tensor:
        """s_{t-1} of the top layer, (B, D): the query when attending from the previous state."""
        hidden = self.hidden[0] if isinstance(self.hidden, tuple) else self.hidden
        return hidden[-1]


class DecoderOutput(NamedTuple):
    logits: Tensor  # (B, T, V) unnormalised log-probabilities of y_t
    alpha: Tensor | None  # (B, T, S) attention weights; None without attention
    state: DecoderState  # after the last step


class Decoder(nn.Module):
    def __init__(self, vocab_size: int, enc_size: int, cfg: ModelConfig):
        super().__init__()
        D = cfg.dec_hidden_size
        self.attention = cfg.attention
        self.attend_from = cfg.attend_from
        self.input_feeding = cfg.input_feeding
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.bridge = nn.Linear(enc_size, D)  # W_b
        self.score = (
            None if cfg.attention == "none" else build_score(cfg.attention, D, enc_size, cfg.attention_size)
        )
        rnn_in = cfg.emb_size + (enc_size if self.feeds_context else 0) + (D if cfg.input_feeding else 0)
        self.rnn = RNNS[cfg.cell](
            rnn_in,
            D,
            num_layers=cfg.dec_layers,
            batch_first=True,
            dropout=cfg.dropout if cfg.dec_layers > 1 else 0.0,
        )
        self.combine = nn.Linear(D + enc_size, D, bias=False)  # W_c
        self.out = nn.Linear(D, vocab_size)  # W_o
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight
        self.dropout = nn.Dropout(cfg.dropout)
        self.num_layers = cfg.dec_layers
        self.is_lstm = cfg.cell == "lstm"

    @property
    def feeds_context(self) -> bool:
        """Whether a context vector is part of the RNN input (fixed c, or c_t from s_{t-1})."""
        return self.attention == "none" or self.attend_from == "previous"

    @property
    def parallel(self) -> bool:
        """Whether teacher forcing can run all T steps in one RNN call."""
        return not self.input_feeding and (self.attention == "none" or self.attend_from == "current")

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """Add the attention keys (e.g. U h), computed once per sentence."""
        return enc if self.score is None else enc._replace(keys=self.score.keys(enc.h))

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """s_0 = tanh(W_b c) in every layer; zero LSTM memory; zero attentional vector."""
        s0 = torch.tanh(self.bridge(enc.c))  # (B, He) -> (B, D)
        s0 = s0.unsqueeze(0).repeat(self.num_layers, 1, 1).contiguous()  # -> (L, B, D)
        hidden = (s0, torch.zeros_like(s0)) if self.is_lstm else s0
        return DecoderState(hidden, torch.zeros_like(s0[0]))

    def context(self, s: Tensor, enc: EncoderOutput) -> tuple[Tensor, Tensor | None]:
        """c_t and alpha_t for queries s (R, T, D); the fixed c when there is no attention.

        R is the batch, or in beam search K rows per sentence of enc, kept
        together: the source is then stored once per sentence, and the
        K beams of a sentence attend to it as K x T queries.
        """
        R, T, _ = s.shape
        B = enc.h.size(0)
        if self.score is None:
            c = enc.c if R == B else enc.c.repeat_interleave(R // B, 0)  # (R, He)
            return c.unsqueeze(1).expand(-1, T, -1), None  # (R, T, He)
        q = s.reshape(B, R // B * T, -1)  # (R, T, D) -> (B, K*T, D)
        c, alpha = attend(self.score(q, enc.keys), enc.h, enc.src_mask)  # (B, K*T, He), (B, K*T, S)
        return c.view(R, T, -1), alpha.view(R, T, -1)

    def forward(self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState) -> DecoderOutput:
        """Run T steps on the previous tokens y_prev (B, T): the whole target in teacher
        forcing, one token at a time in search."""
        att, alpha, state = self.attentional(y_prev, enc, state)
        return DecoderOutput(self.project(att), alpha, state)

    def attentional(
        self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """Steps 1-4 for y_prev (B, T): the attentional vectors ~s_t (B, T, D), alpha_t, the state."""
        if self.parallel or y_prev.size(1) == 1:
            return self._steps(y_prev, enc, state)
        atts, alphas = [], []
        for t in range(y_prev.size(1)):
            att, alpha, state = self._steps(y_prev[:, t : t + 1], enc, state)
            atts.append(att)
            alphas.append(alpha)
        alpha = None if self.score is None else torch.cat(alphas, 1)
        return torch.cat(atts, 1), alpha, state

    def project(self, att: Tensor) -> Tensor:
        """5) the logits of P(y_t) = softmax(W_o ~s_t): (..., D) -> (..., V)."""
        return self.out(self.dropout(att))

    def _steps(
        self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState
    ) -> tuple[Tensor, Tensor | None, DecoderState]:
        """T decoder steps with one RNN call; T must be 1 unless `self.parallel`."""
        x = self.dropout(self.embed(y_prev))  # (B, T) -> (B, T, E)
        inputs, c, alpha = [x], None, None
        if self.score is None:  # 1) the fixed context c, at every step
            c, alpha = self.context(x, enc)
            inputs.append(c)
        elif self.attend_from == "previous":  # 1) c_t from s_{t-1}, before the step
            c, alpha = self.context(state.top().unsqueeze(1), enc)  # (B, 1, He)
            inputs.append(c.to(x.dtype))
        if self.input_feeding:
            inputs.append(state.feed.unsqueeze(1))  # (B, 1, D)
        s, hidden = self.rnn(torch.cat(inputs, -1), state.hidden)  # 2) (B, T, D)
        if c is None:  # 3) attend from the new state s_t
            c, alpha = self.context(s, enc)
        att = torch.tanh(self.combine(torch.cat([s, c.to(s.dtype)], -1)))  # 4) ~s_t (B, T, D)
        return att, alpha, DecoderState(hidden, att[:, -1])
