"""bench/transformer_peer.py's --joey-from: Joey's run taken from a finished joey-search point,
checked to be the same recipe and clock, and said so in the record and the table."""

from __future__ import annotations

import json

import pytest

from bench import settings, transformer_peer


def point(folder, recipe, minutes=12.0, bleu=15.6):
    """A finished joey-search point as the headline harness leaves it (the fields read here)."""
    folder.mkdir(parents=True)
    curve = [{"seconds": 360.0, "bleu": bleu / 2}, {"seconds": 720.0, "bleu": bleu}]
    train = {"figures": {"curve": curve, "steps": 516, "seconds": 720.0, "parameters": 6790656}}
    translate = {"figures": {"beam1": {"bleu": 16.25}, "beam5": {"bleu": 15.65}}}
    record = {
        "status": "ok",
        "settings": {"budget_s": minutes * 60, "joey_best": recipe},
        "systems": {settings.JOEY_BEST: {"train": train, "translate": translate}},
    }
    (folder / "2026-12-04_115151_feed.json").write_text(json.dumps(record), encoding="utf-8")
    return folder


def test_joeys_run_is_taken_from_the_point_and_said_so(tmp_path):
    sets = ["lr=0.001", "warmup=1000"]
    folder = point(tmp_path / "tf_lr1e-3_w1000", settings.joey_recipe("transformer", sets))
    argv = ["--joey-from", str(folder), *[a for s in sets for a in ("--joey-set", s)]]
    args = transformer_peer.parse_args(argv)
    joey = transformer_peer.joey_system(args, tmp_path / "work")
    assert joey["taken_from"].endswith("tf_lr1e-3_w1000") and joey["updates"] == 516
    assert joey["valid_bleu_best"] == 15.6 and joey["test"]["beam5"]["bleu"] == 15.65
    assert not (tmp_path / "work").exists()  # nothing trained
    record = {"minutes": 12, "cpu": "a CPU", "cpu_flags": ["avx2"], "test": "t", "systems": {"joey": joey}}
    assert "joey: taken from " in transformer_peer.markdown(record)


@pytest.mark.parametrize(
    ("sets", "minutes", "message"),
    [
        ([], 12.0, "that point ran another recipe (lr, warmup differ); give its --joey-set flags"),
        (["lr=0.001", "warmup=1000"], 9.0, "that point trained 12 minutes, not 9"),
    ],
)
def test_a_point_of_another_recipe_or_clock_is_refused(tmp_path, capsys, sets, minutes, message):
    folder = point(tmp_path / "p", settings.joey_recipe("transformer", ["lr=0.001", "warmup=1000"]))
    argv = [
        "--joey-from",
        str(folder),
        "--minutes",
        str(minutes),
        *[a for s in sets for a in ("--joey-set", s)],
    ]
    with pytest.raises(SystemExit) as stop:
        transformer_peer.parse_args(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_folder_without_a_finished_point_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        transformer_peer.parse_args(["--joey-from", str(tmp_path)])
    assert "no finished joey-search point there" in capsys.readouterr().err
