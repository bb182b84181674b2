"""bench.decoding inside the headline run (issue 39): `python -m bench headline --decoding` decodes with
each tool's weights at its own recipe (recipe against joey_best) and keeps the figures in the
run's JSON; the ratios are taken against whichever Joey system decoded. No Joey, no training."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import decoding as decoding_bench
from bench.headline import decoding, parse_args


@pytest.mark.parametrize(
    "argv",
    [["--decoding", "--only", "lookback"], ["--decoding", "--joey-from", "old.json"]],
)
def test_decoding_needs_both_tools_weights_from_this_run(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(argv)
    assert stop.value.code == 2
    assert "--decoding needs both tools' weights from this run" in capsys.readouterr().err
    assert parse_args(["--decoding"]).decoding and not parse_args([]).decoding


def plan(tmp_path: Path, systems: list[str], recipe: dict | None, threads: int = 0) -> SimpleNamespace:
    args = SimpleNamespace(joey_venv=tmp_path / "venv", threads=threads)
    return SimpleNamespace(args=args, systems=systems, recipe=recipe, results_dir=tmp_path / "results")


def test_each_tool_decodes_at_its_own_recipe_when_the_run_has_one(monkeypatch, tmp_path):
    seen = []

    def measure(args):
        seen.append(args)
        return {"rows": [{"name": "lookback torch"}], "errors": []}, tmp_path / "results" / "d.json"

    monkeypatch.setattr(decoding_bench, "measure", measure)
    monkeypatch.setattr(decoding_bench, "print_table", lambda record: None)
    out = decoding(plan(tmp_path, ["lookback", "joey", "recipe", "joey_best"], {"path": "c.yaml"}), tmp_path)
    assert (seen[0].system, seen[0].joey_system, seen[0].threads) == ("recipe", "joey_best", [1, 2])
    assert seen[0].run == tmp_path and seen[0].results_dir == tmp_path / "results"
    assert out["systems"] == {"lookback": "recipe", "joey": "joey_best"} and out["errors"] == []
    assert out["rows"] == [{"name": "lookback torch"}] and out["path"].endswith("d.json")
    decoding(plan(tmp_path, ["lookback", "joey"], None, threads=2), tmp_path)  # like for like only
    assert (seen[1].system, seen[1].joey_system, seen[1].threads) == ("lookback", "joey", [2])


def test_a_failed_decoding_is_recorded_not_raised(monkeypatch, tmp_path):
    def measure(args):
        raise subprocess.CalledProcessError(1, ["lookback", "export"])

    monkeypatch.setattr(decoding_bench, "measure", measure)
    out = decoding(plan(tmp_path, ["lookback", "joey"], None), tmp_path)
    assert out["path"] is None and out["rows"] == []
    assert out["errors"] == [
        "CalledProcessError: Command '['lookback', 'export']' returned non-zero exit status 1."
    ]


def row(name: str, system: str, tag: str, greedy: float, beam5: float) -> dict:
    figures = {
        "beam1": {"sentences_per_s": greedy, "bleu": 50.0},
        "beam5": {"sentences_per_s": beam5, "bleu": 51.0},
    }
    return {
        "name": name,
        "threads": 2,
        "tag": tag,
        "system": system,
        "result": {"figures": figures, "peak_rss_bytes": 1e9},
    }


def test_ratios_are_taken_against_the_joey_system_that_decoded(tmp_path):
    for name, lines in {
        "joey_best.t2.beam5.txt": ["un chien", "deux hommes"],
        "recipe.torch.t2.beam5.txt": ["un chien", "deux hommes"],
        "recipe.torch_int8.t2.beam5.txt": ["un chien court", "deux hommes"],
    }.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    rows = [
        row("joey_best", "joey_best", ".t2", 100.0, 40.0),
        row("lookback torch", "recipe", ".torch.t2", 400.0, 160.0),
        row("lookback torch int8", "recipe", ".torch_int8.t2", 500.0, 200.0),
    ]
    table = decoding_bench.summarise(rows, tmp_path, "joey_best")["rows"]
    assert [e["beam5_vs_joey"] for e in table] == [1.0, 4.0, 5.0]
    assert [e["beam1_vs_joey"] for e in table] == [1.0, 4.0, 5.0]
    assert "beam5_differ_from_fp32" not in table[0]  # Joey is not compared with lookback's fp32
    assert [e["beam5_differ_from_fp32"] for e in table[1:]] == [0, 1]
    assert table[2]["beam5_words_per_output"] == 2.5 and table[1]["peak_rss_gb"] == 1.0
