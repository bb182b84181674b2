"""Ensembles: several runs translate as one, with the mean of their next-token distributions."""

from __future__ import annotations

import io
import json

import pytest
import torch

from lookback.cli import main
from lookback.config import from_dict
from lookback.data.batch import pad
from lookback.decoding.ensemble import Ensemble
from lookback.training.checkpoint import load_checkpoint
from lookback.training.train import train
from lookback.translator import Translator

from ..helpers import tiny_model, tiny_train_config, train_tiny

SOURCES = ["the dog sees the cat .", "a man runs .", "the cat sleeps in the house ."]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ensemble")
    return train_tiny(tmp, "additive"), train_tiny(tmp, "none")  # same data, same tokenizers


def test_one_step_is_the_log_of_the_mean_of_the_members_probabilities():
    a, b = tiny_model(seed=1), tiny_model(seed=2, attention="general")
    src, src_len = pad([[5, 6, 7], [8, 9]])
    y = torch.tensor([[1], [1]])
    ens = Ensemble([a, b]).eval()
    enc = ens.encode(src, src_len)
    out = ens.decoder(y, enc, ens.decoder.init_state(enc))
    p = [
        m.decoder(y, e, m.decoder.init_state(e))
        for m, e in ((a, a.encode(src, src_len)), (b, b.encode(src, src_len)))
    ]
    by_hand = ((p[0].logits.softmax(-1) + p[1].logits.softmax(-1)) / 2).log()  # (B, 1, V)
    torch.testing.assert_close(out.logits, by_hand)
    torch.testing.assert_close(out.alpha, (p[0].alpha + p[1].alpha) / 2)  # the members' mean
    torch.testing.assert_close(out.logits.exp().sum(-1), torch.ones(2, 1))


def test_an_ensemble_of_one_model_twice_translates_as_the_model(runs):
    alone = Translator.load(runs[0])
    twice = Translator.ensemble([runs[0], runs[0]])
    for beam in (1, 3):
        a, b = alone.translate(SOURCES, beam=beam), twice.translate(SOURCES, beam=beam)
        assert [x.ids for x in a] == [x.ids for x in b]
        assert [x.score for x in a] == pytest.approx([x.score for x in b], abs=1e-5)
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x.attention, y.attention)


def test_an_ensemble_with_and_without_attention_translates_and_aligns(runs, capsys):
    both = Translator.ensemble(list(runs))
    outs = both.translate(SOURCES, beam=3)
    assert all(o.text for o in outs)
    for o in outs:  # the attention member's weights: one row per output token, rows sum to 1
        assert o.attention.shape == (len(o.tokens), len(o.src_tokens))
        torch.testing.assert_close(o.attention.sum(-1), torch.ones(len(o.tokens)))
    capsys.readouterr()
    assert main(["evaluate", str(runs[0]), str(runs[1]), "--beam", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 20


def test_translate_takes_several_runs_as_an_ensemble(runs, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(SOURCES) + "\n"))
    assert main(["translate", str(runs[0]), str(runs[1]), "--beam", "2"]) == 0
    expected = [o.text for o in Translator.ensemble(list(runs)).translate(SOURCES, beam=2)]
    assert capsys.readouterr().out.splitlines() == expected


def test_members_with_other_vocabularies_are_refused_in_one_line(runs, tmp_path):
    raw = tiny_train_config(tmp_path, train={"run_dir": str(tmp_path / "other"), "max_steps": 2})
    raw["tokenizer"]["vocab_size"] = 20  # fewer target words
    other = train(from_dict(raw))
    with pytest.raises(ValueError) as err:
        Translator.ensemble([runs[0], other])
    assert str(err.value) == (
        f"{other}: its source and target vocabulary differ from {runs[0]}'s; "
        "the members of an ensemble must share them"
    )


def test_averaging_keeps_the_last_checkpoints_and_writes_their_mean(tmp_path, capsys):
    raw = tiny_train_config(tmp_path, train={"max_steps": 40, "valid_every": 10, "keep_checkpoints": 3})
    run_dir = train(from_dict(raw))
    kept = sorted(p.name for p in run_dir.glob("step_*.pt"))
    assert kept == ["step_00000020.pt", "step_00000030.pt", "step_00000040.pt"]  # the 3 newest of 4
    assert main(["average", str(run_dir), "--last", "2"]) == 0
    assert "the mean of 2 checkpoints, step_00000030.pt to step_00000040.pt" in capsys.readouterr().out
    averaged = load_checkpoint(run_dir / "averaged.pt")
    a, b = (load_checkpoint(run_dir / name)["model"] for name in kept[1:])
    for key, value in averaged["model"].items():
        torch.testing.assert_close(value, (a[key] + b[key]) / 2)
    assert averaged["averaged"] == kept[1:]
    t = Translator.load(run_dir, checkpoint="averaged")  # a model like any other
    assert t.translate(SOURCES[:1])[0].text
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--checkpoint", "averaged", "--beam", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sentences"] == 20


def test_averaging_without_kept_checkpoints_is_one_line(runs, capsys):
    assert main(["average", str(runs[0])]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"lookback: error: {runs[0]}: 0 kept checkpoint(s) (step_N.pt), and averaging needs 2 or more; "
        "train with --set train.keep_checkpoints=N"
    ]
