"""bench/stopping.py: how outputs end, and beam's search errors against greedy, counted by hand."""

from types import SimpleNamespace

import pytest
import sacrebleu

from bench.stopping import measure
from lookback.decoding.search import lp


class FakeTranslator:
    """Fixed outputs per beam size; target pieces are the words."""

    def __init__(self, outputs: dict[int, list[tuple[str, float]]]):
        self.outputs = outputs
        self.decode = SimpleNamespace(max_ratio=1.0, length_penalty=1.0)
        self.tgt_tok = SimpleNamespace(encode=lambda text: text.split())

    def translate(self, sources, beam):
        return [
            SimpleNamespace(text=text, ids=text.split(), score=score, src_ids=src.split())
            for src, (text, score) in zip(sources, self.outputs[beam], strict=True)
        ]


def test_where_outputs_end_and_which_beam_outputs_score_below_greedy():
    src = ["a b", "a b c", "a", "a b c d"]
    ref = ["x y", "x y z", "x", "x y z w"]
    t = FakeTranslator(
        {
            # greedy scores are log-probabilities; beam scores are over lp(length + 1)
            1: [("x y z", -1.0), ("x y", -2.0), ("x", -0.5), ("q y z w", -3.0)],
            5: [
                ("x y", -0.6 / lp(3, 1.0)),
                ("x y", -3.0 / lp(3, 1.0)),
                ("x", -0.5 / lp(2, 1.0)),
                ("x y z w", -1.0),
            ],
        }
    )
    greedy, outs = measure(t, src, ref, 1, None)
    assert greedy["sentences"] == 4 and "below_greedy" not in greedy
    assert greedy["longer_than_reference"] == 0.25  # "x y z" against "x y"
    assert greedy["runs_past_reference"] == 1  # "x y" is a proper prefix of "x y z"
    assert greedy["cut_short"] == 1  # "x y" against "x y z"
    # the limit is ceil(1.0 x source tokens) + 5 with </s>: 7 for "a b"; no output is that long
    assert greedy["at_length_limit"] == 0
    beam, _ = measure(t, src, ref, 5, outs)
    # greedy's objective: -1 / lp(4) = -0.67, -2 / lp(3) = -1.5, -0.5 / lp(2), -3 / lp(5) = -1.8;
    # beam's: -0.45 (above), -2.25 (below), the same (a tie), -1 (above)
    assert (beam["below_greedy"], beam["above_greedy"]) == (1, 2)
    assert beam["bleu"] == pytest.approx(sacrebleu.corpus_bleu(["x y", "x y", "x", "x y z w"], [ref]).score)
    assert beam["length_ratio"] == pytest.approx(9 / 10)
    assert list(beam["by_length"]) == ["1-10"]


def test_an_output_at_its_length_limit_is_counted():
    t = FakeTranslator({1: [("x y z w v u", -1.0)]})  # 6 tokens + </s> = 7 = 1 x 2 + 5
    r, _ = measure(t, ["a b"], ["x y"], 1, None)
    assert r["at_length_limit"] == 1 and r["runs_past_reference"] == 1
