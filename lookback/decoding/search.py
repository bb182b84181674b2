"""Decoding word by word: greedy and batched beam search.

Both drive the model's own decoder step over one value, `Beam`, the live
hypotheses, and return for every output its tokens, its score and its
attention matrix (one row per output token, one column per source token).
Beam search with beam 1 is greedy search exactly.

Legend: B batch, K beam, S source length, V target vocabulary.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..data.tokenizer import BOS, EOS
from ..model.coverage import coverage_penalty
from ..model.decoder import SOFT, DecoderOutput, DecoderState, Look
from ..model.encoder import EncoderOutput
from ..model.seq2seq import Seq2Seq


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without </s>
    score: float  # log-probability (with </s>), over the length penalty in beam search
    logprob: float  # log-probability of tokens + </s>
    alpha: Tensor | None  # (len(tokens), source length) attention weights; None without attention


def rank_score(logprob: float, length: int, alpha: Tensor | None, power: float, beta: float) -> float:
    """GNMT's s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y) (Wu et al. 2016, eq. 14) of an output of
    `length` tokens plus </s>, whose tokens' attention weights are alpha (length, S)."""
    cp = coverage_penalty(alpha, beta) if alpha is not None else 0.0
    return logprob / lp(length + 1, power) + cp


def max_lengths(src_len: Tensor, max_ratio: float) -> Tensor:
    """Longest output allowed per sentence, </s> included: ratio x source length + 5."""
    return (src_len.float() * max_ratio).ceil().long() + 5


def lp(length: int, power: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** power, the power often written alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + length) / 6) ** power


def top_tokens(logits: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The n most probable next tokens of each row of logits (R, V): their log P(y_t) (R, n),
    the tokens (R, n), and log P(</s>) (R, 1). The ONNX decoder graph computes this same
    function inside the graph (runtime.py), so that its (R, V) logits never leave it.

    Two choices for speed on the CPU, where this runs at every step over (R, V) numbers:
    log_softmax rather than logsumexp (PyTorch 2.13's CPU logsumexp is about 2x slower than
    its log_softmax), and `top_k`'s blocks rather than one topk (bench/kernels.py).
    """
    logits = logits if logits.dtype == torch.float32 else logits.float()  # (no copy in a graph)
    logp = torch.log_softmax(logits, dim=-1)  # (R, V)
    top, tokens = top_k(logp, n)  # (R, n)
    return top, tokens, logp[:, EOS : EOS + 1]


BLOCK = 64  # top_k's block size: the fastest of 16-256 for V = 8,000 (bench/kernels.py)


def top_k(x: Tensor, n: int | Tensor) -> tuple[Tensor, Tensor]:
    """x.topk(n) of each row of x (R, V), in two smaller steps: the n best values of a row lie
    in the n blocks of BLOCK columns with the largest maxima (a block holding one of them
    has a maximum at least as large as it), so topk runs on n blocks' columns, not all V.
    Exact: the same values and, but for ties, the same columns. Where n blocks would cover
    the row, and on a GPU (whose topk is fast), it is x.topk(n) itself. In the ONNX graph n
    is a tensor (an input of the graph), and more than all blocks means all of them."""
    R, V = x.shape
    m = V // BLOCK * BLOCK  # the columns in whole blocks; the rest (< BLOCK) always join
    traced = isinstance(n, Tensor)
    if m == 0 or x.device.type != "cpu" or (not traced and n * BLOCK >= m):
        return x.topk(n, dim=-1)
    blocks = (x if m == V else x[:, :m]).view(R, m // BLOCK, BLOCK)  # (no copy of x in a graph)
    k = n.clamp(max=m // BLOCK) if traced else n  # blocks to look in
    _, best = blocks.amax(-1).topk(k, dim=-1, sorted=False)  # (R, k) the blocks to look in
    cols = (best.unsqueeze(-1) * BLOCK + torch.arange(BLOCK, device=x.device)).view(R, -1)  # (R, k*BLOCK)
    if m < V:
        cols = torch.cat([cols, torch.arange(m, V, device=x.device).expand(R, -1)], 1)
    top, j = x.gather(1, cols).topk(n, dim=-1)  # (R, n)
    return top, cols.gather(1, j)


def decode_step(
    decoder: nn.Module, y_prev: Tensor, enc: EncoderOutput, state: DecoderState, n: int, look: Look = SOFT
) -> tuple[DecoderOutput, Tensor, Tensor, Tensor]:
    """One decoder step on y_prev (R, 1), looking as `look` says, and `top_tokens` of its logits:
    (out, log P (R, n), tokens (R, n), log P(</s>) (R, 1)). A decoder with a `forward_top` of its
    own (ONNX Runtime's) picks the tokens itself, and attends only as trained."""
    own = getattr(decoder, "forward_top", None)
    if own is not None:
        if look != SOFT:
            raise ValueError(
                "hard attention and interventions are not in the ONNX graph; use --backend torch"
            )
        return own(y_prev, enc, state, n)
    out = decoder(y_prev, enc, state, look=look)
    return (out, *top_tokens(out.logits[:, -1], n))


def only_eos_at_limit(logp: Tensor, tokens: Tensor, eos: Tensor, at_limit: Tensor) -> tuple[Tensor, Tensor]:
    """Rows at their length limit (R,) may only end: </s>, at its own log P `eos` (R, 1), as
    when a hypothesis ends by itself (fairseq does the same), so that an output cut at the
    limit does not get its end for free. logp, tokens (R, n) as `top_tokens` gives them."""
    if not at_limit.any():  # on the host: most steps have no row at its limit
        return logp, tokens
    return end_at_limit(logp, tokens, eos, at_limit)


def end_at_limit(logp: Tensor, tokens: Tensor, eos: Tensor, at_limit: Tensor) -> tuple[Tensor, Tensor]:
    """only_eos_at_limit without a look at the device: what the search on the device (on_device.py)
    runs at every step."""
    rows = at_limit.unsqueeze(-1)  # (R, 1)
    only_eos = torch.full_like(logp, float("-inf"))
    only_eos[:, :1] = eos
    return torch.where(rows, only_eos, logp), tokens.masked_fill(rows, EOS)


def search_bytes(sentences: int, beam: int, vocab: int, src_len: int, out_len: int, state_size: int) -> int:
    """About how many bytes one step of beam search holds for `sentences` sentences: per row (a
    sentence's `beam` hypotheses, and twice as many candidates), the logits and their
    log-softmax over the vocabulary, the attention weights of every step so far, and the
    decoder's states and their copies; float32, twice over for what the step frees late."""
    rows = sentences * beam
    per_row = 2 * vocab + out_len * src_len + 8 * state_size + 2 * out_len
    return 2 * 4 * rows * per_row


def check_search(
    beam: int, nbest: int, vocab: int, sentences: int, src_len: int, out_len: int, state_size: int, free: int
) -> None:
    """A one-line ValueError when a search cannot run: a beam or an n-best list wider than the
    target vocabulary, or one step that would need more memory than is `free`."""
    if beam > vocab:
        raise ValueError(
            f"beam {beam} is wider than the target vocabulary ({vocab} pieces): use at most {vocab}"
        )
    if nbest > beam:
        raise ValueError(f"nbest {nbest} is more than the beam {beam} holds")
    need = search_bytes(sentences, beam, vocab, src_len, out_len, state_size)
    if need <= free:
        return
    fits = beam * free // need  # the need grows with the beam
    what = f"use a beam of at most {fits}" if fits else "even one hypothesis per sentence does not fit"
    raise ValueError(
        f"beam {beam} on {sentences} sentence(s) of up to {src_len} tokens, outputs of up to {out_len}, "
        f"needs about {need / 2**30:.1f} GiB, more than the {free / 2**30:.1f} GiB free: {what}; fewer "
        "sentences at once (decode.batch_size) or a lower max_ratio need less"
    )


class Beam(NamedTuple):
    """The live hypotheses of the sentences still searched: A sentences, k rows each.

    Two index spaces: the source is kept once per sentence (A), everything
    else once per row (A*k, the k rows of a sentence together); `select`
    moves both at once.
    """

    sent: Tensor  # (A,) which sentence of the batch
    limit: Tensor  # (A,) longest output allowed, </s> included
    enc: EncoderOutput  # (A, ...) the source
    scores: Tensor  # (A, k) log-probabilities of the live hypotheses
    tokens: Tensor  # (A*k, 1 + t) <s> and the t tokens so far
    alpha: Tensor | None  # (A*k, t, S) their attention weights; None without attention
    state: DecoderState  # (A*k, ...) after the last token
    look: Look = SOFT  # (A, ...) how attention looks: soft, hard, or a counterfactual

    @classmethod
    def start(cls, model: Seq2Seq, src: Tensor, src_len: Tensor, max_ratio: float, look: Look = SOFT) -> Beam:
        """One live hypothesis, <s>, per sentence of src (B, S), attending as `look` says."""
        B, device = src.size(0), src.device
        enc = model.encode(src, src_len)
        return cls(
            sent=torch.arange(B, device=device),
            limit=max_lengths(src_len, max_ratio),
            enc=enc,
            scores=torch.zeros(B, 1, device=device),
            tokens=torch.full((B, 1), BOS, dtype=torch.long, device=device),
            alpha=None if not model.decoder.attends else torch.zeros(B, 0, src.size(1), device=device),
            state=model.decoder.init_state(enc),
            look=look,
        )

    def finish(
        self, rows: Tensor, logprobs: Tensor, src_len: Tensor, power: float | None, beta: float = 0.0
    ) -> list[Hypothesis]:
        """Rows `rows` (E,) ended with </s>, at log-probabilities `logprobs` (E,): their
        hypotheses, scored over lp(length) ** power plus the coverage penalty cp with weight
        beta (power None: the plain log-probability, as greedy reports it). All E come to the
        host together: on a GPU every copy to the host waits for the device."""
        if rows.numel() == 0:
            return []
        t = self.tokens.size(1) - 1  # tokens so far, without <s> (</s> is not among them)
        seqs = self.tokens[rows, 1:].tolist()  # E lists of t tokens
        S = src_len[self.sent[rows // self.scores.size(1)]].tolist()  # (E,) source lengths
        alpha = None if self.alpha is None else self.alpha[rows, :t].cpu()  # (E, t, S_max)
        hyps = []
        for e, (seq, logprob) in enumerate(zip(seqs, logprobs.tolist(), strict=True)):
            a = None if alpha is None else alpha[e, :, : S[e]]  # (t, S)
            score = logprob if power is None else rank_score(logprob, t, a, power, beta)
            hyps.append(Hypothesis(seq, score, logprob, a))
        return hyps

    def select(self, keep: Tensor | None, rows: Tensor, y: Tensor, scores: Tensor) -> Beam:
        """The next step's beam: sentences `keep` (A',) (None: all), each continuing its
        rows `rows` (A, K) by the tokens y (A, K), with log-probabilities `scores` (A, K)."""
        if keep is not None:
            rows, y, scores = rows[keep], y[keep], scores[keep]  # (A', K)
            self = self._replace(
                sent=self.sent[keep],
                limit=self.limit[keep],
                enc=self.enc.index_select(keep),
                look=self.look.index_select(keep),
            )
        rows = rows.view(-1)  # (A'*K,)
        return self._replace(
            scores=scores,
            tokens=torch.cat([self.tokens.index_select(0, rows), y.view(-1, 1)], 1),
            alpha=None if self.alpha is None else self.alpha.index_select(0, rows),
            state=self.state.index_select(rows),
        )


def on_model(model: Seq2Seq, src: Tensor, src_len: Tensor) -> tuple[Tensor, Tensor]:
    """src (B, S) and src_len (B,) on the model's device (a batch made on the CPU, a model on a
    GPU); a model without torch parameters (ONNX Runtime's) takes them where they are."""
    weight = next(model.parameters(), None)
    device = src.device if weight is None else weight.device
    return src.to(device), src_len.to(device)


@torch.no_grad()
def greedy(
    model: Seq2Seq, src: Tensor, src_len: Tensor, max_ratio: float = 2.0, look: Look = SOFT
) -> list[Hypothesis]:
    """Pick the most probable token at every step until </s>, for a batch src (B, S), attending
    as `look` says (soft by default; hard, or a counterfactual).

    A sentence that has ended leaves the batch: the decoder only works on
    the sentences still being translated.
    """
    src, src_len = on_model(model, src, src_len)
    live = Beam.start(model, src, src_len, max_ratio, look)  # one row per sentence still going
    hyps: list[Hypothesis | None] = [None] * src.size(0)
    for t in range(int(live.limit.max())):
        out, *top = decode_step(model.decoder, live.tokens[:, -1:], live.enc, live.state, 1, live.look)
        logp, y = only_eos_at_limit(*top, t + 1 >= live.limit)  # (A, 1) the best token, its log P
        scores = live.scores + logp
        live = live._replace(state=out.state, alpha=_extend(live.alpha, out.alpha))
        ended = y[:, 0] == EOS
        ends = ended.nonzero()[:, 0]  # (E,) the rows that end here
        ended_hyps = live.finish(ends, scores[ends, 0], src_len, None)
        for b, hyp in zip(live.sent[ends].tolist(), ended_hyps, strict=True):
            hyps[b] = hyp
        if len(ends) == len(y):
            break
        keep = (~ended).nonzero().squeeze(1) if len(ends) else None  # (A',)
        live = live.select(keep, torch.arange(len(y), device=y.device).unsqueeze(1), y, scores)
    return hyps


def _extend(alpha: Tensor | None, step: Tensor | None) -> Tensor | None:
    """The attention weights so far (R, t, S) and this step's (R, 1, S), in float32."""
    return None if alpha is None else torch.cat([alpha, step[:, -1:].float()], 1)


def beam_step(scores: Tensor, logp: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The pure step of beam search: extend every hypothesis by every token, keep the n best.

    Args:
        scores: (B, K) log-probabilities of the live hypotheses (-inf for empty slots).
        logp: (B, K, V) log-probabilities of each next token (or of each beam's V best).
        n: candidates kept per sentence, usually 2K (in case half of them end with </s>).

    Returns:
        (B, n) candidate scores, the beam each extends, and the token it adds.
    """
    B, K, V = logp.shape
    total = (scores.unsqueeze(-1) + logp).view(B, K * V)
    top, idx = total.topk(min(n, K * V), dim=-1)
    return top, idx // V, idx % V


class GreedyPath:
    """Greedy search's path, followed inside the beam (beam_search's `at_least_greedy`): row `row`
    of each sentence, continued by its best token. Its end joins the finished hypotheses wherever
    it ranks; a sentence whose beam drops the path runs greedy search after the beam, for its
    finished ones. A sentence that stops while the path is live needs nothing: the stop rule
    bounds the path too."""

    def __init__(self, sentences: int, follow: bool, device: torch.device):
        self.row = torch.full((sentences,), 0 if follow else -1, device=device)  # (A,); -1: none
        self.dropped: list[Tensor] = []  # sentences whose beam dropped the path, a step's each

    def next(self, cand_beams: Tensor, cand_j: Tensor) -> Tensor:
        """(A, 2K) the candidate that continues the path by its row's best token (j = 0): one
        True per sentence, or none where that token is not among the candidates."""
        return (cand_beams == self.row.unsqueeze(1)) & (cand_j == 0)

    def follow(self, sent: Tensor, nxt: Tensor, ends: Tensor, pick: Tensor, scores: Tensor) -> None:
        """The path's row in the next beam, whose live hypotheses are the candidates `pick` (A, K)
        with `scores`; the path is dropped where it neither ended (`ends`) nor goes on."""
        kept_on = nxt.gather(1, pick) & torch.isfinite(scores)  # (A, K)
        self.dropped.append(sent[(self.row >= 0) & ~(nxt & ends).any(1) & ~kept_on.any(1)])  # (no copy yet)
        self.row = torch.where(kept_on.any(1), kept_on.float().argmax(1), -1)

    def select(self, keep: Tensor | None) -> None:
        """The sentences `keep` go on (None: all)."""
        self.row = self.row if keep is None else self.row[keep]

    def add_dropped(
        self, model: Seq2Seq, src: Tensor, src_len: Tensor, max_ratio: float, look: Look, rank, finished: list
    ) -> None:
        """Greedy's own outputs for the sentences whose beam dropped its path, ranked by `rank`
        (logprob, length, alpha -> score), into their `finished` heaps."""
        idx = torch.cat(self.dropped) if self.dropped else src.new_zeros(0)  # (D,)
        if idx.numel() == 0:
            return
        for b, h in zip(
            idx.tolist(),
            greedy(model, src[idx], src_len[idx], max_ratio, look.index_select(idx)),
            strict=True,
        ):
            score = rank(h.logprob, len(h.tokens), h.alpha)
            heapq.heappush(finished[b], (score, 1, Hypothesis(h.tokens, score, h.logprob, h.alpha)))


@torch.no_grad()
def beam_search(
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
) -> list[list[Hypothesis]]:
    """Keep the `beam` best partial outputs of each sentence at every step; return its `nbest`
    best finished ones, scored by log-probability over lp(length) ** `length_penalty`, plus
    GNMT's coverage penalty with weight `coverage_penalty` (coverage.py; 0: none); attention
    looks as `look` says.

    `at_least_greedy` (the Translator's choice): never return less than greedy search under
    the search's own objective, which a beam can, by pruning the path greedy takes: the beam
    follows greedy's path as it goes (`GreedyPath`).

    A sentence is done when no live hypothesis can beat its nbest-th finished one: with
    log-probability L, none can score above L / lp(limit), as log-probabilities only fall,
    lp grows and cp is never above 0 (docs/search.md: the rule beside Joey NMT's,
    OpenNMT-py's and Hugging Face's). A done sentence leaves the batch; the K rows of a
    sentence share one copy of its source, and the first step runs one row per sentence (all
    start from <s>).
    """
    src, src_len = on_model(model, src, src_len)
    B, K, device, order = src.size(0), beam, src.device, itertools.count()
    live = Beam.start(model, src, src_len, max_ratio, look)  # k = 1 live hypothesis, <s>, at the start
    finished: list[list[tuple[float, int, Hypothesis]]] = [[] for _ in range(B)]  # heaps, worst first
    path = GreedyPath(B, at_least_greedy, device)
    n = min(2 * K, model.decoder.out.out_features)  # a row's best tokens (V may be under 2K)
    for t in range(int(live.limit.max())):
        A, k = live.scores.shape
        # only a row's 2K best tokens can be among the sentence's 2K best candidates
        out, *top = decode_step(model.decoder, live.tokens[:, -1:], live.enc, live.state, n, live.look)
        logp, tokens = only_eos_at_limit(*top, (t + 1 >= live.limit).repeat_interleave(k))  # (A*k, n)
        cand_scores, cand_beams, cand_j = beam_step(live.scores, logp.view(A, k, n), 2 * K)  # (A, <= 2K)
        cand_tokens = tokens.view(A, k * n).gather(1, cand_beams * n + cand_j)
        cand_rows = torch.arange(A, device=device).unsqueeze(1) * k + cand_beams  # rows they extend
        live = live._replace(state=out.state, alpha=_extend(live.alpha, out.alpha))
        greedy_next = path.next(cand_beams, cand_j)  # (A, 2K)

        # 1) candidates ending with </s> within the top K become finished hypotheses (and
        # greedy's end, wherever it ranks)
        ends = (cand_tokens == EOS) & torch.isfinite(cand_scores)  # (A, 2K)
        ends &= (torch.arange(ends.size(1), device=device) < K) | greedy_next
        a, j = ends.nonzero().unbind(1)  # (E,) each, in the order of the candidates
        hyps = live.finish(cand_rows[a, j], cand_scores[a, j], src_len, length_penalty, coverage_penalty)
        for b, hyp in zip(live.sent[a].tolist(), hyps, strict=True):
            heap = finished[b]
            heapq.heappush(heap, (hyp.score, -next(order), hyp))  # ties: the first found ranks first
            if len(heap) > K:
                heapq.heappop(heap)  # the worst of K + 1

        # 2) the K best candidates that do not end become the live hypotheses
        going_on = cand_scores.masked_fill(cand_tokens == EOS, float("-inf"))
        scores, pick = going_on.topk(min(K, going_on.size(1)), dim=-1)  # (A, K); -inf: an empty slot
        rows, y = cand_rows.gather(1, pick), cand_tokens.gather(1, pick)  # (A, K)
        path.follow(live.sent, greedy_next, ends, pick, scores)

        # 3) sentences that are done leave the batch: no live hypothesis can beat the finished
        bound = scores[:, 0] / ((5 + live.limit) / 6) ** length_penalty  # (A,) lp(limit) of the best live
        need, heaps = min(nbest, K), [finished[b] for b in live.sent.tolist()]
        kept = [heapq.nlargest(need, h)[-1][0] if len(h) >= need else None for h in heaps]  # nbest-th best
        at_limit = (t + 1 >= live.limit).tolist()
        done = [
            stop or (k is not None and k >= x)
            for k, x, stop in zip(kept, bound.tolist(), at_limit, strict=True)
        ]  # decided on the host, with no copy back to the device until the sentences that go on
        if all(done):
            break
        going = [i for i, d in enumerate(done) if not d]
        keep = torch.tensor(going, device=device) if len(going) < len(done) else None  # (A',)
        live = live.select(keep, rows, y, scores)
        path.select(keep)
    rank = lambda logprob, length, alpha: rank_score(logprob, length, alpha, length_penalty, coverage_penalty)  # noqa: E731
    path.add_dropped(model, src, src_len, max_ratio, look, rank, finished)
    return [[h for _, _, h in heapq.nlargest(nbest, f)] for f in finished]
