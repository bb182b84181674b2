"""model/dropout.py: the CPU mask from 16-bit random numbers drops at rate p and keeps the mean."""

import pytest
import torch
from torch import nn

from lookback.model.dropout import LEVELS, Dropout, drop_words, mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_mask_drops_at_rate_p_in_each_of_the_four_16_bit_lanes(p):
    torch.manual_seed(0)
    m = mask((400_000,), p, torch.ones(1))
    k = round(p * LEVELS)
    values = m.unique().tolist()
    assert values[0] == 0.0 and values[1:] == [pytest.approx(LEVELS / (LEVELS - k))]
    dropped = (m == 0).float().view(-1, 4)  # column j: the j-th 16 bits of every 64-bit draw
    for lane in dropped.t():  # 100,000 elements each: 3 standard deviations are about 0.0045
        assert abs(float(lane.mean()) - p) < 0.006
    assert abs(float(m.mean()) - 1) < 0.01  # the expected value is kept


def test_mask_of_an_odd_size_and_shape_in_the_tensors_dtype():
    m = mask((3, 5, 7), 0.5, torch.ones(1, dtype=torch.bfloat16))
    assert m.shape == (3, 5, 7) and m.dtype == torch.bfloat16
    assert set(m.unique().tolist()) <= {0.0, 2.0}


def test_rate_zero_keeps_everything_and_rate_one_drops_everything():
    assert torch.equal(mask((1000,), 0.0, torch.ones(1)), torch.ones(1000))
    assert torch.equal(mask((1000,), 1.0, torch.ones(1)), torch.zeros(1000))


def test_mask_follows_the_seed():
    torch.manual_seed(3)
    a = mask((64, 9), 0.3, torch.ones(1))
    torch.manual_seed(3)
    assert torch.equal(a, mask((64, 9), 0.3, torch.ones(1)))
    assert not torch.equal(a, mask((64, 9), 0.3, torch.ones(1)))


def test_dropout_module_is_nn_dropout_in_evaluation_and_in_its_gradient():
    drop = Dropout(0.3)
    assert isinstance(drop, nn.Dropout) and drop.state_dict() == {}
    x = torch.randn(8, 20, 16, requires_grad=True)
    torch.manual_seed(1)
    y = drop(x)
    kept = y != 0
    scale = LEVELS / (LEVELS - round(0.3 * LEVELS))
    assert torch.allclose(y[kept], x[kept] * scale)
    y.sum().backward()  # d y / d x: the mask itself
    assert torch.allclose(x.grad, kept.float() * scale)
    drop.eval()
    assert torch.equal(drop(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)


def test_word_dropout_zeroes_whole_words_in_training_only():
    x = torch.ones(4, 50, 3)  # (B, T, E)
    torch.manual_seed(0)
    dropped = drop_words(x, 0.5, training=True)
    per_word = dropped[..., 0]  # (B, T): each word is all 0 or all 2 (kept and scaled by 1 / 0.5)
    assert torch.equal(dropped, per_word.unsqueeze(-1).expand_as(dropped))
    assert set(per_word.unique().tolist()) == {0.0, 2.0}
    assert 0.3 < float((per_word == 0).float().mean()) < 0.7
    assert torch.equal(drop_words(x, 0.5, training=False), x)
    assert torch.equal(drop_words(x, 0.0, training=True), x)
