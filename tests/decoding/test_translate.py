"""decoding/translate.py: sentences in, Translations out; batches by length, the limits of a
search, and the model left as training had it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from lookback.data.tokenizer import EOS
from lookback.decoding.translate import TextTranslator
from lookback.model.decoder import Look
from lookback.translator import Translator

from ..helpers import toy_pairs


def test_translating_between_updates_searches_without_dropout_and_leaves_training_on(trained):
    """The trainer's translator shares the model being trained (the bench validates so): a
    search in train mode would run with dropout on, and turning it off must not stick."""
    sentences = [e for e, _ in toy_pairs(12, seed=7)]
    drops = [m for m in trained.model.modules() if isinstance(m, torch.nn.Dropout)]
    assert drops
    expected = [x.text for x in trained.translator.translate(sentences, beam=1)]
    try:
        for m in drops:
            m.p = 0.5  # with dropout on in the search, 12 outputs would not all come out the same
        trained.model.train()
        for _ in range(2):
            assert [x.text for x in trained.translator.translate(sentences, beam=1)] == expected
            assert trained.model.training and all(m.training for m in drops)
    finally:
        for m in drops:
            m.p = 0.0
        trained.model.eval()


def test_translator_handles_empty_and_overlong_input(trained, caplog):
    t = Translator.load(trained.run.path)
    with caplog.at_level("WARNING"):
        empty, long, fine = t.translate(["", "the dog runs . " * 200, "the dog runs ."], beam=2)
    assert empty.text == "" and empty.tokens == []
    assert len(long.src_tokens) == t.max_src_len  # cut, so one input cannot exhaust memory
    assert fine.text
    said = [r.getMessage() for r in caplog.records]
    assert "1 of 3 sentence(s) with over 250 tokens with </s>: cut" in said
    assert "1 of 3 sentence(s) with no source tokens: translated as empty" in said
    assert not any("empty output" in m for m in said)
    assert len(t.translate_nbest(["the dog ."], beam=2, nbest=3)[0]) == 3  # the beam grows to nbest


def test_an_empty_output_is_said_in_one_line(trained, caplog):
    t = Translator.load(trained.run.path)
    with torch.no_grad():
        t.model.decoder.out.bias[EOS] = 1e4  # the model now ends at once
    with caplog.at_level("WARNING"):
        outs = t.translate(["the dog runs .", "a cat ."], beam=1)
    assert [o.text for o in outs] == ["", ""]
    assert [r.getMessage() for r in caplog.records] == ["2 of 2 sentence(s) with empty output"]


def test_each_translation_shows_its_pieces_and_attention_and_nbest_is_best_first(trained):
    t = TextTranslator(trained.model, trained.src_tok, trained.tgt_tok, trained.cfg.decode, trained.cfg)
    [outs] = t.translate_nbest(["the big dog sees a small cat ."], beam=4, nbest=3)
    assert len(outs) == 3 and [o.score for o in outs] == sorted((o.score for o in outs), reverse=True)
    for o in outs:
        assert o.tokens == t.tgt_tok.pieces(o.ids) and o.src_tokens == t.src_tok.pieces(o.src_ids)
        assert o.src_ids[-1] == EOS  # the model was trained with data.src_eos
        assert o.attention.shape == (len(o.tokens), len(o.src_tokens))
        assert torch.allclose(o.attention.sum(-1), torch.ones(len(o.tokens)), atol=1e-5)


def test_decode_hard_attention_is_the_look_of_every_search(trained):
    t = TextTranslator(trained.model, trained.src_tok, trained.tgt_tok, trained.cfg.decode, trained.cfg)
    assert t.look == Look()
    t.decode = dataclasses.replace(t.decode, hard_attention=1)
    assert t.look == Look(top_k=1)
    for beam in (1, 3):
        [out] = t.translate(["the big dog sees a small cat ."], beam=beam)
        assert ((out.attention == 0) | (out.attention == 1)).all()


def test_a_beam_wider_than_the_vocabulary_is_refused_before_any_search(trained, monkeypatch):
    t = TextTranslator(trained.model, trained.src_tok, trained.tgt_tok, trained.cfg.decode, trained.cfg)
    monkeypatch.setattr("lookback.decoding.translate.beam_search", None)  # a search would fail otherwise
    vocab = trained.model.decoder.out.out_features
    with pytest.raises(
        ValueError, match=rf"^beam {vocab + 1} is wider than the target vocabulary \({vocab} "
    ):
        t.translate(["the dog ."], beam=vocab + 1)
