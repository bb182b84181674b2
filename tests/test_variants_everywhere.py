"""Issue 15's variants in every command: a tiny model trained with local_p attention, coverage (score,
loss and beam penalty), Bahdanau's readout and scheduled sampling, then translated, evaluated,
explained, plotted and served; exact zeros and unscored positions shown as such."""

import dataclasses
import json

import pytest
import sacrebleu
import torch
from fastapi.testclient import TestClient

from lookback.cli import main
from lookback.config import from_dict
from lookback.data.read import read_parallel
from lookback.serve.app import create_app
from lookback.translator import Translator

from .helpers import tiny_train_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from lookback.training.train import train

    tmp = tmp_path_factory.mktemp("variants")
    raw = tiny_train_config(
        tmp,
        model={
            "attention": "additive",
            "window": "local_p",
            "window_size": 1,
            "coverage": True,
            "attend_from": "previous",
            "readout": "bahdanau",
        },
        train={
            "run_dir": str(tmp / "run"),
            "max_steps": 80,
            "valid_every": 40,
            "coverage_loss": 0.5,
            "teacher_forcing": 0.8,
            "sampling_decay": "linear",
            "sampling_k": 80,
        },
        decode={"beam": 3, "batch_size": 16, "coverage_penalty": 0.2},
    )
    return train(from_dict(raw))


SENTENCE = "the small dog sees a big cat in the park ."


def test_the_translator_keeps_each_step_inside_its_window(run):
    translator = Translator.load(run)
    assert translator.decode.coverage_penalty == 0.2
    (t,) = translator.translate([SENTENCE])
    assert t.attention.shape == (len(t.tokens), len(t.src_tokens))
    assert ((t.attention > 0).sum(-1) <= 3).all()  # 2D + 1 = 3 positions
    assert (t.attention == 0).any()  # exact zeros outside the window
    assert torch.allclose(t.attention.sum(-1), torch.ones(len(t.tokens)), atol=1e-5)


def test_translate_evaluate_explain_and_plot_from_the_cli(run, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(SENTENCE + "\n"))
    assert main(["translate", str(run), "--coverage-penalty", "1.0"]) == 0
    translator = Translator.load(run)
    translator.decode = dataclasses.replace(translator.decode, coverage_penalty=1.0)
    assert capsys.readouterr().out == translator.translate([SENTENCE])[0].text + "\n"
    hyps = tmp_path / "hyps.txt"
    assert main(["evaluate", str(run), "--json", "-o", str(hyps)]) == 0
    data = translator.config.data  # the run's data.test: its references
    refs = read_parallel(data.test, data.src_lang, data.tgt_lang)[1]
    want = sacrebleu.corpus_bleu(hyps.read_text(encoding="utf-8").splitlines(), [refs]).score
    assert json.loads(capsys.readouterr().out)["bleu"] == pytest.approx(want)  # sacreBLEU of its outputs
    assert main(["explain", str(run), SENTENCE, "--step", "2"]) == 0
    out = capsys.readouterr().out
    assert "local_p window" in out and "not scored" in out and "0 exactly" in out
    plot = tmp_path / "a.png"
    assert main(["attention", str(run), SENTENCE, "-o", str(plot)]) == 0
    assert plot.stat().st_size > 1000
    with pytest.raises(SystemExit):
        main(["translate", str(run), "--coverage-penalty", "-1"])
    assert "--coverage-penalty" in capsys.readouterr().err


def test_the_explorer_traces_the_window(run):
    client = TestClient(create_app([str(run)]))
    response = client.post("/api/explain", json={"model": "run", "text": SENTENCE})
    assert response.status_code == 200
    trace = response.json()
    assert trace["window"] == "local_p" and trace["normalizer"] == "softmax"
    for step in trace["steps"]:
        unscored = [i for i, e in enumerate(step["scores"]) if e is None]
        assert unscored and all(step["weights"][i] == 0 for i in unscored)  # null score, weight 0
        assert abs(sum(step["weights"]) - 1) < 1e-5
