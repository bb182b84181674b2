"""Two of issue 14's recipe candidates: layer normalisation (`model.layer_norm`) of the encoder
states and of the readout, and Bahdanau's initialisation of the additive score
(`model.attention_init`). Checked by hand on a tiny model, through a tiny training run that
must learn, and against checkpoints written before the options existed."""

import json

import pytest
import torch
import torch.nn.functional as F

from lookback.config import ConfigError, from_dict
from lookback.translator import Translator

from ..helpers import assert_gradient_descends, tiny_model, tiny_train_config, toy_pairs

SRC = torch.tensor([[4, 9, 3, 12, 7], [3, 11, 5, 0, 0]])
SRC_LEN = torch.tensor([5, 3])
TGT_IN = torch.tensor([[1, 6, 7, 8], [1, 9, 10, 0]])


def test_layer_norm_gives_every_encoder_state_mean_0_and_variance_1():
    model = tiny_model(layer_norm=True)
    h = model.encoder(SRC, SRC_LEN).h  # (B, S, He); the norm's gain is 1, its bias 0, untrained
    mask = SRC != 0
    real = h[mask]  # (N, He)
    torch.testing.assert_close(real.mean(-1), torch.zeros(len(real)), atol=1e-5, rtol=0)
    torch.testing.assert_close(real.var(-1, unbiased=False), torch.ones(len(real)), atol=1e-3, rtol=0)
    plain = tiny_model(layer_norm=False).encoder(SRC, SRC_LEN).h[mask]
    assert not torch.allclose(plain.var(-1, unbiased=False), torch.ones(len(plain)), atol=0.1)


@pytest.mark.parametrize("readout", ["luong", "bahdanau"])
def test_layer_norm_normalises_the_readout_inside_its_nonlinearity(readout):
    model = tiny_model(layer_norm=True, readout=readout)
    with torch.no_grad():
        model.decoder.norm.weight.uniform_(0.5, 1.5)  # a gain and bias of its own, as after training
        model.decoder.norm.bias.uniform_(-0.2, 0.2)
        out = model(SRC, SRC_LEN, TGT_IN)
        d = model.decoder
        norm = lambda x: F.layer_norm(x, x.shape[-1:], d.norm.weight, d.norm.bias)  # noqa: E731
        if readout == "luong":  # ~s_t = tanh(LN(W_c [s_t; c_t]))
            expected = torch.tanh(norm(torch.cat([out.s, out.c], -1) @ d.combine.weight.T))
        else:  # maxout over pairs of LN(U_o s_t + V_o y_{t-1} + C_o c_t)
            x = d.embed(TGT_IN)
            pieces = norm(F.linear(torch.cat([out.s, x, out.c], -1), d.maxout.weight, d.maxout.bias))
            expected = pieces.view(*pieces.shape[:-1], -1, 2).amax(-1)
    torch.testing.assert_close(out.s_tilde, expected)


def test_bahdanau_init_starts_every_score_at_0_and_alpha_uniform():
    model = tiny_model(attention_init="bahdanau")
    score = model.decoder.score
    assert (score.v.weight == 0).all() and (score.U.bias == 0).all()
    for w in (score.W.weight, score.U.weight):
        assert 0.0005 < w.std() < 0.002  # N(0, 0.001^2)
    with torch.no_grad():
        out = model(SRC, SRC_LEN, TGT_IN)
    assert (out.e == 0).all()
    torch.testing.assert_close(out.alpha[0], torch.full((4, 5), 1 / 5))
    torch.testing.assert_close(out.alpha[1, :, :3], torch.full((4, 3), 1 / 3))  # 3 real tokens
    assert (out.alpha[1, :, 3:] == 0).all()
    default = tiny_model().decoder.score
    assert default.v.weight.abs().max() > 0.01  # PyTorch's uniform(+-1/sqrt(A)): scores differ at once


def test_bahdanau_init_is_for_the_additive_score_only():
    with pytest.raises(ConfigError) as err:
        from_dict({"model": {"attention": "dot", "attention_init": "bahdanau"}})
    assert "model.attention_init" in str(err.value) and "'dot'" in str(err.value)
    with pytest.raises(ConfigError, match="model.layer_norm"):
        from_dict({"model": {"layer_norm": "yes"}})


def test_without_the_options_the_weights_are_those_of_earlier_runs():
    """The options off add no weights and draw no random numbers: runs and checkpoints
    from before them load and resume unchanged."""
    plain = tiny_model(seed=5)
    assert not any("norm" in k for k in plain.state_dict())
    normed = tiny_model(seed=5, layer_norm=True)
    extra = set(normed.state_dict()) - set(plain.state_dict())
    assert extra == {"encoder.norm.weight", "encoder.norm.bias", "decoder.norm.weight", "decoder.norm.bias"}
    for k, v in plain.state_dict().items():  # LayerNorm's init draws nothing: all else identical
        torch.testing.assert_close(normed.state_dict()[k], v)


def test_a_tiny_model_with_both_learns_the_toy_translation(tmp_path):
    from lookback.training.train import train

    raw = tiny_train_config(
        tmp_path,
        model={"layer_norm": True, "attention_init": "bahdanau"},
        train={"run_dir": str(tmp_path / "run"), "max_steps": 300, "valid_every": 50},
    )
    run = train(from_dict(raw))
    valid = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["kind"] == "valid"]
    # the best validation, whose weights the run keeps: a tiny model's last one can land on a
    # loss spike (lr 1e-3 near zero loss), and fp32 rounding decides which run meets one
    assert max(r["bleu"] for r in valid) > 80.0
    assert valid[-1]["alpha_diagonal"] > valid[0]["alpha_diagonal"]  # it learns to look, from uniform
    pairs = toy_pairs(30, seed=9)
    translator = Translator.load(run)
    outs = translator.translate([e for e, _ in pairs], beam=3)
    refs = [translator.tgt_tok.decode(translator.tgt_tok.encode(f)) for _, f in pairs]
    assert sum(o.text == r for o, r in zip(outs, refs, strict=True)) >= 20  # an untrained model: none


@pytest.mark.parametrize("attention", ["none", "dot", "general", "additive"])
def test_layer_norm_trains_with_every_shipped_attention(attention):
    """The four Multi30k configs ship with the norm: each must run forward and backward with it."""
    sizes = {"dec_hidden_size": 24} if attention == "dot" else {}  # dot: s and h of one size
    model = tiny_model(layer_norm=True, attention=attention, **sizes)
    out = model(SRC, SRC_LEN, TGT_IN)
    assert out.logits.shape[:2] == TGT_IN.shape and torch.isfinite(out.logits).all()
    loss = lambda: model(SRC, SRC_LEN, TGT_IN).logits.logsumexp(-1).sum()  # noqa: E731
    assert_gradient_descends(loss, model.decoder.norm.weight)  # the readout's norm learns
    encoder_norm = model.encoder.norm.weight.grad
    if attention == "none":  # a `final` fixed context is the RNN's last state, not a normalised h_i
        assert encoder_norm is None
    else:
        assert encoder_norm.abs().sum() > 0


@pytest.mark.parametrize(
    "attention,gain",
    [("dot", 48**-0.5), ("general", 48**-0.5), ("additive", 1.0), ("scaled_dot", 1.0), ("none", 1.0)],
)
def test_the_norm_on_h_starts_at_the_gain_its_score_reads_it_at(attention, gain):
    """Dot and general read h unscaled: its norm starts at a gain of 1 / sqrt(He), so that each h_i
    starts at a norm of about 1; model.norm_gain sets any gain."""
    sizes = {"dec_hidden_size": 48} if "dot" in attention else {}
    model = tiny_model(attention=attention, layer_norm=True, hidden_size=24, **sizes)  # He = 48
    assert torch.allclose(model.encoder.norm.weight, torch.full((48,), gain))
    assert torch.equal(
        model.decoder.norm.weight, torch.ones_like(model.decoder.norm.weight)
    )  # the readout's: 1
    mine = tiny_model(attention=attention, layer_norm=True, hidden_size=24, norm_gain=0.5, **sizes)
    assert torch.allclose(mine.encoder.norm.weight, torch.full((48,), 0.5))
    with pytest.raises(ConfigError, match="model.norm_gain: is the gain of model.layer_norm, which is off"):
        from_dict({"model": {"norm_gain": 0.5}})
