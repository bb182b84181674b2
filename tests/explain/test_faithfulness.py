"""Counterfactual attention (faithfulness.py): each change by hand, and on tiny models."""

import json
import math

import pytest
import torch

from lookback.decoding.search import greedy
from lookback.explain.faithfulness import (
    Counterfactual,
    decode,
    donor_order,
    drop_max,
    faithfulness,
    js_divergence,
    kinds_for,
    permute,
    step_effects,
    stretch,
    uniform,
)
from lookback.model.decoder import Look
from lookback.translator import Translator

from ..helpers import tiny_model, toy_pairs, train_tiny

ALPHA = torch.tensor([[[0.5, 0.3, 0.2, 0.0], [0.1, 0.1, 0.8, 0.0]]])  # (1, 2, 4): 3 real tokens
MASK = torch.tensor([[True, True, True, False]])


def test_uniform_spreads_over_the_real_tokens_only():
    assert torch.allclose(uniform(ALPHA, MASK), torch.tensor([[[1 / 3, 1 / 3, 1 / 3, 0.0]] * 2]))


def test_permute_shuffles_a_rows_own_weights_among_the_real_tokens():
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(30):
        out = permute(ALPHA, MASK, g)
        assert (out[..., 3] == 0).all()  # padding keeps 0
        for row, new in zip(ALPHA[0], out[0], strict=True):
            assert sorted(new[:3].tolist()) == sorted(row[:3].tolist())  # the same weights
        seen.add(tuple(out[0, 0].tolist()))
    assert len(seen) == 6  # all 3! orders of 0.5, 0.3, 0.2 turn up


def test_drop_max_removes_the_top_weight_and_renormalises():
    out = drop_max(ALPHA, MASK)
    assert torch.allclose(out, torch.tensor([[[0.0, 0.6, 0.4, 0.0], [0.5, 0.5, 0.0, 0.0]]]))
    one_hot = torch.tensor([[[0.0, 1.0, 0.0, 0.0]]])  # nothing else had weight: uniform over the rest
    assert torch.allclose(drop_max(one_hot, MASK), torch.tensor([[[0.5, 0.0, 0.5, 0.0]]]))
    single = torch.tensor([[[1.0, 0.0]]])  # one real token: nothing else to look at
    assert torch.equal(drop_max(single, torch.tensor([[True, False]])), single)


def test_every_change_keeps_rows_summing_to_one_over_real_tokens():
    torch.manual_seed(0)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    alpha = torch.softmax(torch.randn(2, 5, 7).masked_fill(~mask.unsqueeze(1), float("-inf")), -1)
    donors = torch.softmax(torch.randn(2, 3, 7).masked_fill(~mask.unsqueeze(1), float("-inf")), -1)
    for kind in ("uniform", "permute", "drop_max", "other"):
        out = Counterfactual(kind, donors)(alpha, mask, 0)
        assert torch.allclose(out.sum(-1), torch.ones(2, 5)), kind
        assert (out[1, :, 4:] == 0).all(), kind


def test_other_lends_the_donors_step_and_repeats_its_last():
    donors = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # (1, 2 steps, 2)
    change = Counterfactual("other", donors)
    alpha, mask = torch.tensor([[[0.5, 0.5]]]), torch.tensor([[True, True]])
    for step, want in ((0, [1.0, 0.0]), (1, [0.0, 1.0]), (5, [0.0, 1.0])):
        assert change(alpha, mask, step).tolist() == [[want]]


def test_other_follows_its_sentences_when_search_drops_the_finished():
    donors = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])  # sentence 0 lends [1, 0], sentence 1 [0, 1]
    kept = Counterfactual("other", donors).index_select(torch.tensor([1]))
    alpha, mask = torch.tensor([[[0.5, 0.5]]]), torch.tensor([[True, True]])
    assert kept(alpha, mask, 0).tolist() == [[[0.0, 1.0]]]
    assert Look(change=kept).index_select(torch.tensor([0])).change(alpha, mask, 0).tolist() == [[[0.0, 1.0]]]


def test_stretch_moves_weights_to_the_same_relative_place():
    assert stretch(torch.tensor([0.5, 0.5]), 4).tolist() == [0.5, 0.0, 0.5, 0.0]  # 0.5 -> 0.5, 1.5 -> 2.5
    assert stretch(torch.tensor([0.1, 0.2, 0.3, 0.4]), 2).tolist() == pytest.approx([0.3, 0.7])
    assert stretch(torch.tensor([0.2, 0.8]), 2).tolist() == pytest.approx([0.2, 0.8])


def test_donor_is_the_next_sentence_by_length_never_itself():
    assert donor_order([5, 2, 9, 3]) == [2, 3, 1, 0]  # by length 2 (1), 3 (3), 5 (0), 9 (2)
    assert donor_order([4]) == [0]


def test_js_divergence_by_hand():
    p = torch.tensor([0.5, 0.5, 0.0]).log()
    assert float(js_divergence(p, p)) == pytest.approx(0.0, abs=1e-7)
    q = torch.tensor([0.0, 0.0, 1.0]).log()
    assert float(js_divergence(p, q)) == pytest.approx(1.0)  # disjoint: 1 bit
    r = torch.tensor([1.0, 0.0, 0.0]).log()  # M = (3/4, 1/4, 0); JSD = (KL(p||M) + KL(r||M)) / 2
    want = (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25) + math.log(1 / 0.75)) / 2 / math.log(2)
    assert float(js_divergence(p, r)) == pytest.approx(want)


@pytest.mark.parametrize(
    "overrides",
    [
        {"attention": "none"},
        {"attention": "additive"},
        {"attention": "dot", "input_feeding": True},
        {"attention": "scaled_dot", "heads": 2, "attention_size": 12},
        {"window": "local_p", "window_size": 1},
    ],
)
def test_decode_is_greedy_and_its_weights_are_greedys(overrides):
    overrides = {"hidden_size": 10, **overrides}  # dot: 2 x 10 = dec_hidden_size 20
    model = tiny_model(seed=3, **overrides)
    src = torch.tensor([[5, 6, 7, 8, 9], [4, 9, 3, 0, 0]])
    src_len = torch.tensor([5, 3])
    outputs, weights = decode(model, src, src_len)
    hyps = greedy(model, src, src_len)
    assert outputs == [h.tokens for h in hyps]
    if not model.decoder.attends:
        assert weights == [None, None]
        return
    assert [w.shape for w in weights] == [(len(outputs[0]) + 1, 5), (len(outputs[1]) + 1, 3)]
    assert all(torch.allclose(w.sum(-1), torch.ones(len(w))) for w in weights)
    for w, h in zip(weights, hyps, strict=True):  # teacher-forced along the output: greedy's own rows
        assert torch.allclose(w[:-1], h.alpha, atol=1e-5)


def test_decode_with_a_change_decodes_greedily_with_it():
    model = tiny_model(seed=3, hidden_size=10, attention="additive")
    src, src_len = torch.tensor([[5, 6, 7, 8, 9], [4, 9, 3, 0, 0]]), torch.tensor([5, 3])
    outputs, weights = decode(model, src, src_len, Counterfactual("uniform"))
    changed = greedy(model, src, src_len, look=Look(change=Counterfactual("uniform")))
    assert outputs == [h.tokens for h in changed] and weights == [None, None]
    for h, S in zip(changed, (5, 3), strict=True):  # every step attended uniformly
        assert torch.allclose(h.alpha, torch.full((len(h.tokens), S), 1 / S))


def test_a_change_reaches_the_output_and_none_is_the_control():
    src, src_len = torch.tensor([[5, 6, 7, 8, 9]]), torch.tensor([5])
    attends = tiny_model(seed=1, attention="additive")
    own, _ = decode(attends, src, src_len)
    effects = step_effects(attends, src, src_len, own, {"uniform": Counterfactual("uniform")})
    divergence, _ = effects["uniform"][0]
    assert len(divergence) == len(own[0]) + 1 and max(divergence) > 0
    assert kinds_for(tiny_model(attention="none")) == ()
    assert "other" not in kinds_for(tiny_model(window="local_m", window_size=1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faithful")
    return {name: train_tiny(tmp / name, name) for name in ("none", "additive")}


def test_permuting_a_trained_models_attention_changes_its_output_not_the_controls(runs):
    src, ref = map(list, zip(*toy_pairs(24, seed=7), strict=True))
    attends = faithfulness(Translator.load(runs["additive"]), src, ref, seed=1)
    row = attends["by_length"]["all"]
    assert attends["counterfactuals"] == ["uniform", "permute", "drop_max", "other"]
    assert row["permute"]["js_divergence"] > 0.05 and row["permute"]["changed_outputs"] > 0
    assert row["permute"]["bleu"] < row["greedy"]["bleu"]  # the toy lexicon needs the right word
    assert row["permute"]["bleu_change"] == pytest.approx(row["permute"]["bleu"] - row["greedy"]["bleu"])
    control = faithfulness(Translator.load(runs["none"]), src, ref)
    assert control["control"] and control["counterfactuals"] == []
    assert set(control["by_length"]["all"]) == {"sentences", "greedy"}


def test_faithfulness_refuses_an_ensemble(runs):
    t = Translator.ensemble([runs["additive"], runs["additive"]])
    with pytest.raises(ValueError, match="ensemble"):
        faithfulness(t, ["a dog ."], ["un chien ."])


def test_the_faithfulness_command_prints_a_table_and_json(runs, capsys):
    from lookback.cli import main

    run_dir = str(runs["additive"])
    assert main(["faithfulness", run_dir, "--limit", "6", "--kinds", "uniform,drop_max"]) == 0
    out = capsys.readouterr().out
    assert "on " in out and "uniform" in out and "drop_max" in out and "permute" not in out
    assert main(["faithfulness", run_dir, "--limit", "6", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sentences"] == 6
    assert report["counterfactuals"] == ["uniform", "permute", "drop_max", "other"]
    assert main(["faithfulness", str(runs["none"]), "--limit", "4"]) == 0
    assert "control" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:
        main(["faithfulness", run_dir, "--kinds", "uniform,flat"])
    assert exit.value.code == 2
    assert "'flat'" in capsys.readouterr().err
