"""Make docs/tutorial/explorer.png: the explorer with two models side by side.

    python docs/tutorial/explorer_screenshot.py NONE_RUN ADDITIVE_RUN "sentence" ROW COL

Starts `lookback serve` on a free loopback port, translates the sentence,
hovers cell (ROW, COL) of the attention model's heatmap, opens the trace of
output token ROW, and saves a screenshot. Needs playwright and chromium.
"""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

none_run, attn_run, sentence, row, col = sys.argv[1:6]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
url = f"http://127.0.0.1:{port}/"
cmd = [
    sys.executable,
    "-m",
    "lookback",
    "serve",
    f"none={none_run}",
    f"additive={attn_run}",
    "--port",
    str(port),
]
server = subprocess.Popen(cmd)
try:
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "api/models", timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(url)
        page.fill("#text", sentence)
        page.select_option("#beam", "5")
        page.click("#go")
        attn = page.locator('.model[data-model="additive"]')
        attn.locator("tr.heat-row").first.wait_for()
        attn.locator(f'th.tgt[data-row="{row}"]').click()
        attn.locator(".trace .step").wait_for()
        attn.locator(f'td.cell[data-row="{row}"][data-col="{col}"]').hover()
        out = Path(__file__).with_name("explorer.png")
        page.screenshot(path=str(out), full_page=True)
        browser.close()
        print(out)
finally:
    server.terminate()
    server.wait()
