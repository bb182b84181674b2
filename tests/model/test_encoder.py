"""model/encoder.py: the source read into h, the fixed context c, padding and word dropout."""

import torch

from lookback.data.batch import collate

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
