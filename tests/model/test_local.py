"""Luong's local attention (local.py): the window and the Gaussian by hand, weights zero outside the
window and on padding, a cost that grows with the window and not with the source, in every wiring
and through search, the trace and the CLI (a tiny model that must learn: tests/model/test_seq2seq.py)."""

import itertools
import math

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.decoding.search import beam_search, greedy
from lookback.explain.cost import step_flops
from lookback.model.attention import attend
from lookback.model.local import LocalWindow, gather, scatter

from ..helpers import assert_gradient_descends, tiny_model
from .test_seq2seq import PAIRS, assert_one_call_equals_stepping


def test_local_m_centres_on_the_step_and_stays_on_the_sentence():
    window = LocalWindow("local_m", half_width=1, dec_size=4)
    steps = torch.tensor([[0, 1, 2, 5]])  # (B=1, Q=4) output positions
    p = window.centre(torch.zeros(1, 4, 4), steps, torch.tensor([4]))
    assert p.tolist() == [[0.0, 1.0, 2.0, 3.0]]  # step 5 of a 4-token source: its last token
    idx, inside = window.window(p, torch.tensor([4]))
    assert idx[0].tolist() == [[-1, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert inside[0].tolist() == [
        [False, True, True],
        [True, True, True],
        [True, True, True],
        [True, True, False],
    ]
    assert window.prior(p, idx) is None  # local_m: no Gaussian


def test_local_p_predicts_the_centre_and_weights_by_a_gaussian_by_hand():
    window = LocalWindow("local_p", half_width=2, dec_size=2)
    with torch.no_grad():
        window.W_p.weight.copy_(torch.eye(2))
        window.v_p.weight.copy_(torch.tensor([[1.0, 0.0]]))
    s = torch.tensor([[[0.0, 5.0], [math.atanh(0.5), 0.0]]])  # (1, Q=2, D=2)
    p = window.centre(s, torch.zeros(1, 2, dtype=torch.long), torch.tensor([6]))
    # p = S sigmoid(v . tanh(W s)): S sigmoid(0) = 3;  S sigmoid(0.5) = 6 x 0.622459 = 3.734754
    assert p[0].tolist() == pytest.approx([3.0, 6 / (1 + math.exp(-0.5))], abs=1e-5)
    idx, inside = window.window(p, torch.tensor([6]))
    assert idx[0].tolist() == [[1, 2, 3, 4, 5], [2, 3, 4, 5, 6]]  # round(p) -+ D
    assert inside[0, 1].tolist() == [True, True, True, True, False]  # position 6 is past the end
    prior = window.prior(p, idx)  # -(i - p)^2 / (2 sigma^2), sigma = D / 2 = 1
    assert prior[0, 0].tolist() == pytest.approx([-2.0, -0.5, 0.0, -0.5, -2.0])
    # equal scores: the weights are the Gaussian over the window, renormalised
    h = torch.eye(5).unsqueeze(0)  # (1, W=5, He=5): c shows the weights
    c, alpha = attend(torch.zeros(1, 1, 5), h, inside[:, 0], prior=prior[:, :1])
    g = torch.tensor([-2.0, -0.5, 0.0, -0.5, -2.0]).exp()
    assert alpha[0, 0].tolist() == pytest.approx((g / g.sum()).tolist(), abs=1e-6)
    assert c[0, 0].tolist() == pytest.approx((g / g.sum()).tolist(), abs=1e-6)


def test_p_gets_its_gradient_through_the_gaussian():
    window = LocalWindow("local_p", half_width=2, dec_size=3)
    s = torch.randn(1, 1, 3, requires_grad=True)

    def loss():  # the window's mean position under alpha: moves with p_t, so with s and v_p
        p = window.centre(s, torch.zeros(1, 1, dtype=torch.long), torch.tensor([8]))
        idx, inside = window.window(p, torch.tensor([8]))
        _, alpha = attend(
            torch.zeros(1, 1, 5), torch.eye(5).unsqueeze(0), inside[:, 0], prior=window.prior(p, idx)
        )
        return (alpha[0, 0] * torch.arange(5.0)).sum()

    assert_gradient_descends(loss, s)
    assert_gradient_descends(loss, window.v_p.weight)


def test_gather_and_scatter_move_window_values_and_drop_positions_off_the_sentence():
    x = torch.arange(8.0).view(1, 4, 2)  # (B=1, S=4, 2)
    idx = torch.tensor([[[-1, 0, 1], [2, 3, 4]]])  # (1, Q=2, W=3)
    assert gather(x, idx)[0, 1].tolist() == [[4.0, 5.0], [6.0, 7.0], [6.0, 7.0]]  # 4 clamped to 3
    inside = (idx >= 0) & (idx < 4)
    full = scatter(torch.tensor([[[9.0, 1.0, 2.0], [3.0, 4.0, 9.0]]]), idx, inside, 4, 0.0)
    assert full[0].tolist() == [[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 4.0]]  # the 9s fall off


def windowed(kind, D, **kw):
    return tiny_model(attention="additive", window=kind, window_size=D, **kw)


@pytest.mark.parametrize("kind", ["local_m", "local_p"])
def test_weights_are_zero_outside_the_window_and_on_padding(kind):
    model = windowed(kind, 1).train()
    b = collate(PAIRS)
    out = model(b.src, b.src_len, b.tgt_in)
    B, T, S = out.alpha.shape
    assert torch.allclose(out.alpha.sum(-1), torch.ones(B, T), atol=1e-5)
    assert ((out.alpha > 0).sum(-1) <= 3).all()  # 2D + 1 = 3 positions at most
    assert (out.alpha[1, :, 2:] == 0).all()  # sentence 2 has two real source tokens
    assert torch.isinf(out.e[out.alpha == 0]).all()  # weight 0 only where unscored: e = -inf
    if kind == "local_m":  # step t looks at min(t, S_b - 1) -+ 1
        for b_, t in itertools.product(range(B), range(T)):
            centre = min(t, int(b.src_len[b_]) - 1)
            nonzero = out.alpha[b_, t].nonzero()[:, 0].tolist()
            assert set(nonzero) <= {centre - 1, centre, centre + 1}


def test_a_local_steps_cost_grows_with_the_window_not_the_source():
    model = windowed("local_p", 2)
    seen = []
    model.decoder.score.register_forward_hook(lambda m, args, out: seen.append(args[1].size(1)))
    for S in (5, 40):
        src = torch.randint(4, 30, (2, S))
        hyps = greedy(model, src, torch.tensor([S, S]))
        assert len(hyps) == 2
    assert set(seen) == {5}  # every step scored W = 2D + 1 = 5 keys, for 5 source tokens and for 40
    glob = tiny_model(attention="additive")
    seen.clear()
    glob.decoder.score.register_forward_hook(lambda m, args, out: seen.append(args[1].size(1)))
    greedy(glob, torch.randint(4, 30, (2, 40)), torch.tensor([40, 40]))
    assert set(seen) == {40}


def wirings():
    return itertools.product(
        ["local_m", "local_p"],
        ["gru", "lstm"],
        ["dot", "general", "additive", "heads"],
        [False, True],
        ["current", "previous"],
    )


@pytest.mark.parametrize("kind,cell,attention,feeding,attend_from", list(wirings()))
def test_every_wiring_trains_and_decodes_with_a_window(kind, cell, attention, feeding, attend_from):
    extra = {"attention": "scaled_dot", "heads": 2, "attention_size": 8} if attention == "heads" else {}
    model = tiny_model(
        **{"attention": attention, **extra},
        window=kind,
        window_size=1,
        cell=cell,
        input_feeding=feeding,
        attend_from=attend_from,
        dec_hidden_size=24,
    ).train()
    b = collate(PAIRS)
    out = model(b.src, b.src_len, b.tgt_in)
    assert torch.allclose(out.alpha.sum(-1), torch.ones(b.tgt_in.shape), atol=1e-5)
    model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out).backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    greedy_out = greedy(model, b.src, b.src_len)
    beam_out = beam_search(model, b.src, b.src_len, beam=1)
    assert [h.tokens for h in greedy_out] == [n[0].tokens for n in beam_out]  # beam 1 is greedy
    assert all(((h.alpha > 0).sum(-1) <= 3).all() for h in greedy_out)


@pytest.mark.parametrize("kind", ["local_m", "local_p"])
def test_teacher_forcing_in_one_call_equals_stepping_with_a_window(kind):
    assert_one_call_equals_stepping(windowed(kind, 1, dec_hidden_size=24))


def test_window_config_checks():
    with pytest.raises(
        ConfigError, match="model.window: needs attention weights, but model.attention is 'none'"
    ):
        from_dict({"model": {"attention": "none", "window": "local_p"}})
    with pytest.raises(ConfigError, match="model.window_size: got 0, expected an integer >= 1"):
        from_dict({"model": {"window": "local_m", "window_size": 0}})
    with pytest.raises(
        ConfigError, match="model.window: got 'local', expected one of global, local_m, local_p"
    ):
        from_dict({"model": {"window": "local"}})


def test_measured_attention_flops_grow_with_the_source_globally_and_with_the_window_locally():
    glob, loc = (
        tiny_model(attention="general"),
        tiny_model(attention="general", window="local_m", window_size=2),
    )
    g = {S: step_flops(glob, S) for S in (10, 20, 40)}
    l_ = {S: step_flops(loc, S) for S in (10, 20, 40)}
    # general, per step: e = s . (W h) over S keys, 2 x D x S, then c = alpha h, 2 x S x He (D = 20, He = 24)
    for S in (10, 20, 40):
        assert g[S]["attention_flops_per_step"] == 2 * 20 * S + 2 * S * 24
        assert l_[S]["attention_flops_per_step"] == 2 * 20 * 5 + 2 * 5 * 24  # W = 2D + 1 = 5 whatever S
        assert g[S]["keys_flops"] == 2 * S * 24 * 20  # W h, once per sentence
    assert g[40]["attention_share"] > g[10]["attention_share"]
    assert l_[40]["attention_share"] == pytest.approx(l_[10]["attention_share"])
    assert step_flops(tiny_model(attention="none"), 20)["attention_flops_per_step"] == 0
