"""Explain a translation output word by output word: the notes' three steps, with numbers.

For every output token y_t a trace shows

    (1) score      e_{t,i}     = score(s_t, h_i), one per source token
    (2) normalise  alpha_{t,i} = softmax(e_t)_i
    (3) combine    c_t         = sum_i alpha_{t,i} h_i   (its size, and how far it moved)

and the model's five most probable next tokens P(y_t | y_<t, x). Without
attention there are no scores: the trace shows that c is the same at every step.
Beside alpha_t, `gradients` adds what the output token owes each source
token by integrated gradients (attribution.py), their agreement with the
weights, and the attention diagnostics of the sentence (diagnostics.py).

The numbers are the model's own: `trace` replays the chosen hypothesis
through `Decoder.forward` with teacher forcing, once, and reads every
step's e_t, alpha_t, c_t and logits off the decoder's output.
`lecture` runs the notes' worked examples through `attention.DotScore`,
`attention.GeneralScore` and `attention.attend`, the code the models use.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from .. import display
from ..config import search_width
from ..data.tokenizer import BOS, EOS
from ..model.attention import DotScore, GeneralScore, attend
from .attribution import agreement, attribute
from .diagnostics import sentence_diagnostics


@dataclass
class Step:
    index: int  # t, counted from 1
    token: str  # the output piece chosen at this step ("</s>" ends the output)
    prob: float  # P(token | y_<t, x)
    top: list[tuple[str, float]]  # the most probable next pieces, with probabilities
    scores: list[float | None] | None  # e_{t,i} per source piece (None outside a local window); None
    # without attention
    weights: list[float] | None  # alpha_{t,i}, summing to 1; None without attention
    focus: str | None  # the source piece with the largest weight
    context_size: int  # numbers in c_t
    context_norm: float  # |c_t|
    context_change: float | None  # |c_t - c_{t-1}|; None at the first step
    gradient: list[float] | None = None  # integrated gradients of log P(token) per source piece
    # a transformer decoder's every attention at this step (None for an RNN decoder):
    heads: list[list[list[float]]] | None = None  # [layer][head][i]: weights over the source
    self_weights: list[list[list[float]]] | None = None  # [layer][head][j]: over <s> y_1 .. y_{t-1}


@dataclass
class Trace:
    source: str
    src_tokens: list[str]  # one per column of scores and weights
    translation: str
    tokens: list[str]  # output pieces; the steps add "</s>"
    attention: str  # the model's `model.attention`
    normalizer: str  # `model.normalizer`: softmax, sparsemax or entmax15
    window: str  # `model.window`: global, local_m or local_p
    beam: int
    hypothesis: int  # 0 is the best
    score: float
    steps: list[Step]
    agreement: dict | None = None  # attention vs gradients over the steps (attribution.agreement)
    diagnostics: dict | None = None  # the sentence's attention diagnostics (diagnostics.py)
    encoder_self: list[list[list[list[float]]]] | None = None  # [layer][head][i][j]: a transformer
    # encoder's self-attention, source piece i's weights over the pieces j; None for an RNN encoder

    def to_dict(self) -> dict:
        return asdict(self)

    def _repr_html_(self) -> str:
        """In a notebook: the heatmap, then every step's e, alpha and c (display.py)."""
        return display.trace(self)

    def slider(self):
        """One step at a time under a slider, where ipywidgets is installed."""
        return display.step_slider(self)


@torch.no_grad()
def trace(
    translator, sentence: str, beam: int = 1, hypothesis: int = 0, top_k: int = 5, gradients: bool = True
) -> Trace:
    """Translate `sentence` and replay hypothesis number `hypothesis` (0: the best) step by step;
    with `gradients`, also each step's integrated gradients over the source."""
    if not sentence.strip():
        raise ValueError("nothing to explain: the sentence is empty")
    if hypothesis < 0:
        raise ValueError(f"hypothesis must be 0 or more, not {hypothesis}")
    beam = search_width(beam, hypothesis + 1)  # hypothesis h needs a beam of h + 1
    hyps = translator.translate_nbest([sentence], beam, hypothesis + 1)[0]
    if not hyps[0].src_ids:
        raise ValueError(f"nothing to explain: {sentence!r} has no source tokens")
    if hypothesis >= len(hyps):
        raise ValueError(f"beam {beam} found {len(hyps)} hypotheses; there is no number {hypothesis}")
    hyp = hyps[hypothesis]
    model, device, dec = translator.model, translator.device, translator.model.decoder
    src = torch.tensor([hyp.src_ids], device=device)
    enc = model.encode(src, torch.tensor([len(hyp.src_ids)], device=device))
    targets = [*hyp.ids, EOS]
    y_prev = torch.tensor([[BOS, *hyp.ids]], device=device)  # (1, T): teacher forcing of the output
    out = dec(y_prev, enc, dec.init_state(enc), look=translator.look)  # every step's s, e, alpha, c, logits
    p = torch.softmax(out.logits[0].float(), dim=-1)  # (T, V)
    c = out.c[0].float()  # (T, He)
    grads = attribute(model, hyp.src_ids, hyp.ids, n_steps=20, end=True)[0] if gradients else None
    steps: list[Step] = []
    for t, target in enumerate(targets):
        best_p, best_ids = p[t].topk(min(top_k, p.size(-1)))
        scores = weights = focus = None
        if out.alpha is not None:
            weights = out.alpha[0, t].float().tolist()
            scores = [x if math.isfinite(x) else None for x in out.e[0, t].float().tolist()]  # None: unscored
            focus = translator.src_tok.id_to_piece(hyp.src_ids[int(out.alpha[0, t].argmax())])
        steps.append(
            Step(
                index=t + 1,
                token=translator.tgt_tok.id_to_piece(target),
                prob=float(p[t, target]),
                top=[
                    (translator.tgt_tok.id_to_piece(int(i)), float(q))
                    for q, i in zip(best_p, best_ids, strict=True)
                ],
                scores=scores,
                weights=weights,
                focus=focus,
                context_size=c.size(-1),
                context_norm=float(c[t].norm()),
                context_change=None if t == 0 else float((c[t] - c[t - 1]).norm()),
                gradient=None if grads is None else grads[t].tolist(),
                heads=None if out.heads is None else out.heads[0, t].float().tolist(),
                self_weights=None
                if out.self_alpha is None
                else out.self_alpha[0, t, :, :, : t + 1].float().tolist(),
            )
        )
    alpha = None if out.alpha is None else out.alpha[0].float().cpu()  # (T + 1, S), </s> included
    return Trace(
        source=sentence,
        src_tokens=hyp.src_tokens,
        translation=hyp.text,
        tokens=hyp.tokens,
        attention=dec.attention,
        normalizer=dec.normalizer,
        window="global" if dec.window is None else dec.window.kind,
        beam=beam,
        hypothesis=hypothesis,
        score=hyp.score,
        steps=steps,
        agreement=None if alpha is None or grads is None else agreement(alpha, grads),
        diagnostics=None if alpha is None else sentence_diagnostics(alpha[:-1], hyp.src_tokens),
        encoder_self=None if enc.self_alpha is None else enc.self_alpha[0].float().tolist(),
    )


def _bar(weight: float, width: int = 30) -> str:
    return "█" * round(weight * width)


def format_trace(tr: Trace, only_step: int | None = None) -> str:
    """The trace as text for a terminal; `only_step` (from 1) shows one step."""
    size = tr.steps[0].context_size if tr.steps else 0
    search = "greedy" if tr.beam == 1 else f"beam {tr.beam}, hypothesis {tr.hypothesis + 1}"
    lines = [
        f"source ({len(tr.src_tokens)} tokens): {' '.join(tr.src_tokens)}",
        f"output ({search}, score {tr.score:.3f}): {tr.translation}",
    ]
    if tr.attention == "none":
        lines.append(
            f"attention: none. Every step reads the same fixed context c ({size} numbers), "
            "made by the encoder from the whole source."
        )
    else:
        where = (
            "every source token" if tr.window == "global" else f"the source tokens of its {tr.window} window"
        )
        lines.append(
            f"attention: {tr.attention}. At every step the decoder (1) scores {where}, "
            f"(2) turns the scores into weights with {tr.normalizer}, (3) takes the weighted sum of the "
            f"encoder states as its context c_t ({size} numbers)."
        )
    width = max((len(s) for s in tr.src_tokens), default=6) + 2
    for st in tr.steps:
        if only_step is not None and st.index != only_step:
            continue
        lines += ["", f"step {st.index}: {st.token}   P = {st.prob:.3f}"]
        grad = st.gradient or [None] * len(tr.src_tokens)
        shown = "gradient" if st.gradient else ""
        if st.weights is not None:
            lines.append(f"  {'source':<{width}} {'(1) score':>10} {'(2) weight':>11} {shown:>9}")
            for tok, e, a, g in zip(tr.src_tokens, st.scores, st.weights, grad, strict=True):
                score = "not scored" if e is None else f"{e:.3f}"  # outside a local window
                weight = "0 exactly" if a == 0 else f"{a:.3f}"  # sparse, local and hard attention
                g = "" if g is None else f"{g:+.3f}"
                lines.append(f"  {tok:<{width}} {score:>10} {weight:>11} {g:>9}  {_bar(a)}")
            lines.append(f"  {'':<{width}} {'sum':>10} {sum(st.weights):>11.3f}")
            lines.append(f"  most attended: {st.focus} ({max(st.weights):.3f})")
            name = "(3) c_t"
        else:
            if st.gradient:
                lines.append(f"  {'source':<{width}} {'gradient':>9}")
                lines += [f"  {tok:<{width}} {g:>+9.3f}" for tok, g in zip(tr.src_tokens, grad, strict=True)]
            name = "c (no attention)"
        moved = "" if st.context_change is None else f", moved {st.context_change:.3f} since the last step"
        lines.append(f"  {name}: {st.context_size} numbers, |c| = {st.context_norm:.3f}{moved}")
        lines.append("  next: " + " · ".join(f"{tok} {q:.3f}" for tok, q in st.top))
    if only_step is not None and not any(st.index == only_step for st in tr.steps):
        raise ValueError(f"there is no step {only_step}: the output has {len(tr.steps)} steps")
    if any(st.gradient for st in tr.steps):
        lines += [
            "",
            "gradient: integrated gradients of log P(token) to each source embedding (attribution.py)",
        ]
    if tr.agreement and tr.agreement["tokens"]:
        tau = tr.agreement["kendall_tau"]
        lines.append(
            f"attention vs gradients over the {tr.agreement['tokens']} steps: Kendall tau "
            f"{'-' if tau is None else f'{tau:.2f}'} (of alpha and |gradient|), same top source token "
            f"at {100 * tr.agreement['same_top']:.0f}% of steps"
        )
    if tr.diagnostics:
        lines.append(_diagnostics_line(tr.diagnostics))
    return "\n".join(lines)


def _diagnostics_line(d: dict) -> str:
    """A sentence's attention diagnostics (diagnostics.sentence_diagnostics) in one line."""
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    entropy = "-" if d["entropy"] is None else f"{d['entropy']:.2f}"
    return (
        f"attention diagnostics: entropy {entropy} (1 = uniform), {pct(d['near_uniform'])} of steps near "
        f"uniform, {pct(d['unattended'])} of source tokens never the focus, {pct(d['over_attended'])} "
        f"over-attended, {pct(d['parking'])} of the weight on </s> and punctuation "
        f"({pct(d['parking_share'])} if uniform), {pct(d['backward'])} of moves backward"
    )


# The notes' worked examples, run through the models' own attention code.

LECTURE = [
    {
        "title": 'Generating "chat" from "The cat sat" (dot-product attention)',
        "query": [0.5, -0.2, 0.8],
        "keys": {"The": [0.1, 0.2, 0.1], "cat": [0.8, 0.1, 0.7], "sat": [0.2, 0.3, 0.2]},
        "printed": {"weights": [0.27, 0.63, 0.22], "denominator": 4.02},  # as the notes print them
    },
    {
        "title": 'Generating "chats" from "I love cats" (dot-product attention)',
        "query": [0.5, 0.6],
        "keys": {"I": [0.2, 0.8], "love": [0.9, 0.3], "cats": [0.4, 0.7]},
        "printed": None,
    },
]

EMBEDDINGS = {  # the notes' toy embeddings: size, cuteness, speed
    "cat": [0.3, 0.9, 0.6],
    "dog": [0.5, 0.8, 0.5],
    "mouse": [0.1, 0.7, 0.8],
    "elephant": [0.95, 0.4, 0.2],
}


def lecture_numbers() -> list[dict]:
    """Every intermediate number of the worked examples, computed by `DotScore` and `attend`."""
    results = []
    for ex in LECTURE:
        words = list(ex["keys"])
        s = torch.tensor(ex["query"], dtype=torch.float64).view(1, 1, -1)  # (B=1, T=1, D)
        h = torch.tensor([ex["keys"][w] for w in words], dtype=torch.float64).unsqueeze(0)  # (1, S, D)
        e = DotScore()(s, h)  # (1) e_i = s . h_i  -> (1, 1, S)
        c, alpha = attend(e, h, torch.ones(1, len(words), dtype=torch.bool))  # (2) and (3)
        general = GeneralScore(s.size(-1), h.size(-1)).double()
        with torch.no_grad():
            general.W.weight.copy_(torch.eye(s.size(-1), dtype=torch.float64))
            e_general = general(s, general.keys(h))  # s W h with W = I is the dot product
        results.append(
            {
                "title": ex["title"],
                "query": ex["query"],
                "keys": ex["keys"],
                "scores": dict(zip(words, e[0, 0].tolist(), strict=True)),
                "exp": dict(zip(words, torch.exp(e[0, 0]).tolist(), strict=True)),
                "weights": dict(zip(words, alpha[0, 0].tolist(), strict=True)),
                "weights_sum": float(alpha.sum()),
                "context": c[0, 0].tolist(),
                "general_identity_scores": e_general[0, 0].tolist(),
                "printed": ex["printed"],
            }
        )
    return results


def embedding_similarities() -> dict[str, float]:
    """Cosine similarity of "cat" with each toy embedding of the notes."""
    from .neighbours import cosine

    table = torch.tensor(list(EMBEDDINGS.values()), dtype=torch.float64)
    sims = cosine(table[0], table)
    return dict(zip(EMBEDDINGS, sims.tolist(), strict=True))


def _product_terms(a: list[float], b: list[float]) -> str:
    return " + ".join(f"({x:g})({y:g})" for x, y in zip(a, b, strict=True))


def lecture() -> str:
    """The worked examples as text, every number shown."""
    out = []
    for ex in lecture_numbers():
        words = list(ex["keys"])
        total = sum(ex["exp"].values())
        out += [ex["title"], f"  decoder state s = {ex['query']}"]
        out += [f"  encoder state h_{i + 1} = {ex['keys'][w]} ({w})" for i, w in enumerate(words)]
        out.append("  (1) score e_i = s . h_i   (attention.DotScore)")
        for i, w in enumerate(words):
            terms = _product_terms(ex["query"], ex["keys"][w])
            out.append(f"      e_{i + 1} = {terms} = {ex['scores'][w]:.4f}")
        out.append("  (2) weights alpha_i = exp(e_i) / sum_j exp(e_j)   (attention.attend)")
        exps = " + ".join(f"{ex['exp'][w]:.4f}" for w in words)
        out.append(f"      sum_j exp(e_j) = {exps} = {total:.4f}")
        for i, w in enumerate(words):
            out.append(
                f"      alpha_{i + 1} = exp({ex['scores'][w]:.4f}) / {total:.4f} = "
                f"{ex['exp'][w]:.4f} / {total:.4f} = {ex['weights'][w]:.4f}   ({w})"
            )
        out.append(f"      sum of the weights = {ex['weights_sum']:.4f}")
        if ex["printed"]:
            printed = ex["printed"]["weights"]
            out.append(
                f"      (the notes print {', '.join(f'{p:g}' for p in printed)}, which sum to "
                f"{math.fsum(printed):.2f}: they divide by {ex['printed']['denominator']:g}, "
                f"not by {total:.4f})"
            )
        weighted = " + ".join(f"{ex['weights'][w]:.4f} h_{i + 1}" for i, w in enumerate(words))
        c = ", ".join(f"{x:.4f}" for x in ex["context"])
        out.append(f"  (3) context c = {weighted} = [{c}]")
        same = torch.allclose(
            torch.tensor(ex["general_identity_scores"]), torch.tensor(list(ex["scores"].values()))
        )
        out.append(
            "  general score s W h with W = I (attention.GeneralScore) gives "
            f"{', '.join(f'{x:.4f}' for x in ex['general_identity_scores'])}: "
            f"{'the same as the dot product' if same else 'NOT the dot product'}"
        )
        out.append("")
    out.append('Embeddings: "cat is near dog" (cosine similarity, as `lookback neighbours` ranks words)')
    for word, vec in EMBEDDINGS.items():
        out.append(f"  {word:<9} {vec}")
    for word, sim in embedding_similarities().items():
        if word != "cat":
            out.append(f"  cos(cat, {word}) = {sim:.3f}")
    return "\n".join(out)
