"""model/encoder.py: the source read into h, the fixed context c, padding and word dropout."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lookback.data.batch import collate
from lookback.model import bptt, encoder
from lookback.model.encoder import each_way

from ..helpers import tiny_model
from .test_seq2seq import PAIRS, model_for


def test_padding_does_not_change_a_sentence():
    model = model_for("gru", True, "additive", True, "current")
    alone = collate(PAIRS[1:2])
    padded = collate(PAIRS)  # sentence 2 is padded to length 5 here
    with torch.no_grad():
        a = model(alone.src, alone.src_len, alone.tgt_in)
        p = model(padded.src, padded.src_len, padded.tgt_in)
    T = alone.tgt_in.size(1)
    assert torch.allclose(a.logits[0], p.logits[1, :T], atol=1e-5)
    assert torch.allclose(a.alpha[0], p.alpha[1, :T, :2], atol=1e-6)


def test_final_context_joins_forward_end_and_backward_start():
    model = model_for("gru", True, "none", False, "current", context="final")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    H = 12
    # sentence 2 (length 2): forward state at its last real token, backward state at its first
    assert torch.allclose(enc.c[1, :H], enc.h[1, 1, :H], atol=1e-6)
    assert torch.allclose(enc.c[1, H:], enc.h[1, 0, H:], atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # fp32: torch's oneDNN LSTM on a CPU
@pytest.mark.parametrize("bidirectional", [True, False])
def test_an_lstm_read_each_way_is_nn_lstms_packed_reading(bidirectional, dtype):
    """encoder.each_way, each direction one call on the padded batch (the backward one on each
    sentence reversed within its length), gives nn.LSTM's states on packed input at every real
    position, zeros at the padding, its last states, and the same gradients of a loss that reads
    both; lengths 5, 1, 7, 3 unsorted, one of a single token."""
    torch.manual_seed(0)
    rnn = nn.LSTM(6, 5, batch_first=True, bidirectional=bidirectional).to(dtype)
    x = torch.randn(4, 7, 6, dtype=dtype)
    lengths = torch.tensor([5, 1, 7, 3])
    K = 1 + bidirectional
    w_h, w_last = torch.randn(4, 7, 5 * K, dtype=dtype), torch.randn(K, 4, 5, dtype=dtype)
    results = []
    for packed in (True, False):
        xi = x.clone().requires_grad_()
        if packed:
            out, (last, _) = rnn(pack_padded_sequence(xi, lengths, batch_first=True, enforce_sorted=False))
            h, _ = pad_packed_sequence(out, batch_first=True, total_length=7)
        else:
            h, last = each_way(rnn, xi, lengths)
        J = (h * w_h).sum() + (last * w_last).sum()
        results.append((h, last, torch.autograd.grad(J, [xi, *rnn.parameters()])))
    (h_ref, last_ref, g_ref), (h, last, g) = results
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(h, h_ref, **tol)
    assert (h[torch.arange(7) >= lengths.unsqueeze(1)] == 0).all()
    torch.testing.assert_close(last, last_ref, **tol)
    for name, a, b in zip(["x", *dict(rnn.named_parameters())], g, g_ref, strict=True):
        torch.testing.assert_close(a, b, **tol, msg=name)


def test_the_encoder_reads_an_lstm_each_way_only_where_most_positions_are_real(monkeypatch):
    """Asked to (train.bptt auto), in fp32 with gradients: each way where at least EACH_WAY_FILL of
    the B x S positions are real tokens, else packed with its backward written out; the GRU
    always packed; without gradients nn.LSTM's packed call."""
    ways = []
    real_each_way, real_recurrence = encoder.each_way, bptt.recurrence
    monkeypatch.setattr(encoder, "each_way", lambda *a: ways.append("each way") or real_each_way(*a))
    monkeypatch.setattr(bptt, "recurrence", lambda *a: ways.append("packed") or real_recurrence(*a))
    full = collate([([5, 6, 7, 8], [5]), ([9, 10, 11, 12], [6]), ([4, 5, 6], [7])])  # 11 of 12 real
    ragged = collate(PAIRS)  # 12 of 21 real
    assert encoder.EACH_WAY_FILL == 0.8
    for cell, b, way in [("lstm", full, "each way"), ("lstm", ragged, "packed"), ("gru", full, "packed")]:
        model = tiny_model(cell=cell, bidirectional=True).train()
        ways.clear()
        model.encoder(b.src, b.src_len, written=True)
        model.encoder(b.src, b.src_len)  # not asked: nn.LSTM packed
        with torch.no_grad():
            model.encoder(b.src, b.src_len, written=True)
        assert ways == [way], (cell, way)
