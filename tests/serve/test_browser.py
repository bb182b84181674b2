"""The explorer page end to end: `python -m lookback serve` on loopback, driven by Playwright and chromium.

Skips without playwright or a system chromium, except under CI (the variable CI set), where it fails.
Every wait is on the page's state (an element, a text, a count); PATIENCE_S only bounds a hung test,
so a machine busy with other work makes the test slower, not red.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from .. import own_score
from ..helpers import TINY_TRANSFORMER, WORDS, assert_drawn, require, train_tiny

SENTENCE = "the small dog runs ."
NO_ATTENTION = "no attention: one fixed context vector for every step"
PATIENCE_S = 120  # the longest any one wait may take: the server's start, a request, an element


@pytest.fixture
def chromium() -> str:
    """The system chromium's path; skip (fail under CI) without it or without playwright."""
    require(importlib.util.find_spec("playwright"), "playwright is not installed (pip install -e '.[dev]')")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    require(path, "no chromium on PATH (apt-get install chromium)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=PATIENCE_S) as response:
        return json.loads(response.read())


def watch(page, origin: str) -> list[str]:
    """Collect the page's errors, console errors, missing files and requests that leave `origin`."""
    problems: list[str] = []

    def on_console(message):
        if message.type == "error":
            problems.append(f"console: {message.text}")

    def on_response(response):
        if response.status in (404, 500):
            problems.append(f"{response.status}: {response.url}")

    def on_request(request):
        if not request.url.startswith(origin):
            problems.append(f"off-machine: {request.url}")

    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    page.on("console", on_console)
    page.on("response", on_response)
    page.on("request", on_request)
    return problems


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real server, as the CLI starts it, with a model without attention, an additive one and
    one with a score of a test file's own (tests/own_score.py, through --plugin); yields its URL."""
    tmp_path = tmp_path_factory.mktemp("explorer")
    runs = [train_tiny(tmp_path / name, name) for name in ("none", "additive", "distance")]
    yield from serving(runs, tmp_path / "serve.log")


@pytest.fixture(scope="module")
def transformer_server(tmp_path_factory):
    """The server with a tiny attention-only model beside an additive one; yields its URL."""
    tmp_path = tmp_path_factory.mktemp("explorer_transformer")
    transformer = train_tiny(tmp_path, name="transformer", **TINY_TRANSFORMER)
    runs = [transformer, train_tiny(tmp_path, "additive")]
    yield from serving(runs, tmp_path / "serve.log")


def serving(runs, log):
    """Start `lookback serve` on the runs, wait until it answers, yield its URL, then stop it."""
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    plugin = ["--plugin", own_score.__file__]
    cmd = [sys.executable, "-m", "lookback", *plugin, "serve", *map(str, runs), "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lookback serve exited with status {proc.returncode}:\n{log.read_text()}")
            try:
                fetch(url + "api/models")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    pytest.fail(f"lookback serve did not answer within {PATIENCE_S} s:\n{log.read_text()}")
                time.sleep(0.2)
        assert url in log.read_text()  # serve() prints where to go
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def translated(browser, server: str, text: str, model: str, models: int, width: int = 1300):
    """A new page of the explorer, once it lists `model`, with `text` translated greedily by all
    `models`; returns the page and the list that collects its problems (`watch`)."""
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": width, "height": 900})
    page.set_default_timeout(PATIENCE_S * 1000)  # every action and wait_for: page state, not a clock
    problems = watch(page, server)
    page.goto(server)
    expect(page.locator("#models")).to_contain_text(model)
    page.fill("#text", text)
    page.select_option("#beam", "1")
    page.click("#go")
    expect(page.locator("#status")).to_have_text(f"beam 1: {models} models")
    return page, problems


def test_the_page_translates_highlights_and_traces(chromium, server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    expected = fetch(server + "api/translate", {"text": SENTENCE, "beam": 3, "nbest": 3})["results"]
    attn = next(r for r in expected if r["model"] == "additive")
    expect.set_options(timeout=PATIENCE_S * 1000)  # expect(...) retries until the page agrees, or this

    def text(locator, value):  # the element's text as a reader sees it, once the page shows it
        expect(locator).to_have_text(value, use_inner_text=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, timeout=PATIENCE_S * 1000)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.set_default_timeout(PATIENCE_S * 1000)  # every action and wait_for: page state, not a clock
            problems = watch(page, server)
            page.goto(server)
            expect(page.locator("#models")).to_contain_text("additive")

            # Translate: one column per model; the heatmap has a row per output token.
            page.fill("#text", SENTENCE)
            page.select_option("#beam", "3")
            page.click("#go")
            text(page.locator("#status"), "beam 3: 3 models")  # set once the results are on the page
            col = page.locator('.model[data-model="additive"]')
            text(col.locator(".translation"), attn["translation"])
            expect(col.locator("tr.heat-row")).to_have_count(len(attn["tokens"]))
            expect(col.locator("th.src")).to_have_count(len(attn["src_tokens"]))
            expect(col.locator(".candidates li")).to_have_count(len(attn["candidates"]))
            plain = page.locator('.model[data-model="none"]')
            expect(plain.locator(".heatmap")).to_have_count(0)
            text(plain.locator(".note"), NO_ATTENTION)

            # Hover a cell: the source headers take the row's weights, the info line names the pair.
            expect(col.locator("th.src.lit")).to_have_count(0)
            col.locator('td.cell[data-row="0"][data-col="2"]').hover()
            expect(col.locator("th.src.lit")).to_have_count(len(attn["src_tokens"]))
            expect(col.locator("td.cell.hover")).to_have_count(1)
            weight = attn["attention_matrix"][0][2]
            text(col.locator(".info"), f"{attn['src_tokens'][2]} → {attn['tokens'][0]} {weight:.2f}")
            text(col.locator('th.src[data-col="2"] .w'), f"{weight:.2f}")

            # Click an output token: that step's trace appears below the heatmap.
            col.locator('th.tgt[data-row="0"]').click()
            step = col.locator(".trace .step")
            expect(step).to_have_attribute("data-step", "1")
            expect(col.locator(".trace-table tbody tr")).to_have_count(len(attn["src_tokens"]))
            expect(col.locator(".trace .top li")).to_have_count(5)
            expect(step).to_contain_text("most attended:", use_inner_text=True)
            # beside the weights, each source token's gradient attribution, and the sentence's notes
            expect(col.locator(".trace-table .grad-bar")).to_have_count(len(attn["src_tokens"]))
            expect(step.locator(".agreement")).to_contain_text("attention vs gradients over the")
            expect(step.locator(".diagnostics")).to_contain_text("of the weight on </s> and punctuation")

            # Without attention a token still gives its trace, whose context never changes.
            plain.locator('button.tok[data-row="0"]').click()
            expect(plain.locator(".trace .step")).to_contain_text("no attention", use_inner_text=True)
            expect(plain.locator(".trace .grad-bar")).to_have_count(len(attn["src_tokens"]))  # same source
            expect(plain.locator(".trace .agreement")).to_have_count(0)

            # An error of the API shows in the page.
            page.fill("#text", "   ")
            page.press("#text", "Enter")  # Enter submits too
            text(page.locator("#error"), "text is empty: type a sentence to translate")

            # Translate again; wait for the new columns before clicking in them, since clicks in the
            # old ones would be lost when the answer replaces them.
            shot = tmp_path / "explorer.png"
            page.fill("#text", SENTENCE)
            page.click("#go")
            text(page.locator("#status"), "beam 3: 3 models")
            expect(page.locator("#error")).to_be_hidden()
            col.locator('th.tgt[data-row="2"]').click()
            plain.locator('button.tok[data-row="2"]').click()
            expect(col.locator('.trace .step[data-step="3"]')).to_be_visible()
            expect(plain.locator('.trace .step[data-step="3"]')).to_be_visible()
            col.locator('td.cell[data-row="2"][data-col="2"]').hover()
            expect(col.locator("td.cell.hover")).to_have_count(1)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert_drawn(shot)  # the page as a person sees it, drawn
    expected_422 = "console: Failed to load resource: the server responded with a status of 422"
    assert [m for m in problems if not m.startswith(expected_422)] == []  # the empty text, on purpose


# A sentence of 40 words: every source column of every heatmap shows at once, without scrolling.
LONG_SENTENCE = " ".join(sorted(WORDS)[i % len(WORDS)] for i in range(40)) + " ."
COLUMNS = """(cards) => cards.map((card) => {
  const wrap = card.querySelector(".heat-wrap");
  if (!wrap) return null;
  const box = wrap.getBoundingClientRect();
  const heads = [...card.querySelectorAll("th.src")];
  const inside = heads.filter((th) => {
    const r = th.getBoundingClientRect();
    return r.width >= 4 && r.left >= box.left - 0.5 && r.right <= box.right + 0.5 && r.right <= innerWidth;
  });
  return {hidden: wrap.scrollWidth - wrap.clientWidth, columns: heads.length, inside: inside.length,
          titles: heads.map((th) => th.title)};
})"""


def test_a_long_sentence_shows_every_source_column_of_three_models(chromium, server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    expected = fetch(server + "api/translate", {"text": LONG_SENTENCE, "beam": 1, "nbest": 1})["results"]
    src_tokens = expected[0]["src_tokens"]
    assert len(src_tokens) >= 41
    expect.set_options(timeout=PATIENCE_S * 1000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, timeout=PATIENCE_S * 1000)
        try:
            page, problems = translated(browser, server, LONG_SENTENCE, "distance", 3, width=1600)
            expect(page.locator("#results")).to_have_class("long")  # the models stack
            cards = page.locator(".model").evaluate_all(COLUMNS)
            drawn = [c for c in cards if c is not None]
            assert len(drawn) == 2  # additive and distance; the model without attention has no heatmap
            for card in drawn:
                assert card["hidden"] <= 0  # nothing behind a scroll bar
                assert card["columns"] == card["inside"] == len(src_tokens)  # every column, in its card
                assert card["titles"] == src_tokens  # each source word on hover
            lefts = page.locator(".model").evaluate_all(
                "(cards) => cards.map((c) => c.getBoundingClientRect().left)"
            )
            assert len(lefts) == 3 and len(set(lefts)) == 1  # the models stack: one card per row
            page.screenshot(path=str(tmp_path / "long.png"), full_page=True)
        finally:
            browser.close()
    assert_drawn(tmp_path / "long.png")
    assert problems == []


def test_a_transformer_shows_every_layer_and_head_of_a_step(chromium, transformer_server, tmp_path):
    """Clicking an output token of the attention-only model: beside the step's alpha (its top layer's
    heads' mean), a strip per layer and head over the source and over the output so far, and the
    encoder's self-attention, L x H tables of S rows, behind a fold."""
    from playwright.sync_api import expect, sync_playwright

    request = {"text": SENTENCE, "beam": 1, "nbest": 1}
    results = fetch(transformer_server + "api/translate", request)["results"]
    tf = next(r for r in results if r["model"] == "transformer")
    S, L, H = len(tf["src_tokens"]), 2, TINY_TRANSFORMER["heads"]
    expect.set_options(timeout=PATIENCE_S * 1000)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, timeout=PATIENCE_S * 1000)
        try:
            page, problems = translated(browser, transformer_server, SENTENCE, "transformer", 2)
            col = page.locator('.model[data-model="transformer"]')
            expect(col.locator("tr.heat-row")).to_have_count(len(tf["tokens"]))
            col.locator('th.tgt[data-row="1"]').click()  # the second output token: two positions so far
            expect(col.locator('.trace .step[data-step="2"]')).to_be_visible()
            strips = col.locator(".trace table.heads")
            source, so_far = strips.nth(0), strips.nth(1)
            expect(source.locator("tbody tr")).to_have_count(L * H)
            expect(source.locator("td.cell")).to_have_count(L * H * S)
            expect(so_far.locator("td.cell")).to_have_count(L * H * 2)  # <s> and the first token
            expect(source.locator("tbody tr").first).to_contain_text("layer 1, head 1")
            fold = col.locator("details.encoder-self")
            fold.locator("summary").click()
            expect(fold.locator("table.heads")).to_have_count(L * H)
            expect(fold.locator("td.cell")).to_have_count(L * H * S * S)
            additive = page.locator('.model[data-model="additive"]')  # an RNN's trace has no such strips
            additive.locator('th.tgt[data-row="1"]').click()
            expect(additive.locator('.trace .step[data-step="2"]')).to_be_visible()
            expect(additive.locator(".trace table.heads")).to_have_count(0)
            page.screenshot(path=str(tmp_path / "transformer.png"), full_page=True)
        finally:
            browser.close()
    assert_drawn(tmp_path / "transformer.png")
    assert problems == []
