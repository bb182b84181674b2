"""Greedy and beam search: the pure beam step by hand, beam 1 = greedy, limits, attention."""

import itertools
import math

import pytest
import torch

from lookback.data.batch import pad
from lookback.data.tokenizer import BOS, EOS
from lookback.decoding.search import (
    BLOCK,
    beam_search,
    beam_step,
    check_search,
    greedy,
    lp,
    max_lengths,
    top_k,
    top_tokens,
)

from ..helpers import tiny_model

SRC = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]


def test_beam_step_on_hand_built_log_probabilities():
    log = math.log
    scores = torch.tensor([[log(0.6), log(0.4)]])  # (B=1, K=2)
    logp = torch.tensor([[[log(0.5), log(0.3), log(0.2)], [log(0.9), log(0.05), log(0.05)]]])  # (1, K, V=3)
    top, beams, tokens = beam_step(scores, logp, 3)
    # products: beam0: .30 .18 .12; beam1: .36 .02 .02 -> best .36 (1,0), .30 (0,0), .18 (0,1)
    assert torch.exp(top[0]).tolist() == pytest.approx([0.36, 0.30, 0.18])
    assert beams[0].tolist() == [1, 0, 0]
    assert tokens[0].tolist() == [0, 0, 1]


def test_beam_step_ignores_empty_slots():
    scores = torch.tensor([[0.0, float("-inf")]])
    logp = torch.log_softmax(torch.randn(1, 2, 4), -1)
    _, beams, _ = beam_step(scores, logp, 4)
    assert beams[0].tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("V", [8000, 8000 + BLOCK // 2, 3 * BLOCK, BLOCK - 3])
@pytest.mark.parametrize("n", [1, 2, 10])
def test_top_k_in_blocks_equals_topk(V, n):
    # whole blocks only, a tail of half a block, fewer blocks than n, less than one block
    torch.manual_seed(V + n)
    x = torch.randn(7, V) * 4
    x[0, :n] = x.max() + torch.arange(n, 0, -1)  # the best n all in the first block
    x[1, -n:] = x.max() + 1  # tied best values at the end (the tail, where there is one)
    top, cols = top_k(x, n)
    want, want_cols = x.topk(n, dim=-1)
    assert torch.equal(top, want)  # the same values, in the same order
    assert torch.equal(x.gather(1, cols), top)  # each column holds its value
    assert torch.equal(cols[2:], want_cols[2:])  # and, but for ties, the same columns
    assert sorted(cols[0].tolist()) == list(range(n))


def test_top_tokens_are_log_softmax_and_its_best():
    logits = torch.tensor([[0.0, 1.0, 3.0, 2.0, -1.0], [5.0, 5.5, 0.0, 0.0, 1.0]])
    logp, tokens, eos = top_tokens(logits, 2)
    norm = torch.logsumexp(logits, -1, keepdim=True)
    assert tokens.tolist() == [[2, 3], [1, 0]]
    assert torch.allclose(logp, logits.gather(1, tokens) - norm)
    assert torch.allclose(eos, logits[:, EOS : EOS + 1] - norm)


@pytest.mark.parametrize("attention", ["none", "additive", "dot"])
@pytest.mark.parametrize("feeding", [False, True])
def test_beam_one_equals_greedy_exactly(attention, feeding):
    model = tiny_model(attention=attention, input_feeding=feeding, dec_hidden_size=24, seed=3)
    src, src_len = pad(SRC)
    g = greedy(model, src, src_len, max_ratio=3.0)
    b = beam_search(model, src, src_len, beam=1, length_penalty=0.0, max_ratio=3.0)
    for gh, [bh] in zip(g, b, strict=True):
        assert gh.tokens == bh.tokens
        assert gh.logprob == pytest.approx(bh.logprob, abs=1e-5)
        if attention != "none":
            assert torch.allclose(gh.alpha, bh.alpha, atol=1e-6)


def test_outputs_respect_the_length_limit_and_carry_attention():
    model = tiny_model(attention="general", seed=1)
    src, src_len = pad(SRC)
    limits = max_lengths(src_len, 0.5).tolist()  # tokens, </s> included
    for hyps in beam_search(model, src, src_len, beam=4, nbest=4, max_ratio=0.5):
        assert len(hyps) >= 1
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    for i, h in enumerate(greedy(model, src, src_len, max_ratio=0.5)):
        assert len(h.tokens) + 1 <= limits[i]
        assert h.alpha.shape == (len(h.tokens), len(SRC[i]))
        assert torch.allclose(h.alpha.sum(-1), torch.ones(len(h.tokens)), atol=1e-5)


def test_beam_hypotheses_carry_their_own_attention_rows():
    model = tiny_model(attention="additive", seed=2)
    src, src_len = pad(SRC)
    for i, hyps in enumerate(beam_search(model, src, src_len, beam=3, nbest=3)):
        for h in hyps:
            assert h.alpha.shape == (len(h.tokens), len(SRC[i]))
            assert h.score == pytest.approx(h.logprob / lp(len(h.tokens) + 1, 1.0))


def test_length_penalty_is_gnmt():
    assert lp(1, 1.0) == 1.0
    assert lp(7, 0.5) == pytest.approx(math.sqrt(2))
    assert lp(9, 0.0) == 1.0


def _count_rows(model) -> list[int]:
    """Record how many rows the decoder runs at each step."""
    rows, forward = [], model.decoder.forward

    def counting(y, enc, state, **look):
        rows.append(y.size(0))
        return forward(y, enc, state, **look)

    model.decoder.forward = counting
    return rows


@pytest.mark.parametrize(
    "variant",
    [
        dict(attention="additive"),
        dict(attention="none"),
        dict(attention="dot", input_feeding=True, dec_hidden_size=24),
        dict(attention="general", attend_from="previous", cell="lstm"),
    ],
)
def test_a_batch_translates_each_sentence_as_alone(variant):
    """Sentences leave the batch as they finish: no row may be mixed up with another's."""
    model = tiny_model(seed=5, **variant)
    src, src_len = pad(SRC)
    together_g = greedy(model, src, src_len)
    together_b = beam_search(model, src, src_len, beam=3, nbest=3)
    for i, ids in enumerate(SRC):
        one, one_len = pad([ids])
        [alone_g] = greedy(model, one, one_len)
        [alone_b] = beam_search(model, one, one_len, beam=3, nbest=3)
        assert together_g[i].tokens == alone_g.tokens
        assert together_g[i].logprob == pytest.approx(alone_g.logprob, abs=1e-4)
        assert [h.tokens for h in together_b[i]] == [h.tokens for h in alone_b]
        assert [h.score for h in together_b[i]] == pytest.approx([h.score for h in alone_b], abs=1e-4)
        if variant["attention"] != "none":
            assert torch.allclose(together_g[i].alpha, alone_g.alpha, atol=1e-5)
            assert torch.allclose(together_b[i][0].alpha, alone_b[0].alpha, atol=1e-5)


def test_greedy_runs_one_row_per_unfinished_sentence():
    model = tiny_model(attention="additive", seed=4)
    rows = _count_rows(model)
    src, src_len = pad(SRC)
    hyps = greedy(model, src, src_len, max_ratio=1.0)
    # every row the decoder ran produced one output token of a sentence still going (</s> included)
    assert sum(rows) == sum(len(h.tokens) + 1 for h in hyps)
    assert rows[0] == len(SRC) and rows[-1] < len(SRC)


def test_beam_search_drops_the_rows_of_finished_sentences():
    model = tiny_model(attention="additive", seed=4)
    rows = _count_rows(model)
    src, src_len = pad(SRC)
    K = 3
    beam_search(model, src, src_len, beam=K, max_ratio=1.0)
    limits = max_lengths(src_len, 1.0).tolist()  # 11, 7, 9: the untrained model runs to the limit
    assert rows[0] == len(SRC)  # one row per sentence: all beams would start from <s>
    # afterwards K rows per sentence still searched; a sentence at its limit leaves
    expected = [K * sum(t < lim for lim in limits) for t in range(1, len(rows))]
    assert rows[1:] == expected
    assert rows[-1] == K


@torch.no_grad()
def _teacher_forced_logprob(model, src_ids: list[int], outputs: list[list[int]]) -> torch.Tensor:
    """log P(y + </s> | x) of each output, read off one teacher-forced pass: (N,)."""
    N = len(outputs)
    src, src_len = pad([src_ids] * N)
    tgt_in, _ = pad([[BOS, *y] for y in outputs])
    logp = torch.log_softmax(model(src, src_len, tgt_in).logits.float(), -1)  # (N, T, V)
    return torch.stack(
        [logp[i, torch.arange(len(y) + 1), torch.tensor([*y, EOS])].sum() for i, y in enumerate(outputs)]
    )


def test_an_output_cut_at_the_length_limit_pays_for_its_end():
    """A model that rarely ends runs to the limit; the score must hold the real log P(</s>)."""
    model = tiny_model(attention="additive", seed=6)
    with torch.no_grad():
        model.decoder.out.bias[EOS] = -6.0  # </s> improbable, but not free
    src, src_len = pad(SRC)
    greedy_hyps = greedy(model, src, src_len, max_ratio=0.5)
    beam_hyps = [hs[0] for hs in beam_search(model, src, src_len, beam=3, max_ratio=0.5)]
    limits = max_lengths(src_len, 0.5).tolist()
    for i, (g, b) in enumerate(zip(greedy_hyps, beam_hyps, strict=True)):
        assert len(g.tokens) + 1 == limits[i]  # cut, not ended by itself
        expected = _teacher_forced_logprob(model, SRC[i], [g.tokens, b.tokens])
        assert g.logprob == pytest.approx(float(expected[0]), abs=1e-4)
        assert b.logprob == pytest.approx(float(expected[1]), abs=1e-4)
        assert g.logprob < _teacher_forced_logprob(model, SRC[i], [g.tokens])[0] + 1e-3  # </s> cost something


def test_beam_search_wider_than_every_output_finds_what_exhaustive_search_finds():
    """Tiny vocabulary, short limit: every output can be scored, and a wide enough beam must
    return the best of them under its own objective, log P over the length penalty."""
    model = tiny_model(vocab=2, attention="general", seed=7)  # 5 target ids: 4 that are not </s>
    src_ids = [1, 1]  # the source vocabulary has two ids: <pad> and <unk>
    src, src_len = pad([src_ids])
    limit = int(max_lengths(src_len, 0.01)[0])  # 6 tokens, </s> included
    tokens = [i for i in range(5) if i != EOS]
    outputs = [list(y) for n in range(limit) for y in itertools.product(tokens, repeat=n)]
    logprob = _teacher_forced_logprob(model, src_ids, outputs)
    for power in (0.0, 1.0):
        scores = torch.tensor([lp(len(y) + 1, power) for y in outputs])
        scores = logprob / scores
        best = int(scores.argmax())
        [found] = beam_search(model, src, src_len, beam=len(outputs), length_penalty=power, max_ratio=0.01)
        assert found[0].tokens == outputs[best]
        assert found[0].score == pytest.approx(float(scores[best]), abs=1e-4)


def test_a_target_vocabulary_smaller_than_twice_the_beam():
    model = tiny_model(vocab=2, attention="dot", dec_hidden_size=24, seed=8)  # 5 target ids, 2K = 10
    src, src_len = pad([[1, 1, 1]])
    [hyps] = beam_search(model, src, src_len, beam=5, nbest=5, max_ratio=1.0)
    assert 1 <= len(hyps) <= 5
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert [h.tokens for h in hyps] != [] and len({tuple(h.tokens) for h in hyps}) == len(hyps)


def test_the_search_goes_on_past_improbable_ends_until_none_can_win():
    """A confident model whose </s> candidates rank in the top K at every step: counting K
    finished hypotheses stopped at step 2 with '[4]' (score -2.66); the bound goes on to
    '4 4 4 4' ending with P(</s>) 0.95 (score -0.28)."""
    model = tiny_model(vocab=2, attention="additive", seed=9)  # 5 target ids; 4 is the only word
    forward, step = model.decoder.forward, [0]
    ends = torch.log(torch.tensor([0.0167, 0.0166, 0.0167, 0.05, 0.9]))  # P(4) .9, P(</s>) .05
    last = torch.log(torch.tensor([0.0125, 0.0125, 0.0125, 0.95, 0.0125]))  # after four words: end

    def fixed(y, enc, state, **look):
        out = forward(y, enc, state, **look)
        table = last if step[0] >= 4 else ends
        step[0] += 1
        return out._replace(logits=table.expand(y.size(0), 1, -1).clone())

    model.decoder.forward = fixed
    src, src_len = pad([[1, 1, 1]])
    [[best]] = beam_search(model, src, src_len, beam=2, length_penalty=1.0)
    expected = 4 * math.log(0.9) + math.log(0.95)
    assert best.tokens == [4, 4, 4, 4]
    assert best.score == pytest.approx(expected / lp(5, 1.0), abs=1e-3)


def test_at_least_greedy_keeps_beam_search_from_returning_less_than_greedy():
    """A decoder whose beam of 2 prunes the path greedy takes: after <s> a (.40) or b (.35);
    after 'a' greedy goes on with a (.34) and then ends (.95), but 'b c' (.175) and 'b b'
    (.1575) both beat 'a a' (.136) at step 2, and every path from b ends badly. Alone, beam 2
    returns less than greedy under its own objective; seeded with greedy's output, it cannot."""
    model = tiny_model(vocab=4, attention="additive", seed=9)  # target ids: 4 a, 5 b, 6 c
    forward, t = model.decoder.forward, [0]
    P = {  # (step, previous token) -> P(pad, unk, <s>, </s>, a, b, c)
        (0, BOS): [1e-4, 1e-4, 1e-4, 0.05, 0.40, 0.35, 0.1997],
        (1, 4): [1e-4, 1e-4, 1e-4, 0.0097, 0.34, 0.33, 0.32],
        (1, 5): [1e-4, 1e-4, 1e-4, 0.0097, 0.04, 0.45, 0.50],
        (2, 4): [1e-4, 1e-4, 1e-4, 0.95, 0.0166, 0.0166, 0.0165],
    }
    other = [1e-4, 1e-4, 1e-4, 0.2, 0.0333, 0.3833, 0.3831]  # any other step: </s> .2

    def fixed(y, enc, state, **look):
        out = forward(y, enc, state, **look)
        t[0] = 0 if bool((y[:, -1] == BOS).all()) else t[0] + 1
        rows = [P.get((min(t[0], 2), int(prev)), other) for prev in y[:, -1]]
        return out._replace(logits=torch.log(torch.tensor(rows)).unsqueeze(1))

    model.decoder.forward = fixed
    src, src_len = pad([[1, 1, 1]])
    [g] = greedy(model, src, src_len)
    assert g.tokens == [4, 4] and g.logprob == pytest.approx(math.log(0.40 * 0.34 * 0.95), abs=1e-4)
    floor = g.logprob / lp(3, 1.0)
    [[alone]] = beam_search(model, src, src_len, beam=2)
    assert alone.tokens[0] == 5 and alone.score < floor - 0.5  # greedy's path was pruned
    [[seeded]] = beam_search(model, src, src_len, beam=2, at_least_greedy=True)
    assert seeded.tokens == [4, 4] and seeded.score == pytest.approx(floor)
    hyps = beam_search(model, src, src_len, beam=3, nbest=3, at_least_greedy=True)[0]  # greedy's once
    assert len({tuple(h.tokens) for h in hyps}) == len(hyps) == 3


@pytest.mark.parametrize("seed", [1, 3])  # untrained models where beam 2 loses greedy's output
def test_at_least_greedy_is_the_better_of_beam_and_greedy(seed):
    """Following greedy's path inside the beam (and running greedy only where the beam dropped
    it) returns what running greedy first and keeping the better of the two would."""
    model = tiny_model(vocab=12, attention="additive", seed=seed)
    torch.manual_seed(seed)
    src, src_len = pad([torch.randint(4, 12, (int(n),)).tolist() for n in torch.randint(2, 9, (48,))])
    greedy_scores = [h.logprob / lp(len(h.tokens) + 1, 1.0) for h in greedy(model, src, src_len)]
    plain = [hs[0] for hs in beam_search(model, src, src_len, beam=2)]
    both = [hs[0] for hs in beam_search(model, src, src_len, beam=2, at_least_greedy=True)]
    for p, b, g in zip(plain, both, greedy_scores, strict=True):
        assert b.score == pytest.approx(max(p.score, g), abs=1e-5)
    assert any(p.score < g - 1e-4 for p, g in zip(plain, greedy_scores, strict=True))  # beam 2 lost some


def test_a_search_that_cannot_fit_is_one_line_naming_the_limit():
    with pytest.raises(ValueError, match=r"^beam 9000 is wider than the target vocabulary \(8000 pieces\)"):
        check_search(9000, 1, 8000, 1, 20, 45, 256, free=2**40)
    gib = 2**30
    too_wide = r"needs about .* GiB, more than the 1.0 GiB free: use a beam of at most"
    with pytest.raises(ValueError, match=too_wide):
        check_search(5000, 1, 8000, 64, 40, 85, 256, free=gib)
    with pytest.raises(ValueError, match="even one hypothesis per sentence does not fit"):
        check_search(1, 1, 8000, 64, 40, 10**9, 256, free=gib)
    check_search(5, 1, 8000, 64, 40, 85, 256, free=gib)  # the shipped decoding fits easily
