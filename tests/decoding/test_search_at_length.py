"""Beam search on long outputs, where a confident model exposes search errors (issue 13).

A tiny attention model learns to reverse sequences of 40-60 symbols in about 900 updates
(about 90 s on 2 cores, hence `slow`). Under the old stop rule (a sentence was done once K
hypotheses had finished) beam 5 returned a hypothesis scoring below greedy's on 5 of these
60 test sentences and beam 2 on 4; with the bound no sentence does. Since then the
Translator also asks beam search for at least greedy's output (a beam can prune greedy's
path), and the test searches as it does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lookback.config import from_dict
from lookback.data.batch import pad
from lookback.data.synth import synth_corpus
from lookback.data.tokenizer import EOS
from lookback.decoding.search import beam_search, greedy, lp
from lookback.training.train import Trainer

from ..helpers import threads

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reverse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reverse")
    sizes = {"train": 3000, "val": 20, "test": 60}
    splits = synth_corpus("reverse", tmp / "data", (40, 60), 1, sizes, vocab=12)
    raw = {
        "data": {"train": str(splits["train"]), "valid": str(splits["val"]), "test": str(splits["test"])},
        "tokenizer": {"kind": "word", "vocab_size": 100},
        "model": {
            "emb_size": 32,
            "hidden_size": 48,
            "dec_hidden_size": 48,
            "attention_size": 32,
            "dropout": 0.0,
        },
        "train": {"run_dir": str(tmp / "run"), "max_steps": 900, "valid_every": 900, "max_tokens": 2000},
    }
    raw["data"].update(src_lang="src", tgt_lang="tgt")
    raw["train"].update(lr=0.005, threads=threads(), valid_sample=0)
    trainer = Trainer(from_dict(raw))
    trainer.train()
    test = Path(str(splits["test"]))
    eos = [EOS] if trainer.cfg.data.src_eos else []  # sources as the model read them in training
    src = [
        trainer.src_tok.encode(x) + eos
        for x in test.with_suffix(".src").read_text(encoding="utf-8").splitlines()
    ]
    refs = [
        trainer.tgt_tok.encode(x) for x in test.with_suffix(".tgt").read_text(encoding="utf-8").splitlines()
    ]
    return trainer.model.eval(), src, refs


@pytest.mark.parametrize("length_penalty", [1.0, 0.0])
def test_beam_never_returns_a_hypothesis_below_greedy_and_matches_about_as_often(reverse, length_penalty):
    model, src, refs = reverse
    batch, lengths = pad(src)
    [*greedy_hyps] = greedy(model, batch, lengths)
    greedy_scores = [h.logprob / lp(len(h.tokens) + 1, length_penalty) for h in greedy_hyps]
    greedy_exact = sum(h.tokens == r for h, r in zip(greedy_hyps, refs, strict=True))
    for k in (2, 5):
        hyps = beam_search(model, batch, lengths, beam=k, length_penalty=length_penalty, at_least_greedy=True)
        best = [hs[0] for hs in hyps]  # at least greedy's outputs, as the Translator asks
        worse = [i for i, (h, g) in enumerate(zip(best, greedy_scores, strict=True)) if h.score < g - 1e-4]
        assert not worse, f"beam {k} scores below greedy on sentences {worse}"
        if k == 5:  # the search maximises the score, not matches: this model's beam 5 matched 42
            # of 60 against greedy's 43 trained in fp32, 51 against 49 in bf16 (2026-11-24)
            assert sum(h.tokens == r for h, r in zip(best, refs, strict=True)) >= greedy_exact - 2
