"""The decoder: generates the target one token at a time from the source's states.

One decoder step, in the notes' names (Appendix A and B):

    s_0   = tanh(W_b c)                                  bridge from the fixed context c
    s_t   = RNN_dec([y_{t-1}; ...], s_{t-1})             the RNN input holds, by config,
              attention none:          the fixed context c (every step, Appendix A)
              attend_from: previous:   c_t = attend(score(s_{t-1}, h)), as in Bahdanau and
                                       the notes' h_i^d = g(y_{i-1}, h_{i-1}^d, c_i)
              input_feeding:           the previous attentional vector ~s_{t-1} (Luong 3.3)
    c_t   = attend(score(s_t, h))                        attend_from: current (Luong)
    ~s_t  = tanh(W_c [s_t; c_t])                         attentional vector (Luong eq. 5), or with
          = maxout(U_o q_t + V_o y_{t-1} + C_o c_t)      readout: bahdanau (Bahdanau A.2.2), q_t the
                                                         query: s_{t-1} (previous) or s_t;
                                                         model.layer_norm: LN(W_c [s_t; c_t]) inside
                                                         the tanh, LN(...) inside the maxout
    P(y_t | y_<t, x) = softmax(W_o ~s_t)                 output distribution (Appendix A.2)

Attention looks at all of h, or with `model.window` at a window of it
(local.py); with `model.coverage` the score also reads the running sum of
past weights, which the state carries from step to step.

When the RNN does not read what attention computed (attend_from current, no
input feeding) teacher forcing runs it over the whole target in one call and
attends with one batched matrix product; with coverage, whose scores read the
weights of the steps before, only attention then loops over the steps, the RNN
and the readout still run once. Otherwise the decoder steps, as search does, with
the target embedded once for all steps (`stepwise=True` forces stepping: the
reference the fast paths are tested against).

Legend: B batch, T target steps, S source length, E embedding size,
D decoder state size, He encoder state size, L layers, V target vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from ..data.tokenizer import PAD
from . import local
from .attention import attend, build_score
from .dropout import Dropout, drop_words
from .encoder import RNNS, EncoderOutput


class DecoderState(NamedTuple):
    """What one step hands the next: small, explicit, reordered for the beam in one place, and
    named here once for every path that carries it (the ONNX graph's inputs and outputs too:
    `names`, `tensors`, `from_tensors`)."""

    hidden: Tensor | tuple[Tensor, Tensor] | None  # (L, B, D) s_{t-1}; LSTM: (s, memory cell)
    feed: Tensor | None  # (B, D) the previous attentional vector ~s_{t-1} (zeros at the start)
    step: int = 0  # t: output tokens made so far (local_m's window centre, a transformer's position)
    coverage: Tensor | None = None  # (B, S) sum of the alphas so far; None without model.coverage
    cache: Tensor | None = None  # (L, B, t, 2A) a transformer decoder's keys and values of the t steps

    ROWS = {"hidden": 1, "cell": 1, "feed": 0, "coverage": 0, "cache": 1}  # each tensor's beam row axis

    @staticmethod
    def names(lstm: bool, coverage: bool, transformer: bool = False) -> list[str]:
        """The state's tensors, by name, for a decoder of this kind (step, an int, aside): an RNN
        decoder's, or a transformer decoder's cache."""
        if transformer:
            return ["cache"]
        return ["hidden", *(["cell"] if lstm else []), "feed", *(["coverage"] if coverage else [])]

    def tensors(self) -> dict[str, Tensor]:
        """The state's tensors by name, in `names` order."""
        hidden, cell = self.hidden if isinstance(self.hidden, tuple) else (self.hidden, None)
        named = {
            "hidden": hidden,
            "cell": cell,
            "feed": self.feed,
            "coverage": self.coverage,
            "cache": self.cache,
        }
        return {name: x for name, x in named.items() if x is not None}

    @classmethod
    def from_tensors(cls, named: dict[str, Tensor], step: int) -> DecoderState:
        """The state back from its tensors by name (`tensors`), at output step `step`."""
        hidden = (named["hidden"], named["cell"]) if "cell" in named else named.get("hidden")
        return cls(hidden, named.get("feed"), step, named.get("coverage"), named.get("cache"))

    def index_select(self, idx: Tensor) -> DecoderState:
        named = {name: x.index_select(self.ROWS[name], idx) for name, x in self.tensors().items()}
        return self.from_tensors(named, self.step)

    def top(self) -> Tensor:
        """s_{t-1} of the top layer, (B, D): the query when attending from the previous state."""
        hidden = self.hidden[0] if isinstance(self.hidden, tuple) else self.hidden
        return hidden[-1]


class Look(NamedTuple):
    """How attention looks at inference: one small value that search hands each decoder step,
    never set on the model. Training passes none, so it always attends softly.

    top_k: keep each step's k largest weights, renormalised (hard attention, `decode.hard_attention`;
        0: all of them, soft).
    change: alpha (B, Q, S), src_mask (B, S), step t -> the weights to use instead
        (explain/faithfulness.py's counterfactual attention); None: alpha as computed.
    """

    top_k: int = 0
    change: Callable[[Tensor, Tensor, int], Tensor] | None = None

    def index_select(self, idx: Tensor) -> Look:
        """The same look for the sentences `idx` of the batch: a change that holds something per
        sentence (a counterfactual's lent weights) follows them, as search drops finished ones."""
        select = getattr(self.change, "index_select", None)
        return self if select is None else self._replace(change=select(idx))


SOFT = Look()  # attention as trained


class DecoderOutput(NamedTuple):
    """What T decoder steps computed, in the notes' names; each (B, T, ...) along the steps."""

    s: Tensor  # (B, T, D) decoder states s_t of the top layer
    e: Tensor | None  # (B, T, S) scores e_t before the mask (padding columns mean nothing)
    alpha: Tensor | None  # (B, T, S) attention weights; e and alpha are None without attention
    c: Tensor  # (B, T, He) contexts c_t (the fixed c, at every step, without attention)
    s_tilde: Tensor  # (B, T, D) attentional vectors ~s_t
    logits: Tensor | None  # (B, T, V) unnormalised log P(y_t); None when not projected
    state: DecoderState  # after the last step
    # a transformer decoder's every attention, per layer and head (None for an RNN decoder):
    heads: Tensor | None = None  # (B, T, L, H, S) over the source; alpha is the top layer's mean
    self_alpha: Tensor | None = None  # (B, T, L, H, P) over the target steps so far, P in all

    @staticmethod
    def cat(steps: list[DecoderOutput]) -> DecoderOutput:
        """One output from consecutive steps: every field joined along T, the last state. The
        self-attention of step t reads P_t positions: zeros past them, as the future mask gives."""
        joined = {}
        for name in DecoderOutput._fields:
            xs = [getattr(o, name) for o in steps]
            if name == "state" or xs[0] is None:
                joined[name] = steps[-1].state if name == "state" else None
                continue
            if name == "self_alpha":
                P = max(x.size(-1) for x in xs)
                xs = [torch.nn.functional.pad(x, (0, P - x.size(-1))) for x in xs]
            joined[name] = torch.cat(xs, 1)
        return DecoderOutput(**joined)


class Decoder(nn.Module):
    def __init__(self, vocab_size: int, enc_size: int, cfg: ModelConfig):
        super().__init__()
        D = self.state_size = cfg.dec_hidden_size
        self.attention = cfg.attention
        self.normalizer = cfg.normalizer  # step (2): softmax, sparsemax or entmax15
        self.attend_from = cfg.attend_from
        self.input_feeding = cfg.input_feeding
        self.embed = nn.Embedding(vocab_size, cfg.emb_size, padding_idx=PAD)
        self.bridge = nn.Linear(enc_size, D)  # W_b
        self.score = None if cfg.attention == "none" else build_score(D, enc_size, cfg)
        local_window = self.attends and cfg.window != "global"
        self.window = local.LocalWindow(cfg.window, cfg.window_size, D) if local_window else None
        self.coverage = cfg.coverage and self.attends
        feeds_context = cfg.attention == "none" or cfg.attend_from == "previous"  # fixed c, or c_t of s_{t-1}
        rnn_in = cfg.emb_size + (enc_size if feeds_context else 0) + (D if cfg.input_feeding else 0)
        layers = dict(
            num_layers=cfg.dec_layers, batch_first=True, dropout=cfg.dropout if cfg.dec_layers > 1 else 0
        )
        self.rnn = RNNS[cfg.cell](rnn_in, D, **layers)  # dropout between layers, none after the last
        self.readout = cfg.readout
        if cfg.readout == "luong":
            self.combine = nn.Linear(D + enc_size, D, bias=False)  # W_c
        else:  # U_o, V_o, C_o side by side; 2 pieces per maxout unit
            self.maxout = nn.Linear(D + cfg.emb_size + enc_size, 2 * D)
        readout_size = D if cfg.readout == "luong" else 2 * D
        self.norm = nn.LayerNorm(readout_size) if cfg.layer_norm else nn.Identity()  # model.layer_norm
        if cfg.attention_init != "torch":  # one the score declares (Score.inits), e.g. init_bahdanau
            getattr(self.score, f"init_{cfg.attention_init}")()
        self.out = nn.Linear(D, vocab_size)  # W_o
        if cfg.tie_embeddings:
            self.out.weight = self.embed.weight
        self.dropout = Dropout(cfg.dropout)
        self.word_dropout = cfg.word_dropout
        self.num_layers = cfg.dec_layers
        self.is_lstm = cfg.cell == "lstm"
        self._compiled_step = None  # train.compile on a decoder that steps: compile_steps

    @property
    def attends(self) -> bool:
        """Whether the decoder has attention (a score), or works from the fixed context c."""
        return self.score is not None

    @property
    def parallel(self) -> bool:
        """Whether teacher forcing can run all T steps in one RNN call: the RNN reads neither c_t
        nor ~s_{t-1} (coverage is fine: only attention then steps, in `_attend`)."""
        return not self.input_feeding and (self.attention == "none" or self.attend_from == "current")

    def compile_steps(self) -> None:
        """train.compile for a decoder that steps in training (input feeding, attending from
        s_{t-1}, train.stepwise): one step (score, softmax, context, the RNN cell, the readout) and
        its backward compiled by torch.compile, once for dynamic shapes, and run at every step in
        training; the loop over the steps stays Python (compiled whole, it would be traced again
        for every target length). Search and validation step eagerly."""
        step = torch.compile(self._steps, dynamic=True)
        self._compiled_step = torch._dynamo.config.patch(allow_rnn=True)(step)  # the GRU's cell traced too

    def attention_parameters(self) -> list[nn.Parameter]:
        """The attention's own parameters: the score's and a local window's (none for dot)."""
        return [p for part in (self.score, self.window) if part is not None for p in part.parameters()]

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        """Add the attention keys (e.g. U h), computed once per sentence."""
        return enc._replace(keys=self.score.keys(enc.h)) if self.attends else enc

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        """s_0 = tanh(W_b c) in every layer; zero LSTM memory; zero attentional vector."""
        s0 = torch.tanh(self.bridge(enc.c))  # (B, He) -> (B, D)
        s0 = s0.unsqueeze(0).repeat(self.num_layers, 1, 1).contiguous()  # -> (L, B, D)
        hidden = (s0, torch.zeros_like(s0)) if self.is_lstm else s0
        coverage = enc.h.new_zeros(enc.h.shape[:2], dtype=torch.float) if self.coverage else None  # (B, S)
        return DecoderState(hidden, torch.zeros_like(s0[0]), 0, coverage)

    def context(
        self, s: Tensor, enc: EncoderOutput, step: int = 0, coverage: Tensor | None = None, look: Look = SOFT
    ) -> tuple[Tensor | None, Tensor | None, Tensor]:
        """e_t, alpha_t and c_t for queries s (R, T, D) at output steps step .. step + T - 1;
        without attention None, None and the fixed c. `coverage` (R, S): past weights (T = 1);
        `look`: hard attention or a counterfactual, at inference.

        R is the batch, or in beam search K rows per sentence of enc, kept
        together: the source is then stored once per sentence, and the
        K beams of a sentence attend to it as K x T queries.
        """
        R, T, _ = s.shape
        B, S = enc.h.shape[:2]
        if not self.attends:
            c = enc.c if R == B else enc.c.repeat_interleave(R // B, 0)  # (R, He)
            return None, None, c.unsqueeze(1).expand(-1, T, -1)  # (R, T, He)
        Q = R // B * T  # queries per sentence: K beams x T steps
        q = s.reshape(B, Q, -1)  # (R, T, D) -> (B, Q, D)
        cov = None if coverage is None else coverage.view(B, Q, S)  # coverage steps: T = 1
        top_k = look.top_k
        change = None if look.change is None else lambda alpha, mask: look.change(alpha, mask, step)
        if self.window is None:
            e = self._score(q, enc.keys, cov)  # (1) (B, Q, S); H heads: (B, H*Q, S)
            c, alpha = attend(e, enc.h, enc.src_mask, self.normalizer, top_k, transform=change)  # (2), (3)
            e, alpha, c = self.score.merge(e, alpha, c)  # H heads -> one: (B, Q, S), (B, Q, S), (B, Q, He)
        else:
            steps = (step + torch.arange(T, device=s.device)).repeat(R // B).expand(B, Q)  # (B, Q)
            e, alpha, c = self._attend_window(q, enc, steps, cov, top_k, change)
        if e.shape == (R, T, S):  # the very tensors attend used, not views: diagnostics.probe takes dJ/de
            return e, alpha, c
        return e.view(R, T, S), alpha.view(R, T, S), c.view(R, T, -1)

    def _score(self, q: Tensor, keys: Tensor, cov: Tensor | None) -> Tensor:
        """(1) e for queries q (B, Q, D) against keys (B, S, *); with coverage (B, Q, S)."""
        return self.score(q, keys, cov)

    def _attend_window(
        self,
        q: Tensor,
        enc: EncoderOutput,
        steps: Tensor,
        cov: Tensor | None,
        top_k: int,
        change: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Local attention (local.py): each of the B x Q queries (B, Q, D) scores only its window
        of W = 2D + 1 states, as a batch of its own; the weights come back as full rows (B, Q, S)."""
        (B, Q, _), S = q.shape, enc.h.size(1)
        lengths = enc.src_mask.sum(1)  # (B,) real source lengths
        p = self.window.centre(q, steps, lengths)  # (B, Q) p_t
        idx, inside = self.window.window(p, lengths)  # (B, Q, W)
        N, W = B * Q, idx.size(-1)
        keys = local.gather(enc.keys, idx).reshape(N, W, -1)  # (N, W, *)
        h = local.gather(enc.h, idx).reshape(N, W, -1)  # (N, W, He)
        cov = None if cov is None else cov.gather(2, idx.clamp(0, S - 1)).reshape(N, 1, W)
        prior = self.window.prior(p, idx)  # (B, Q, W) log Gaussian, local_p
        prior = None if prior is None else prior.reshape(N, 1, W)
        e = self._score(q.reshape(N, 1, -1), keys, cov)  # (1) (N, 1, W); H heads: (N, H, W)
        c, alpha = attend(e, h, inside.reshape(N, W), self.normalizer, top_k, prior, change)  # (2), (3)
        e, alpha, c = self.score.merge(e, alpha, c)  # H heads -> one: (N, 1, W), (N, 1, W), (N, 1, He)
        e = local.scatter(e.float().view(B, Q, W), idx, inside, S, float("-inf"))  # (B, Q, S)
        alpha = local.scatter(alpha.view(B, Q, W), idx, inside, S, 0.0)  # (B, Q, S), 0 outside
        return e, alpha, c.view(B, Q, -1)

    def _attend(
        self, s: Tensor, enc: EncoderOutput, step: int, coverage: Tensor | None, look: Look
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """e, alpha and c for the states s (B, T, D) of steps step .. step + T - 1, and the coverage
        after them. Without coverage the T steps attend at once; with it each step's scores read
        the weights of the steps before, so attention, and only attention, loops over them."""
        if coverage is None:
            return *self.context(s, enc, step, look=look), None
        steps = []
        for t in range(s.size(1)):
            steps.append(self.context(s[:, t : t + 1], enc, step + t, coverage, look))  # each (B, 1, ...)
            coverage = coverage + steps[-1][1][:, 0]  # + alpha_t: (B, S)
        if len(steps) == 1:  # search's one step: its very tensors (diagnostics.probe takes dJ/de)
            return *steps[0], coverage
        e, alpha, c = (torch.cat(x, 1) for x in zip(*steps, strict=True))  # (B, T, S), (B, T, S), (B, T, He)
        return e, alpha, c, coverage

    def forward(
        self,
        y_prev: Tensor,
        enc: EncoderOutput,
        state: DecoderState,
        project: bool = True,
        stepwise: bool = False,
        look: Look = SOFT,
    ) -> DecoderOutput:
        """Run T steps on the previous tokens y_prev (B, T): the whole target in teacher
        forcing, one token at a time in search. `project=False` leaves out the logits
        (the loss projects only the real target tokens); `stepwise` runs one step at a time
        even where the decoder could run all at once (the same numbers, slower); `look`:
        hard attention or a counterfactual, at inference."""
        x = self.embed_inputs(y_prev)  # (B, T, E), once for all T steps
        if self.parallel and not stepwise:
            out = self._steps(x, enc, state, look)
        else:  # train.compile: the compiled step in training (compile_steps), search steps eagerly
            one = self._compiled_step if self.training and self._compiled_step is not None else self._steps
            steps = []
            for t in range(y_prev.size(1)):
                steps.append(one(x[:, t : t + 1], enc, state, look))
                state = steps[-1].state
            out = steps[0] if len(steps) == 1 else DecoderOutput.cat(steps)  # one step: its very tensors
        return out._replace(logits=self.project(out.s_tilde)) if project else out

    def project(self, s_tilde: Tensor) -> Tensor:
        """5) the logits of P(y_t) = softmax(W_o ~s_t): (..., D) -> (..., V)."""
        return self.out(self.dropout(s_tilde))

    def embed_inputs(self, y_prev: Tensor) -> Tensor:
        """The embeddings of the previous tokens y_prev (B, T), with word dropout and dropout:
        (B, T, E). Done once for all T even when the steps run one at a time: an embedding's
        backward writes a gradient the size of the whole table, once per call."""
        return self.dropout(drop_words(self.embed(y_prev), self.word_dropout, self.training))

    def _steps(self, x: Tensor, enc: EncoderOutput, state: DecoderState, look: Look) -> DecoderOutput:
        """T decoder steps with one RNN call on the embedded previous tokens x (B, T, E), without
        logits; T must be 1 unless `self.parallel`."""
        inputs, c, query = [x], None, None
        if not self.attends:  # 1) the fixed context c, at every step
            e, alpha, c = self.context(x, enc)
            inputs.append(c)
        elif self.attend_from == "previous":  # 1) c_t from s_{t-1}, before the step
            query = state.top().unsqueeze(1)  # (B, 1, D)
            e, alpha, c = self.context(query, enc, state.step, state.coverage, look)  # (B, 1, He)
            inputs.append(c.to(x.dtype))
        if self.input_feeding:
            inputs.append(state.feed.unsqueeze(1))  # (B, 1, D)
        s, hidden = self.rnn(torch.cat(inputs, -1), state.hidden)  # 2) (B, T, D)
        coverage = state.coverage
        if c is None:  # 3) attend from the new state s_t
            e, alpha, c, coverage = self._attend(s, enc, state.step, coverage, look)
        elif coverage is not None:  # attended from s_{t-1} above, T = 1
            coverage = coverage + alpha[:, -1]  # (B, S)
        query = s if query is None else query
        if self.readout == "luong":  # 4) ~s_t (B, T, D)
            s_tilde = torch.tanh(self.norm(self.combine(torch.cat([s, c.to(s.dtype)], -1))))
        else:  # maxout over pairs of units of U_o q_t + V_o y_{t-1} + C_o c_t
            pieces = self.maxout(torch.cat([query, x.to(s.dtype), c.to(s.dtype)], -1))  # (B, T, 2D)
            pieces = self.norm(pieces)
            s_tilde = pieces.view(*pieces.shape[:-1], -1, 2).amax(-1)  # (B, T, D)
        next_state = DecoderState(hidden, s_tilde[:, -1], state.step + x.size(1), coverage)
        return DecoderOutput(s, e, alpha, c, s_tilde, None, next_state)
