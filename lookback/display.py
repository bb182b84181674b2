"""How lookback's objects look in a notebook: translations, n-best lists and step traces as HTML.

Jupyter shows an object through its `_repr_html_`: `Translation`, `NBest` (translate_nbest's list
for one sentence) and `explain.trace.Trace` have one, which calls the functions below. The
heatmap is the explorer's drawing (lookback/serve/web/app.js): one row per output piece, one
column per source piece, each cell shaded by its weight alpha_{t,i} in the same blue, hatched
where the weight is exactly 0, with the same stylesheet (heatmap.css). Hovering a cell shows its
source piece, output piece and weight. Every piece of text goes through html.escape.

    from lookback import Translator
    t = Translator.load("runs/quickstart")
    t.translate(["A dog runs."])[0]          # the text, then the heatmap
    t.translate_nbest(["A dog runs."], 5)[0]  # the five candidates, each with its heatmap
    trace(t, "A dog runs.")                  # every step: scores e, weights alpha, context c
    step_slider(trace(t, "A dog runs."))     # one step at a time (with ipywidgets installed)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from html import escape
from pathlib import Path
from typing import Any

LONG = 24  # source pieces from which a heatmap's cells shrink to fit their container
NO_ATTENTION = "no attention: one fixed context vector c for every step"


@cache
def css() -> str:
    """The stylesheet that the explorer loads too."""
    return (Path(__file__).parent / "heatmap.css").read_text(encoding="utf-8")


class HTML:
    """A piece of HTML that Jupyter shows as such (and prints as its source elsewhere)."""

    def __init__(self, html: str):
        self.html = html

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def page(body: str) -> str:
    """`body` with the stylesheet, as one output cell shows it."""
    return f'<style>{css()}</style><div class="lookback">{body}</div>'


def _rows(alpha: Any) -> list[list[float]]:
    """A (T, S) tensor or nested list as lists of floats."""
    return alpha.float().tolist() if hasattr(alpha, "tolist") and hasattr(alpha, "float") else alpha


def heatmap(alpha: Any, rows: Sequence[str], cols: Sequence[str]) -> str:
    """The attention matrix alpha (len(rows), len(cols)) as the explorer's table: rows are output
    pieces, columns source pieces; from LONG columns on the cells shrink to the container's width."""
    weights = _rows(alpha)
    if len(weights) != len(rows) or any(len(r) != len(cols) for r in weights):
        shape = (len(weights), len(weights[0]) if weights else 0)
        raise ValueError(f"attention of shape {shape} does not fit {len(rows)} rows x {len(cols)} columns")
    long = " long" if len(cols) >= LONG else ""
    head = "".join(
        f'<th class="src" data-col="{j}" title="{escape(tok)}"><span class="tok">{escape(tok)}</span>'
        '<span class="w"></span></th>'
        for j, tok in enumerate(cols)
    )
    body = []
    for i, (tok, row) in enumerate(zip(rows, weights, strict=True)):
        cells = "".join(_cell(i, j, w, cols[j], tok) for j, w in enumerate(row))
        body.append(
            f'<tr class="heat-row" data-row="{i}">'
            f'<th class="tgt" title="{escape(tok)}">{escape(tok)}</th>{cells}</tr>'
        )
    return (
        f'<table class="heatmap{long}"><thead><tr>'
        f'<th class="corner">output ↓ · source →</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _cell(i: int, j: int, w: float, src: str, out: str) -> str:
    """One weight, shaded as the explorer's paint() shades it."""
    shade = f"rgba(29, 78, 216, {max(0.0, min(1.0, w)):.3f})"
    classes = "cell" + (" dark" if w > 0.55 else "") + (" zero" if w == 0 else "")
    weight = "0 (exactly)" if w == 0 else f"{w:.2f}"
    return (
        f'<td class="{classes}" data-row="{i}" data-col="{j}" style="background-color: {shade}" '
        f'title="{escape(src)} → {escape(out)} {weight}"></td>'
    )


def _translation_body(t: Any) -> str:
    """A Translation without the stylesheet: its text, score and heatmap (or its tokens)."""
    parts = [
        f'<p class="text">{escape(t.text) or "(empty)"}</p>',
        f'<p class="muted">score {t.score:.3f} · {len(t.tokens)} output pieces · '
        f"{len(t.src_tokens)} source pieces</p>",
    ]
    if t.attention is not None and len(t.tokens):
        parts.append(heatmap(t.attention, t.tokens, t.src_tokens))
    elif t.tokens:
        parts.append(f'<p class="muted"><i>{NO_ATTENTION}</i>: {escape(" ".join(t.tokens))}</p>')
    return "".join(parts)


def translation(t: Any) -> str:
    """A `Translation` as HTML."""
    return page(_translation_body(t))


def nbest(candidates: Sequence[Any]) -> str:
    """The candidates of one sentence, best first, each with its heatmap (the best one open)."""
    items = [
        f"<details{' open' if k == 0 else ''}><summary>{k + 1}. {escape(c.text) or '(empty)'} "
        f'<span class="muted">({c.score:.3f})</span></summary>{_translation_body(c)}</details>'
        for k, c in enumerate(candidates)
    ]
    return page(f'<p class="muted">{len(candidates)} candidate(s), best first</p>{"".join(items)}')


def step(tr: Any, st: Any) -> str:
    """One step of a trace without the stylesheet: (1) the scores e, (2) the weights alpha with
    bars, beside the gradients when the trace has them, (3) the context c, and the next tokens."""
    title = f"<h4>step {st.index}: “{escape(st.token)}”, P = {st.prob:.3f}</h4>"
    grad = st.gradient
    moved = "" if st.context_change is None else f", moved {st.context_change:.3f} since the last step"
    head = ["source"]
    if st.weights is not None:
        head += ["(1) score e", "(2) weight α", ""]
    if grad:
        head += ["gradient × input (IG)", ""]
        top = max(max(abs(g) for g in grad), 1e-12)
    rows = []
    for i, tok in enumerate(tr.src_tokens):
        cells = [f"<td>{escape(tok)}</td>"]
        if st.weights is not None:
            e, a = st.scores[i], st.weights[i]
            cells += [
                f'<td class="num">{"not scored" if e is None else f"{e:.3f}"}</td>',
                f'<td class="num">{"0 (exactly)" if a == 0 else f"{a:.3f}"}</td>',
                f'<td class="bar-col"><div class="bar" style="width: {100 * a:.1f}%"></div></td>',
            ]
        if grad:
            cells += [
                f'<td class="num">{grad[i]:+.3f}</td>',
                f'<td class="bar-col"><div class="bar grad-bar" '
                f'style="width: {100 * abs(grad[i]) / top:.1f}%"></div></td>',
            ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    table = (
        f'<table class="trace-table"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    name = "(3) context c_t" if st.weights is not None else f"context c ({NO_ATTENTION})"
    context = f'<p class="muted">{name}: {st.context_size} numbers, |c| = {st.context_norm:.3f}{moved}</p>'
    nxt = " · ".join(f"{escape(tok)} {q:.3f}" for tok, q in st.top)
    return f'{title}{table}{context}{_heads(tr, st)}<p class="muted">most probable next tokens: {nxt}</p>'


def _heads(tr: Any, st: Any) -> str:
    """A transformer's step: its weights in every layer and head, over the source and over the
    output so far (its masked self-attention); '' for an RNN decoder."""
    if not st.heads:
        return ""
    labels = [f"layer {i + 1}, head {h + 1}" for i, layer in enumerate(st.heads) for h in range(len(layer))]
    flat = lambda layers: [w for layer in layers for w in layer]  # noqa: E731  [layer][head] -> rows
    before = ["<s>", *tr.tokens][: st.index]
    return (
        "<p class=\"muted\">α above is the top layer's heads' mean; each layer and head, over the source "
        "and over the output so far:</p>"
        f"{heatmap(flat(st.heads), labels, tr.src_tokens)}{heatmap(flat(st.self_weights), labels, before)}"
    )


def _trace_head(tr: Any) -> str:
    search = "greedy" if tr.beam == 1 else f"beam {tr.beam}, hypothesis {tr.hypothesis + 1}"
    how = (
        f"attention: {escape(tr.attention)}, normalised by {escape(tr.normalizer)}, {escape(tr.window)}"
        if tr.attention != "none"
        else NO_ATTENTION
    )
    parts = [
        f'<p class="text">{escape(tr.translation) or "(empty)"}</p>',
        f'<p class="muted">from “{escape(tr.source)}” ({search}, score {tr.score:.3f}); {how}</p>',
    ]
    if tr.steps and tr.steps[0].weights is not None:
        parts.append(heatmap([st.weights for st in tr.steps], [st.token for st in tr.steps], tr.src_tokens))
    if tr.agreement and tr.agreement.get("tokens"):
        tau = tr.agreement["kendall_tau"]
        parts.append(
            f'<p class="muted">attention against gradients over the {tr.agreement["tokens"]} steps: '
            "Kendall τ "
            f"{'–' if tau is None else f'{tau:.2f}'}, the same top source token at "
            f"{100 * tr.agreement['same_top']:.0f}% of the steps</p>"
        )
    return "".join(parts)


def trace(tr: Any) -> str:
    """A step-by-step `Trace`: the sentence's heatmap, then each step, folded (the first open)."""
    steps = "".join(
        f"<details{' open' if k == 0 else ''}><summary>step {st.index}: {escape(st.token)}</summary>"
        f"{step(tr, st)}</details>"
        for k, st in enumerate(tr.steps)
    )
    return page(_trace_head(tr) + steps)


def step_slider(tr: Any) -> Any:
    """The trace one step at a time under a slider (an ipywidgets widget); without ipywidgets,
    the whole trace as HTML."""
    try:
        import ipywidgets as widgets
    except ImportError:
        return HTML(trace(tr))
    head = widgets.HTML(page(_trace_head(tr)))
    shown = widgets.HTML()
    slider = widgets.IntSlider(value=1, min=1, max=max(1, len(tr.steps)), description="step")

    def show(change: dict | None = None) -> None:
        shown.value = page(step(tr, tr.steps[slider.value - 1])) if tr.steps else ""

    slider.observe(show, names="value")
    show()
    return widgets.VBox([head, slider, shown])
