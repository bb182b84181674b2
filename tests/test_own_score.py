"""A score of one's own, written in a test file (own_score.py) and registered through the public
API: its name then works in the config, training, translation, explain, the plots and the
explorer, in this process and, through `lookback --plugin FILE`, in a command's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient

from lookback import Translator
from lookback.cli import main
from lookback.explain.trace import trace
from lookback.serve.app import create_app

from . import own_score
from .helpers import assert_drawn, train_tiny

OWN = Path(own_score.__file__)
SENTENCE = "the small dog runs ."


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("own_score"), "distance")


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_it_trains_and_translates_with_its_own_weights(run):
    first, last = records(run, "train")[0]["loss"], records(run, "valid")[-1]["loss"]
    assert last < 0.5 * first and records(run, "valid")[-1]["bleu"] > 50  # it learned, through its own score
    t = Translator.load(run)
    assert isinstance(t.model.decoder.score, own_score.DistanceScore)
    out = t.translate([SENTENCE], beam=3)[0]
    assert out.text and out.attention.shape == (len(out.tokens), len(out.src_tokens))
    assert torch.allclose(out.attention.sum(-1), torch.ones(len(out.tokens)), atol=1e-5)
    assert '<table class="heatmap' in out._repr_html_()  # and a notebook draws it


def test_explain_and_the_plot_show_it(run, tmp_path, capsys):
    tr = trace(Translator.load(run), SENTENCE)
    assert tr.attention == "distance" and all(abs(sum(st.weights) - 1) < 1e-5 for st in tr.steps)
    png = tmp_path / "attention.png"
    assert main(["attention", str(run), SENTENCE, "-o", str(png)]) == 0
    assert_drawn(png)
    assert main(["explain", str(run), SENTENCE, "--step", "1"]) == 0
    assert "attention: distance." in capsys.readouterr().out


def test_the_explorer_serves_it(run):
    client = TestClient(create_app([f"mine={run}"]))
    assert client.get("/api/models").json()[0]["attention"] == "distance"
    result = client.post("/api/translate", json={"text": SENTENCE, "beam": 2}).json()["results"][0]
    assert result["attention"] == "distance" and len(result["attention_matrix"]) == len(result["tokens"])


def command(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "lookback", *args],
        input=SENTENCE + "\n",
        capture_output=True,
        text=True,
        env=env,
    )


def test_a_command_imports_it_with_plugin_and_says_so_without(run):
    done = command("--plugin", str(OWN), "translate", str(run))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    bare = command("translate", str(run))
    assert bare.returncode == 2
    assert "model.attention: got 'distance'" in bare.stderr and "lookback --plugin FILE" in bare.stderr
    missing = command("--plugin", "no_such_file.py", "translate", str(run))
    assert missing.returncode == 2 and "--plugin no_such_file.py: no such file" in missing.stderr
