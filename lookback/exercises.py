"""Checks for the notebooks' exercises (notebooks/): call one with your answer.

Each check runs your code on inputs of its own and compares it with the code the models use
(attention.attend, search.greedy, evaluate.bucket_of, faithfulness.uniform, attribution.agreement,
transformer.future_mask and transformer.positions).
It prints one line when you are right and raises AssertionError saying what differs when you are
not. The solutions sit apart, in notebooks/solutions/, and tests/test_exercises.py holds them to
these checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .config import ModelConfig
from .data.tokenizer import BOS, EOS
from .decoding.evaluate import bucket_of
from .decoding.search import greedy
from .decoding.translate import evaluating
from .explain.attribution import agreement
from .explain.faithfulness import uniform
from .explain.trace import lecture_numbers
from .model.attention import Score, attend
from .model.transformer import future_mask, positions


def _inputs(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Scores e (2, 3, 5), states h (2, 5, 4) and a mask (2, 5) whose second sentence has 3 tokens."""
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(2, 3, 5, generator=g) * 2
    h = torch.randn(2, 5, 4, generator=g)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    return e, h, mask


def _close(name: str, got: Tensor, want: Tensor, atol: float = 1e-5) -> None:
    got = torch.as_tensor(got, dtype=torch.float64)
    want = want.to(torch.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if not torch.allclose(got, want, atol=atol):
        worst = int((got - want).abs().argmax())
        raise AssertionError(
            f"{name}: {got.flatten()[worst]:.4f} where {want.flatten()[worst]:.4f} was expected "
            f"(element {worst} of {tuple(want.shape)})"
        )


def _ok(what: str) -> bool:
    print(f"✓ {what}")
    return True


def check_weights(weights: Callable[[Tensor, Tensor], Tensor]) -> bool:
    """`weights(e, mask)`: step (2), alpha = softmax of the scores e (B, T, S) over the real source
    tokens (mask (B, S), True at real ones); padding gets 0."""
    e, _, mask = _inputs()
    want = attend(e, torch.zeros(2, 5, 1), mask)[1]
    got = weights(e.clone(), mask.clone())
    _close("alpha", got, want)
    return _ok("alpha: each row sums to 1 over the real tokens, and padding gets 0")


def check_context(context: Callable[[Tensor, Tensor], Tensor]) -> bool:
    """`context(alpha, h)`: step (3), c_t = sum_i alpha_{t,i} h_i, for alpha (B, T, S) and h (B, S, He)."""
    e, h, mask = _inputs(1)
    want, alpha = attend(e, h, mask)
    _close("c", context(alpha.clone(), h.clone()), want)
    return _ok("c_t: the weighted sum of the encoder states")


def check_lecture_weights(weights: list[float]) -> bool:
    """The notes' first worked example (generating "chat" from "The cat sat"): its three weights,
    computed by hand."""
    want = list(lecture_numbers()[0]["weights"].values())
    _close("the notes' weights", torch.tensor(weights), torch.tensor(want), atol=5e-3)
    return _ok(f"the weights are {', '.join(f'{w:.3f}' for w in want)}, not the notes' 0.27, 0.63, 0.22")


def check_bucket(bucket: Callable[[int], str]) -> bool:
    """`bucket(n_words)`: the source-length bucket of the notes' table, '1-10', '11-20', ..., '61+'."""
    for n in range(1, 120):
        if (got := bucket(n)) != (want := bucket_of(n)):
            raise AssertionError(f"bucket({n}) is {got!r}; expected {want!r}")
    return _ok("every length from 1 to 119 words falls in its bucket")


def check_greedy(decode: Callable, translator, sentences: list[str]) -> bool:
    """`decode(translator, sentence)`: greedy search by hand, the output token ids (without </s>)."""
    model = translator.model
    for sentence in sentences:
        ids = translator.source_ids([sentence])[0]
        src, src_len = torch.tensor([ids]), torch.tensor([len(ids)])
        with torch.no_grad(), evaluating(model):
            want = greedy(model, src, src_len, translator.decode.max_ratio)[0].tokens
        got = [int(i) for i in decode(translator, sentence)]
        if got and got[0] == BOS:
            raise AssertionError(f"{sentence!r}: the output starts with <s>: leave it out")
        if got and got[-1] == EOS:
            raise AssertionError(f"{sentence!r}: the output ends with </s>: leave it out")
        if got != want:
            raise AssertionError(
                f"{sentence!r}: {translator.tgt_tok.decode(got)!r}; greedy search gives "
                f"{translator.tgt_tok.decode(want)!r}"
            )
    return _ok(f"the same tokens as lookback's greedy search on {len(sentences)} sentence(s)")


def check_score(score: type[Score], dec_size: int = 6, enc_size: int = 4) -> bool:
    """A Score subclass: built by `build`, it scores queries s (B, T, D) against keys(h) as
    (B, T, S), e_{t,i} from s_t and h_i alone, every sentence of a batch by itself, and every
    parameter learns through the weights."""
    if not (isinstance(score, type) and issubclass(score, Score)):
        raise AssertionError(f"{score!r} is not a subclass of lookback.Score")
    torch.manual_seed(0)
    module = score.build(dec_size, enc_size, ModelConfig(hidden_size=enc_size // 2, dec_hidden_size=dec_size))
    _, h, mask = _inputs(2)
    s = torch.randn(2, 3, dec_size)
    e = module(s, module.keys(h))
    if tuple(e.shape) != (2, 3, 5):
        raise AssertionError(f"the scores e have shape {tuple(e.shape)}; expected (B, T, S) = (2, 3, 5)")
    moved = h.clone()
    moved[:, 2] += 1.0  # another h_3: its scores must move, and only its
    e_moved = module(s, module.keys(moved))
    if torch.allclose(e_moved[..., 2], e[..., 2]):
        raise AssertionError("changing h_3 leaves e_{t,3} as it was: the scores must depend on h")
    if not torch.allclose(e_moved[..., [0, 1, 3, 4]], e[..., [0, 1, 3, 4]], atol=1e-5):
        raise AssertionError(
            "changing h_3 moved the scores of other source tokens: e_{t,i} is of s_t and h_i"
        )
    if torch.allclose(module(s + 1.0, module.keys(h)), e):
        raise AssertionError("the scores do not depend on the decoder state s")
    alone = module(s[1:], module.keys(h[1:]))  # the second sentence without the first
    _close("the second sentence's scores, scored alone", alone, e[1:].detach(), atol=1e-4)
    c, alpha = attend(e, h, mask)
    (c * torch.randn_like(c)).sum().backward()
    silent = [name for name, p in module.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    if silent:
        raise AssertionError(f"no gradient reaches {', '.join(silent)}: they would never learn")
    return _ok(f"{score.__name__}: e of shape (B, T, S), each e_(t,i) of s_t and h_i, every parameter learns")


def check_uniform(counterfactual: Callable[[Tensor, Tensor], Tensor]) -> bool:
    """`counterfactual(alpha, mask)`: uniform attention, 1/S on the S real tokens of each row."""
    e, _, mask = _inputs(3)
    alpha = torch.softmax(e.masked_fill(~mask.unsqueeze(1), float("-inf")), dim=-1)
    _close("uniform weights", counterfactual(alpha.clone(), mask.clone()), uniform(alpha, mask))
    return _ok("uniform: 1/S on the real tokens, 0 on padding")


def check_same_top(same_top: Callable[[Tensor, Tensor], float]) -> bool:
    """`same_top(alpha, attributions)`: the share of output tokens (rows) whose largest weight and
    largest |attribution| are on the same source token."""
    g = torch.Generator().manual_seed(4)
    alpha = torch.softmax(torch.randn(8, 6, generator=g) * 3, dim=-1)
    grads = torch.randn(8, 6, generator=g)
    grads[:4] = -2 * alpha[:4]  # half the rows agree with alpha in |a|, and disagree in a
    want = agreement(alpha, grads)["same_top"]
    got = float(same_top(alpha.clone(), grads.clone()))
    if abs(got - want) > 1e-9:
        raise AssertionError(
            f"same_top is {got:.3f}; expected {want:.3f} (the sign of an attribution does not count)"
        )
    return _ok(f"the largest weight and the largest |attribution| agree on {want:.0%} of these steps")


def check_future_mask(mask: Callable[[int], Tensor]) -> bool:
    """`mask(T)`: the decoder self-attention's (T, T) mask, True where step t may read position j."""
    for T in (1, 4, 7):
        got, want = torch.as_tensor(mask(T)), future_mask(0, T)[0]
        if got.shape != want.shape:
            raise AssertionError(f"future_mask({T}): shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        wrong = (got.bool() != want).nonzero()
        if len(wrong):
            t, j = (int(i) for i in wrong[0])
            reads = "reads" if got[t, j] else "does not read"
            must = "must" if want[t, j] else "must not"
            raise AssertionError(f"future_mask({T}): step {t} {reads} position {j}; it {must}")
    return _ok("future_mask: each step reads itself and the steps before it, never a later one")


def check_positions(encode: Callable[[int, int], Tensor]) -> bool:
    """`encode(T, d)`: the (T, d) sinusoidal encodings of positions 0 .. T - 1 (Vaswani et al. 3.5)."""
    for T, d in ((5, 8), (12, 16)):
        _close(f"positions({T}, {d})", encode(T, d), positions(0, T, d), atol=1e-4)
    return _ok("positions: sin at the even dimensions 2i, cos at 2i + 1, of pos / 10000^(2i / d)")
