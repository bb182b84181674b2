"""data/batch.py: batches by tokens, and the plan of every update's batches across epochs, ranks
and a resume."""

from __future__ import annotations

import logging

import pytest

from lookback.config import ConfigError, from_dict
from lookback.data.batch import UpdatePlan, curriculum_batches, token_batches

PAIRS = [([i + 4] * (1 + i % 3), [i + 4] * (1 + i % 2)) for i in range(10)]


def fixed_batches(epoch: int) -> list[list[int]]:
    """Five batches of two pairs; the order changes with the epoch."""
    order = list(range(10))[epoch % 10 :] + list(range(10))[: epoch % 10]
    return [order[i : i + 2] for i in range(0, 10, 2)]


def firsts(batches) -> list[int]:
    """The first source token of every pair in an update's batches, to name them."""
    return [int(x) for b in batches for x in b.src[:, 0]]


def take(plan: UpdatePlan, n: int) -> list[list[int]]:
    updates = iter(plan)
    return [firsts(next(updates)) for _ in range(n)]


def test_the_plan_rolls_over_with_the_last_update_of_an_epoch_and_drops_what_cannot_fill_one():
    plan = UpdatePlan(PAIRS, fixed_batches, per_update=2)  # 5 batches: 2 updates, the 5th left out
    updates = iter(plan)
    first = firsts(next(updates))
    assert sorted(first) == [4, 5, 6, 7] and (plan.epoch, plan.batch) == (0, 2)
    next(updates)
    assert (plan.epoch, plan.batch) == (1, 0)  # points past the update it just gave
    assert sorted(firsts(next(updates))) == [5, 6, 7, 8]  # epoch 1 starts at pair 1


def test_a_plan_started_at_a_saved_position_goes_on_as_the_uninterrupted_one():
    straight = take(UpdatePlan(PAIRS, fixed_batches, per_update=2), 7)
    plan = UpdatePlan(PAIRS, fixed_batches, per_update=2)
    head = take(plan, 3)
    resumed = UpdatePlan(PAIRS, fixed_batches, per_update=2, epoch=plan.epoch, batch=plan.batch)
    assert head + take(resumed, 4) == straight
    # a position at the end of an epoch (saved before the plan rolled over eagerly) starts the next
    at_end = UpdatePlan(PAIRS, fixed_batches, per_update=2, epoch=0, batch=4)
    assert take(at_end, 1) == straight[2:3]


def test_a_length_curriculum_keeps_short_targets_in_its_first_epochs_and_then_all():
    lengths = [(3, 1 + i % 12) for i in range(120)]  # target lengths 1 .. 12
    staged = [[b.tolist() for b in curriculum_batches(lengths, 40, 7, [4, 8], epoch)] for epoch in range(3)]
    for epoch, limit in ((0, 4), (1, 8)):
        seen = sorted(i for b in staged[epoch] for i in b)
        assert seen == [i for i, (_, t) in enumerate(lengths) if t <= limit]  # each short pair once
    assert staged[2] == [b.tolist() for b in token_batches(lengths, 40, 7, 2)]  # after it: the usual epoch
    again = [b.tolist() for b in curriculum_batches(lengths, 40, 7, [4, 8], 0)]
    assert staged[0] == again  # seeded: a resume sees the same
    with pytest.raises(ValueError, match="train.curriculum: no training pair has at most 0 target tokens"):
        curriculum_batches(lengths, 40, 7, [0], 0)
    with pytest.raises(
        ConfigError, match=r"train.curriculum: got \[10, 0\], expected a list of integers >= 1"
    ):
        from_dict({"train": {"curriculum": [10, 0]}})


def test_the_ranks_share_each_update_and_together_see_what_one_process_sees():
    one = take(UpdatePlan(PAIRS, fixed_batches, per_update=2), 4)
    ranks = [take(UpdatePlan(PAIRS, fixed_batches, per_update=2, rank=r, world=2), 4) for r in (0, 1)]
    for update, (a, b) in enumerate(zip(*ranks, strict=True)):
        assert len(a) == len(b) == 2 and sorted(a + b) == sorted(one[update])


def test_a_plan_whose_epoch_cannot_fill_one_update_says_so():
    with pytest.raises(ValueError, match="makes 5 batches per epoch, fewer than the 6 of one update"):
        take(UpdatePlan(PAIRS, fixed_batches, per_update=6, world=2), 1)


def test_training_pairs_over_max_len_tokens_are_skipped_with_a_count(caplog) -> None:
    """The token-length limit of training (data.max_len), applied after the tokenizers."""
    from lookback.data.batch import encode_corpus
    from lookback.data.tokenizer import WordTokenizer

    tok = WordTokenizer("en", ["a", "b"])
    src = ["a b", "a b a b a", "\x07", "b"]  # fits, 5 tokens, no tokens at all, fits
    with caplog.at_level(logging.INFO, logger="lookback.data.batch"):
        corpus = encode_corpus(src, list(src), tok, tok, max_len=3)
    assert corpus.src == ["a b", "b"] and len(corpus.pairs) == 2
    assert "skipped 2 of 4 pairs" in caplog.text
