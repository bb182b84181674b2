"""Guided alignment: the diagonal prior and its loss by hand, the annealed weight, and a
model that looks at the diagonal sooner with it."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lookback.config import TrainConfig, from_dict
from lookback.data.tokenizer import PAD
from lookback.model.guided import diagonal_prior, guide_at, guided_loss
from lookback.model.seq2seq import LossTerms

from ..helpers import tiny_model, tiny_train_config


def test_the_prior_is_a_gaussian_around_the_diagonal_over_real_tokens_only():
    # S = T = 3: the diagonal is at 0, 1, 2; a fourth source column is padding
    g = diagonal_prior(torch.tensor([3]), torch.tensor([[7, 8, 2]]), S=4)
    z = 1 + math.exp(-0.5) + math.exp(-2)  # step 0: distances 0, 1, 2 (sigma 1)
    assert g[0, 0].tolist() == pytest.approx([1 / z, math.exp(-0.5) / z, math.exp(-2) / z, 0.0])
    w = 1 + 2 * math.exp(-0.5)  # step 1: distances 1, 0, 1
    assert g[0, 1].tolist() == pytest.approx([math.exp(-0.5) / w, 1 / w, math.exp(-0.5) / w, 0.0])
    assert g[0].sum(-1).tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_the_loss_is_the_cross_entropy_from_the_prior_over_real_steps():
    alpha = torch.tensor([[[0.5, 0.5], [0.25, 0.75]]])  # (B 1, T 2, S 2)
    tgt_out = torch.tensor([[2, PAD]])  # one real step: d = (0 + 1/2) 2 / 1 - 1/2 = 0.5
    g = diagonal_prior(torch.tensor([2]), tgt_out, S=2)
    assert g[0, 0].tolist() == pytest.approx([0.5, 0.5])  # midway: equal weights
    loss = guided_loss(alpha, torch.tensor([2]), tgt_out)
    assert float(loss) == pytest.approx(math.log(2))  # -(0.5 log 0.5 + 0.5 log 0.5); the padding step adds 0


def test_the_weight_falls_linearly_to_zero():
    cfg = TrainConfig(guide=2.0, guide_updates=4)
    assert [guide_at(cfg, s) for s in range(1, 7)] == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0, 0.0])
    assert guide_at(TrainConfig(), 1) == 0.0  # off by default


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_the_model_loss_adds_the_weighted_guide_only_when_it_attends(attention):
    model = tiny_model(attention=attention)
    src = torch.tensor([[5, 6, 7, 2], [5, 6, 2, PAD]])
    src_len = torch.tensor([4, 3])
    tgt_in = torch.tensor([[1, 9, 10, 11], [1, 9, 10, PAD]])
    tgt_out = torch.tensor([[9, 10, 11, 2], [9, 10, 2, PAD]])
    with torch.no_grad():
        plain = model.loss(src, src_len, tgt_in, tgt_out)
        guided = model.loss(src, src_len, tgt_in, tgt_out, LossTerms(guide=0.5))
        alpha = model(src, src_len, tgt_in).alpha
    if attention == "none":
        assert float(guided) == float(plain)
        return
    assert float(guided) == pytest.approx(float(plain + 0.5 * guided_loss(alpha, src_len, tgt_out)), rel=1e-5)


def test_guided_training_looks_at_the_diagonal_sooner(tmp_path):
    from lookback.training.train import train

    diag = {}
    for guide in (0.0, 1.0):
        raw = tiny_train_config(
            tmp_path,
            train={
                "run_dir": str(tmp_path / f"g{guide}"),
                "max_steps": 20,
                "valid_every": 20,
                "guide": guide,
            },
        )
        run = train(from_dict(raw))
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        diag[guide] = [r for r in records if r["kind"] == "valid"][-1]["alpha_diagonal"]
    assert diag[1.0] > diag[0.0] + 0.1, diag
