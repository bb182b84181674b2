"""Decoding word by word: greedy and batched beam search.

Both drive the model's own decoder step and return, for every output, its
tokens, its score and its attention matrix (one row per output token, one
column per source token). Beam search with beam 1 is greedy search exactly.

Legend: B batch, K beam, S source length, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .model import Seq2Seq
from .tokenizer import BOS, EOS, PAD


@dataclass
class Hypothesis:
    tokens: list[int]  # output ids, without </s>
    score: float  # log-probability (with </s>) divided by the length penalty
    logprob: float  # log-probability of tokens + </s>
    attention: Tensor | None  # (len(tokens), source length) weights; None without attention


def max_lengths(src_len: Tensor, max_ratio: float) -> Tensor:
    """Longest output allowed per sentence, </s> included: ratio x source length + 5."""
    return (src_len.float() * max_ratio).ceil().long() + 5


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al. 2016, eq. 14)."""
    return ((5 + length) / 6) ** alpha


def _log_probs(logits: Tensor, at_limit: Tensor) -> Tensor:
    """log P(y_t) of the last step (N, V); rows at their length limit may only end."""
    logp = torch.log_softmax(logits[:, -1].float(), dim=-1)
    if at_limit.any():
        only_eos = torch.full_like(logp[0], float("-inf"))
        only_eos[EOS] = 0.0
        logp = torch.where(at_limit.unsqueeze(-1), only_eos, logp)
    return logp


def _attention_rows(alphas: list[Tensor], n_tokens: int, src_len: int) -> Tensor | None:
    if not alphas:
        return None
    if n_tokens == 0:
        return torch.zeros(0, src_len)
    return torch.stack(alphas[:n_tokens]).float()[:, :src_len].cpu()


@torch.no_grad()
def greedy(model: Seq2Seq, src: Tensor, src_len: Tensor, max_ratio: float = 2.0) -> list[Hypothesis]:
    """Pick the most probable token at every step until </s>, for a batch src (B, S)."""
    B = src.size(0)
    enc = model.encode(src, src_len)
    state = model.decoder.init_state(enc)
    limit = max_lengths(src_len, max_ratio)
    y = torch.full((B, 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    logprob = torch.zeros(B, device=src.device)
    tokens, alphas = [], []
    for t in range(int(limit.max())):
        out = model.decoder(y, enc, state)
        state = out.state
        logp = _log_probs(out.logits, t + 1 >= limit)
        best, y_t = logp.max(-1)  # (B,)
        logprob += torch.where(finished, 0.0, best)
        y_t = y_t.masked_fill(finished, PAD)
        tokens.append(y_t)
        if out.alpha is not None:
            alphas.append(out.alpha[:, -1])  # (B, S)
        finished |= y_t == EOS
        if finished.all():
            break
        y = y_t.unsqueeze(1)
    ids = torch.stack(tokens, 1).tolist()  # (B, steps)
    hyps = []
    for b in range(B):
        seq = ids[b][: ids[b].index(EOS)] if EOS in ids[b] else ids[b]
        rows = [a[b] for a in alphas]
        lp = float(logprob[b])
        hyps.append(Hypothesis(seq, lp, lp, _attention_rows(rows, len(seq), int(src_len[b]))))
    return hyps


def beam_step(scores: Tensor, logp: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The pure step of beam search: extend every hypothesis by every token, keep the n best.

    Args:
        scores: (B, K) log-probabilities of the live hypotheses (-inf for empty slots).
        logp: (B, K, V) log-probabilities of each next token.
        n: candidates kept per sentence, usually 2K (in case half of them end with </s>).

    Returns:
        (B, n) candidate scores, the beam each extends, and the token it adds.
    """
    B, K, V = logp.shape
    total = (scores.unsqueeze(-1) + logp).view(B, K * V)
    top, idx = total.topk(min(n, K * V), dim=-1)
    return top, idx // V, idx % V


@torch.no_grad()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    beam: int = 5,
    nbest: int = 1,
    alpha: float = 1.0,
    max_ratio: float = 2.0,
) -> list[list[Hypothesis]]:
    """Keep the `beam` best partial outputs of each sentence at every step.

    A candidate ending in </s> among the top `beam` of a step becomes a
    finished hypothesis, scored by its log-probability over lp(length); a
    sentence is done once it has `beam` finished ones or reaches its length
    limit. Returns the `nbest` best finished hypotheses per sentence.
    """
    B, K, device = src.size(0), beam, src.device
    enc = model.encode(src, src_len)
    state = model.decoder.init_state(enc)
    expand = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,)
    enc, state = enc.index_select(expand), state.index_select(expand)
    limit = max_lengths(src_len, max_ratio)  # (B,)
    scores = torch.full((B, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live hypothesis, <s>, per sentence at the start
    y = torch.full((B * K, 1), BOS, dtype=torch.long, device=device)
    history = torch.zeros((B * K, 0), dtype=torch.long, device=device)  # tokens so far
    attn_history: Tensor | None = None  # (B*K, steps, S)
    finished: list[list[Hypothesis]] = [[] for _ in range(B)]
    done = torch.zeros(B, dtype=torch.bool, device=device)
    offsets = (torch.arange(B, device=device) * K).unsqueeze(1)  # (B, 1)
    for t in range(int(limit.max())):
        out = model.decoder(y, enc, state)
        at_limit = (t + 1 >= limit).repeat_interleave(K)
        logp = _log_probs(out.logits, at_limit).view(B, K, -1)
        cand_scores, cand_beams, cand_tokens = beam_step(scores, logp, 2 * K)  # (B, 2K)
        flat_beams = (offsets + cand_beams).view(-1)  # rows of (B*K) each candidate extends
        if out.alpha is not None:
            step_attn = out.alpha[:, -1:].float()  # (B*K, 1, S)
            attn_history = step_attn if attn_history is None else torch.cat([attn_history, step_attn], 1)

        # 1) candidates ending with </s> within the top K become finished hypotheses
        ends = (cand_tokens == EOS) & torch.isfinite(cand_scores)
        ends[:, K:] = False
        ends &= ~done.unsqueeze(1)
        for b, j in ends.nonzero().tolist():
            row = int(flat_beams[b * cand_beams.size(1) + j])
            seq = history[row].tolist()
            lp = float(cand_scores[b, j])
            attn = None if attn_history is None else attn_history[row, : len(seq), : int(src_len[b])].cpu()
            finished[b].append(Hypothesis(seq, lp / length_penalty(len(seq) + 1, alpha), lp, attn))
        done |= torch.tensor([len(f) >= K for f in finished], device=device) | (t + 1 >= limit)
        if done.all():
            break

        # 2) the K best candidates that do not end become the live hypotheses
        live = cand_scores.masked_fill(cand_tokens == EOS, float("-inf"))
        scores, pick = live.topk(K, dim=-1)  # (B, K)
        rows = (offsets + cand_beams.gather(1, pick)).view(-1)  # (B*K,)
        y = cand_tokens.gather(1, pick).view(-1, 1)
        history = torch.cat([history.index_select(0, rows), y], 1)
        if attn_history is not None:
            attn_history = attn_history.index_select(0, rows)
        state = out.state.index_select(rows)
    return [sorted(f, key=lambda h: -h.score)[:nbest] for f in finished]


def translate_batch(
    model: Seq2Seq,
    src: Tensor,
    src_len: Tensor,
    beam: int = 1,
    nbest: int = 1,
    alpha: float = 1.0,
    max_ratio: float = 2.0,
) -> list[list[Hypothesis]]:
    """Greedy for beam 1 with one hypothesis, beam search otherwise."""
    if beam == 1 and nbest == 1:
        return [[h] for h in greedy(model, src, src_len, max_ratio)]
    return beam_search(model, src, src_len, beam, nbest, alpha, max_ratio)
