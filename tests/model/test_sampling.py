"""Scheduled sampling (sampling.py): the decays by hand, ratio 1 is teacher forcing exactly, ratio 0
feeds the model's own tokens, and training logs eps as it falls."""

import json
import math

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.data.tokenizer import PAD
from lookback.model.sampling import mixed_inputs, sampled_forward, truth_probability
from lookback.model.seq2seq import LossTerms

from ..helpers import assert_source_rows_learn, tiny_model, tiny_train_config
from .test_seq2seq import PAIRS


def test_each_decay_by_hand():
    assert truth_probability(123, 0.75) == 0.75  # none: the ratio itself
    assert truth_probability(0, 0.0, "linear", 1000) == 1.0
    assert truth_probability(250, 0.0, "linear", 1000) == 0.75
    assert truth_probability(5000, 0.2, "linear", 1000) == 0.2  # the floor
    assert truth_probability(10, 0.0, "exponential", 0.9) == pytest.approx(0.9**10)
    assert truth_probability(1000, 0.0, "inverse_sigmoid", 100) == pytest.approx(100 / (100 + math.exp(10)))
    assert truth_probability(10**9, 0.1, "inverse_sigmoid", 100) == 0.1  # no overflow


@pytest.mark.parametrize("attention,feeding", [("none", False), ("additive", False), ("additive", True)])
def test_ratio_one_is_teacher_forcing_exactly(attention, feeding):
    model = tiny_model(attention=attention, input_feeding=feeding).eval()
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    forced = model.decoder(b.tgt_in, enc, model.decoder.init_state(enc))
    sampled = sampled_forward(model.decoder, b.tgt_in, enc, model.decoder.init_state(enc), 1.0)
    assert torch.allclose(forced.logits, sampled.logits, atol=1e-6)
    model.train()  # and the loss, with dropout, draws the same masks: ratio 1 takes the same path
    losses = []
    for ratio in (None, 1.0):
        torch.manual_seed(5)
        kw = {} if ratio is None else {"teacher_forcing": ratio}
        losses.append(float(model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(**kw)).detach()))
    assert losses[0] == losses[1]


@pytest.mark.parametrize("attend_from", ["current", "previous"])
def test_two_pass_sampling_with_ratio_one_is_teacher_forcing_exactly(attend_from):
    """No first pass and no draws at eps = 1: the same loss and gradients, bit for bit, with dropout
    drawing the same masks, and the random generator left where teacher forcing leaves it."""
    b = collate(PAIRS)
    results = []
    for kw in ({}, {"teacher_forcing": 1.0}):
        model = tiny_model(attention="additive", attend_from=attend_from, dropout=0.3).train()
        torch.manual_seed(5)
        loss = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(**kw))
        loss.backward()
        results.append((float(loss), [p.grad for p in model.parameters()], torch.rand(1)))
    (tf, g_tf, r_tf), (ss, g_ss, r_ss) = results
    assert tf == ss and torch.equal(r_tf, r_ss)
    assert all(torch.equal(x, y) for x, y in zip(g_tf, g_ss, strict=True))


def test_two_pass_mixes_truth_and_first_pass_draws_and_keeps_padding():
    model = tiny_model(attention="additive").train()  # dropout 0: the first pass is deterministic
    b = collate(PAIRS * 4)
    enc = model.encode(b.src, b.src_len)
    state = model.decoder.init_state(enc)
    with torch.no_grad():
        p = torch.softmax(model.decoder(b.tgt_in[:, :-1], enc, state).logits, -1)  # (B, T-1, V)
    pad = b.tgt_in == PAD
    for eps in (0.0, 0.5):
        torch.manual_seed(0)
        mixed = mixed_inputs(model.decoder, b.tgt_in, enc, state, eps)
        assert torch.equal(mixed[:, 0], b.tgt_in[:, 0])  # <s> is always given
        assert torch.equal(mixed[pad], b.tgt_in[pad])  # padding stays padding
        changed = (mixed != b.tgt_in)[:, 1:]  # (B, T-1): steps fed the model's own token
        assert changed.any() and (eps == 0 or (~changed & ~pad[:, 1:]).any())
        drawn = mixed[:, 1:][changed]  # each a token the first pass gave weight to at its step
        assert (p[changed].gather(1, drawn.unsqueeze(1)) > 0).all()
    # the loss's two passes: only the second takes gradient, and it reaches the encoder
    model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(teacher_forcing=0.5)).backward()
    assert_source_rows_learn(model, b.src)


def test_ratio_zero_feeds_the_models_own_samples():
    model = tiny_model(attention="additive").eval()
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    fed = []
    decoder_forward = model.decoder.forward

    def spy(y_prev, *args, **kw):
        fed.append(y_prev.clone())
        return decoder_forward(y_prev, *args, **kw)

    model.decoder.forward = spy
    torch.manual_seed(0)
    out = sampled_forward(model.decoder, b.tgt_in, enc, model.decoder.init_state(enc), 0.0)
    assert torch.equal(fed[0], b.tgt_in[:, :1])  # <s> is always given
    torch.manual_seed(0)
    for t in range(1, b.tgt_in.size(1)):  # each later input is a draw from the step before
        p = torch.softmax(out.logits[:, t - 1].float(), -1)
        assert (p.gather(1, fed[t]) > 0).all()
    assert not all(torch.equal(fed[t], b.tgt_in[:, t : t + 1]) for t in range(1, b.tgt_in.size(1)))


def test_the_loss_with_sampling_trains_and_reaches_the_encoder():
    model = tiny_model(attention="additive").train()
    b = collate(PAIRS)
    model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(teacher_forcing=0.5)).backward()
    assert_source_rows_learn(model, b.src)


@pytest.mark.parametrize("stepwise", [False, True])
def test_training_logs_eps_as_it_falls(tmp_path, stepwise):
    from lookback.training.train import train

    raw = tiny_train_config(
        tmp_path,
        train={
            "run_dir": str(tmp_path / "run"),
            "max_steps": 40,
            "valid_every": 40,
            "log_every": 10,
            "teacher_forcing": 0.5,
            "sampling_decay": "linear",
            "sampling_k": 40,
            "stepwise": stepwise,  # two passes, or Bengio's draws one step at a time
        },
    )
    run = train(from_dict(raw))
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    eps = [x["teacher_forcing"] for x in lines if x["kind"] == "train"]
    assert eps == sorted(eps, reverse=True) and eps[0] < 1 and eps[-1] == 0.5


def test_sampling_config_checks():
    with pytest.raises(
        ConfigError, match="train.sampling_decay: linear decays to train.teacher_forcing, which is 1"
    ):
        from_dict({"train": {"sampling_decay": "linear"}})
    with pytest.raises(ConfigError, match="train.sampling_k: exponential decay k\\^i needs 0 < k < 1"):
        from_dict({"train": {"sampling_decay": "exponential", "teacher_forcing": 0.5, "sampling_k": 2}})
    with pytest.raises(
        ConfigError, match="train.sampling_k: inverse sigmoid k / \\(k \\+ exp\\(i / k\\)\\) needs k >= 1"
    ):
        from_dict({"train": {"sampling_decay": "inverse_sigmoid", "teacher_forcing": 0.5, "sampling_k": 0.5}})
    with pytest.raises(ConfigError, match=r"train.teacher_forcing: got 1.5, expected a number in \[0, 1\]"):
        from_dict({"train": {"teacher_forcing": 1.5}})
