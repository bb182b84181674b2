"""Greedy and beam search that stay on the device: for GPUs, where every copy to the host waits
for the device to finish its queue.

search.py decides on the host, at every step, which sentences are done, and drops them from the
batch: on a CPU that saves their work and costs nothing, since the host is the device. On a GPU
each such decision is a sync, and one per step leaves the GPU idle between steps while the host
catches up. Here every tensor keeps its shape for the whole search, B sentences x K rows:

- a sentence that is done stays in the batch (its rows are computed and ignored: `done`);
- its finished hypotheses are kept on the device, the K best per sentence, in tensors (`Finished`)
  merged with each step's new ones by one topk;
- the host looks at the device once every `check_every` steps (have all sentences finished?),
  and once at the end, to bring back the hypotheses.

Same rules as search.py: the same candidates, the same stop rule (no live hypothesis can beat
the nbest-th finished one), the same scores (GNMT's length and coverage penalties); on the CPU
both give the same outputs (tests/decoding/test_on_device.py, which also counts the host
transfers per step). `at_least_greedy` runs greedy search first (on the device too) and lets its
output compete with the beam's at the end.

Legend: B sentences, K beam, R = B*K rows, T longest output, S source length, n = 2K.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ..data.tokenizer import BOS, EOS
from ..model.coverage import FLOOR
from ..model.decoder import SOFT, Look
from ..model.seq2seq import Seq2Seq
from .search import Hypothesis, decode_step, end_at_limit, max_lengths, on_model


def longest(src: Tensor, max_ratio: float) -> int:
    """T, the most output steps any sentence of src (B, S) may take, from its padded length S
    (the longest source): no look at src_len, which lives on the device."""
    return math.ceil(src.size(1) * max_ratio) + 5


def rank(logprob: Tensor, length: int | Tensor, cover: Tensor | None, power: float, beta: float) -> Tensor:
    """search.rank_score of many outputs at once: log P / lp(length + 1) + cp, with each output's
    coverage (..., S), padding columns already at 1 (log 1 = 0); an empty output has no cp."""
    score = logprob / ((5 + length + 1) / 6) ** power
    if beta and cover is not None:
        cp = beta * cover.clamp(FLOOR, 1.0).log().sum(-1)
        if isinstance(length, Tensor):
            score = score + cp * (length > 0)
        elif length > 0:
            score = score + cp
    return score


class Finished(NamedTuple):
    """The K best finished hypotheses of each sentence, on the device; -inf scores: empty slots."""

    score: Tensor  # (B, K) rank scores
    logprob: Tensor  # (B, K)
    length: Tensor  # (B, K) tokens, without </s>
    tokens: Tensor  # (B, K, T) the tokens, 0 after the end
    alpha: Tensor | None  # (B, K, T, S) their attention weights

    @classmethod
    def empty(cls, B: int, K: int, T: int, S: int | None, device: torch.device) -> Finished:
        alpha = None if S is None else torch.zeros(B, K, T, S, device=device)
        return cls(
            score=torch.full((B, K), float("-inf"), device=device),
            logprob=torch.zeros(B, K, device=device),
            length=torch.zeros(B, K, dtype=torch.long, device=device),
            tokens=torch.zeros(B, K, T, dtype=torch.long, device=device),
            alpha=alpha,
        )

    def merge(self, new: Finished) -> Finished:
        """The K best of these and `new` (B, N) per sentence; on a tie the earlier stays first."""
        joined = [torch.cat([a, b], 1) if a is not None else None for a, b in zip(self, new, strict=True)]
        K = self.score.size(1)
        _, pick = _stable_top(joined[0], K)  # (B, K)
        return Finished(*(None if x is None else _take(x, pick) for x in joined))

    def unless_among(self, others: Finished) -> Finished:
        """These (B, 1), but empty where the sentence's `others` hold the same output already."""
        steps = torch.arange(self.tokens.size(2), device=self.tokens.device)
        same_tokens = (others.tokens == self.tokens) | (steps >= self.length.unsqueeze(-1))  # (B, K, T)
        same = (others.length == self.length) & same_tokens.all(-1) & torch.isfinite(others.score)  # (B, K)
        return self._replace(score=self.score.masked_fill(same.any(1, keepdim=True), float("-inf")))

    def to_host(self, src_len: list[int], nbest: int) -> list[list[Hypothesis]]:
        """The nbest best of each sentence, as search.py gives them: each tensor copied to the
        host once."""
        score, logprob, length, tokens = (x.tolist() for x in self[:4])
        alpha = None if self.alpha is None else self.alpha.cpu()
        out = []
        for b, S in enumerate(src_len):
            hyps = []
            for k in range(min(nbest, len(score[b]))):
                if score[b][k] == float("-inf"):
                    break
                n = length[b][k]
                a = None if alpha is None else alpha[b, k, :n, :S]  # (n, S)
                hyps.append(Hypothesis(tokens[b][k][:n], score[b][k], logprob[b][k], a))
            out.append(hyps)
        return out


def _stable_top(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """topk of each row of x (B, N) that, on ties, keeps the earlier column first (as search.py's
    heaps rank the first found first)."""
    order = torch.sort(x, dim=1, descending=True, stable=True)
    return order.values[:, :k], order.indices[:, :k]


def _take(x: Tensor, pick: Tensor) -> Tensor:
    """x (B, N, ...) at columns pick (B, k): (B, k, ...)."""
    idx = pick.view(*pick.shape, *([1] * (x.dim() - 2))).expand(-1, -1, *x.shape[2:])
    return x.gather(1, idx)


@torch.no_grad()
def greedy_on_device(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    max_ratio: float = 2.0,
    look: Look = SOFT,
    check_every: int = 8,
) -> list[Hypothesis]:
    """search.greedy with every decision on the device: the most probable token at every step
    until </s>; the host looks once every `check_every` steps, and at the end."""
    src, src_len = on_model(model, src, src_len)
    found = _greedy(model, src, src_len, max_ratio, look, None, 0.0, check_every)
    return [hyps[0] for hyps in found.to_host(src_len.tolist(), 1)]


def _greedy(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    max_ratio: float,
    look: Look,
    power: float | None,
    beta: float,
    check_every: int,
) -> Finished:
    """Greedy search's output of each sentence as one finished hypothesis (B, 1), scored by its
    log-probability (power None) or as beam search ranks (`rank`)."""
    B, device, T = src.size(0), src.device, longest(src, max_ratio)
    enc = model.encode(src, src_len)
    limit = max_lengths(src_len, max_ratio)  # (B,)
    attends = model.decoder.attends
    state = model.decoder.init_state(enc)
    tokens = torch.full((B, T + 1), BOS, dtype=torch.long, device=device)
    alpha = torch.zeros(B, T, src.size(1), device=device) if attends else None
    logprob = torch.zeros(B, device=device)
    length = torch.zeros(B, dtype=torch.long, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    for t in range(T):
        out, *top = decode_step(model.decoder, tokens[:, t : t + 1], enc, state, 1, look)
        logp, y = end_at_limit(*top, t + 1 >= limit)  # (B, 1) the best token, its log P
        logprob = logprob + logp[:, 0].masked_fill(~alive, 0.0)
        tokens[:, t + 1] = y[:, 0]
        if attends:
            alpha[:, t] = out.alpha[:, -1].float()
        ends = alive & (y[:, 0] == EOS)
        length = torch.where(ends, t, length)  # tokens without </s>
        alive = alive & ~ends
        state = out.state
        if (t + 1) % check_every == 0 and not bool(alive.any()):  # the host looks, now and then
            break
    steps = torch.arange(T, device=device)
    if attends:
        alpha = alpha.masked_fill(
            (steps >= length.unsqueeze(1)).unsqueeze(-1), 0.0
        )  # (B, T, S) its own steps
    if power is None:
        score = logprob
    else:
        pad = torch.arange(src.size(1), device=device) >= src_len.unsqueeze(1)  # (B, S) padding columns
        cover = alpha.sum(1) + pad.float() if attends else None
        score = rank(logprob, length, cover, power, beta)
    return Finished(
        score=score.unsqueeze(1),
        logprob=logprob.unsqueeze(1),
        length=length.unsqueeze(1),
        tokens=tokens[:, 1:].unsqueeze(1),
        alpha=None if alpha is None else alpha.unsqueeze(1),
    )


@torch.no_grad()
def beam_search_on_device(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    beam: int = 5,
    nbest: int = 1,
    length_penalty: float = 1.0,
    max_ratio: float = 2.0,
    coverage_penalty: float = 0.0,
    at_least_greedy: bool = False,
    look: Look = SOFT,
    check_every: int = 8,
) -> list[list[Hypothesis]]:
    """search.beam_search with every decision on the device (this module's docstring): the same
    candidates, stop rule and scores. The host looks once every `check_every` steps, and at the end."""
    src, src_len = on_model(model, src, src_len)
    B, K, device = src.size(0), beam, src.device
    T, n = longest(src, max_ratio), min(2 * K, model.decoder.out.out_features)
    enc = model.encode(src, src_len)
    limit = max_lengths(src_len, max_ratio)  # (B,) longest output of each, </s> included
    attends = model.decoder.attends
    S = src.size(1) if attends else None
    pad = torch.arange(src.size(1), device=device) >= src_len.unsqueeze(1)  # (B, S) padding columns
    state = model.decoder.init_state(enc).index_select(torch.arange(B, device=device).repeat_interleave(K))
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis, <s>, per sentence at the start
    tokens = torch.full((B * K, T + 1), BOS, dtype=torch.long, device=device)  # (R, T + 1) <s> and the tokens
    alpha = torch.zeros(B * K, T, S, device=device) if attends else None  # (R, T, S)
    cover = pad.float().repeat_interleave(K, 0) if attends else None  # (R, S) sum of alpha; padding: 1
    finished = Finished.empty(B, K, T, S, device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    may_end = torch.arange(2 * K, device=device) < K  # (2K,) the candidates within the top K
    first_row = torch.arange(B, device=device).unsqueeze(1) * K  # (B, 1)
    for t in range(T):
        out, *top = decode_step(model.decoder, tokens[:, t : t + 1], enc, state, n, look)
        at_limit = t + 1 >= limit  # (B,)
        logp, ys = end_at_limit(*top, at_limit.repeat_interleave(K))  # (R, n)
        total = (scores.unsqueeze(-1) + logp.view(B, K, n)).view(B, K * n)
        cand_scores, idx = total.topk(2 * K, dim=-1)  # (B, 2K) every row's n best, so 2K <= K n
        cand_tokens = ys.view(B, K * n).gather(1, idx)  # (B, 2K)
        cand_rows = (first_row + idx // n).view(-1)  # (B*2K,) the rows they extend
        if attends:
            alpha[:, t] = out.alpha[:, -1].float()

        # 1) candidates ending with </s> within the top K, of sentences not done, join the finished
        ends = (cand_tokens == EOS) & torch.isfinite(cand_scores) & may_end & ~done.unsqueeze(1)  # (B, 2K)
        c_cover = cover[cand_rows].view(B, 2 * K, -1) if attends else None  # without this step's
        ranked = rank(cand_scores, t, c_cover, length_penalty, coverage_penalty)
        new = Finished(
            score=ranked.masked_fill(~ends, float("-inf")),
            logprob=cand_scores,
            length=torch.full_like(cand_tokens, t),
            tokens=tokens[cand_rows, 1:].view(B, 2 * K, T),
            alpha=alpha[cand_rows].view(B, 2 * K, T, -1) if attends else None,
        )
        finished = finished.merge(new)

        # 2) the K best candidates that do not end go on (-inf: an empty slot)
        going_on = cand_scores.masked_fill(cand_tokens == EOS, float("-inf"))
        scores, pick = going_on.topk(K, dim=-1)  # (B, K)
        rows = cand_rows.view(B, 2 * K).gather(1, pick).view(-1)  # (R,)
        tokens = tokens[rows]
        tokens[:, t + 1] = cand_tokens.gather(1, pick).view(-1)
        state = out.state.index_select(rows)
        if attends:
            alpha, cover = alpha[rows], cover[rows] + alpha[rows, t]

        # 3) a sentence is done when no live hypothesis can beat its nbest-th finished one
        bound = scores[:, 0] / ((5 + limit) / 6) ** length_penalty  # (B,)
        done = done | at_limit | (finished.score[:, min(nbest, K) - 1] >= bound)
        if (t + 1) % check_every == 0 and bool(done.all()):  # the host looks, now and then
            break
    if at_least_greedy:
        greedy = _greedy(model, src, src_len, max_ratio, look, length_penalty, coverage_penalty, check_every)
        finished = finished.merge(greedy.unless_among(finished))
    return finished.to_host(src_len.tolist(), nbest)
