"""Attention statistics: entropy and diagonal weight, by hand and while a tiny model learns."""

from __future__ import annotations

import json

import pytest
import torch

from lookback.diagnostics import attention_stats
from lookback.tokenizer import PAD

from .helpers import train_tiny


def test_uniform_weights_have_entropy_one_and_half_their_weight_near_the_diagonal():
    alpha = torch.full((1, 2, 4), 0.25)  # T = 2 steps over S = 4 tokens
    # diagonal positions (t + 1/2) 4 / 2 - 1/2 = 0.5 and 2.5: tokens 0-1, then 2-3, within one
    stats = attention_stats(alpha, torch.tensor([4]), torch.tensor([[7, 2]]))
    assert stats == pytest.approx({"alpha_entropy": 1.0, "alpha_diagonal": 0.5})


def test_one_hot_weights_on_and_off_the_diagonal():
    eye = torch.eye(3).unsqueeze(0)  # target step t looks at source token t
    stats = attention_stats(eye, torch.tensor([3]), torch.tensor([[7, 8, 2]]))
    assert stats == pytest.approx({"alpha_entropy": 0.0, "alpha_diagonal": 1.0})
    anti = eye.flip(-1)  # t looks at 2 - t: only the middle step is within one of the diagonal
    assert attention_stats(anti, torch.tensor([3]), torch.tensor([[7, 8, 2]]))[
        "alpha_diagonal"
    ] == pytest.approx(1 / 3)


def test_padding_and_one_token_sources_are_left_out():
    alpha = torch.zeros(3, 2, 4)
    alpha[0] = 0.25  # 4 real tokens, uniform, 2 real steps
    alpha[1, :, 0] = 1.0  # 1 real token: no choice, left out
    alpha[2, 0, :2] = torch.tensor([1.0, 0.0])  # 2 real tokens, one real step, one-hot
    alpha[2, 1, :2] = 0.5  # a padding step: left out
    tgt_out = torch.tensor([[7, 2], [7, 2], [2, PAD]])
    stats = attention_stats(alpha, torch.tensor([4, 1, 2]), tgt_out)
    # entropies 1, 1 and 0 over three steps; diagonal: 0.5, 0.5, and 1 (d = 0.5: both tokens)
    assert stats == pytest.approx({"alpha_entropy": 2 / 3, "alpha_diagonal": 2 / 3})


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_training_logs_how_attention_learns_to_look(tmp_path, attention):
    run_dir = train_tiny(tmp_path, attention)
    valid = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    if attention == "none":
        assert all("alpha_entropy" not in r for r in valid)
        return
    first, last = valid[0], valid[-1]
    # the toy lexicon translates word by word, in order: the weights sharpen onto the diagonal
    assert last["alpha_entropy"] < first["alpha_entropy"] and last["alpha_diagonal"] > first["alpha_diagonal"]
