"""Every score learns (issue 36): none starts saturated at the shipped sizes, and a tiny model
with each one, layer-normalised as the shipped configs are, learns the toy translation."""

import json

import pytest
import torch

from lookback.config import from_dict
from lookback.explain.diagnostics import probe
from lookback.model.seq2seq import build_model

from ..helpers import tiny_train_config

SCORES = {
    "dot": {"attention": "dot", "dec_hidden_size": 512},
    "general": {"attention": "general"},
    "additive": {"attention": "additive"},
    "scaled_dot": {"attention": "scaled_dot", "dec_hidden_size": 512},
    "multihead": {"attention": "scaled_dot", "heads": 4},
}


def _random_pairs(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Sentences of 5-30 random pieces: the lengths of Multi30k and beyond."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 31, (n, 2), generator=g).tolist()
    ids = lambda n: torch.randint(4, vocab, (n,), generator=g).tolist()  # noqa: E731
    return [(ids(s), ids(t)) for s, t in lengths]


@pytest.mark.parametrize("attend_from", ["current", "previous"])
@pytest.mark.parametrize("score", list(SCORES))
def test_no_score_starts_saturated_at_the_shipped_sizes(score, attend_from):
    """Embeddings 256, a bidirectional GRU of 256 per direction with layer-normalised states, the
    decoder of each shipped config: the weights start near uniform (entropy 1), far from one-hot
    (0), and the scores' spread is below 1, where softmax still passes gradient back."""
    cfg = from_dict({"model": {**SCORES[score], "layer_norm": True, "attend_from": attend_from}}).model
    torch.manual_seed(0)
    model = build_model(cfg, 1000, 1000)
    stats = probe(model, _random_pairs(16, 1000), torch.device("cpu"))
    assert stats["alpha_entropy"] > 0.9 and stats["score_spread"] < 1.0, stats


@pytest.mark.parametrize("score", list(SCORES) + ["local_p", "previous_dot", "previous_general"])
def test_a_tiny_model_with_each_score_learns_the_toy_translation(tmp_path, score):
    from lookback.training.train import train

    more = {
        "local_p": {"window": "local_p", "window_size": 2},
        "previous_dot": {"attention": "dot", "attend_from": "previous"},
        "previous_general": {"attention": "general", "attend_from": "previous"},
    }
    model = more.get(score) or SCORES[score]
    sizes = (
        {"dec_hidden_size": 48}
        if model.get("attention") in ("dot", "scaled_dot") and "heads" not in model
        else {}
    )
    raw = tiny_train_config(
        tmp_path,
        model={**model, **sizes, "layer_norm": True},
        train={"run_dir": str(tmp_path / "run"), "max_steps": 300, "valid_every": 100},
    )
    run = train(from_dict(raw))
    valid = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "valid"
    ]
    assert valid[-1]["bleu"] > 80.0, [r["bleu"] for r in valid]
    assert valid[-1]["alpha_diagonal"] > valid[0]["alpha_diagonal"] or valid[0]["alpha_diagonal"] > 0.8
