"""The encoder-decoder, trained with teacher forcing and cross-entropy.

Notes, Appendix A.3-4: during training the decoder is fed the true previous
word y*_{t-1} (teacher forcing) and the loss is J = -sum_t log P(y*_t | y*_<t, x).

The encoder and the decoder are chosen apart (model.encoder, model.decoder): an RNN
(encoder.py, decoder.py) or attention only (transformer.py), so that the notes' next
step, removing one RNN at a time, is two config keys.

Legend: B batch, S source length, T target length, V target vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor, nn

from ..config import ModelConfig, TrainConfig
from ..data.tokenizer import PAD
from . import bptt
from .coverage import coverage_loss, coverage_weight
from .cross_entropy import cross_entropy
from .decoder import SOFT, Decoder, DecoderOutput, Look
from .encoder import Encoder, EncoderOutput
from .guided import guide_at, guided_loss
from .sampling import mixed_inputs, sampled_forward, truth_probability
from .transformer import TransformerDecoder, TransformerEncoder

ENCODERS = {"rnn": Encoder, "transformer": TransformerEncoder}  # model.encoder -> its class
DECODERS = {"rnn": Decoder, "transformer": TransformerDecoder}  # model.decoder -> its class


class LossTerms(NamedTuple):
    """What the loss of one update adds up (Seq2Seq.loss), each term at its weight then."""

    label_smoothing: float = 0.0  # of the cross-entropy
    guide: float = 0.0  # guided alignment's weight (guided.py; 0: none)
    coverage: float = 0.0  # the coverage loss's weight (coverage.py; 0: none)
    teacher_forcing: float = 1.0  # scheduled sampling's eps (sampling.py; 1: teacher forcing)
    stepwise: bool = False  # run the decoder one step at a time, as search does
    written: bool = False  # the decoder's steps differentiated by bptt.py where it covers them

    @classmethod
    def at(cls, t: TrainConfig, update: int) -> LossTerms:
        """train's terms for the update after `update` updates: the one place they are computed."""
        return cls(
            t.label_smoothing,
            guide_at(t, update + 1),
            coverage_weight(t.coverage_loss, t.coverage_start, update + 1),
            truth_probability(update, t.teacher_forcing, t.sampling_decay, t.sampling_k),
            t.stepwise,
            t.bptt == "auto" and not t.compile,  # train.compile: the compiled step instead
        )


PLAIN = LossTerms()  # cross-entropy alone, teacher-forced


class Seq2Seq(nn.Module):
    def __init__(self, cfg: ModelConfig, src_vocab: int, tgt_vocab: int):
        super().__init__()
        self.encoder = ENCODERS[cfg.encoder](src_vocab, cfg)
        self.decoder = DECODERS[cfg.decoder](tgt_vocab, self.encoder.out_size, cfg)

    def encode(self, src: Tensor, src_len: Tensor, written: bool = False) -> EncoderOutput:
        """Encoder states, fixed context and precomputed attention keys for src (B, S); `written`:
        an RNN encoder's recurrence differentiated by bptt.py where it covers it."""
        return self.decoder.prepare(self.encoder(src, src_len, written=written))

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, look: Look = SOFT) -> DecoderOutput:
        """Teacher forcing: tgt_in (B, T) is <s> y*_1 .. y*_{T-1}; logits are (B, T, V); attention
        looks as `look` says (soft, as trained, by default)."""
        enc = self.encode(src, src_len)
        return self.decoder(tgt_in, enc, self.decoder.init_state(enc), look=look)

    def loss(
        self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor, terms: LossTerms = PLAIN
    ) -> Tensor:
        """Summed cross-entropy J over the real target tokens of tgt_out (B, T), with
        `terms.label_smoothing`, plus, when the model attends, `terms.guide` times the
        guided-alignment loss (guided.py) and `terms.coverage` times the coverage loss
        (coverage.py).

        `terms.teacher_forcing` < 1 feeds the true previous token with that probability, else
        the model's own (scheduled sampling, sampling.py: in two passes, or with
        `terms.stepwise` one step at a time). `terms.stepwise` runs the decoder one step at a
        time, as search does, even where it could run the whole target at once: the same loss,
        slower. Only the real tokens reach the output layer: W_o and the softmax over V are most
        of the cost, and a batch of sentences is often half padding.
        """
        label_smoothing, guide, coverage, teacher_forcing, stepwise, written = terms
        enc = self.encode(src, src_len, written)
        state = self.decoder.init_state(enc)
        real = tgt_out != PAD  # (B, T)
        plain = not (guide or coverage or stepwise) and teacher_forcing == 1  # nothing reads alpha
        if written and plain and bptt.runs(self.decoder):  # the same loss, backward written out
            x = self.decoder.embed_inputs(tgt_in)  # (B, T, E)
            s_tilde = bptt.steps(self.decoder, x, enc.h, enc.keys, enc.src_mask, state.top(), real.sum(1))
            logits = self.decoder.project(s_tilde[real])  # (N, D) -> (N, V)
        elif teacher_forcing < 1 and stepwise:
            out = sampled_forward(self.decoder, tgt_in, enc, state, teacher_forcing)
            logits = out.logits[real]  # (N, V), N real tokens
        else:
            y_prev = mixed_inputs(self.decoder, tgt_in, enc, state, teacher_forcing)  # tgt_in at 1
            out = self.decoder(y_prev, enc, state, project=False, stepwise=stepwise)
            logits = self.decoder.project(out.s_tilde[real])  # (N, D) -> (N, V)
        targets = tgt_out[real]  # (N,)
        J = cross_entropy(logits, targets, label_smoothing)  # summed, fp32 (cross_entropy.py)
        if guide and out.alpha is not None:
            J = J + guide * guided_loss(out.alpha, src_len, tgt_out)
        if coverage and out.alpha is not None:
            J = J + coverage * coverage_loss(out.alpha, real)
        return J


def count_parameters(model: nn.Module) -> int:
    """Numbers the model learns (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())


def build_model(cfg: ModelConfig, src_vocab: int, tgt_vocab: int) -> Seq2Seq:
    """The one factory: a Seq2Seq model from `model:` and the two vocabulary sizes."""
    model = Seq2Seq(cfg, src_vocab, tgt_vocab)
    for emb in (model.encoder.embed, model.decoder.embed):
        nn.init.normal_(emb.weight, std=cfg.emb_size**-0.5)  # N(0, 1) would saturate tanh
        emb.weight.data[PAD].zero_()
    if cfg.layer_norm and cfg.encoder == "rnn":  # the scale of the h_i the score reads: its own, or norm_gain
        score = getattr(model.decoder, "score", None)
        own = score.h_gain(cfg.enc_out_size) if score is not None else 1.0
        nn.init.constant_(model.encoder.norm.weight, cfg.norm_gain if cfg.norm_gain is not None else own)
    return model
