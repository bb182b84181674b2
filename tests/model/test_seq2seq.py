"""The encoder-decoder: every branch runs, shapes and masks hold, fast path equals stepping."""

import itertools

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.data.tokenizer import BOS
from lookback.decoding.search import greedy
from lookback.model.seq2seq import LossTerms

from ..helpers import assert_source_rows_learn, tiny_model

PAIRS = [([5, 6, 7, 8, 9], [5, 6, 7]), ([10, 11], [12, 13, 14, 15]), ([4, 5, 6], [7])]


def combos():
    for cell, bi, attention, feeding, attend_from in itertools.product(
        ["rnn", "gru", "lstm"],
        [True, False],
        ["none", "dot", "scaled_dot", "general", "additive"],
        [False, True],
        ["current", "previous"],
    ):
        if attention == "none" and attend_from == "previous":
            continue  # attend_from has no meaning without attention
        yield cell, bi, attention, feeding, attend_from


def model_for(cell, bi, attention, feeding, attend_from, **kw):
    dec = 24 if bi else 12  # dot needs the decoder size to equal the encoder output size
    return tiny_model(
        cell=cell,
        bidirectional=bi,
        attention=attention,
        input_feeding=feeding,
        attend_from=attend_from,
        dec_hidden_size=dec,
        enc_layers=2,
        dec_layers=2,
        **kw,
    )


@pytest.mark.parametrize("cell,bi,attention,feeding,attend_from", list(combos()))
def test_every_combination_runs_forward_and_backward(cell, bi, attention, feeding, attend_from):
    model = model_for(cell, bi, attention, feeding, attend_from).train()
    b = collate(PAIRS)
    out = model(b.src, b.src_len, b.tgt_in)
    B, T = b.tgt_in.shape
    assert out.logits.shape == (B, T, 33)
    if attention == "none":
        assert out.alpha is None
    else:
        assert out.alpha.shape == (B, T, b.src.size(1))
        assert torch.allclose(out.alpha.sum(-1), torch.ones(B, T), atol=1e-5)
        assert (out.alpha[1, :, 2:] == 0).all()  # sentence 2 has two real source tokens
    loss = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert_source_rows_learn(model, b.src)  # the loss reaches the source side


@pytest.mark.parametrize("attention", ["none", "dot", "scaled_dot", "general", "additive"])
@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_teacher_forcing_in_one_call_equals_stepping(attention, cell):
    assert_one_call_equals_stepping(model_for(cell, True, attention, False, "current"))


def assert_one_call_equals_stepping(model) -> None:
    """The whole target in one decoder call gives the logits and weights of stepping token by token."""
    assert model.decoder.parallel
    b = collate(PAIRS)
    with torch.no_grad():
        enc = model.encode(b.src, b.src_len)
        state = model.decoder.init_state(enc)
        whole = model.decoder(b.tgt_in, enc, state)
        steps = []
        for t in range(b.tgt_in.size(1)):
            out = model.decoder(b.tgt_in[:, t : t + 1], enc, state)
            state = out.state
            steps.append(out)
    assert torch.allclose(whole.logits, torch.cat([o.logits for o in steps], 1), atol=1e-5)
    if whole.alpha is not None:
        assert torch.allclose(whole.alpha, torch.cat([o.alpha for o in steps], 1), atol=1e-6)


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


def test_without_attention_the_context_is_the_same_at_every_step():
    model = model_for("gru", True, "none", False, "current", context="mean")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    _, alpha, c = model.decoder.context(torch.zeros(3, 4, 24), enc)
    assert alpha is None and c.shape == (3, 4, 24)
    assert torch.equal(c[:, 0], c[:, 3])
    # context 'mean' is the mean of the real encoder states
    assert torch.allclose(enc.c[1], enc.h[1, :2].mean(0), atol=1e-6)


def test_final_context_joins_forward_end_and_backward_start():
    model = model_for("gru", True, "none", False, "current", context="final")
    b = collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    H = 12
    # sentence 2 (length 2): forward state at its last real token, backward state at its first
    assert torch.allclose(enc.c[1, :H], enc.h[1, 1, :H], atol=1e-6)
    assert torch.allclose(enc.c[1, H:], enc.h[1, 0, H:], atol=1e-6)


def test_dot_attention_with_mismatched_sizes_is_a_config_error():
    with pytest.raises(ConfigError, match="model.attention: dot scores need s and h of one size"):
        from_dict({"model": {"attention": "dot", "hidden_size": 256, "dec_hidden_size": 256}})


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


@pytest.mark.parametrize(
    "attention,variant",
    [
        ("none", {}),
        ("additive", {}),
        ("scaled_dot", {}),
        ("additive", {"normalizer": "sparsemax"}),
        ("scaled_dot", {"heads": 2, "attention_size": 8}),
    ],
)
def test_a_tiny_model_overfits_a_handful_of_pairs(attention, variant):
    pairs = [
        ([5, 6, 7], [8, 9]),
        ([10, 11, 12, 13], [14, 15, 16]),
        ([7, 6, 5], [9, 8, 20]),
        ([21, 22], [23, 24, 25, 26]),
        ([12, 11, 10], [16, 15]),
    ]
    model = tiny_model(attention=attention, seed=0, dec_hidden_size=24, **variant).train()
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    b = collate(pairs)
    for _ in range(150):
        opt.zero_grad()
        (model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out) / b.n_tokens).backward()
        opt.step()
    with torch.no_grad():
        assert float(model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out)) / b.n_tokens < 0.05
    hyps = greedy(model.eval(), b.src, b.src_len)
    assert [h.tokens for h in hyps] == [t for _, t in pairs]


@pytest.mark.parametrize("feeding", [False, True])
def test_the_loss_sends_only_real_tokens_to_the_output_layer(feeding):
    """J over real tokens equals cross-entropy of the full (B, T, V) logits with padding ignored."""
    model = tiny_model(attention="additive", input_feeding=feeding, seed=7)
    batch = collate([([5, 6, 7], [8, 9, 10, 11, 12]), ([13], [14]), ([15, 16], [17, 18])])
    logits = model(batch.src, batch.src_len, batch.tgt_in).logits  # (B, T, V), padding included
    full = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0, reduction="sum", label_smoothing=0.1
    )
    rows = []
    model.decoder.out.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[0]))
    loss = model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, LossTerms(label_smoothing=0.1))
    assert loss.item() == pytest.approx(full.item(), rel=1e-5)
    assert rows == [batch.n_tokens] and batch.n_tokens == 6 + 2 + 3 < batch.tgt_out.numel()


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


def test_word_dropout_zeroes_whole_words_in_training_only():
    from lookback.model.encoder import drop_words

    x = torch.ones(4, 50, 3)  # (B, T, E)
    torch.manual_seed(0)
    dropped = drop_words(x, 0.5, training=True)
    per_word = dropped[..., 0]  # (B, T): each word is all 0 or all 2 (kept and scaled by 1 / 0.5)
    assert torch.equal(dropped, per_word.unsqueeze(-1).expand_as(dropped))
    assert set(per_word.unique().tolist()) == {0.0, 2.0}
    assert 0.3 < float((per_word == 0).float().mean()) < 0.7
    assert torch.equal(drop_words(x, 0.5, training=False), x)
    assert torch.equal(drop_words(x, 0.0, training=True), x)


def test_word_dropout_changes_training_losses_and_not_evaluation():
    src = torch.tensor([[5, 6, 7, 2]] * 8)
    src_len = torch.tensor([4] * 8)
    tgt_in = torch.tensor([[1, 9, 10, 11]] * 8)
    tgt_out = torch.tensor([[9, 10, 11, 2]] * 8)
    plain, dropping = tiny_model(), tiny_model(word_dropout=0.5)  # the same weights
    with torch.no_grad():
        assert torch.equal(
            plain.loss(src, src_len, tgt_in, tgt_out), dropping.loss(src, src_len, tgt_in, tgt_out)
        )
        dropping.train()
        torch.manual_seed(1)
        assert not torch.equal(
            plain.loss(src, src_len, tgt_in, tgt_out), dropping.loss(src, src_len, tgt_in, tgt_out)
        )
