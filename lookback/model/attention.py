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

Step (2) is softmax in the notes; `model.normalizer` may replace it by
sparsemax or 1.5-entmax, which give exactly zero weight to low scores:
soft, sparse, and in the limit hard alignment, all trained end to end.
At inference `decode.hard_attention: k` keeps only the k largest weights
of each step, renormalised (k = 1: the argmax, one-hot), on any model.

Legend: B batch, T decoder steps, S source length, D decoder state size,
He encoder state size, A additive attention size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import entmax
import torch
from torch import Tensor, nn

from ..config import CHECKS, NAMES, Config, ModelConfig


class Score(nn.Module):
    """score(s, h) -> e. Subclasses give the formula in their docstring; each is built by
    `build` from the sizes of s (dec_size) and h (enc_size) and the model's config, and named
    in SCORES, the one registry (`register_score` adds to it).

    What a score needs of the config it declares here, and `check_needs` holds every model.*
    to it, for shipped and registered scores alike:
    `equal_sizes`: s and h must be of one size (a dot product of the two), with one head;
    `multi_head`: model.heads > 1 splits it into heads (`build` then makes them);
    `reads_coverage`: model.coverage feeds it the running sum of past weights;
    `inits`: the model.attention_init values it has an `init_NAME` method for ("torch", the
    layers' own initialisation, needs none).

    `lr_scale`: the score's own parameters learn at train.lr times this, unless
    train.attention_lr says otherwise (see GeneralScore for why one score needs it).
    `h_gain`: the initial gain of the layer norm on h (model.layer_norm), unless
    model.norm_gain says otherwise (see DotScore)."""

    equal_sizes = False
    multi_head = False
    reads_coverage = False
    inits: tuple[str, ...] = ("torch",)
    lr_scale = 1.0

    @staticmethod
    def h_gain(enc_size: int) -> float:
        return 1.0

    @classmethod
    def build(cls, dec_size: int, enc_size: int, cfg: ModelConfig) -> Score:
        """The score for states s of dec_size and h of enc_size, as `cfg` (model.*) says."""
        return cls()

    def keys(self, h: Tensor) -> Tensor:
        """Precompute what depends on the encoder alone: (B, S, He) -> (B, S, *)."""
        return h

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        """Scores e of shape (B, T, S) for queries s (B, T, D); `coverage` (B, T, S), the sum of
        past weights that the decoder state carries, is given to a score built to read it."""
        raise NotImplementedError

    def merge(self, e: Tensor, alpha: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """e, alpha and c as `attend` gave them for this score's scores -> one of each per query:
        (B, Q, S), (B, Q, S), (B, Q, He). A score of one head has nothing to merge."""
        return e, alpha, c


class DotScore(Score):
    """Dot product (Luong et al. 2015, eq. 8): e = s . h. Needs D == He.

    With layer-normalised h, each h_i has a norm of about sqrt(He) times the norm's gain,
    so e = s . h grows with the decoder state's norm and sqrt(He) together: on Multi30k
    the scores' spread passed 5 within 50 updates, the weights went one-hot, and no
    gradient came back to e (docs/study.md, "Why dot and general did not learn"). The
    formula stays; the gain starts at 1 / sqrt(He), so that h_i starts at a norm of about
    1, and the model learns the scale it needs."""

    equal_sizes = True

    @staticmethod
    def h_gain(enc_size: int) -> float:
        return enc_size**-0.5

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        return s @ keys.transpose(1, 2)  # (B, T, D) x (B, D, S) -> (B, T, S)


class ScaledDotScore(Score):
    """Scaled dot product (Vaswani et al. 2017, eq. 1): e = s . h / sqrt(d). Needs D == He.

    Dividing by sqrt(d) keeps the scores' spread near 1 when s and h have unit-variance
    entries, however large d is, so softmax does not start out saturated."""

    equal_sizes, multi_head = True, True

    @classmethod
    def build(cls, dec_size: int, enc_size: int, cfg: ModelConfig) -> Score:
        """With model.heads > 1: multi-head."""
        if cfg.heads > 1:
            return MultiHeadScore(dec_size, enc_size, cfg.attention_size, cfg.heads)
        return cls()

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        return s @ keys.transpose(1, 2) / math.sqrt(s.size(-1))  # (B, T, S)


class MultiHeadScore(Score):
    """Multi-head scaled dot product (Vaswani et al. 2017, 3.2.2) over the RNN states, H heads:

        e^i   = (W^Q_i s) . (W^K_i h) / sqrt(d_k)      head i's scores, d_k = A / H
        c^i   = sum_j alpha^i_j h_j                    head i's context (the shared `attend`)
        c     = LayerNorm(W^O [c^1 W^V_1; ...; c^H W^V_H])   merged back to the size of h

    The heads ride along the query axis, (B, H*T, S), so `attend` masks and
    normalises them as any other scores; `merge` joins their contexts. Multi-head lives here
    whole: its scores, its merge, and `ScaledDotScore.build`, which makes it for model.heads > 1. Since
    alpha^i (h W^V_i) = (alpha^i h) W^V_i, the value projection comes after the sum.

    The layer norm (Ba et al. 2016) is the "Norm" of the Transformer's "Add & Norm"
    after its attention (Vaswani et al. 2017, 3.1). Here it is not decoration: a
    weighted sum of RNN states is bounded by them, but W^O W^V is not. Without the
    norm, the study's Multi30k run (Adam, lr 1e-3) grew c to a mean |c| of 15 against
    |h| 0.66; every unit of tanh(W_c [s; c]) sat at +-1 and the loss never left the
    unigram level, 5.9 (docs/study.md, "Multi-head attention needs a layer norm").
    """

    def __init__(self, dec_size: int, enc_size: int, attention_size: int, heads: int):
        super().__init__()
        self.heads, self.d_k = heads, attention_size // heads
        self.W_q = nn.Linear(dec_size, attention_size, bias=False)
        self.W_k = nn.Linear(enc_size, attention_size, bias=False)
        self.W_v = nn.Parameter(torch.empty(heads, enc_size, self.d_k))  # W^V_i, one per head
        nn.init.xavier_uniform_(self.W_v.view(-1, self.d_k))
        self.W_o = nn.Linear(attention_size, enc_size, bias=False)
        self.norm = nn.LayerNorm(enc_size)  # keeps c at the scale of h: see above

    def keys(self, h: Tensor) -> Tensor:
        return self.W_k(h)  # (B, S, He) -> (B, S, A): every head's W^K_i h, side by side

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        (B, T, _), S = s.shape, keys.size(1)
        q = self.W_q(s).view(B, T, self.heads, self.d_k).transpose(1, 2)  # (B, H, T, d_k)
        k = keys.view(B, S, self.heads, self.d_k).transpose(1, 2)  # (B, H, S, d_k)
        e = q @ k.transpose(2, 3) / math.sqrt(self.d_k)  # (B, H, T, S)
        return e.reshape(B, self.heads * T, -1)  # (B, H*T, S)

    def merge(self, e: Tensor, alpha: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The heads' (B, H*T, ...) -> one context from theirs (W^O, W^V, the norm), and their
        mean scores and weights, which is what the plots, the explorer and the probes show."""
        B, HT, He = c.shape
        c = c.view(B, self.heads, HT // self.heads, He)  # (B, H, T, He)
        v = torch.einsum("bhte,hed->bthd", c, self.W_v.to(c.dtype))  # c^i W^V_i: (B, T, H, d_k)
        c = self.norm(self.W_o(v.reshape(B, HT // self.heads, -1)))  # (B, T, A) -> (B, T, He)
        e, alpha = (x.view(B, self.heads, -1, x.size(-1)).mean(1) for x in (e, alpha))  # (B, T, S)
        return e, alpha, c


class GeneralScore(Score):
    """Multiplicative, 'general' (Luong et al. 2015, eq. 8): e = s W h.

    W learns at a hundredth of the model's rate (`lr_scale`). Adam moves every entry of
    W by about the learning rate at each update, whatever its gradient's size, so one
    update can move e = s W h by up to lr |s|_1 |h|_1, some D x He / 2 times what it can
    move additive's e = v . tanh(...), whose v enters linearly and whose tanh is bounded.
    At the full rate the scores' spread passed 4 within 50 updates on Multi30k, before
    attention meant anything, and softmax saturated: one-hot weights, no gradient back
    to e, 16 validation BLEU at update 600 against additive's 42. At a hundredth, 42.
    And as for dot, h starts at a norm of about 1 (`h_gain`): attending from s_{t-1},
    the state that carries c_t, saturated even at a hundredth without it (6 BLEU at
    update 300 against 23 with it). (docs/study.md, "Why dot and general did not learn")."""

    lr_scale = 0.01
    h_gain = staticmethod(DotScore.h_gain)  # h at a norm of about 1, as for dot

    def __init__(self, dec_size: int, enc_size: int):
        super().__init__()
        self.W = nn.Linear(enc_size, dec_size, bias=False)

    @classmethod
    def build(cls, dec_size: int, enc_size: int, cfg: ModelConfig) -> Score:
        return cls(dec_size, enc_size)

    def keys(self, h: Tensor) -> Tensor:
        return self.W(h)  # (B, S, He) -> (B, S, D): W h once per sentence

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        return s @ keys.transpose(1, 2)  # (B, T, D) x (B, D, S) -> (B, T, S)


class AdditiveScore(Score):
    """Additive (Bahdanau et al. 2015, A.1.2): e = v . tanh(W s + U h).

    With coverage (See et al. 2017, eq. 11; after Tu et al. 2016) the running
    sum of past weights, cov_{t,i} = sum_{t' < t} alpha_{t',i}, joins the score:
    e = v . tanh(W s + U h + w_c cov), so the model can learn to look away from
    source words it has already translated."""

    reads_coverage = True
    inits = ("torch", "bahdanau")

    def __init__(self, dec_size: int, enc_size: int, attention_size: int, coverage: bool = False):
        super().__init__()
        self.W = nn.Linear(dec_size, attention_size, bias=False)
        self.U = nn.Linear(enc_size, attention_size)
        self.v = nn.Linear(attention_size, 1, bias=False)
        self.w_c = nn.Linear(1, attention_size, bias=False) if coverage else None

    @classmethod
    def build(cls, dec_size: int, enc_size: int, cfg: ModelConfig) -> Score:
        """With model.coverage: See et al.'s coverage term."""
        return cls(dec_size, enc_size, cfg.attention_size, cfg.coverage)

    def init_bahdanau(self) -> None:
        """Bahdanau et al. 2015, B.1: W and U drawn from N(0, 0.001^2), v and the bias zero, so
        that every score starts at exactly 0 and alpha at uniform (`model.attention_init`)."""
        for linear in (self.W, self.U):
            nn.init.normal_(linear.weight, std=0.001)
        nn.init.zeros_(self.U.bias)
        nn.init.zeros_(self.v.weight)

    def keys(self, h: Tensor) -> Tensor:
        return self.U(h)  # (B, S, He) -> (B, S, A): U h once per sentence

    def forward(self, s: Tensor, keys: Tensor, coverage: Tensor | None = None) -> Tensor:
        if not through_sigmoid(keys):  # bf16, or a GPU: as the formula is written
            return self.v(torch.tanh(self._pre(s, keys, coverage))).squeeze(-1)  # (B, T, S)
        # float32 on a CPU: tanh(x) = 2 sigmoid(2x) - 1 (`through_sigmoid`), with its 2s moved
        # onto the small tensors (2 W s = W 2s: W has no bias) and onto v:
        #     v . tanh(x) = 2v . sigmoid(2x) - sum(v)
        # the same e within rounding, but the (B, T, S, A) numbers are made and read in two
        # passes (sum, sigmoid) instead of five, forward and backward alike. v as a vector: its
        # backward is then an elementwise outer product, where a product with a (1, A) matrix
        # made it a matrix product of inner size 1, at well under 1 GFLOP/s (bench/machine.py)
        twice = self._pre(2 * s, 2 * keys, None if coverage is None else 2 * coverage)  # 2x: (B, T, S, A)
        if not isinstance(self.v, nn.Linear) or torch.onnx.is_in_onnx_export():
            # v quantised, or on its way to ONNX, whose int8 quantises it as a (1, A) matrix
            return self.v(torch.sigmoid(twice) * 2 - 1).squeeze(-1)  # (runtime/fast.py)
        v = self.v.weight.view(-1)  # (A,)
        return torch.sigmoid(twice) @ (2 * v) - v.sum()  # (B, T, S)

    def _pre(self, s: Tensor, keys: Tensor, coverage: Tensor | None) -> Tensor:
        """W s + U h (+ w_c cov): queries s (B, T, D), keys U h (B, S, A) -> (B, T, S, A)."""
        pre = self.W(s).unsqueeze(2) + keys.unsqueeze(1)  # (B, T, 1, A) + (B, 1, S, A)
        if coverage is not None:  # cov (B, T, S) -> w_c cov (B, T, S, A)
            pre = pre + self.w_c(coverage.unsqueeze(-1).to(pre.dtype))
        return pre


def through_sigmoid(x: Tensor) -> bool:
    """Whether additive attention takes its tanh as 2 sigmoid(2x) - 1, for numbers like x: in
    float32 on a CPU, where PyTorch's sigmoid is several times faster than its tanh
    (bench/kernels.py). In bf16 the subtraction would lose small values' digits, and on a GPU
    tanh is one pass over memory as sigmoid is."""
    return x.dtype == torch.float32 and x.device.type == "cpu"


SCORES: dict[str, type[Score]] = {  # model.attention -> its score: the one registry
    "dot": DotScore,
    "scaled_dot": ScaledDotScore,
    "general": GeneralScore,
    "additive": AdditiveScore,
}
NAMES["model.attention"] = lambda: ["none", *SCORES]  # the config's choices come from it
NAMES["model.attention_init"] = lambda: list(dict.fromkeys(i for s in SCORES.values() for i in s.inits))


def register_score(name: str, score: type[Score]) -> None:
    """Make `score` (a Score subclass) the score of `model.attention: name`."""
    if not (isinstance(score, type) and issubclass(score, Score)):
        raise TypeError(f"register_score({name!r}, ...): expected a subclass of Score, got {score!r}")
    if name == "none":
        raise ValueError("'none' is attention without a score: register the score under another name")
    SCORES[name] = score


def build_score(dec_size: int, enc_size: int, cfg: ModelConfig) -> Score:
    """The score that `model.attention` names, for states s of dec_size and h of enc_size."""
    return SCORES[cfg.attention].build(dec_size, enc_size, cfg)


def check_needs(cfg: Config) -> list[str]:
    """What model.* asks of its score against what the score declares it needs (Score): the
    one place these are checked, run with the config's other checks (config.CHECKS)."""
    m, problems = cfg.model, []
    score = SCORES.get(m.attention)  # None: no attention, so nothing that needs a score

    def those(need: str) -> str:  # the scores that have it, for the message
        return ", ".join(f"'{n}'" for n, s in SCORES.items() if getattr(s, need)) or "none registered"

    transformer = "transformer" in (m.encoder, m.decoder)  # its layers have heads whatever the score
    if m.heads > 1 and not (score and score.multi_head) and not transformer:
        need = f"a multi-head score ({those('multi_head')}) or a transformer"
        problems.append(f"model.heads: {m.heads} heads need {need}, not '{m.attention}'")
    elif m.heads > 1 and m.attention_size % m.heads:
        problems.append(
            f"model.heads: model.attention_size ({m.attention_size}) must divide into {m.heads} heads"
        )
    rnn_reads_h = m.decoder == "rnn" and m.heads == 1  # a transformer decoder projects s and h first
    if score and score.equal_sizes and rnn_reads_h and m.enc_out_size != m.dec_hidden_size:
        problems.append(
            f"model.attention: {m.attention} scores need s and h of one size, but the decoder has "
            f"{m.dec_hidden_size} and the encoder outputs {m.enc_out_size}; set model.dec_hidden_size="
            f"{m.enc_out_size} or use 'general'"
        )
    if m.coverage and score and not score.reads_coverage:  # without attention: a problem said before
        problems.append(
            f"model.coverage: the coverage term is read by {those('reads_coverage')}, not '{m.attention}'"
        )
    inits = score.inits if score else ("torch",)
    if m.attention_init not in inits:
        known = ", ".join(f"'{n}'" for n, s in SCORES.items() if m.attention_init in s.inits)
        problems.append(
            f"model.attention_init: '{m.attention_init}' initialises {known}, not '{m.attention}'"
        )
    return problems


CHECKS.append(check_needs)


def sparsemax(e: Tensor) -> Tensor:
    """alpha = argmin_p ||p - e||^2 over the simplex: e_i - tau clipped at 0, tau such that the
    weights sum to 1 (Martins & Astudillo 2016). Scores below tau get exactly 0."""
    return entmax.sparsemax(e, dim=-1)


def entmax15(e: Tensor) -> Tensor:
    """1.5-entmax (Peters et al. 2019): alpha_i = [e_i / 2 - tau]_+^2, between softmax (which
    never gives 0) and sparsemax (which is piecewise linear in e)."""
    return entmax.entmax15(e, dim=-1)


NORMALIZERS = {"softmax": lambda e: torch.softmax(e, dim=-1), "sparsemax": sparsemax, "entmax15": entmax15}


def keep_top(alpha: Tensor, k: int) -> Tensor:
    """Hard attention at inference: the k largest weights of each row, renormalised to sum to 1;
    k = 1 is the argmax, one-hot. (..., S) -> (..., S)."""
    if k >= alpha.size(-1):
        return alpha
    top, where = alpha.topk(k, dim=-1)  # ties: the first, as argmax
    return torch.zeros_like(alpha).scatter(-1, where, top / top.sum(-1, keepdim=True))


def attend(
    e: Tensor,
    h: Tensor,
    src_mask: Tensor,
    normalizer: str = "softmax",
    top_k: int = 0,
    prior: Tensor | None = None,
    transform: Callable[[Tensor, Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Steps (2) and (3): normalise over the real source tokens, then the weighted sum.

    Args:
        e: scores (B, T, S).
        h: encoder states (B, S, He).
        src_mask: (B, S) bool, True at real tokens; padding gets weight 0. Or a mask per query,
            (B or 1, T, S), True where it may look: a decoder's self-attention must not read ahead.
        normalizer: softmax (the notes'), sparsemax or entmax15.
        top_k: keep only the top_k weights of each step, renormalised (0: all of them).
        prior: log-weights added to the scores before normalising (B, T or 1, S), e.g. the
            Gaussian of local attention (local.py); None: none.
        transform: alpha, src_mask -> the alpha to use instead, each row still summing to 1
            (faithfulness.py's counterfactual attention); None: alpha as computed.

    Returns:
        c: contexts (B, T, He), and alpha: weights (B, T, S), each row summing to 1.
    """
    wide = torch.promote_types(e.dtype, torch.float32)  # float32 even under autocast; float64 stays
    e = e.to(wide) if prior is None else e.to(wide) + prior.to(wide)
    mask = src_mask.unsqueeze(1) if src_mask.dim() == 2 else src_mask  # (B or 1, 1 or T, S)
    e = e.masked_fill(~mask, float("-inf"))
    alpha = NORMALIZERS[normalizer](e)
    if top_k:
        alpha = keep_top(alpha, top_k)
    if transform is not None:
        alpha = transform(alpha, src_mask)
    c = alpha.to(h.dtype) @ h  # (B, T, S) x (B, S, He) -> (B, T, He)
    return c, alpha
