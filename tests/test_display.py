"""What a notebook shows: translations, n-best lists and step traces as HTML (lookback/display.py)."""

import importlib.util
import re
import sys
from html.parser import HTMLParser

import pytest
import torch

from lookback import display
from lookback.explain.trace import trace

from .explain.test_trace import SENTENCE, toy_translator
from .helpers import require


class Cells(HTMLParser):
    """The heatmaps' cells, source headers and row labels of a piece of HTML."""

    def __init__(self, html: str):
        super().__init__()
        self.cells, self.src, self.rows, self.tables = [], [], [], []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = a.get("class", "").split()
        if tag == "td" and "cell" in classes:
            shade = float(re.search(r"rgba\(29, 78, 216, ([0-9.]+)\)", a["style"]).group(1))
            self.cells.append((int(a["data-row"]), int(a["data-col"]), shade, a["title"]))
        elif tag == "th" and "src" in classes:
            self.src.append(a["title"])
        elif tag == "th" and "tgt" in classes:
            self.rows.append(a["title"])
        elif tag == "table" and "heatmap" in classes:
            self.tables.append(classes)


def test_a_heatmap_has_a_cell_per_weight_shaded_by_it():
    alpha = torch.tensor([[0.75, 0.25, 0.0], [0.1, 0.2, 0.7]])
    html = display.heatmap(alpha, ["le", "chat"], ["the", "cat", "<script>"])
    got = Cells(html)
    assert [(i, j) for i, j, _, _ in got.cells] == [(i, j) for i in range(2) for j in range(3)]
    assert [s for _, _, s, _ in got.cells] == pytest.approx(alpha.flatten().tolist(), abs=1e-3)
    assert got.src == ["the", "cat", "<script>"] and got.rows == ["le", "chat"]
    assert got.cells[0][3] == "the → le 0.75" and got.cells[2][3] == "<script> → le 0 (exactly)"
    assert "<script>" not in html and "&lt;script&gt;" in html  # text is escaped
    assert 'class="cell dark"' in html and 'class="cell zero"' in html  # as the explorer paints
    assert got.tables == [["heatmap"]]
    wide = Cells(
        display.heatmap(torch.full((1, display.LONG), 1 / display.LONG), ["x"], ["w"] * display.LONG)
    )
    assert wide.tables == [["heatmap", "long"]]  # a long sentence's cells shrink to the width
    with pytest.raises(ValueError, match=r"attention of shape \(2, 3\) does not fit 2 rows x 2 columns"):
        display.heatmap(alpha, ["le", "chat"], ["the", "cat"])


def test_a_translation_and_its_candidates_show_their_heatmaps():
    t = toy_translator(attention="additive")
    out = t.translate([SENTENCE], beam=3)[0]
    html = out._repr_html_()
    got = Cells(html)
    assert len(got.cells) == len(out.tokens) * len(out.src_tokens) and got.rows == out.tokens
    assert "<style>" in html and ".heatmap" in html  # the explorer's stylesheet comes along
    candidates = t.translate_nbest([SENTENCE], beam=3, nbest=3)[0]
    assert isinstance(candidates, list) and len(candidates) == 3
    html = candidates._repr_html_()
    assert html.count("<details") == 3 and html.count("<details open") == 1
    assert len(Cells(html).tables) == 3
    plain = toy_translator(attention="none").translate([SENTENCE])[0]
    assert display.NO_ATTENTION in plain._repr_html_() and not Cells(plain._repr_html_()).cells


def test_a_trace_shows_every_step_with_its_scores_and_weights():
    tr = trace(toy_translator(attention="dot"), SENTENCE, gradients=False)
    html = tr._repr_html_()
    assert html.count("<details") == len(tr.steps)
    assert len(Cells(html).cells) == len(tr.steps) * len(tr.src_tokens)  # the sentence's heatmap
    step = tr.steps[0]
    for e, a in zip(step.scores, step.weights, strict=True):
        assert f"{e:.3f}" in html and f"{a:.3f}" in html
    assert f"|c| = {step.context_norm:.3f}" in html


def test_the_step_slider_without_ipywidgets_shows_the_whole_trace(monkeypatch):
    tr = trace(toy_translator(attention="dot"), SENTENCE, gradients=False)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if it were not installed
    shown = tr.slider()
    assert shown._repr_html_() == tr._repr_html_()


def test_the_step_slider_shows_one_step_at_a_time():
    require(importlib.util.find_spec("ipywidgets"), "ipywidgets is not installed (pip install -e '.[dev]')")
    import ipywidgets as widgets

    tr = trace(toy_translator(attention="dot"), SENTENCE, gradients=False)
    box = tr.slider()
    head, slider, shown = box.children
    assert isinstance(slider, widgets.IntSlider) and (slider.min, slider.max) == (1, len(tr.steps))
    assert f"step 1: “{tr.steps[0].token}”" in shown.value
    slider.value = 2
    assert f"step 2: “{tr.steps[1].token}”" in shown.value and "step 1:" not in shown.value
