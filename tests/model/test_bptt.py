"""The decoder's steps with their backward written out (bptt.py): autograd's loss and gradients,
for the decoders it covers, and autograd itself for every other."""

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.model import bptt
from lookback.model.seq2seq import LossTerms
from lookback.training.train import Trainer

from ..helpers import tiny_model, tiny_train_config
from ..training.test_train import params, records

PAIRS = [([5, 6, 7, 8, 9, 10, 11], [5, 6, 7]), ([10, 11], [12, 13, 14, 15, 16]), ([4, 5, 6], [7])]
COVERED = dict(attention="additive", input_feeding=True, attend_from="current", bidirectional=True)


def covered_model(dtype=torch.float64, **kw):
    return tiny_model(seed=3, **{**COVERED, "dropout": 0.3, "word_dropout": 0.1, **kw}).to(dtype).train()


def loss_and_grads(model, terms, seed=0):
    b = collate(PAIRS)
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks on both paths: drawn in the same order
    J = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, terms)
    (J / 3).backward()
    return J.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_and_every_gradient_are_autograds(smoothing):
    model = covered_model()
    assert bptt.covers(model.decoder)
    J_ref, ref = loss_and_grads(model, LossTerms(label_smoothing=smoothing))
    J, ours = loss_and_grads(model, LossTerms(label_smoothing=smoothing, written=True))
    assert J.item() == pytest.approx(J_ref.item(), rel=1e-12)
    assert ours.keys() == ref.keys()  # every parameter the loss reaches, the source's embedding too
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-9, atol=1e-12, msg=name)


def test_it_runs_once_for_all_steps(monkeypatch):
    model = covered_model()
    calls = []
    steps = bptt.steps
    monkeypatch.setattr(bptt, "steps", lambda *a: calls.append(a[1].shape) or steps(*a))
    loss_and_grads(model, LossTerms(written=True))
    assert calls == [(3, 6, 16)]  # (B, T, E): <s> and the longest target's 5 pieces


def test_source_padding_gets_no_weight_and_no_gradient():
    model, b = covered_model(), collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    h, keys = enc.h.detach().requires_grad_(), enc.keys.detach().requires_grad_()
    s0 = model.decoder.init_state(enc).top().detach()
    x = model.decoder.embed_inputs(b.tgt_in).detach()
    s_tilde = bptt.steps(model.decoder, x, h, keys, enc.src_mask, s0)  # (B, T, D)
    assert s_tilde.shape == (3, 6, 20)
    s_tilde.sum().backward()
    padding = ~enc.src_mask  # sentence 2 has 2 real tokens of 7, sentence 3 has 3
    assert padding.sum() == 9
    assert (h.grad[padding] == 0).all() and (keys.grad[padding] == 0).all()
    assert (h.grad[~padding].abs().sum(-1) > 0).all() and (keys.grad[~padding].abs().sum(-1) > 0).all()


def test_each_step_runs_only_the_sentences_still_going(monkeypatch):
    """Sorted by target length, step t runs the b_t sentences longer than t: the same ~s_t at every
    real position as stepping all of them through T, zeros past each length, and the same gradients
    of a loss that reads the real positions only."""
    model, b = covered_model(), collate(PAIRS)
    enc = model.encode(b.src, b.src_len)
    lengths = (b.tgt_out != 0).sum(1)
    assert lengths.tolist() == [4, 6, 2]
    seen = []
    apply = bptt.InputFeedingSteps.apply
    monkeypatch.setattr(bptt.InputFeedingSteps, "apply", lambda *a: seen.append(a[1]) or apply(*a))
    x = model.decoder.embed_inputs(b.tgt_in).detach()  # dropout's mask drawn once for both
    s0 = model.decoder.init_state(enc).top().detach()
    out = {}
    for name, given in (("all", None), ("packed", lengths)):
        h = enc.h.detach().requires_grad_()
        s_tilde = bptt.steps(model.decoder, x, h, enc.keys.detach(), enc.src_mask, s0, given)
        real = torch.arange(6) < lengths.unsqueeze(1)  # (B, T)
        (s_tilde[real] ** 2).sum().backward()
        out[name] = s_tilde.detach(), real, h.grad
    assert seen == [[3] * 6, [3, 3, 2, 2, 1, 1]]  # b_t: all three; then the three, two, one longest
    (full, real, g_full), (packed, _, g_packed) = out["all"], out["packed"]
    torch.testing.assert_close(packed[real], full[real], rtol=1e-12, atol=1e-12)
    assert (packed[~real] == 0).all()
    torch.testing.assert_close(g_packed, g_full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM], ids=["gru", "lstm"])
def test_the_encoders_rnn_written_out_is_nn_grus_and_nn_lstms_outputs_and_gradients(cell, bidirectional):
    """bptt.recurrence on packed sentences of lengths 5, 1, 7, 3 (unsorted, one of a single token)
    gives nn.GRU's (nn.LSTM's) output, last states (and memory cells) and every gradient, in
    float64, with a loss that reads all of them."""
    torch.manual_seed(0)
    rnn = cell(6, 5, batch_first=True, bidirectional=bidirectional).double()
    x = torch.randn(4, 7, 6, dtype=torch.float64)
    lengths = torch.tensor([5, 1, 7, 3])
    K = 1 + bidirectional
    w_out = torch.randn(lengths.sum().item(), 5 * K, dtype=torch.float64)
    w_last = torch.randn(2, K, 4, 5, dtype=torch.float64)  # for h_n and c_n
    results = []
    for run in (rnn, lambda p: bptt.recurrence(rnn, p)):
        xi = x.clone().requires_grad_()
        packed = pack_padded_sequence(xi, lengths, batch_first=True, enforce_sorted=False)
        out, last = run(packed)
        last = last if isinstance(last, tuple) else (last,)
        weighted = zip(last, w_last[: len(last)], strict=True)
        J = (out.data * w_out).sum() + sum((state * w).sum() for state, w in weighted)
        results.append((out.data, last, torch.autograd.grad(J, [xi, *rnn.parameters()])))
    (out_ref, last_ref, g_ref), (out, last, g) = results
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12)
    assert len(last) == len(last_ref) == (2 if cell is torch.nn.LSTM else 1)
    for a, b in zip(last, last_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for name, a, b in zip(["x", *dict(rnn.named_parameters())], g, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=name)


def test_the_encoder_takes_the_written_rnn_only_where_it_covers_it(monkeypatch):
    calls = []
    recurrence = bptt.recurrence
    monkeypatch.setattr(bptt, "recurrence", lambda *a: calls.append(1) or recurrence(*a))
    b = collate(PAIRS)
    cases = [({}, True), (dict(cell="lstm"), True), (dict(cell="rnn"), False), (dict(enc_layers=2), False)]
    for kw, written in cases:
        model = covered_model(torch.float32, **kw)
        calls.clear()
        model.encoder(b.src, b.src_len, written=True)
        model.encoder(b.src, b.src_len)  # not asked: nn.GRU
        with torch.no_grad():
            model.encoder(b.src, b.src_len, written=True)  # no gradients: nn.GRU
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model.encoder(b.src, b.src_len, written=True)  # autocast: nn.GRU
        assert calls == [1] * written, kw


@pytest.mark.parametrize("cell", ["gru", "lstm"])  # the LSTM: only its encoder is written out
def test_in_float32_it_is_autograd_within_rounding(cell):
    model = covered_model(torch.float32, cell=cell)
    J_ref, ref = loss_and_grads(model, LossTerms())
    J, ours = loss_and_grads(model, LossTerms(written=True))
    assert J.item() == pytest.approx(J_ref.item(), rel=1e-5)
    for name in ref:
        torch.testing.assert_close(ours[name], ref[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    "change",
    [
        dict(cell="lstm"),
        dict(cell="rnn"),
        dict(attention="general"),
        dict(attention="dot", dec_hidden_size=24),
        dict(attend_from="previous"),
        dict(input_feeding=False),
        dict(dec_layers=2),
        dict(readout="bahdanau"),
        dict(layer_norm=True),
        dict(coverage=True),
        dict(window="local_m", window_size=2),
        dict(normalizer="sparsemax"),
    ],
    ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()),
)
def test_any_other_decoder_goes_through_autograd(change, monkeypatch):
    model = covered_model(**change)
    assert not bptt.covers(model.decoder)
    monkeypatch.setattr(bptt, "steps", lambda *a: pytest.fail("bptt.steps ran"))
    loss_and_grads(model, LossTerms(written=True))


@pytest.mark.parametrize(
    "terms", [dict(guide=0.5), dict(coverage=0.5), dict(teacher_forcing=0.5), dict(stepwise=True)]
)
def test_a_loss_that_reads_alpha_or_steps_goes_through_autograd(terms, monkeypatch):
    model = covered_model()
    monkeypatch.setattr(bptt, "steps", lambda *a: pytest.fail("bptt.steps ran"))
    J, ours = loss_and_grads(model, LossTerms(written=True, **terms))
    J_ref, ref = loss_and_grads(model, LossTerms(**terms))
    assert J.item() == J_ref.item()


def test_without_gradients_or_under_autocast_it_stands_aside():
    model = covered_model(torch.float32)
    assert bptt.runs(model.decoder)
    with torch.no_grad():
        assert not bptt.runs(model.decoder)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not bptt.runs(model.decoder)


def test_train_bptt_takes_auto_or_autograd_and_says_which_in_one_line():
    assert from_dict({"train": {"bptt": "autograd"}}).train.bptt == "autograd"
    with pytest.raises(ConfigError, match="train.bptt"):
        from_dict({"train": {"bptt": "written"}})
    cfg = from_dict({"train": {"bptt": "auto", "compile": True}}).train
    assert not LossTerms.at(cfg, 0).written  # train.compile compiles the step instead


def test_training_takes_autograds_steps_and_the_toy_translation_is_learned(tmp_path, caplog):
    """Ten updates with the written backward and with autograd's end at the same weights; the line
    that says so is logged once; and 150 updates learn the toy lexicon's translation."""
    runs = {}
    for way in ("auto", "autograd"):
        raw = tiny_train_config(
            tmp_path / way, model={**COVERED, "dropout": 0.2}, train={"max_steps": 10, "bptt": way}
        )
        with caplog.at_level("INFO"):
            caplog.clear()
            runs[way] = Trainer(from_dict(raw))
            runs[way].train()
        said = [r.message for r in caplog.records if "written out" in r.message]
        assert len(said) == (way == "auto")
        assert all("for the decoder's steps and the encoder's GRU (model/bptt.py" in x for x in said)
    a, b = params(runs["auto"]), params(runs["autograd"])
    # fp32 rounding apart; Adam divides by the gradient's size, so the attention's nearly
    # gradient-free U bias and W move furthest (by about 1e-5 of an lr of 1e-3 over 10 steps)
    assert all(torch.allclose(a[k], b[k], atol=5e-5) for k in a)
    raw = tiny_train_config(tmp_path / "learn", model=COVERED, train={"max_steps": 150, "valid_every": 150})
    trainer = Trainer(from_dict(raw))
    trainer.train()
    assert records(trainer.run, "valid")[-1]["bleu"] > 80


def test_training_an_lstm_says_in_one_line_where_its_encoder_runs_each_way(tmp_path, caplog):
    raw = tiny_train_config(tmp_path, model={**COVERED, "cell": "lstm"}, train={"max_steps": 1})
    with caplog.at_level("INFO"):
        Trainer(from_dict(raw)).train()
    said = [r.message for r in caplog.records if "each way" in r.message]
    assert said == [
        "the encoder's LSTM each way on the padded batch where 80% of it is real tokens "
        "(model/encoder.py: torch's fused LSTM)"
    ]
