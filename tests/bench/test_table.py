"""python -m bench table (issue 39): the README's result table from one bench invocation,
like for like and each tool at its own recipe, with ratios checked by hand; a run that reused
Joey's figures from another day is refused."""

from __future__ import annotations

import json

from bench import table


def record(**settings) -> dict:
    def both(mine, theirs, a="lookback", b="joey"):
        return {a: mine, b: theirs}

    return {
        "created": "2026-11-27T10:00:00+00:00",
        "path": "results/bench/2026-11-27_100000_cpu_feed.json",
        "machine": {"cpu_model": "AMD EPYC", "cpu_cores": 2, "cpu_flags": ["avx2", "fma"]},
        "versions": {"lookback_env": {"torch": "2.13.0+cpu"}},
        "settings": {
            "joey_from": None,
            "recipe_budget_s": 1800.0,
            "joey_best_budget_s": 4500.0,
            "recipe": {"path": "configs/multi30k_en_fr_additive.yaml"},
            "joey_best": {"name": "peer", "lr": 0.002},
            **settings,
        },
        "figures": {
            "training, target tokens/s": both(4000.0, 2000.0),
            "training, share of the fp32 GEMM peak": both(0.5, 0.4),
            "training, MFLOP per target token": both(29.0, 47.7),
            "training, peak RSS (GB)": both(1.5, 2.0),
            "training, updates in the budget": both(9000, 6000, "recipe", "joey_best"),
            "validation BLEU at the end": both(57.5, 53.0, "recipe", "joey_best"),
            "minutes to joey_best's final validation BLEU": both(9.0, 75.0, "recipe", "joey_best"),
            "BLEU greedy, after the budget": both(58.0, 54.0, "recipe", "joey_best"),
            "BLEU beam 5, after the budget": both(59.0, 55.0, "recipe", "joey_best"),
        },
        "decoding": {
            "systems": {"lookback": "recipe", "joey": "joey_best"},
            "rows": [
                {"name": "joey_best", "threads": 2, "beam1_sentences_per_s": 100.0,
                 "beam5_sentences_per_s": 40.0, "beam1_bleu": 54.0, "beam5_bleu": 55.0},
                {"name": "lookback torch", "threads": 2, "beam1_sentences_per_s": 300.0,
                 "beam5_sentences_per_s": 120.0, "beam1_bleu": 58.0, "beam5_bleu": 59.0},
                {"name": "lookback onnxruntime int8", "threads": 2, "beam1_sentences_per_s": 500.0,
                 "beam5_sentences_per_s": 200.0, "beam1_bleu": 57.9, "beam5_bleu": 58.8},
                {"name": "lookback torch int8", "threads": 2, "beam1_sentences_per_s": 400.0,
                 "beam5_sentences_per_s": 150.0, "beam1_bleu": 57.9, "beam5_bleu": 58.9},
            ],
        },
    }  # fmt: skip


def test_the_table_holds_both_blocks_with_their_ratios():
    text = table.markdown(record())
    assert "| training, target tokens/s | 4,000 | 2,000 | 2.00x |" in text
    assert "| training, share of the fp32 GEMM peak | 50% | 40% | 1.25x |" in text
    assert "| training, peak RSS (GB) | 1.50 | 2.00 | 0.75x |" in text
    assert "lookback's `multi30k_en_fr_additive.yaml`, Joey's `peer` recipe" in text
    assert "| training minutes | 30 | 75 | 0.40x |" in text
    assert "| minutes to Joey's final validation BLEU | 9 | 75 | 0.12x |" in text
    assert "| test BLEU, beam 5 | 59.00 | 55.00 | 1.07x |" in text
    # decoding: PyTorch fp32 and the fastest beam-5 combination of the rest, each with its BLEU
    assert (
        "| decoding beam 5, sentences/s, 2 thread(s), lookback PyTorch fp32 (BLEU 59.00 vs 55.00) "
        "| 120.0 | 40.0 | 3.00x |" in text
    )
    assert "lookback onnxruntime int8 (BLEU 58.80 vs 55.00) | 200.0 | 40.0 | 5.00x |" in text
    assert "torch int8" not in text
    assert "AMD EPYC, 2 cores, flags avx2, fma; torch 2.13.0+cpu; 2026-11-27" in text
    # the footer names, whole, the two figures whose ratio is better below 1
    assert 'ratios of "minutes to Joey\'s final validation BLEU" and "training, peak RSS (GB)".' in text


def test_a_missing_figure_prints_as_a_dash_and_its_ratio_too():
    r = record()
    r["figures"]["training, target tokens/s"]["joey"] = None
    del r["decoding"]
    text = table.markdown(r)
    assert "| training, target tokens/s | 4,000 | - | - |" in text and "decoding" not in text


def test_a_run_that_reused_joeys_figures_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(record(joey_from="results/bench/old.json")))
    assert table.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Joey's figures come from results/bench/old.json, not this run" in err
    path.write_text(json.dumps(record()))
    assert table.main([str(path)]) == 0 and "| training, target tokens/s |" in capsys.readouterr().out
