"""translator.py, the API: a Translator loaded from a run directory, an export or several runs."""

from __future__ import annotations

import pytest

from lookback.errors import CheckpointError
from lookback.translator import Translator

from .helpers import toy_pairs


def test_checkpoint_round_trip_translates_identically(trained):
    sentences = [e for e, _ in toy_pairs(12, seed=7)]
    in_memory = Translator(trained.model, trained.src_tok, trained.tgt_tok, trained.cfg.decode, trained.cfg)
    loaded = Translator.load(trained.run.path, checkpoint="last")
    a = in_memory.translate(sentences, beam=3)
    b = loaded.translate(sentences, beam=3)
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.score for x in a] == pytest.approx([x.score for x in b])


def test_a_run_directory_loads_its_best_or_last_checkpoint_and_an_export_has_one(trained, tmp_path):
    from lookback.runtime.export import export

    out = tmp_path / "model"
    export(trained.run.path, out)
    assert (
        Translator.load(out).translate(["the dog runs ."])[0].text
        == Translator.load(trained.run.path).translate(["the dog runs ."])[0].text
    )
    with pytest.raises(CheckpointError, match="an export has one set of weights, no 'last'"):
        Translator.load(out, checkpoint="last")
