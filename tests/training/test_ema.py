"""train.ema: the weights' moving average, which validations decode and checkpoints keep."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from lookback.config import ConfigError, from_dict
from lookback.decoding.evaluate import validation_loss
from lookback.training.checkpoint import load_checkpoint, moving_average
from lookback.training.train import Trainer
from lookback.translator import Translator

from ..helpers import tiny_train_config, toy_pairs


def test_the_average_copies_the_first_weights_then_moves_a_tenth_of_the_way_at_decay_09():
    model = nn.Linear(1, 1, bias=False)
    ema = moving_average(model, 0.9)
    for w in (2.0, 12.0, 2.0):
        model.weight.data.fill_(w)
        ema.update_parameters(model)
    # by hand: 2; 0.9 * 2 + 0.1 * 12 = 3.0; 0.9 * 3.0 + 0.1 * 2 = 2.9
    assert ema.module.weight.item() == pytest.approx(2.9, abs=1e-6)
    assert model.weight.item() == 2.0  # the trained weights are left as they are
    assert moving_average(model, 0.0) is None


def test_a_decay_of_one_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.ema.*\[0, 1\)"):
        from_dict(tiny_train_config(tmp_path, train={"ema": 1.0}))


def test_checkpoints_keep_the_average_as_the_model_and_the_trained_weights_beside_it(tmp_path):
    cfg = from_dict(tiny_train_config(tmp_path, train={"max_steps": 30, "valid_every": 30, "ema": 0.8}))
    trainer = Trainer(cfg)
    seen = []  # the trained weights after every update
    step = trainer.train_step

    def train_step(*batches):
        loss = step(*batches)
        seen.append({k: v.clone() for k, v in trainer.model.state_dict().items()})
        return loss

    trainer.train_step = train_step
    trainer.train()
    assert len(seen) == 30
    by_hand = dict(seen[0])
    for weights in seen[1:]:
        by_hand = {k: 0.8 * by_hand[k] + 0.2 * w for k, w in weights.items()}
    state = load_checkpoint(trainer.run.path / "last.pt")
    assert state["ema_updates"] == 30
    for k, w in seen[-1].items():
        assert torch.equal(state["trained"][k], w)
        torch.testing.assert_close(state["model"][k], by_hand[k], rtol=1e-5, atol=1e-6)
    assert not torch.equal(state["model"]["decoder.out.weight"], seen[-1]["decoder.out.weight"])
    # the validation scored the average: its loss is the average's
    valid = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in valid if r["kind"] == "valid"][-1]["loss"]
    assert logged == pytest.approx(validation_loss(trainer.ema.module, trainer.valid_data.pairs, 400, "cpu"))
    assert logged != pytest.approx(validation_loss(trainer.model, trainer.valid_data.pairs, 400, "cpu"))


def test_a_resumed_run_ends_with_the_weights_and_the_average_of_an_uninterrupted_one(tmp_path):
    def config(folder, steps):
        train = {"max_steps": steps, "valid_every": 15, "ema": 0.9}
        return from_dict(tiny_train_config(tmp_path / folder, train=train))

    straight = Trainer(config("a", 40))
    straight.train()
    Trainer(config("b", 25)).train()
    resumed = Trainer(config("b", 40), resume=True)
    assert resumed.progress.step == 25 and resumed.ema.n_averaged.item() == 25
    resumed.train()
    for mine, theirs in ((straight.model, resumed.model), (straight.ema.module, resumed.ema.module)):
        a, b = mine.state_dict(), theirs.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_without_the_average_resumes_from_the_trained_weights_of_one_with_it(tmp_path):
    first = tiny_train_config(tmp_path, train={"max_steps": 20, "ema": 0.9})
    Trainer(from_dict(first)).train()
    state = load_checkpoint(tmp_path / "run" / "last.pt")
    resumed = Trainer(from_dict(tiny_train_config(tmp_path, train={"max_steps": 30})), resume=True)
    assert resumed.ema is None
    assert all(torch.equal(v, state["trained"][k]) for k, v in resumed.model.state_dict().items())


def test_a_tiny_model_with_the_average_learns_the_toy_translation(tmp_path):
    cfg = from_dict(tiny_train_config(tmp_path, train={"max_steps": 300, "valid_every": 100, "ema": 0.95}))
    trainer = Trainer(cfg)
    trainer.train()
    records = [json.loads(x) for x in (trainer.run.path / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in records if r["kind"] == "valid"][-1]["bleu"] > 80.0
    pairs = toy_pairs(50, seed=9)  # sentences it has not seen
    outs = Translator.load(trainer.run.path).translate([e for e, _ in pairs], beam=3)
    refs = [trainer.tgt_tok.decode(trainer.tgt_tok.encode(f)) for _, f in pairs]
    assert sum(o.text == r for o, r in zip(outs, refs, strict=True)) >= 35  # an untrained model gets none
