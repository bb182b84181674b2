"""lookback export: a model directory to share, with safetensors weights, read without any pickle."""

from __future__ import annotations

import json
import pickle
import shutil

import pytest
import torch

from lookback.cli import main
from lookback.config import from_dict
from lookback.runtime.export import WEIGHTS, export, is_export
from lookback.serve.app import load_model
from lookback.training.checkpoint import CheckpointError
from lookback.training.train import train
from lookback.translator import Translator

from ..helpers import tiny_train_config, train_tiny

SOURCES = ["the cat sees the dog", "a small bird sings", "the dog"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return train_tiny(tmp_path_factory.mktemp("export"), "additive")


def _same_translations(a: Translator, b: Translator, beam: int) -> None:
    for x, y in zip(a.translate(SOURCES, beam=beam), b.translate(SOURCES, beam=beam), strict=True):
        assert x.tokens == y.tokens and x.text == y.text
        assert torch.equal(x.attention, y.attention)


def test_an_export_translates_exactly_as_its_run_directory(run, tmp_path):
    out = tmp_path / "model"
    info = export(run, out)
    assert is_export(out) and not is_export(run)
    names = {p.name for p in out.iterdir()}
    assert {WEIGHTS, "config.yaml", "tokenizer.json", "model.json", "README.md"} <= names
    assert not [n for n in names if n.endswith((".pt", ".pkl", ".bin"))]
    assert info["checkpoint"] == "best.pt" and info["parameters"] > 0
    assert json.loads((out / "model.json").read_text(encoding="utf-8")) == info
    for beam in (1, 3):
        _same_translations(Translator.load(run), Translator.load(out), beam)


def test_loading_an_export_runs_no_pickle(run, tmp_path, monkeypatch):
    out = tmp_path / "model"
    export(run, out)

    def refuse(*args, **kwargs):
        raise AssertionError("an export must load without unpickling anything")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    monkeypatch.setattr(torch, "load", refuse)
    translator = Translator.load(out)
    assert translator.translate(["the cat"])[0].text
    loaded = load_model("shared", out, "best")  # what lookback serve does with it
    assert loaded.translator.translate(["the cat"])[0].text


def test_tied_embeddings_survive_the_export(tmp_path):
    raw = tiny_train_config(
        tmp_path, model={"tie_embeddings": True}, train={"max_steps": 5, "valid_every": 5}
    )
    run = train(from_dict(raw))
    export(run, tmp_path / "model")
    a, b = Translator.load(run), Translator.load(tmp_path / "model")
    assert b.model.decoder.out.weight is b.model.decoder.embed.weight  # still one tensor
    assert torch.equal(a.model.decoder.out.weight, b.model.decoder.out.weight)


def test_the_cli_exports_with_test_scores_in_the_card_and_translates_from_it(
    run, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "model"
    test = Translator.load(run).config.data.test
    assert main(["export", str(run), "-o", str(out), "--test", test, "--beam", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out}: ") and f"on {test}, beam 2" in line
    card = (out / "README.md").read_text(encoding="utf-8")
    info = json.loads((out / "model.json").read_text(encoding="utf-8"))
    assert info["test"]["beam"] == 2 and f"{info['test']['bleu']:.2f}" in card
    assert info["test"]["bleu_signature"].startswith("nrefs:1|") and info["test"]["bleu_signature"] in card
    assert "lookback train config.yaml --set train.run_dir=runs/again" in card
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("the cat sees the dog\n"))
    assert main(["translate", str(out)]) == 0
    assert capsys.readouterr().out.strip() == Translator.load(run).translate(["the cat sees the dog"])[0].text
    assert main(["export", str(run), "-o", str(out)]) == 0  # an earlier export is replaced


def test_bad_exports_are_one_line_and_lose_nothing(run, tmp_path, capsys):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"busy: exists and is not an export; choose a new or empty directory$"
    ):
        export(run, busy)
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    with pytest.raises(ValueError, match="not the run directory"):
        export(run, run)
    (tmp_path / "a_file").write_text("mine", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a_file/model: cannot make the export's directory \(Not a dir"):
        export(run, tmp_path / "a_file" / "model")
    assert (tmp_path / "a_file").read_text(encoding="utf-8") == "mine"

    out = tmp_path / "model"
    export(run, out)
    assert main(["translate", str(out), "--checkpoint", "last"]) == 2
    assert capsys.readouterr().err.strip().endswith("an export has one set of weights, no 'last'")

    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    (damaged / WEIGHTS).write_bytes((out / WEIGHTS).read_bytes()[:100])
    with pytest.raises(CheckpointError, match=rf"^{damaged / WEIGHTS}: not readable safetensors weights \("):
        Translator.load(damaged)

    other = tmp_path / "other"
    shutil.copytree(out, other)
    config = (other / "config.yaml").read_text(encoding="utf-8")
    (other / "config.yaml").write_text(
        config.replace("hidden_size: 24", "hidden_size: 32", 1), encoding="utf-8"
    )
    with pytest.raises(CheckpointError, match=r"model.safetensors: "):
        Translator.load(other)
