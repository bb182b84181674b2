"""Coverage (coverage.py): the running sum of alphas, in the score, in the loss and in beam search,
each by hand; the over- and under-translation report; and the readout of Bahdanau et al."""

import math

import pytest
import torch

from lookback.config import ConfigError, from_dict
from lookback.data.batch import collate
from lookback.decoding.search import beam_search, greedy, rank_score
from lookback.model.attention import AdditiveScore
from lookback.model.coverage import (
    coverage_loss,
    coverage_penalty,
    coverage_report,
    repeated_ngrams,
    running_coverage,
)
from lookback.model.seq2seq import LossTerms

from ..helpers import assert_gradient_descends, tiny_model
from .test_seq2seq import PAIRS

ALPHA = torch.tensor([[[0.7, 0.3, 0.0], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]]])  # (B=1, T=3, S=3)


def test_running_coverage_is_the_sum_of_the_steps_before():
    assert torch.allclose(
        running_coverage(ALPHA)[0], torch.tensor([[0.0, 0.0, 0.0], [0.7, 0.3, 0.0], [1.3, 0.5, 0.2]])
    )


def test_coverage_loss_by_hand_over_real_steps_only():
    # sum_i min(alpha, cov): step 1: 0;  step 2: .6 + .2 + 0 = .8;  step 3: .1 + .1 + .2 = .4
    real = torch.tensor([[True, True, True]])
    assert float(coverage_loss(ALPHA, real)) == pytest.approx(1.2)
    assert float(coverage_loss(ALPHA, torch.tensor([[True, True, False]]))) == pytest.approx(0.8)


def test_gnmt_coverage_penalty_by_hand():
    alpha = ALPHA[0, :2]  # totals per source token: 1.3, 0.5, 0.2
    # beta sum_i log min(total, 1) = 0.2 (log 1 + log 0.5 + log 0.2)
    assert coverage_penalty(alpha, 0.2) == pytest.approx(0.2 * (math.log(0.5) + math.log(0.2)))
    assert coverage_penalty(alpha, 0.0) == 0.0
    assert coverage_penalty(torch.tensor([[1.0, 0.0]]), 1.0) == pytest.approx(math.log(1e-6))  # floored
    assert rank_score(-3.0, 2, alpha, 1.0, 0.2) == pytest.approx(
        -3.0 / ((5 + 3) / 6) + coverage_penalty(alpha, 0.2)
    )


def test_the_coverage_term_changes_the_additive_score_by_hand():
    score = AdditiveScore(1, 1, 1, coverage=True)
    with torch.no_grad():
        for layer, w in ((score.W, 1.0), (score.U, 1.0), (score.v, 2.0), (score.w_c, -1.0)):
            layer.weight.fill_(w)
        score.U.bias.zero_()
    s, h = torch.tensor([[[0.5]]]), torch.tensor([[[0.25], [1.0]]])  # (1, 1, 1), (1, S=2, 1)
    cov = torch.tensor([[[0.0, 1.0]]])  # (1, T=1, S=2): the second token is covered
    # e_i = 2 tanh(0.5 + h_i - cov_i): 2 tanh(0.75), 2 tanh(0.5)
    e = score(s, score.keys(h), cov)
    assert e[0, 0].tolist() == pytest.approx([2 * math.tanh(0.75), 2 * math.tanh(0.5)])


def test_the_state_carries_the_running_sum_of_the_alphas():
    model = tiny_model(attention="additive", coverage=True).eval()
    assert model.decoder.parallel  # the RNN at once; attention steps, as it needs the steps before
    b = collate(PAIRS)
    with torch.no_grad():
        enc = model.encode(b.src, b.src_len)
        state = model.decoder.init_state(enc)
        assert torch.equal(state.coverage, torch.zeros(b.src.shape))
        out = model.decoder(b.tgt_in, enc, state)
    assert torch.allclose(out.state.coverage, out.alpha.sum(1), atol=1e-6)
    assert out.state.step == b.tgt_in.size(1)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("window", ["global", "local_p"])
def test_the_fast_coverage_path_gives_the_stepwise_loss_and_gradients(cell, window):
    """The RNN over the whole target at once and attention looping over the steps computes what
    the decoder stepping token by token computes: the same loss (with J_cov), weights and gradients."""
    b = collate(PAIRS)
    results = []
    for stepwise in (False, True):
        model = tiny_model(attention="additive", coverage=True, cell=cell, window=window, window_size=1)
        model.train()  # dropout 0 (tiny_model): nothing random
        loss = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(coverage=1.0, stepwise=stepwise))
        loss.backward()
        with torch.no_grad():
            enc = model.encode(b.src, b.src_len)
            alpha = model.decoder(b.tgt_in, enc, model.decoder.init_state(enc), stepwise=stepwise).alpha
        results.append((float(loss.detach()), alpha, [p.grad.clone() for p in model.parameters()]))
    (fast, a_fast, g_fast), (step, a_step, g_step) = results
    assert fast == pytest.approx(step, rel=1e-6)
    assert torch.allclose(a_fast, a_step, atol=1e-6)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(g_fast, g_step, strict=True))


def test_coverage_trains_with_its_loss_and_decodes_with_the_penalty():
    model = tiny_model(attention="additive", coverage=True, attend_from="previous").train()
    b = collate(PAIRS)
    plain = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out)
    torch.manual_seed(0)
    with_cov = model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(coverage=1.0))
    assert float(with_cov.detach()) > float(plain.detach())  # dropout 0: the difference is J_cov > 0
    loss = lambda: model.loss(b.src, b.src_len, b.tgt_in, b.tgt_out, LossTerms(coverage=1.0))  # noqa: E731
    assert_gradient_descends(loss, model.decoder.score.w_c.weight)  # w_c learns from it
    model.eval()
    hyps = beam_search(model, b.src, b.src_len, beam=3, coverage_penalty=0.5)
    for n in hyps:
        h = n[0]
        assert h.score == pytest.approx(rank_score(h.logprob, len(h.tokens), h.alpha, 1.0, 0.5), abs=1e-5)
    g = greedy(model, b.src, b.src_len)
    assert [h.tokens for h in g] == [n[0].tokens for n in beam_search(model, b.src, b.src_len, beam=1)]


def test_the_report_counts_under_and_over_covered_tokens_and_repeats():
    alpha = torch.tensor([[0.9, 0.1, 0.0], [0.9, 0.1, 0.0], [0.0, 0.1, 0.9]])  # totals 1.8, 0.3, 0.9
    report = coverage_report([(alpha, ["a", "b", "</s>"], ["x", "y", "x", "y"])])
    # the closing </s> is left out: a over-covered, b under-covered, of 2 source tokens
    assert report["under_covered"] == 0.5 and report["over_covered"] == 0.5
    assert report["repeated_bigrams"] == pytest.approx(1 / 3)  # (x y) again, of 3 bigrams
    assert repeated_ngrams(["a", "b", "a", "b", "a"], 2) == 2


def test_bahdanau_readout_is_a_maxout_of_the_query_the_previous_word_and_the_context():
    model = tiny_model(attention="additive", attend_from="previous", readout="bahdanau", seed=3).eval()
    dec = model.decoder
    assert not hasattr(dec, "combine")
    b = collate(PAIRS)
    with torch.no_grad():
        enc = model.encode(b.src, b.src_len)
        state = dec.init_state(enc)
        y = b.tgt_in[:, :1]
        out = dec(y, enc, state)
        pieces = dec.maxout(torch.cat([state.top(), dec.embed(y)[:, 0], out.c[:, 0]], -1))  # s_{t-1}
        expected = torch.maximum(pieces[:, 0::2], pieces[:, 1::2])
    assert torch.allclose(out.s_tilde[:, 0], expected, atol=1e-6)


@pytest.mark.parametrize("attend_from", ["current", "previous"])
@pytest.mark.parametrize("feeding", [False, True])
def test_bahdanau_readout_in_every_wiring(attend_from, feeding):
    model = tiny_model(
        attention="general", readout="bahdanau", attend_from=attend_from, input_feeding=feeding
    )
    b = collate(PAIRS)
    loss = lambda: model.train().loss(b.src, b.src_len, b.tgt_in, b.tgt_out)  # noqa: E731
    assert_gradient_descends(loss, model.decoder.maxout.weight)
    assert len(greedy(model.eval(), b.src, b.src_len)) == 3
    none = tiny_model(attention="none", readout="bahdanau")
    assert len(greedy(none, b.src, b.src_len)) == 3


def test_the_coverage_loss_starts_at_its_update():
    from lookback.model.coverage import coverage_weight

    assert [coverage_weight(1.0, 3, step) for step in (1, 2, 3, 4)] == [0.0, 0.0, 1.0, 1.0]
    assert coverage_weight(0.5, 0, 1) == 0.5  # from the first update
    with pytest.raises(ConfigError, match="train.coverage_start: starts train.coverage_loss, which is 0"):
        from_dict({"train": {"coverage_start": 100}})


def test_coverage_config_checks():
    with pytest.raises(
        ConfigError, match="model.coverage: the coverage term is read by 'additive', not 'dot'"
    ):
        from_dict({"model": {"attention": "dot", "coverage": True, "dec_hidden_size": 512}})
    for key in ("train.coverage_loss", "decode.coverage_penalty"):
        section, name = key.split(".")
        with pytest.raises(ConfigError, match=f"{key}: needs attention weights"):
            from_dict({"model": {"attention": "none"}, section: {name: 1.0}})
    with pytest.raises(ConfigError, match="model.readout: got 'maxout', expected one of luong, bahdanau"):
        from_dict({"model": {"readout": "maxout"}})
