"""bench/compiled.py: eager against train.compile on the same batches, its summary checked by hand,
and (slow) end to end on a tiny model."""

from __future__ import annotations

import json

import pytest
import yaml

from bench import compiled

from ..helpers import tiny_train_config


def run(precision, is_compiled, rate, first):
    return {
        "precision": precision,
        "compiled": is_compiled,
        "target_tokens_per_s": rate,
        "first_updates_seconds": first,
    }


def test_the_summary_takes_each_sides_median_and_their_ratio():
    runs = [
        run("fp32", False, 3400.0, 2.5),
        run("fp32", True, 3900.0, 22.0),
        run("fp32", False, 3500.0, 2.7),
        run("fp32", True, 4000.0, 24.0),
        run("bf16", False, 5000.0, 1.8),
        run("bf16", True, 4700.0, 26.0),
    ]
    assert compiled.summary(runs) == {
        "fp32": {
            "eager_tokens_per_s": 3450.0,
            "compiled_tokens_per_s": 3950.0,
            "compiled_over_eager": 1.145,  # 3950 / 3450
            "compile_extra_seconds": 20.4,  # 23.0 - 2.6
        },
        "bf16": {
            "eager_tokens_per_s": 5000.0,
            "compiled_tokens_per_s": 4700.0,
            "compiled_over_eager": 0.94,
            "compile_extra_seconds": 24.2,
        },
    }


def test_bad_counts_and_a_missing_output_are_refused(capsys):
    for argv in (["-o", "x.json", "--updates", "0"], ["-o", "x.json", "--rounds", "11"], []):
        with pytest.raises(SystemExit):
            compiled.parse_args(argv)
    err = capsys.readouterr().err
    assert "--updates must be 1-10,000 and --rounds 1-10, not 0 and 2" in err
    assert "-o/--output is required" in err


@pytest.mark.slow
def test_a_tiny_model_compiled_and_eager_in_fresh_processes(tmp_path, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp_path)), encoding="utf-8")
    out = tmp_path / "compiled.json"
    argv = [
        "-o",
        str(out),
        "--config",
        str(config),
        "--precisions",
        "fp32",
        "--rounds",
        "1",
        "--updates",
        "3",
    ]
    assert compiled.main([*argv, "--threads", "1"]) == 0
    result = json.loads(out.read_text())
    assert [(r["precision"], r["compiled"]) for r in result["runs"]] == [("fp32", False), ("fp32", True)]
    assert result["summary"]["fp32"]["compiled_over_eager"] > 0 and result["cpu_flags"]
    assert result["without_dropout"]["relative_difference"] < 1e-4  # the same losses, to rounding
    assert "fp32: compiled" in capsys.readouterr().err
