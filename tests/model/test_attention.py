"""Each scoring function against a hand computation, and the shared masked softmax."""

import math

import pytest
import torch

from lookback.config import ConfigError, ModelConfig, from_dict
from lookback.model.attention import (
    SCORES,
    AdditiveScore,
    DotScore,
    GeneralScore,
    Score,
    attend,
    build_score,
    register_score,
)
from lookback.model.seq2seq import Seq2Seq

# The notes' worked example: decoder state and three encoder states (The, cat, sat).
S_NOTES = torch.tensor([[[0.5, -0.2, 0.8]]])  # (B=1, T=1, D=3)
H_NOTES = torch.tensor([[[0.1, 0.2, 0.1], [0.8, 0.1, 0.7], [0.2, 0.3, 0.2]]])  # (1, S=3, 3)
ALL_REAL = torch.ones(1, 3, dtype=torch.bool)


def test_dot_scores_and_weights_of_the_notes_worked_example():
    score = DotScore()
    e = score(S_NOTES, score.keys(H_NOTES))
    assert e.shape == (1, 1, 3)
    assert e[0, 0].tolist() == pytest.approx([0.09, 0.94, 0.20], abs=1e-6)
    c, alpha = attend(e, H_NOTES, ALL_REAL)
    # by hand: exp(.09) = 1.0942, exp(.94) = 2.5600, exp(.20) = 1.2214, sum 4.8756
    # (the notes print 0.27, 0.63, 0.22, which sum to 1.12)
    assert alpha[0, 0].tolist() == pytest.approx([0.2244, 0.5251, 0.2505], abs=1e-4)
    assert float(alpha.sum()) == pytest.approx(1.0, abs=1e-6)
    expected_c = [
        sum(a * h[k] for a, h in zip([0.2244, 0.5251, 0.2505], H_NOTES[0].tolist(), strict=True))
        for k in range(3)
    ]
    assert c[0, 0].tolist() == pytest.approx(expected_c, abs=1e-3)


def test_general_score_is_s_W_h():
    score = GeneralScore(dec_size=2, enc_size=3)
    with torch.no_grad():
        score.W.weight.copy_(torch.tensor([[1.0, 0.0, 2.0], [0.0, -1.0, 0.5]]))  # (D, He)
    s = torch.tensor([[[1.0, 2.0]]])
    h = torch.tensor([[[1.0, 1.0, 1.0], [2.0, 0.0, -1.0]]])
    # W h_1 = [3, -0.5] -> s.(W h_1) = 3 - 1 = 2;  W h_2 = [0, -0.5] -> -1
    assert score(s, score.keys(h))[0, 0].tolist() == pytest.approx([2.0, -1.0])


def test_additive_score_is_v_tanh_Ws_plus_Uh():
    score = AdditiveScore(dec_size=2, enc_size=2, attention_size=2)
    with torch.no_grad():
        score.W.weight.copy_(torch.eye(2))
        score.U.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 1.0]]))
        score.U.bias.copy_(torch.tensor([0.0, 0.5]))
        score.v.weight.copy_(torch.tensor([[1.0, -1.0]]))
    s = torch.tensor([[[0.5, -0.5]]])
    h = torch.tensor([[[0.25, 1.0], [-1.0, 0.0]]])
    # h_1: W s + U h + b = [0.5 + 0.5, -0.5 + 1 + 0.5] = [1, 1]       -> tanh(1) - tanh(1) = 0
    # h_2: [0.5 - 2, -0.5 + 0 + 0.5] = [-1.5, 0]                       -> tanh(-1.5)
    expected = [0.0, math.tanh(-1.5)]
    assert score(s, score.keys(h))[0, 0].tolist() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("coverage", [False, True])
def test_additive_score_through_sigmoid_is_the_formula_and_its_gradient(coverage):
    # float32 on a CPU takes tanh as 2 sigmoid(2x) - 1 with the 2s moved onto s, U h, cov and v
    torch.manual_seed(0)
    score = AdditiveScore(dec_size=5, enc_size=4, attention_size=6, coverage=coverage)
    s, h = torch.randn(2, 3, 5, requires_grad=True), torch.randn(2, 7, 4) * 3
    cov = torch.rand(2, 3, 7) * 2 if coverage else None
    e = score(s, score.keys(h), cov)
    pre = score.W(s).unsqueeze(2) + score.U(h).unsqueeze(1)  # W s + U h: (2, 3, 7, 6)
    if coverage:
        pre = pre + cov.unsqueeze(-1) * score.w_c.weight.view(6)
    formula = (torch.tanh(pre) * score.v.weight.view(6)).sum(-1)  # v . tanh(...): (2, 3, 7)
    assert e.shape == (2, 3, 7)
    assert (e - formula).abs().max() < 1e-5
    g = torch.randn(2, 3, 7)
    got = torch.autograd.grad((e * g).sum(), [s, *score.parameters()])
    want = torch.autograd.grad((formula * g).sum(), [s, *score.parameters()])
    for a, b in zip(got, want, strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_additive_score_in_bf16_is_torch_tanh_itself():
    torch.manual_seed(0)
    score = AdditiveScore(dec_size=5, enc_size=4, attention_size=6).bfloat16()
    s, h = torch.randn(2, 3, 5).bfloat16(), torch.randn(2, 7, 4).bfloat16()
    pre = score.W(s).unsqueeze(2) + score.U(h).unsqueeze(1)
    assert torch.equal(score(s, score.keys(h)), score.v(torch.tanh(pre)).squeeze(-1))


@pytest.mark.parametrize("kind", ["dot", "general", "additive"])
def test_weights_sum_to_one_and_ignore_padding(kind):
    torch.manual_seed(0)
    score = build_score(6, 6, ModelConfig(attention=kind, attention_size=5))
    h = torch.randn(2, 4, 6)
    s = torch.randn(2, 3, 6)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    c, alpha = attend(score(s, score.keys(h)), h, mask)
    assert c.shape == (2, 3, 6) and alpha.shape == (2, 3, 4)
    assert torch.allclose(alpha.sum(-1), torch.ones(2, 3))
    assert (alpha[1, :, 2:] == 0).all()
    # whatever sits in the padded positions changes nothing
    h2 = h.clone()
    h2[1, 2:] = 100.0
    c2, alpha2 = attend(score(s, score.keys(h2)), h2, mask)
    assert torch.allclose(c2[1], c[1]) and torch.allclose(alpha2[1], alpha[1])


class HalfDot(Score):
    """A score written outside the package: e = (s . h) / 2."""

    def forward(self, s, keys, coverage=None):
        return s @ keys.transpose(1, 2) / 2


def test_a_registered_score_is_a_config_value_and_builds():
    with pytest.raises(ConfigError, match=r"model.attention: got 'halfdot', expected one of none, dot, "):
        from_dict({"model": {"attention": "halfdot"}})
    register_score("halfdot", HalfDot)
    try:
        cfg = from_dict({"model": {"attention": "halfdot", "hidden_size": 8, "dec_hidden_size": 16}})
        score = build_score(16, 16, cfg.model)
    finally:
        SCORES.pop("halfdot")
    s, h = torch.randn(1, 2, 16), torch.randn(1, 3, 16)
    assert isinstance(score, HalfDot) and torch.allclose(score(s, h), (s @ h.transpose(1, 2)) / 2)
    with pytest.raises(TypeError, match="expected a subclass of Score"):
        register_score("nothing", object)
    with pytest.raises(ValueError, match="'none' is attention without a score"):
        register_score("none", HalfDot)


class CoveredDot(HalfDot):
    """A registered score that declares what it needs, as a shipped one does: one size for s
    and h, the coverage sum, and an initialisation of its own."""

    equal_sizes, reads_coverage, inits = True, True, ("torch", "zero")
    initialised = False

    def init_zero(self):
        type(self).initialised = True


@pytest.mark.parametrize(
    "model, problem",
    [
        (
            {"hidden_size": 8, "dec_hidden_size": 24},
            "covered scores need s and h of one size, but the decoder has 24",
        ),
        (
            {"heads": 2},
            "model.heads: 2 heads need a multi-head score ('scaled_dot') or a transformer, not 'covered'",
        ),
        (
            {"attention_init": "bahdanau"},
            "model.attention_init: 'bahdanau' initialises 'additive', not 'covered'",
        ),
    ],
)
def test_a_registered_scores_declared_needs_are_checked_as_a_shipped_scores(model, problem):
    """What a score needs is declared on its class (Score) and checked in one place
    (attention.check_needs): nothing in config.py names a score."""
    register_score("covered", CoveredDot)
    try:
        fits = {"attention": "covered", "hidden_size": 8, "dec_hidden_size": 16}
        cfg = from_dict({"model": {**fits, "coverage": True, "attention_init": "zero"}})  # all it declares
        with pytest.raises(ConfigError) as raised:
            from_dict({"model": {**fits, **model}})
        assert problem in str(raised.value)
        # a shipped score without those needs refuses what this one takes
        with pytest.raises(
            ConfigError, match="the coverage term is read by 'additive', 'covered', not 'dot'"
        ):
            from_dict(
                {"model": {"attention": "dot", "hidden_size": 8, "dec_hidden_size": 16, "coverage": True}}
            )
        Seq2Seq(cfg.model, 20, 20)  # built, its declared initialisation run
        assert CoveredDot.initialised
    finally:
        SCORES.pop("covered")
