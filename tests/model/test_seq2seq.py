"""The encoder-decoder: every branch runs, shapes and masks hold, fast path equals stepping."""

import itertools

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
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


def test_dot_attention_with_mismatched_sizes_is_a_config_error():
    with pytest.raises(ConfigError, match="model.attention: dot scores need s and h of one size"):
        from_dict({"model": {"attention": "dot", "hidden_size": 256, "dec_hidden_size": 256}})


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
