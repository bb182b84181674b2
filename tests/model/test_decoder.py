"""model/decoder.py: the decoder step, in one call or step by step, with and without attention;
its state, reordered for the beam; what it returns."""

import pytest
import torch

from lookback.data.batch import collate
from lookback.data.tokenizer import BOS

from .test_seq2seq import PAIRS, assert_one_call_equals_stepping, model_for


@pytest.mark.parametrize("attention", ["none", "dot", "scaled_dot", "general", "additive"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_teacher_forcing_in_one_call_equals_stepping(attention, cell):
    assert_one_call_equals_stepping(model_for(cell, True, attention, False, "current"))


@pytest.mark.parametrize("feeding,attend_from", [(True, "current"), (False, "previous")])
def test_a_stepping_decoder_embeds_the_whole_target_in_one_call(feeding, attend_from):
    """Where teacher forcing must step (input feeding; attending from s_{t-1}), the target's
    embeddings are still looked up in one call, whose backward then writes the table-sized
    gradient once, not once per step; the steps give the logits and weights of calling the
    decoder one token at a time, as search does."""
    model = model_for("gru", True, "additive", feeding, attend_from).eval()
    assert not model.decoder.parallel
    lookups = []
    model.decoder.embed.register_forward_hook(lambda module, args, out: lookups.append(tuple(args[0].shape)))
    b = collate(PAIRS)
    with torch.no_grad():
        enc = model.encode(b.src, b.src_len)
        state = model.decoder.init_state(enc)
        whole = model.decoder(b.tgt_in, enc, state)
        assert lookups == [tuple(b.tgt_in.shape)]
        steps = []
        for t in range(b.tgt_in.size(1)):
            steps.append(model.decoder(b.tgt_in[:, t : t + 1], enc, state))
            state = steps[-1].state
    assert len(lookups) == 1 + b.tgt_in.size(1)
    assert torch.allclose(whole.logits, torch.cat([o.logits for o in steps], 1), atol=1e-5)
    assert torch.allclose(whole.alpha, torch.cat([o.alpha for o in steps], 1), atol=1e-6)


def test_without_attention_the_context_is_the_same_at_every_step():
    model = model_for("gru", True, "none", False, "current", context="mean")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    _, alpha, c = model.decoder.context(torch.zeros(3, 4, 24), enc)
    assert alpha is None and c.shape == (3, 4, 24)
    assert torch.equal(c[:, 0], c[:, 3])
    # context 'mean' is the mean of the real encoder states
    assert torch.allclose(enc.c[1], enc.h[1, :2].mean(0), atol=1e-6)


def test_decoder_state_reorders_for_the_beam():
    model = model_for("lstm", True, "additive", True, "current")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    state = model.decoder.init_state(enc)
    idx = torch.tensor([2, 2, 0])
    moved = state.index_select(idx)
    assert torch.equal(moved.hidden[0][:, 0], state.hidden[0][:, 2])
    assert torch.equal(enc.index_select(idx).keys[2], enc.keys[0])
    y = torch.full((3, 1), BOS)
    assert model.decoder(y, enc.index_select(idx), moved).logits.shape == (3, 1, 33)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_attend_from_previous_queries_the_state_before_the_step(cell):
    """Bahdanau's wiring: e_t = score(s_{t-1}, h), with s_0 the bridge's state; Luong's: score(s_t, h)."""
    b = collate(PAIRS)
    for attend_from in ("previous", "current"):
        model = model_for(cell, True, "general", False, attend_from)
        enc = model.encode(b.src, b.src_len)
        state = model.decoder.init_state(enc)
        out = model.decoder(b.tgt_in, enc, state)  # (B, T, ...)
        previous = torch.cat([state.top().unsqueeze(1), out.s[:, :-1]], 1)  # s_0 .. s_{T-1}
        queries, other = (out.s, previous) if attend_from == "current" else (previous, out.s)
        assert torch.allclose(out.e, model.decoder.score(queries, enc.keys), atol=1e-6)
        assert not torch.allclose(out.e, model.decoder.score(other, enc.keys), atol=1e-3)


def test_the_decoder_returns_every_quantity_of_the_step():
    model = model_for("gru", True, "additive", True, "current")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    out = model.decoder(b.tgt_in, enc, model.decoder.init_state(enc))
    B, T = b.tgt_in.shape
    assert out.s.shape == out.s_tilde.shape == (B, T, 24)
    assert out.e.shape == out.alpha.shape == (B, T, b.src.size(1))
    assert out.c.shape == (B, T, enc.h.size(-1))
    assert torch.allclose(out.c, out.alpha @ enc.h, atol=1e-6)  # (3) c_t = sum_i alpha_ti h_i
    assert torch.allclose(out.logits, model.decoder.out(out.s_tilde), atol=1e-6)  # dropout is 0
    masked = out.e.masked_fill(~enc.src_mask.unsqueeze(1), float("-inf"))
    assert torch.allclose(out.alpha, torch.softmax(masked, -1), atol=1e-6)  # (2) alpha = softmax(e)


@pytest.mark.parametrize("lstm,coverage", [(False, False), (True, True)])
def test_the_state_is_named_once_and_comes_back_from_its_tensors(lstm, coverage):
    """DecoderState names its tensors (the ONNX graph's inputs and NAME_out outputs come from
    `names`), gives them by name and is rebuilt from them; a beam's reorder moves each tensor
    along its own row axis."""
    from lookback.model.decoder import DecoderState

    L, R, D, S = 2, 3, 4, 5
    hidden = (torch.randn(L, R, D), torch.randn(L, R, D)) if lstm else torch.randn(L, R, D)
    state = DecoderState(hidden, torch.randn(R, D), 7, torch.rand(R, S) if coverage else None)
    names = DecoderState.names(lstm, coverage)
    assert names == ["hidden", *(["cell"] if lstm else []), "feed", *(["coverage"] if coverage else [])]
    assert list(state.tensors()) == names
    back = DecoderState.from_tensors(state.tensors(), state.step)
    assert back.step == 7 and all(
        torch.equal(a, b) for a, b in zip(back.tensors().values(), state.tensors().values(), strict=True)
    )
    idx = torch.tensor([2, 2, 0])
    moved = state.index_select(idx).tensors()
    for name, x in state.tensors().items():
        rows = DecoderState.ROWS[name]
        assert torch.equal(moved[name], x.index_select(rows, idx)) and moved[name].shape[rows] == R
    assert moved["feed"][0].equal(state.feed[2]) and moved["hidden"][:, 1].equal(
        state.tensors()["hidden"][:, 2]
    )
