"""How attention behaves: statistics of the weights alpha, for watching a model learn to look.

An attention model first learns the target language and only later where to
look in the source; until then its weights are close to uniform. Two numbers
make that moment visible (training logs them at every validation, and every
`train.probe_every` updates from the first, on the first `train.probe`
validation pairs, teacher-forced):

- entropy: H(alpha_t) = -sum_i alpha_ti log alpha_ti, over log S, the entropy
  of uniform weights over the S real source tokens: 1 when alpha is uniform,
  0 when it puts all its weight on one token. The mean over target steps.
- diagonal: the weight within one token of the proportional diagonal, the
  source position (t + 1/2) S / T - 1/2 of target step t out of T; for
  language pairs with mostly monotone word order (En-Fr, En-De) it rises as
  the model learns to align. Uniform weights put about 3 / S there.

and three that say why a model does not learn to look (docs/study.md):

- score_spread: the standard deviation of the scores e_t over the real source
  tokens, the mean over steps. Softmax turns a spread of a few units into
  one-hot weights: then alpha is saturated and
- score_grad: the norm of dJ/de_t, the gradient of the step's cross-entropy
  that reaches the scores (mean over steps), is near 0, since softmax's
  Jacobian diag(alpha) - alpha alpha^T vanishes at a one-hot alpha;
- attention_grad: the norm of the gradient of the mean loss per token on
  the score's own parameters (W of general, W, U, v of additive, the window's
  W_p, v_p), the part of the update that could teach them to look; dot has none.

Of a finished translation (`sentence_diagnostics`, by source length in
`diagnostics_by_length`; `lookback evaluate --diagnostics`), over its T
output steps and S source tokens (model pieces):

- entropy and near_uniform: the mean normalised entropy above, and the share
  of steps at or above NEAR_UNIFORM, where the weights say almost nothing;
- unattended: the share of source tokens (the closing </s> left out) that no
  step gives its largest weight; over_attended: the share whose total weight
  sum_t alpha_{t,i} is above 1.5, as coverage.py counts over-translation;
- parking: the mean weight per step on </s> and punctuation, the places a
  model parks attention it has no use for, beside parking_share, the weight
  uniform attention would put there;
- backward: the share of steps whose argmax moves to an earlier source
  token than the step before's (0 for a monotone alignment).

Legend: B batch, S source length, T target length.
"""

from __future__ import annotations

import math
import unicodedata

import torch
from torch import Tensor

from ..data.batch import collate
from ..data.tokenizer import PAD, SPECIALS
from ..decoding.evaluate import group_by_length
from ..device import gradients_in_eval_mode
from ..figures import legend_beside, save_figure, seed_groups
from ..model.guided import diagonal
from ..model.seq2seq import Seq2Seq
from .curves import history, records_of

NEAR_UNIFORM = 0.9  # normalised entropy at or above which a step's weights count as near uniform
OVER = 1.5  # total weight above which a source token counts as over-attended (as coverage.py)


def attention_stats(alpha: Tensor, src_len: Tensor, tgt_out: Tensor) -> dict[str, float]:
    """Mean normalised entropy and diagonal weight of alpha (B, T, S) over the real target steps
    (tgt_out != PAD); sources of one token, whose weights have no choice, are left out."""
    B, T, S = alpha.shape
    S_b = src_len.view(B, 1).float()  # (B, 1) real source lengths
    steps = (tgt_out != PAD) & (S_b > 1)  # (B, T) real steps of sources with a choice
    alpha = alpha.float()
    entropy = -(alpha * alpha.clamp_min(1e-12).log()).sum(-1) / S_b.clamp_min(2).log()  # (B, T): 1 = uniform
    d = diagonal(src_len, tgt_out)  # (B, T)
    i = torch.arange(S, device=alpha.device).view(1, 1, S).float()
    band = ((i - d.unsqueeze(-1)).abs() <= 1.0) & (i < S_b.unsqueeze(-1))  # (B, T, S)
    near = (alpha * band).sum(-1)  # (B, T) weight near the diagonal
    n = steps.sum().clamp_min(1)
    return {
        "alpha_entropy": float(entropy[steps].sum() / n),
        "alpha_diagonal": float(near[steps].sum() / n),
    }


def probe(model: Seq2Seq, pairs: list, device: torch.device) -> dict[str, float]:
    """How `model` attends, teacher-forced on (source ids, target ids) pairs, without dropout:
    attention_stats, score_spread, score_grad and attention_grad (module docstring); {} without
    attention. The decoder runs one step at a time, as in search, so that each step's scores
    e_t are the very tensor its weights came from, whatever the decoder's wiring."""
    if not model.decoder.attends or not pairs:
        return {}
    was_training = model.training
    model.eval()
    batch = collate(pairs).to(device)
    with gradients_in_eval_mode():
        enc = model.encode(batch.src, batch.src_len)
        state = model.decoder.init_state(enc)
        steps = []
        for t in range(batch.tgt_in.size(1)):
            steps.append(model.decoder(batch.tgt_in[:, t : t + 1], enc, state))
            state = steps[-1].state
        real = batch.tgt_out != PAD  # (B, T)
        logits = torch.cat([o.logits for o in steps], 1)  # (B, T, V)
        J = torch.nn.functional.cross_entropy(logits[real].float(), batch.tgt_out[real], reduction="sum")
        params = model.decoder.attention_parameters()
        scores = [o.e for o in steps]  # each (B, 1, S)
        grads = torch.autograd.grad(J, scores + params, allow_unused=True)
    model.train(was_training)
    alpha = torch.cat([o.alpha for o in steps], 1).detach()  # (B, T, S)
    stats = attention_stats(alpha, batch.src_len, batch.tgt_out)
    e = torch.cat(scores, 1).detach().float()  # (B, T, S); -inf outside a local window
    looked = (batch.src != PAD).unsqueeze(1) & e.isfinite()  # (B, T, S) the scores softmax normalised
    n = looked.sum(-1).clamp_min(1)  # (B, T)
    mean = e.where(looked, 0).sum(-1, keepdim=True) / n.unsqueeze(-1)
    spread = ((e - mean).where(looked, 0) ** 2).sum(-1).div(n).sqrt()  # (B, T)
    rows = real & (batch.src_len.view(-1, 1) > 1)  # sources of one token have nothing to spread
    stats["score_spread"] = float(spread[rows].mean()) if rows.any() else 0.0
    if all(g is not None for g in grads[: len(scores)]):  # one local or multi-head e is not the one used
        de = torch.cat(grads[: len(scores)], 1).float().where(looked, 0)  # (B, T, S)
        stats["score_grad"] = float(de.norm(dim=-1)[rows].mean()) if rows.any() else 0.0
    param_grads = [g.float() for g in grads[len(scores) :] if g is not None]
    if param_grads:  # of the mean loss per token, as an update sees it
        norm = torch.cat([g.flatten() for g in param_grads]).norm()
        stats["attention_grad"] = float(norm) / float(real.sum())
    return stats


def is_parking(piece: str) -> bool:
    """Whether a source piece is </s> (or another special) or punctuation only, "▁," included."""
    text = piece.lstrip("▁")
    return piece in SPECIALS or (bool(text) and all(unicodedata.category(ch)[0] == "P" for ch in text))


def sentence_diagnostics(alpha: Tensor, src_tokens: list[str]) -> dict[str, float | None]:
    """The attention diagnostics of one translation from its weights alpha (T, S) over the pieces
    `src_tokens`; a value is None when it has nothing to count (no steps, one source token)."""
    alpha = alpha.float()
    T, S = alpha.shape
    content = [i for i, p in enumerate(src_tokens) if p != "</s>"]
    parking = torch.tensor([is_parking(p) for p in src_tokens])
    top = alpha.argmax(-1) if T else torch.zeros(0, dtype=torch.long)  # (T,)
    entropy = (-(alpha * alpha.clamp_min(1e-12).log()).sum(-1) / math.log(S)) if S > 1 else None  # (T,)
    mean = lambda x, n: float(x) / n if n else None  # noqa: E731
    looked_at = set(top.tolist())  # the source tokens that some step gives its largest weight
    return {
        "steps": T,
        "source_tokens": S,
        "entropy": mean(entropy.sum(), T) if entropy is not None else None,
        "near_uniform": mean((entropy >= NEAR_UNIFORM).sum(), T) if entropy is not None else None,
        "unattended": mean(sum(i not in looked_at for i in content), len(content)) if T else None,
        "over_attended": mean((alpha.sum(0)[content] > OVER).sum(), len(content)) if T else None,
        "parking": mean(alpha[:, parking].sum(), T),
        "parking_share": float(parking.float().mean()) if S else None,
        "backward": mean((top[1:] < top[:-1]).sum(), T - 1),
    }


DIAGNOSTICS = (
    "entropy",
    "near_uniform",
    "unattended",
    "over_attended",
    "parking",
    "parking_share",
    "backward",
)


def pooled(rows: list[dict]) -> dict[str, float | None]:
    """Sentence diagnostics pooled over sentences, each value weighted by what it counts (steps,
    source tokens or step pairs), as if all the steps were one long sentence."""
    weight = {
        "entropy": "steps",
        "near_uniform": "steps",
        "parking": "steps",
        "unattended": "source_tokens",
        "over_attended": "source_tokens",
        "parking_share": "source_tokens",
        "backward": "pairs",
    }
    out: dict[str, float | None] = {"sentences": len(rows)}
    for key in DIAGNOSTICS:
        pairs = [(r[key], r["steps"] - 1 if weight[key] == "pairs" else r[weight[key]]) for r in rows]
        pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
        total = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / total if total else None
    return out


def diagnostics_by_length(srcs: list[str], translations: list) -> dict[str, dict]:
    """Pooled diagnostics of translations (lookback Translation objects) of sentences `srcs`:
    'all' and then each source-length bucket; {} without attention."""
    if not any(t.attention is not None for t in translations):
        return {}
    rows = [
        sentence_diagnostics(t.attention, t.src_tokens) if t.attention is not None else None
        for t in translations
    ]
    groups = {"all": list(range(len(srcs))), **group_by_length(srcs)}
    return {label: pooled([rows[i] for i in idx if rows[i] is not None]) for label, idx in groups.items()}


def _attention_records(records: list[dict]) -> list[dict]:
    """The records that hold the probe's statistics: `probe` ones where the run logged them
    (train.probe_every), else the validations'."""
    for kind in ("probe", "valid"):
        found = [r for r in history(records, kind) if "alpha_entropy" in r]
        if found:
            return found
    return []


def plot_takeoff(runs: dict[str, str | list[dict]], path: str, title: str | None = None) -> list[str]:
    """When each model starts to look at the source, against updates, from each run directory's
    metrics.jsonl (or its records): validation BLEU (top); the entropy and diagonal weight of its attention
    (middle); and, where logged, the spread of its scores (bottom, log scale: softmax saturates
    past a few units). The probe's records where the run logged them every `train.probe_every`
    updates, else the validations'. Saved by `path`'s suffix (PNG, SVG, PDF); returns the names
    of the runs that had attention statistics."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {name: records_of(run) for name, run in runs.items()}
    spreads = any("score_spread" in r for records in data.values() for r in _attention_records(records))
    fig, axes = plt.subplots(3 if spreads else 2, 1, figsize=(9.5, 8.5 if spreads else 6.5), sharex=True)
    top, middle = axes[0], axes[1]
    groups = seed_groups(list(data))  # a model's seeds (MODEL#SEED) in one colour, one legend entry
    drawn = []
    for name, records in data.items():
        valid = history(records, "valid")
        group, colour, first = groups[name]
        label = group if first else None
        top.plot(
            [r["step"] for r in valid], [r["bleu"] for r in valid], marker="o", color=colour, label=label
        )
        stats = _attention_records(records)
        if not stats:
            continue
        drawn.append(name)
        steps = [r["step"] for r in stats]
        marker = "o" if len(stats) < 30 else None
        middle.plot(steps, [r["alpha_entropy"] for r in stats], marker=marker, color=colour)
        middle.plot(steps, [r["alpha_diagonal"] for r in stats], ls="--", color=colour)
        if spreads and any("score_spread" in r for r in stats):
            spread = [(r["step"], r["score_spread"]) for r in stats if "score_spread" in r]
            axes[2].plot(*zip(*spread, strict=True), marker=marker, color=colour)
    top.set_ylabel("validation BLEU, greedy")
    middle.set_ylabel("attention (teacher-forced probe)")
    middle.set_ylim(0, 1.05)
    if spreads:
        axes[2].set_yscale("log")
        axes[2].set_ylabel("spread of the scores e (std)")
    axes[-1].set_xlabel("updates")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title or "Take-off: when attention starts to look at the source")
    note = "middle: entropy solid (1 = uniform weights), weight within one token of the diagonal dashed"
    fig.text(0.4, 0.005, note, ha="center", fontsize=8, color="gray")
    left, _, right, _ = legend_beside(fig, top)
    fig.tight_layout(rect=(left, 0.02, right, 1))
    save_figure(fig, path)
    plt.close(fig)
    return drawn


def format_by_length(by_length: dict[str, dict]) -> str:
    """diagnostics_by_length as text, one line per source-length bucket."""
    if not by_length:
        return "attention diagnostics: no attention"
    lines = [
        "attention diagnostics by source length (words), in % unless said (explain/diagnostics.py):",
        "  bucket  sents  entropy  near-uniform  unattended  over-attended  parking (uniform)  backward",
    ]
    pct = lambda x: "     -" if x is None else f"{100 * x:6.1f}"  # noqa: E731
    for label, d in by_length.items():
        entropy = "     -" if d["entropy"] is None else f"{d['entropy']:6.3f}"
        lines.append(
            f"  {label:>6}  {d['sentences']:5d}   {entropy}        {pct(d['near_uniform'])}      "
            f"{pct(d['unattended'])}         {pct(d['over_attended'])}   {pct(d['parking'])} "
            f"({pct(d['parking_share'])})    {pct(d['backward'])}"
        )
    return "\n".join(lines)
