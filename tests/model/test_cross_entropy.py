"""The loss J and its one-pass backward: torch's value and gradients, by hand and in every dtype."""

import math

import pytest
import torch
import torch.nn.functional as F

from lookback.model.cross_entropy import cross_entropy


def test_a_token_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)  # P = (1/4, 3/4)
    J = cross_entropy(logits, torch.tensor([1]))
    assert J.item() == pytest.approx(-math.log(0.75))
    J.backward()
    assert logits.grad[0].tolist() == pytest.approx([0.25, -0.25])  # P - onehot
    logits.grad = None
    cross_entropy(logits, torch.tensor([1]), label_smoothing=0.5).backward()  # target (1/4, 3/4)
    assert logits.grad[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-7)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_value_and_gradients_are_torchs(eps):
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    W = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 50, (37,))
    ours = cross_entropy(h @ W.T, y, eps)
    theirs = F.cross_entropy(h @ W.T, y, label_smoothing=eps, reduction="sum")
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    grads = [torch.autograd.grad(J / 7, (h, W)) for J in (ours, theirs)]  # dJ not 1: it scales the gradient
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lower_precision_logits_get_an_fp32_loss_and_gradients_in_their_dtype(dtype):
    torch.manual_seed(1)
    logits = (3 * torch.randn(20, 30)).to(dtype).requires_grad_()
    y = torch.randint(0, 30, (20,))
    J = cross_entropy(logits, y, 0.1)
    assert J.dtype == torch.float32
    assert J.item() == pytest.approx(
        F.cross_entropy(logits.float(), y, label_smoothing=0.1, reduction="sum").item()
    )
    J.backward()
    assert logits.grad.dtype == dtype
    expected = F.softmax(logits.float(), -1) - (0.9 * F.one_hot(y, 30) + 0.1 / 30)
    torch.testing.assert_close(
        logits.grad.float(), expected, rtol=0, atol=1e-2 if dtype == torch.bfloat16 else 1e-6
    )


def test_a_second_backward_is_refused_not_wrong():
    logits = torch.randn(4, 6, requires_grad=True)
    J = cross_entropy(logits, torch.tensor([0, 1, 2, 3]))
    J.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):  # the saved log P became the gradient
        J.backward()


def test_label_smoothing_out_of_range_is_refused():
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(torch.zeros(1, 2), torch.tensor([0]), 1.0)
