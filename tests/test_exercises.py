"""The notebooks' exercises: the solutions in notebooks/solutions/ pass lookback.exercises' checks,
and the wrong answers that the notebooks start from do not."""

import importlib.util
from pathlib import Path

import pytest
import torch

from lookback import exercises

from .explain.test_trace import toy_translator

SOLUTIONS = Path(__file__).parent.parent / "notebooks" / "solutions"


def solutions(name: str):
    spec = importlib.util.spec_from_file_location(f"solutions_{name}", SOLUTIONS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_notebook_has_its_solutions():
    notebooks = sorted(p.stem for p in SOLUTIONS.parent.glob("[0-9]_*.py"))
    assert notebooks and sorted(p.stem for p in SOLUTIONS.glob("*.py")) == notebooks


def test_the_journeys_solutions_pass_and_wrong_answers_do_not(capsys):
    s = solutions("1_the_journey_of_the_notes")
    assert exercises.check_weights(s.weights) and exercises.check_context(s.context)
    assert exercises.check_lecture_weights(s.LECTURE_WEIGHTS)
    assert "not the notes' 0.27, 0.63, 0.22" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="alpha: "):
        exercises.check_weights(lambda e, mask: torch.softmax(e, dim=-1))  # padding not masked
    with pytest.raises(AssertionError, match=r"c: shape \(2, 3, 1\), expected \(2, 3, 4\)"):
        exercises.check_context(lambda alpha, h: alpha.sum(-1, keepdim=True))
    with pytest.raises(AssertionError, match="the notes' weights"):
        exercises.check_lecture_weights([0.27, 0.63, 0.22])  # as the notes print them


def test_the_translators_solutions_pass_and_wrong_answers_do_not():
    s = solutions("2_a_real_translator")
    assert exercises.check_bucket(s.bucket)
    with pytest.raises(AssertionError, match=r"bucket\(41\) is '41-50'; expected '41-60'"):
        exercises.check_bucket(lambda n: f"{(n - 1) // 10 * 10 + 1}-{(n - 1) // 10 * 10 + 10}")
    t = toy_translator(attention="additive")
    sentences = ["the big dog sees a small cat in the park .", "a cat .", "the man runs"]
    assert exercises.check_greedy(s.decode, t, sentences)
    with pytest.raises(AssertionError, match="greedy search gives"):
        exercises.check_greedy(lambda tr, sentence: s.decode(tr, sentence)[:-1], t, sentences)


def test_the_scores_of_your_own_pass_and_wrong_ones_do_not():
    s = solutions("3_your_own_attention")
    assert exercises.check_score(s.ConcatScore) and exercises.check_score(s.TemperedGeneral)
    from lookback.model.attention import AdditiveScore, GeneralScore

    assert exercises.check_score(AdditiveScore) and exercises.check_score(GeneralScore)

    class Blind(exercises.Score):  # the same score for every source token
        def forward(self, s, keys, coverage=None):
            return s.sum(-1, keepdim=True).expand(*s.shape[:2], keys.size(1))

    with pytest.raises(AssertionError, match="must depend on h"):
        exercises.check_score(Blind)

    class Mixing(exercises.Score):  # each score sees every source token
        def forward(self, s, keys, coverage=None):
            return (s[..., :4] @ keys.transpose(1, 2)) + keys.sum((1, 2)).view(-1, 1, 1)

    with pytest.raises(AssertionError, match="moved the scores of other source tokens"):
        exercises.check_score(Mixing)

    class Frozen(s.TemperedGeneral):  # log_tau never reaches the scores
        def forward(self, s, keys, coverage=None):
            return s @ keys.transpose(1, 2)

    with pytest.raises(AssertionError, match="no gradient reaches log_tau"):
        exercises.check_score(Frozen)


def test_the_explanations_solutions_pass_and_wrong_answers_do_not():
    s = solutions("4_does_attention_explain")
    assert exercises.check_uniform(s.uniform) and exercises.check_same_top(s.same_top)
    with pytest.raises(AssertionError, match="uniform weights"):
        exercises.check_uniform(lambda alpha, mask: torch.full_like(alpha, 1 / alpha.size(-1)))
    with pytest.raises(AssertionError, match="the sign of an attribution does not count"):
        exercises.check_same_top(lambda a, g: float((a.argmax(-1) == g.argmax(-1)).float().mean()))


def test_the_next_lectures_solutions_pass_and_wrong_answers_do_not():
    s = solutions("5_the_next_lecture")
    assert exercises.check_future_mask(s.future_mask) and exercises.check_positions(s.positions_by_hand)
    with pytest.raises(AssertionError, match="step 0 reads position 1; it must not"):
        exercises.check_future_mask(lambda T: torch.ones(T, T, dtype=torch.bool))  # the notebook's start
    with pytest.raises(AssertionError, match=r"step 0 does not read position 0; it must"):
        exercises.check_future_mask(lambda T: torch.ones(T, T, dtype=torch.bool).tril(-1))  # not itself

    def sines_only(T, d):  # the notebook's start: a sine at every dimension
        return torch.sin(torch.arange(T)[:, None] / 10000 ** (torch.arange(d) / d))

    with pytest.raises(AssertionError, match=r"positions\(5, 8\)"):
        exercises.check_positions(sines_only)
