"""Coverage: how much attention each source token has received so far, and what to do with it.

An attention model may translate a word twice (it attends to it twice) or
never (it never attends to it). Coverage is the running sum of the weights,

    cov_{t,i} = sum_{t' < t} alpha_{t',i}                  (See et al. 2017, eq. 10; Tu et al. 2016)

and it is used three ways:

    in the score    e = v . tanh(W s + U h + w_c cov)      model.coverage (attention.AdditiveScore)
    in the loss     J_cov = sum_t sum_i min(alpha_{t,i}, cov_{t,i})   train.coverage_loss (See eq. 12),
                                                                      from train.coverage_start
    in beam search  cp = beta sum_i log min(sum_t alpha_{t,i}, 1)     decode.coverage_penalty (Wu et al.
                                                                      2016, eq. 14, GNMT)

and measured on outputs by `coverage_report`: source tokens under- and
over-covered, and repeated output n-grams, the usual signs of under- and
over-translation.

Legend: B batch, T target steps, S source length.
"""

from __future__ import annotations

import torch
from torch import Tensor

FLOOR = 1e-6  # log min(coverage, 1) of a token with exactly no attention (sparse, local, hard) is -inf


def running_coverage(alpha: Tensor) -> Tensor:
    """cov_t = sum of the weights before step t: (B, T, S) -> (B, T, S), zero at t = 0."""
    return alpha.cumsum(1) - alpha


def coverage_weight(weight: float, start: int, step: int) -> float:
    """The weight of J_cov at update `step` (1-based): `weight` from update `start` on, 0 before
    (train.coverage_loss, train.coverage_start). See et al. (2017) add the loss only in a short
    last phase: from the first update it interfered with learning to translate."""
    return weight if step >= start else 0.0


def coverage_loss(alpha: Tensor, real: Tensor) -> Tensor:
    """See et al.'s J_cov, summed over the real target steps: alpha (B, T, S), real (B, T) bool.

    min(alpha, cov) is zero while a step looks only where no step has looked
    before, and grows with every weight put on a token already covered."""
    overlap = torch.minimum(alpha, running_coverage(alpha)).sum(-1)  # (B, T)
    return (overlap * real).sum()


def coverage_penalty(alpha: Tensor, beta: float) -> float:
    """GNMT's cp = beta sum_i log min(sum_t alpha_{t,i}, 1) of one output's weights (T, S): 0 when
    every source token got a total weight of 1 or more, negative for each that got less."""
    if not beta or alpha.numel() == 0:
        return 0.0
    total = alpha.float().sum(0).clamp(FLOOR, 1.0)  # (S,)
    return beta * float(total.log().sum())


def repeated_ngrams(tokens: list[str], n: int = 2) -> int:
    """How many of an output's n-grams already occurred earlier in it."""
    seen, repeats = set(), 0
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i : i + n])
        repeats += gram in seen
        seen.add(gram)
    return repeats


def coverage_report(
    outputs: list[tuple[Tensor, list[str], list[str]]], low: float = 0.5, high: float = 1.5
) -> dict:
    """Signs of under- and over-translation over many outputs, each (alpha (T, S), source tokens,
    output tokens). A source token (the closing </s> left out) is under-covered when its total
    weight sum_t alpha_{t,i} is below `low`, over-covered above `high`.

    Returns the share of source tokens under- and over-covered (None without attention), and
    of output bigrams repeated.
    """
    tokens = under = over = grams = repeats = 0
    for alpha, src, out in outputs:
        grams += max(len(out) - 1, 0)
        repeats += repeated_ngrams(out, 2)
        if alpha is None:  # no attention: only the repeats can be counted
            continue
        keep = [i for i, piece in enumerate(src) if piece != "</s>"]
        total = alpha.float().sum(0)[keep]  # (S',); an empty output's (0, S) sums to zeros
        tokens += len(keep)
        under += int((total < low).sum())
        over += int((total > high).sum())
    share = lambda part, whole: part / whole if whole else None  # noqa: E731
    return {
        "under_covered": share(under, tokens),
        "over_covered": share(over, tokens),
        "repeated_bigrams": share(repeats, grams),
        "source_tokens": tokens,
        "output_bigrams": grams,
    }


def format_report(c: dict) -> str:
    """coverage_report as one line: signs of under- and over-translation."""
    repeats = f"{100 * (c['repeated_bigrams'] or 0):.1f}% of output bigrams repeated"
    if c["under_covered"] is None:
        return f"coverage: no attention; {repeats}"
    return (
        f"coverage: {100 * c['under_covered']:.1f}% of source tokens under-covered (total attention "
        f"< 0.5), {100 * c['over_covered']:.1f}% over-covered (> 1.5); {repeats}"
    )
