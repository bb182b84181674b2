"""Gradient attributions over the source (attribution.py): by hand, completeness, agreement with alpha."""

import pytest
import torch
import torch.nn.functional as F

from lookback.data.tokenizer import BOS, EOS
from lookback.decoding.search import greedy
from lookback.explain.attribution import agreement, attribute

from ..helpers import tiny_model

SRC = [5, 6, 7, 8, 9]


def _log_p(model, x, out, t):
    """log P(y_t) with source embeddings x (1, S, E) in place of the encoder's, without captum."""
    swap = model.encoder.embed.register_forward_hook(lambda m, a, o: x)  # a test runs alone
    try:
        logits = model(torch.tensor([SRC]), torch.tensor([len(SRC)]), torch.tensor([[BOS, *out]])).logits
    finally:
        swap.remove()
    return F.log_softmax(logits[0, t], -1)[([*out, EOS])[t]]


@pytest.mark.parametrize("attention", ["additive", "none"])
def test_gradient_x_input_by_hand(attention):
    model = tiny_model(seed=1, attention=attention)
    out = greedy(model, torch.tensor([SRC]), torch.tensor([5]))[0].tokens[:4]
    a, gap = attribute(model, SRC, out, "grad_x_input")
    assert a.shape == (len(out), len(SRC)) and gap is None
    x = model.encoder.embed(torch.tensor([SRC])).detach().requires_grad_()
    for t in range(len(out)):
        (grad,) = torch.autograd.grad(_log_p(model, x, out, t), x)
        assert torch.allclose(a[t], (grad * x).sum(-1)[0], atol=1e-6)


def test_integrated_gradients_are_complete():
    """sum_i a_{t,i} = log P(y_t)(x) - log P(y_t)(0): what the output owes the source, in all."""
    model = tiny_model(seed=2, attention="dot", hidden_size=10)
    out = [11, 12, 13]
    a, gap = attribute(model, SRC, out, "integrated_gradients", n_steps=64)
    x = model.encoder.embed(torch.tensor([SRC])).detach()
    for t in range(len(out)):
        with torch.no_grad():
            change = _log_p(model, x, out, t) - _log_p(model, torch.zeros_like(x), out, t)
        assert float(a[t].sum()) == pytest.approx(float(change), abs=1e-3)
        assert abs(float(gap[t])) < 1e-3
    assert attribute(model, SRC, [], "integrated_gradients")[0].shape == (0, 5)
    with pytest.raises(ValueError, match="unknown attribution method"):
        attribute(model, SRC, out, "saliency")


def test_agreement_by_hand():
    alpha = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    same = agreement(alpha, torch.tensor([[-3.0, 2.0, 1.0], [0.1, 0.1, -5.0]]))  # same order of |a|
    assert same == {"kendall_tau": pytest.approx(1.0), "same_top": 1.0, "tokens": 2}
    flipped = agreement(alpha, torch.tensor([[1.0, 2.0, 3.0], [0.1, 0.1, 0.0]]))
    assert flipped["kendall_tau"] == pytest.approx(-1.0) and flipped["same_top"] == 0.0
    flat = agreement(torch.tensor([[0.5, 0.5]]), torch.tensor([[1.0, 2.0]]))  # constant alpha: no tau
    assert flat["kendall_tau"] is None and flat["tokens"] == 1
    with pytest.raises(ValueError, match="differ in shape"):
        agreement(alpha, torch.zeros(3, 3))
