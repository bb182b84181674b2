"""The explorer page end to end: `python -m lookback serve` on loopback, driven by Playwright and chromium.

Skips without playwright or a system chromium, except under CI (the variable CI set), where it fails.
"""

from __future__ import annotations

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

from .helpers import train_tiny

SENTENCE = "the small dog runs ."
NO_ATTENTION = "no attention: one fixed context vector for every step"


@pytest.fixture
def chromium() -> str:
    """The system chromium's path; skip (fail under CI) without it or without playwright."""
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "playwright is not installed (pip install -e '.[dev]')"
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = reason or "no chromium on PATH (apt-get install chromium)"
    if reason and os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser test")
    if reason:
        pytest.skip(reason)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
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


@pytest.fixture
def server(tmp_path):
    """The real server, as the CLI starts it, with a model without attention and one with; yields its URL."""
    runs = [train_tiny(tmp_path / name, name) for name in ("none", "additive")]
    port = free_port()
    log = tmp_path / "serve.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lookback", "serve", *map(str, runs), "--port", str(port)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lookback serve exited with status {proc.returncode}:\n{log.read_text()}")
            try:
                fetch(url + "api/models")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    pytest.fail(f"lookback serve did not answer within 60 s:\n{log.read_text()}")
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


def test_the_page_translates_highlights_and_traces(chromium, server, tmp_path):
    from playwright.sync_api import sync_playwright

    expected = fetch(server + "api/translate", {"text": SENTENCE, "beam": 3, "nbest": 3})["results"]
    attn = next(r for r in expected if r["model"] == "additive")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            problems = watch(page, server)
            page.goto(server)
            page.wait_for_function("document.getElementById('models').textContent.includes('additive')")

            # Translate: one column per model; the heatmap has a row per output token.
            page.fill("#text", SENTENCE)
            page.select_option("#beam", "3")
            page.click("#go")
            col = page.locator('.model[data-model="additive"]')
            col.locator("table.heatmap tr.heat-row").first.wait_for()
            assert col.locator(".translation").inner_text() == attn["translation"]
            assert col.locator("tr.heat-row").count() == len(attn["tokens"])
            assert col.locator("th.src").count() == len(attn["src_tokens"])
            assert col.locator(".candidates li").count() == len(attn["candidates"])
            plain = page.locator('.model[data-model="none"]')
            assert plain.locator(".heatmap").count() == 0
            assert plain.locator(".note").inner_text() == NO_ATTENTION

            # Hover a cell: the source headers take the row's weights, the info line names the pair.
            assert col.locator("th.src.lit").count() == 0
            col.locator('td.cell[data-row="0"][data-col="2"]').hover()
            assert col.locator("th.src.lit").count() == len(attn["src_tokens"])
            assert col.locator("td.cell.hover").count() == 1
            weight = attn["attention_matrix"][0][2]
            info = f"{attn['src_tokens'][2]} → {attn['tokens'][0]} {weight:.2f}"
            assert col.locator(".info").inner_text() == info
            assert col.locator('th.src[data-col="2"] .w').inner_text() == f"{weight:.2f}"

            # Click an output token: that step's trace appears below the heatmap.
            col.locator('th.tgt[data-row="0"]').click()
            step = col.locator(".trace .step")
            step.wait_for()
            assert step.get_attribute("data-step") == "1"
            assert col.locator(".trace-table tbody tr").count() == len(attn["src_tokens"])
            assert col.locator(".trace .top li").count() == 5
            assert "most attended:" in step.inner_text()

            # Without attention a token still gives its trace, whose context never changes.
            plain.locator('button.tok[data-row="0"]').click()
            plain.locator(".trace .step").wait_for()
            assert "no attention" in plain.locator(".trace .step").inner_text()

            # An error of the API shows in the page.
            page.fill("#text", "   ")
            page.press("#text", "Enter")  # Enter submits too
            page.locator("#error").wait_for()
            assert page.locator("#error").inner_text() == "text is empty: type a sentence to translate"

            shot = tmp_path / "explorer.png"
            page.fill("#text", SENTENCE)
            page.click("#go")
            page.locator("#error").wait_for(state="hidden")
            col.locator('th.tgt[data-row="2"]').click()
            plain.locator('button.tok[data-row="2"]').click()
            col.locator('.trace .step[data-step="3"]').wait_for()
            plain.locator('.trace .step[data-step="3"]').wait_for()
            col.locator('td.cell[data-row="2"][data-col="2"]').hover()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert shot.exists() and shot.stat().st_size > 0
    expected_422 = "console: Failed to load resource: the server responded with a status of 422"
    assert [m for m in problems if not m.startswith(expected_422)] == []  # the empty text, on purpose
