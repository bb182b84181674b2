"""data.src_eos: sources end with </s>, in training, translation, the trace, the plots and the explorer."""

from __future__ import annotations

import shutil

import pytest
import torch
from fastapi.testclient import TestClient

from lookback.config import from_dict
from lookback.data.batch import encode_corpus
from lookback.data.tokenizer import EOS, WordTokenizer
from lookback.explain.alignment import merge_words
from lookback.explain.trace import trace
from lookback.serve.app import create_app
from lookback.training.train import Trainer, train
from lookback.translator import Translator

from ..helpers import tiny_train_config


def test_encode_corpus_ends_each_source_with_eos_when_asked():
    tok = WordTokenizer("en", ["a", "b"])
    plain = encode_corpus(["a b", "b"], ["a", "b a"], tok, tok)
    ended = encode_corpus(["a b", "b"], ["a", "b a"], tok, tok, src_eos=True)
    assert [s for s, _ in ended.pairs] == [[*s, EOS] for s, _ in plain.pairs]
    assert [t for _, t in ended.pairs] == [t for _, t in plain.pairs]  # targets get theirs in collate


@pytest.fixture(scope="module", params=[True, False], ids=["src_eos", "plain"])
def run(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("src_eos")
    raw = tiny_train_config(tmp, train={"max_steps": 30, "valid_every": 30})
    raw["data"]["src_eos"] = request.param
    trainer = Trainer(from_dict(raw))
    trainer.train()
    return trainer.run.path, request.param


def test_translation_trace_and_explorer_show_the_source_end(run):
    run_dir, src_eos = run
    translator = Translator.load(run_dir)
    expected = ["the", "dog", "runs", "."] + (["</s>"] if src_eos else [])
    out = translator.translate(["the dog runs ."], beam=3)[0]
    assert out.src_tokens == expected
    assert out.attention.shape == (len(out.tokens), len(expected))
    tr = trace(translator, "the dog runs .")
    assert tr.src_tokens == expected and all(len(step.weights) == len(expected) for step in tr.steps)
    client = TestClient(create_app([str(run_dir)]))
    result = client.post("/api/translate", json={"text": "the dog runs ."}).json()["results"][0]
    assert result["src_tokens"] == expected
    assert all(len(row) == len(result["src_tokens"]) for row in result["attention_matrix"])


def test_merging_pieces_into_words_keeps_the_source_end_a_word_of_its_own():
    pieces = ["▁le", "▁chi", "en", "</s>"]
    weights = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    merged, words, _ = merge_words(weights, pieces, ["▁x"])
    assert words == ["le", "chien", "</s>"]
    assert merged[0].tolist() == pytest.approx([0.1, 0.5, 0.4])


def test_the_default_is_on_and_a_run_saved_before_the_option_translates_without_it(tmp_path):
    assert from_dict({}).data.src_eos is True  # chosen on Multi30k's validation sets (docs/search.md)
    raw = tiny_train_config(tmp_path, train={"max_steps": 10, "valid_every": 10})
    raw["data"]["src_eos"] = False
    run_dir = train(from_dict(raw))
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    state = torch.load(old / "best.pt", weights_only=True)
    del state["config"]["data"]["src_eos"]  # as a checkpoint from before the option was
    torch.save(state, old / "best.pt")
    loaded = Translator.load(old)
    assert loaded.config.data.src_eos is False
    same = Translator.load(run_dir).translate(["the dog runs ."], beam=3)[0]
    out = loaded.translate(["the dog runs ."], beam=3)[0]
    assert out.src_tokens == same.src_tokens == ["the", "dog", "runs", "."] and out.ids == same.ids
