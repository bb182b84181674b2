"""Counterfactual attention: does the output depend on the weights alpha that seem to explain it?

Jain & Wallace (2019) asked whether attention is explanation by changing the
weights and watching the output; Wiegreffe & Pinter (2019) replied that such
tests must be run on the model's own decisions. Here every test runs inside
greedy decoding (search.greedy), the counterfactual handed to each decoder
step as a `Look`: at step t, after alpha_t is computed and before
c_t = sum_i alpha_{t,i} h_i is formed, alpha_t becomes

    uniform    1 / S on each of the S real source tokens;
    permute    its own weights, shuffled among the real tokens (seeded);
    drop_max   its weights without the most attended token, renormalised
               (uniform over the others when nothing else had any weight);
    other      another sentence's weights at the same step, stretched to this
               source's length (the donor is the next sentence in order of
               source length, so the lengths are close).

Two measurements:

1. One step at a time (`step_effects`): along the model's own greedy output,
   every step runs twice from the same state, with alpha_t and with its
   counterfactual. How far P(y_t) moves is the Jensen-Shannon divergence in
   bits (0: the same distribution, 1: disjoint); a flip is a step whose most
   probable token, the one greedy chose, changes.
2. Whole outputs (`decode`): the set decoded greedily (search.greedy) with the
   counterfactual at every step, scored with BLEU against the references.

A model without attention has no alpha to replace: it is the control, with
divergence 0 and BLEU unchanged. Multi-head attention is changed head by
head ('other' gives every head the donor's mean weights); local attention
is changed inside its window, and has no 'other' (a donor's window lies
elsewhere).

Legend: B batch, Q queries per sentence, S source length, T output steps, V vocabulary.
"""

from __future__ import annotations

import math

import sacrebleu
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.batch import pad
from ..data.tokenizer import BOS
from ..decoding.evaluate import bleu_and_length, group_by_length
from ..decoding.search import greedy
from ..device import autocast
from ..model.decoder import SOFT, Look
from ..model.seq2seq import Seq2Seq

COUNTERFACTUALS = ("uniform", "permute", "drop_max", "other")


def _real(alpha: Tensor, mask: Tensor) -> Tensor:
    """The mask (B, S) of real tokens, broadcast to alpha's (B, Q, S)."""
    return mask.unsqueeze(1).expand_as(alpha)


def uniform(alpha: Tensor, mask: Tensor) -> Tensor:
    """1 / S on the S real tokens of each row, 0 on padding: (B, Q, S) -> (B, Q, S)."""
    real = _real(alpha, mask).to(alpha.dtype)
    return real / real.sum(-1, keepdim=True)


def permute(alpha: Tensor, mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Each row's weights shuffled among its real tokens; padding keeps 0. (B, Q, S) -> (B, Q, S)."""
    real = _real(alpha, mask)
    keys = torch.rand(alpha.shape, generator=generator).to(alpha.device).masked_fill(~real, 2.0)
    source = keys.argsort(-1)  # (B, Q, S): the real positions in random order, then the padding
    slots = (~real).to(torch.uint8).argsort(dim=-1, stable=True)  # the real positions in order, then padding
    return torch.zeros_like(alpha).scatter(-1, slots, alpha.gather(-1, source))


def drop_max(alpha: Tensor, mask: Tensor) -> Tensor:
    """Each row without its largest weight, renormalised over the rest; uniform over the other
    real tokens when none of them had weight; unchanged when there is no other real token."""
    real = _real(alpha, mask)
    top = alpha.argmax(-1, keepdim=True)  # (B, Q, 1)
    kept = alpha.scatter(-1, top, 0.0)
    rest = real.scatter(-1, top, False)  # the other real tokens
    total = kept.sum(-1, keepdim=True)
    spread = rest.to(alpha.dtype) / rest.sum(-1, keepdim=True).clamp_min(1)
    out = torch.where(total > 0, kept / total.clamp_min(torch.finfo(alpha.dtype).tiny), spread)
    return torch.where(rest.any(-1, keepdim=True), out, alpha)


def stretch(weights: Tensor, length: int) -> Tensor:
    """Weights over S' positions (S',) moved to `length` positions, each to the one at the same
    relative place, round((p + 1/2) length / S' - 1/2); their sum is kept."""
    n = weights.numel()
    where = ((torch.arange(n) + 0.5) * length / n - 0.5).round().long().clamp(0, length - 1)
    return torch.zeros(length).index_add(0, where, weights.float().cpu())


def donor_order(lengths: list[int]) -> list[int]:
    """For each sentence, the one whose weights 'other' lends it: the next in order of source
    length (the longest takes the shortest's), never itself when there are two or more."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    donor = [0] * len(lengths)
    for rank, i in enumerate(order):
        donor[i] = order[(rank + 1) % len(order)]
    return donor


class Counterfactual:
    """The weights that replace alpha_t, of one kind: a `Look.change`. For 'other', `donors`
    (B, T, S) holds each sentence's lent weights per step (the last repeats past its end)."""

    def __init__(
        self, kind: str, donors: Tensor | None = None, seed: int = 0, generator: torch.Generator | None = None
    ):
        if kind not in COUNTERFACTUALS:
            raise ValueError(f"unknown counterfactual {kind!r} (choose from {', '.join(COUNTERFACTUALS)})")
        if kind == "other" and donors is None:
            raise ValueError("the 'other' counterfactual needs the donors' weights")
        self.kind, self.donors = kind, donors
        self.generator = generator or torch.Generator().manual_seed(seed)  # shared by index_select's copies

    def __call__(self, alpha: Tensor, mask: Tensor, step: int) -> Tensor:
        """alpha (B, Q, S) at output step `step`, mask (B, S) -> the weights to use instead."""
        if self.kind == "uniform":
            return uniform(alpha, mask)
        if self.kind == "permute":
            return permute(alpha, mask, self.generator)
        if self.kind == "drop_max":
            return drop_max(alpha, mask)
        lent = self.donors[:, min(step, self.donors.size(1) - 1)]  # (B, S)
        return lent.to(alpha).unsqueeze(1).expand_as(alpha)  # every query (and head) of a sentence

    def index_select(self, idx: Tensor) -> Counterfactual:
        """The same counterfactual for the sentences `idx` (search drops the finished ones)."""
        if self.donors is None:
            return self
        return Counterfactual(self.kind, self.donors[idx.cpu()], generator=self.generator)


@torch.no_grad()
def decode(
    model: Seq2Seq, src: Tensor, src_len: Tensor, change: Counterfactual | None = None, max_ratio: float = 2.0
) -> tuple[list[list[int]], list[Tensor | None]]:
    """Greedy decoding (search.greedy) of src (B, S) with `change` at every step (None: as the
    model decodes). Returns each sentence's output ids (without </s>) and, as the model decodes,
    its weights (T + 1, S) along that output, the </s> step included, teacher-forced (None with
    a change, or without attention)."""
    model.eval()
    look = SOFT if change is None else Look(change=change)
    outputs = [h.tokens for h in greedy(model, src, src_len, max_ratio, look)]
    if change is not None or not model.decoder.attends:
        return outputs, [None] * len(outputs)
    y_in, _ = pad([[BOS, *out] for out in outputs])  # (B, T + 1)
    alpha = model(src, src_len, y_in.to(src.device)).alpha.float()  # (B, T + 1, S)
    return outputs, [alpha[b, : len(o) + 1, : int(src_len[b])].cpu() for b, o in enumerate(outputs)]


def js_divergence(logp: Tensor, logq: Tensor) -> Tensor:
    """Jensen-Shannon divergence in bits between rows of log-probabilities (..., V): 0 for equal
    distributions, 1 for disjoint ones. (..., V) -> (...)."""
    m = torch.logaddexp(logp, logq) - math.log(2)  # log of the mean distribution
    kl = lambda a: (a.exp() * (a - m)).nan_to_num().sum(-1)  # noqa: E731  (0 log 0 = 0)
    return (kl(logp) + kl(logq)) / (2 * math.log(2))


@torch.no_grad()
def step_effects(
    model: Seq2Seq, src: Tensor, src_len: Tensor, outputs: list[list[int]], changes: dict[str, Counterfactual]
) -> dict[str, list[tuple[list[float], list[bool]]]]:
    """Along each sentence's own output (ids without </s>), run every step as decoded and with
    each counterfactual, from the same state. Returns per kind, per sentence, the divergence of
    P(y_t) of every step (</s> step included) and whether its argmax flipped."""
    model.eval()
    y_in, _ = pad([[BOS, *out] for out in outputs])  # (B, T): <s> and the output
    y_in = y_in.to(src.device)
    steps = [len(out) + 1 for out in outputs]
    enc = model.encode(src, src_len)
    state = model.decoder.init_state(enc)
    divergence = {k: [] for k in changes}  # kind -> per step (B,)
    flips = {k: [] for k in changes}
    for t in range(y_in.size(1)):
        y = y_in[:, t : t + 1]
        base = model.decoder(y, enc, state)
        logp = F.log_softmax(base.logits[:, -1].float(), -1)  # (B, V)
        for kind, change in changes.items():
            other = model.decoder(y, enc, state, look=Look(change=change)).logits[:, -1]
            other = F.log_softmax(other.float(), -1)
            divergence[kind].append(js_divergence(logp, other).cpu())
            flips[kind].append((other.argmax(-1) != logp.argmax(-1)).cpu())
        state = base.state
    out = {}
    for kind in changes:
        div = torch.stack(divergence[kind], 1).tolist()  # (B, T), one conversion per kind
        flip = torch.stack(flips[kind], 1).tolist()
        out[kind] = [(div[b][:n], flip[b][:n]) for b, n in enumerate(steps)]
    return out


def kinds_for(model: Seq2Seq, kinds: tuple[str, ...] = COUNTERFACTUALS) -> tuple[str, ...]:
    """The counterfactuals that apply to a model: none without attention (the control), and no
    'other' with a local window."""
    if not model.decoder.attends:
        return ()
    return tuple(k for k in kinds if not (k == "other" and model.decoder.window is not None))


def faithfulness(
    translator, src: list[str], ref: list[str], kinds: tuple[str, ...] = COUNTERFACTUALS, seed: int = 0
) -> dict:
    """The counterfactual tests of one model on a test set: per kind, overall and per source-length
    bucket, the mean divergence of P(y_t), the share of flipped steps, and BLEU and chrF of the
    set decoded that way, beside the model's own greedy BLEU. A model without attention is
    measured as the control: its outputs cannot change, and the report says so."""
    model = translator.model
    if not isinstance(model, Seq2Seq):
        raise ValueError("faithfulness tests one model at a time, not an ensemble")
    if len(src) != len(ref):
        raise ValueError(f"{len(src)} sources but {len(ref)} references")
    applied = kinds_for(model, kinds)
    ids = translator.source_ids(src)
    keep = [i for i, x in enumerate(ids) if x]  # an empty source has nothing to attend to
    ids = [ids[i] for i in keep]
    src, ref = [src[i] for i in keep], [ref[i] for i in keep]
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    size = translator.decode.batch_size
    batches = [order[i : i + size] for i in range(0, len(order), size)]  # similar lengths together
    device, ratio = translator.device, translator.decode.max_ratio
    own: list[list[int]] = [[] for _ in ids]
    weights: list[Tensor | None] = [None] * len(ids)
    with autocast(device, translator.precision):
        for chunk in batches:
            s, n = pad([ids[i] for i in chunk])
            outs, alphas = decode(model, s.to(device), n.to(device), None, ratio)
            for i, o, a in zip(chunk, outs, alphas, strict=True):
                own[i], weights[i] = o, a
        donor = donor_order([len(x) for x in ids])
        per_kind = {k: {"outputs": [None] * len(ids), "steps": [None] * len(ids)} for k in applied}
        for chunk in batches:
            s, n = pad([ids[i] for i in chunk])
            s, n = s.to(device), n.to(device)
            lent = _donors(chunk, donor, weights, s.size(1)) if "other" in applied else None
            changes = {k: Counterfactual(k, lent, seed) for k in applied}
            for kind, change in changes.items():
                outs, _ = decode(model, s, n, change, ratio)
                for i, o in zip(chunk, outs, strict=True):
                    per_kind[kind]["outputs"][i] = o
            for kind, rows in step_effects(model, s, n, [own[i] for i in chunk], changes).items():
                for i, r in zip(chunk, rows, strict=True):
                    per_kind[kind]["steps"][i] = r
    text = lambda outs: [translator.tgt_tok.decode(o) for o in outs]  # noqa: E731
    hyps = text(own)
    groups = {"all": list(range(len(ids))), **group_by_length(src)}
    report = {
        "sentences": len(ids),
        "attention": model.decoder.attention,
        "counterfactuals": list(applied),
        "control": not applied,
        "by_length": {},
    }
    for label, idx in groups.items():
        row = {"sentences": len(idx), "greedy": _scores([hyps[i] for i in idx], [ref[i] for i in idx])}
        for kind in applied:
            cf = text(per_kind[kind]["outputs"])
            div = [d for i in idx for d in per_kind[kind]["steps"][i][0]]
            flip = [f for i in idx for f in per_kind[kind]["steps"][i][1]]
            scores = _scores([cf[i] for i in idx], [ref[i] for i in idx])
            row[kind] = {
                "js_divergence": sum(div) / len(div),
                "flipped_steps": sum(flip) / len(flip),
                "changed_outputs": sum(per_kind[kind]["outputs"][i] != own[i] for i in idx) / len(idx),
                **scores,
                "bleu_change": scores["bleu"] - row["greedy"]["bleu"],
            }
        report["by_length"][label] = row
    return report


def _scores(hyps: list[str], refs: list[str]) -> dict:
    return {**bleu_and_length(hyps, refs), "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score}


def _donors(chunk: list[int], donor: list[int], weights: list[Tensor | None], S: int) -> Tensor | None:
    """The weights each sentence of `chunk` borrows for 'other': its donor's rows, step by step,
    stretched to this sentence's source length and padded to S columns: (B, T, S)."""
    if weights[chunk[0]] is None:
        return None
    rows = []
    for i in chunk:
        own_len = weights[i].size(1)
        lent = weights[donor[i]]  # (T', S')
        rows.append(torch.stack([stretch(step, own_len) for step in lent]))  # (T', own_len)
    T = max(r.size(0) for r in rows)
    out = torch.zeros(len(chunk), T, S)
    for b, r in enumerate(rows):
        out[b, : r.size(0), : r.size(1)] = r
        out[b, r.size(0) :, : r.size(1)] = r[-1]  # past the donor's end: its last step
    return out


def format_report(report: dict, run_dir: str, spec: str) -> str:
    """faithfulness()'s report as text: per length bucket, what each counterfactual changed."""
    lines = [f"{run_dir} on {spec}: {report['sentences']} sentences, attention {report['attention']}"]
    if report["control"]:
        lines.append(
            "no attention: nothing to replace; this model is the control (its outputs cannot change)"
        )
    lines.append(
        "by source length (words): greedy BLEU, then per counterfactual attention: mean Jensen-Shannon"
    )
    lines.append(
        "divergence of P(y_t) (bits), share of steps whose argmax flips, BLEU decoded that way (change)"
    )
    for label, row in report["by_length"].items():
        cells = [f"{label:>6} {row['sentences']:5d}  greedy {row['greedy']['bleu']:6.2f}"]
        for kind in report["counterfactuals"]:
            r = row[kind]
            cells.append(
                f"{kind} {r['js_divergence']:.3f} {100 * r['flipped_steps']:4.1f}% "
                f"{r['bleu']:6.2f} ({r['bleu_change']:+.2f})"
            )
        lines.append("  " + "  |  ".join(cells))
    return "\n".join(lines)
