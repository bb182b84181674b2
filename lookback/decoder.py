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
from .encoder import RNNS, EncoderOutput, drop_words
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
    """What T decoder steps computed, in the notes' names; each (B, T, ...) along the steps."""

    s: Tensor  # (B, T, D) decoder states s_t of the top layer
    e: Tensor | None  # (B, T, S) scores e_t before the mask (padding columns mean nothing)
    alpha: Tensor | None  # (B, T, S) attention weights; e and alpha are None without attention
    c: Tensor  # (B, T, He) contexts c_t (the fixed c, at every step, without attention)
    s_tilde: Tensor  # (B, T, D) attentional vectors ~s_t
    logits: Tensor | None  # (B, T, V) unnormalised log P(y_t); None when not projected
    state: DecoderState  # after the last step

    @staticmethod
    def cat(steps: list[DecoderOutput]) -> DecoderOutput:
        """One output from consecutive steps: every field joined along T, the last state."""
        fields = zip(*(o[:-1] for o in steps), strict=True)  # each field, step by step
        return DecoderOutput(*(None if xs[0] is None else torch.cat(xs, 1) for xs in fields), steps[-1].state)


class Decoder(nn.Module):
    def __init__(self, vocab_size: int, enc_size: int, cfg: ModelConfig):
        super().__init__()
        D = cfg.dec_hidden_size
        self.attention = cfg.attention
        self.normalizer = cfg.normalizer  # step (2): softmax, sparsemax or entmax15
        self.hard_attention = 0  # at inference, keep each step's k largest weights (Translator sets it)
        self.attend_from = cfg.attend_from
        self.input_feeding = cfg.input_feeding
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.bridge = nn.Linear(enc_size, D)  # W_b
        self.heads = cfg.heads
        self.score = (
            None
            if cfg.attention == "none"
            else build_score(cfg.attention, D, enc_size, cfg.attention_size, cfg.heads)
        )
        feeds_context = cfg.attention == "none" or cfg.attend_from == "previous"  # fixed c, or c_t of s_{t-1}
        rnn_in = cfg.emb_size + (enc_size if feeds_context else 0) + (D if cfg.input_feeding else 0)
        layers = dict(
            num_layers=cfg.dec_layers, batch_first=True, dropout=cfg.dropout if cfg.dec_layers > 1 else 0
        )
        self.rnn = RNNS[cfg.cell](rnn_in, D, **layers)  # dropout between layers, none after the last
        self.combine = nn.Linear(D + enc_size, D, bias=False)  # W_c
        self.out = nn.Linear(D, vocab_size)  # W_o
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight
        self.dropout = nn.Dropout(cfg.dropout)
        self.word_dropout = cfg.word_dropout
        self.num_layers = cfg.dec_layers
        self.is_lstm = cfg.cell == "lstm"

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

    def context(self, s: Tensor, enc: EncoderOutput) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """e_t, alpha_t and c_t for queries s (R, T, D); without attention None, None and the fixed c.

        R is the batch, or in beam search K rows per sentence of enc, kept
        together: the source is then stored once per sentence, and the
        K beams of a sentence attend to it as K x T queries.
        """
        R, T, _ = s.shape
        B = enc.h.size(0)
        if self.score is None:
            c = enc.c if R == B else enc.c.repeat_interleave(R // B, 0)  # (R, He)
            return None, None, c.unsqueeze(1).expand(-1, T, -1)  # (R, T, He)
        q = s.reshape(B, R // B * T, -1)  # (R, T, D) -> (B, K*T, D)
        e = self.score(q, enc.keys)  # (1) (B, K*T, S); H heads: (B, H*K*T, S)
        top_k = 0 if self.training else self.hard_attention
        c, alpha = attend(e, enc.h, enc.src_mask, self.normalizer, top_k)  # (2), (3)
        # c (B, K*T, He), alpha (B, K*T, S); H heads: (B, H*K*T, ...)
        if self.heads > 1:  # one context from the heads'; their mean scores and weights to show
            c = self.score.merge(c)  # (B, K*T, He)
            e, alpha = (x.view(B, self.heads, R // B * T, -1).mean(1) for x in (e, alpha))
        return e.view(R, T, -1), alpha.view(R, T, -1), c.view(R, T, -1)

    def forward(
        self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState, project: bool = True
    ) -> DecoderOutput:
        """Run T steps on the previous tokens y_prev (B, T): the whole target in teacher
        forcing, one token at a time in search. `project=False` leaves out the logits
        (the loss projects only the real target tokens)."""
        if self.parallel or y_prev.size(1) == 1:
            out = self._steps(y_prev, enc, state)
        else:
            steps = []
            for t in range(y_prev.size(1)):
                steps.append(self._steps(y_prev[:, t : t + 1], enc, state))
                state = steps[-1].state
            out = DecoderOutput.cat(steps)
        return out._replace(logits=self.project(out.s_tilde)) if project else out

    def project(self, s_tilde: Tensor) -> Tensor:
        """5) the logits of P(y_t) = softmax(W_o ~s_t): (..., D) -> (..., V)."""
        return self.out(self.dropout(s_tilde))

    def _steps(self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState) -> DecoderOutput:
        """T decoder steps with one RNN call, without logits; T must be 1 unless `self.parallel`."""
        x = self.dropout(drop_words(self.embed(y_prev), self.word_dropout, self.training))  # (B, T, E)
        inputs, c = [x], None
        if self.score is None:  # 1) the fixed context c, at every step
            e, alpha, c = self.context(x, enc)
            inputs.append(c)
        elif self.attend_from == "previous":  # 1) c_t from s_{t-1}, before the step
            e, alpha, c = self.context(state.top().unsqueeze(1), enc)  # (B, 1, He)
            inputs.append(c.to(x.dtype))
        if self.input_feeding:
            inputs.append(state.feed.unsqueeze(1))  # (B, 1, D)
        s, hidden = self.rnn(torch.cat(inputs, -1), state.hidden)  # 2) (B, T, D)
        if c is None:  # 3) attend from the new state s_t
            e, alpha, c = self.context(s, enc)
        s_tilde = torch.tanh(self.combine(torch.cat([s, c.to(s.dtype)], -1)))  # 4) ~s_t (B, T, D)
        return DecoderOutput(s, e, alpha, c, s_tilde, None, DecoderState(hidden, s_tilde[:, -1]))
