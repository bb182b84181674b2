"""bench/gpu_check.py on a machine without a GPU: its arguments, its plan, its refusal, and its
steps' bookkeeping (time limits, failures, figures) on stand-in commands."""

from __future__ import annotations

import json
import sys

import pytest

from bench import gpu_check


def test_the_plan_prints_every_steps_command_and_runs_nothing(capsys):
    assert gpu_check.main(["--plan", "--updates", "250"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" ")[0] for line in lines] == ["tests", "train", "bench"]
    train = lines[1]
    assert "lookback train configs/quickstart.yaml --set train.device=cuda" in train
    assert "--set train.precision=bf16 --set train.max_steps=250" in train  # one --set each
    assert "train.max_steps=250" in train and "(at most 90 s)" in train
    assert "-m bench headline --device cuda --quick --configs feed" in lines[2]
    assert "tests/training" in lines[0] and "tests/decoding" in lines[0] and "-m 'not slow'" in lines[0]


def test_the_bench_steps_command_is_one_the_bench_takes(tmp_path):
    """Parsed by the bench's own entry point and headline's parser: a step that names no run, or a
    flag headline lacks, fails here and not on a lent GPU."""
    from bench import __main__ as entry
    from bench import headline

    for trained in (0.0, 1.5):
        cmd = gpu_check.commands(300, tmp_path, trained)["bench"]
        assert cmd[1:4] == ["-m", "bench", "headline"] and cmd[3] in entry.RUNS
        args = headline.parse_args(cmd[4:])
        assert args.device == "cuda" and args.configs == ["feed"]
        if trained:  # each tool at its own recipe, trained, then tested
            assert not args.quick and args.budget_minutes == 1.5 and args.validate_every_minutes == 0.5
            assert args.only == "joey_best" and args.joey_best == "peer"
            assert str(args.recipe) == "configs/quickstart.yaml"  # the main job
            assert args.joey_set == ["batch_sentences=40"]
        else:
            assert args.quick and args.recipe is None


def test_trained_minutes_widen_the_bench_steps_limit(capsys):
    assert gpu_check.bench_limit(0) == gpu_check.LIMITS["bench"] == 180
    assert gpu_check.bench_limit(1.5) == 2 * 90 + 150
    assert gpu_check.main(["--plan", "--steps", "bench", "--trained", "2"]) == 0
    assert "(at most 390 s)" in capsys.readouterr().out


def test_the_plan_of_chosen_steps(capsys):
    assert gpu_check.main(["--plan", "--steps", "bench"]) == 0
    assert [line.split(" ")[0] for line in capsys.readouterr().out.splitlines()] == ["bench"]


def test_without_a_gpu_it_stops_at_once_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: False)
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "bench.gpu_check: error: this torch sees no CUDA GPU (torch.cuda.is_available() is False)\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--updates", "0"], "--updates must be between 1 and 100,000, not 0"),
        (["--steps", "train", "deploy"], "invalid choice: 'deploy'"),
        (["--updates", "many"], "invalid int value: 'many'"),
        (["--trained", "-1"], "--trained must be between 0 and 60 minutes, not -1"),
    ],
)
def test_bad_arguments_are_refused_in_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as stop:
        gpu_check.main(args)
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_pytests_summary_becomes_numbers():
    text = "....\n3 failed, 120 passed, 2 skipped in 61.2s\n"
    assert gpu_check.test_figures(text, None) == {"failed": 3, "passed": 120, "skipped": 2}
    assert gpu_check.test_figures("collected 0 items\n", None) == {}


def test_the_training_figures_come_from_the_runs_metrics(tmp_path):
    (tmp_path / "run").mkdir()
    lines = [
        {"step": 50, "kind": "train", "tokens_per_s": 30000.0},
        {"step": 100, "kind": "train", "tokens_per_s": 41000.0, "loss": 4.25},
        {"step": 100, "kind": "valid", "bleu": 31.5},
    ]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert gpu_check.train_figures("", tmp_path) == {
        "target_tokens_per_s": 41000.0,
        "train_loss": 4.25,
        "valid_bleu": 31.5,
        "updates": 100,
    }
    assert gpu_check.train_figures("", tmp_path / "none") == {}
    assert gpu_check.compiled_figures("", tmp_path) == {}  # the compiled step reads its own run
    (tmp_path / "run").rename(tmp_path / "compiled")
    assert gpu_check.compiled_figures("", tmp_path)["train_loss"] == 4.25


def stand_ins(updates, work, trained=0.0):
    """Quick commands in place of the real steps: one passes, one fails, one outlives its limit."""
    (work / "run").mkdir(parents=True, exist_ok=True)
    metrics = work / "run" / "metrics.jsonl"
    write = f"open({str(metrics)!r}, 'w').write('{{\"step\": {updates}, \"bleu\": 12.0}}\\n')"
    return {
        "tests": [sys.executable, "-c", "print('5 passed in 0.1s')"],
        "train": [sys.executable, "-c", f"{write}; raise SystemExit(3)"],
        "bench": [sys.executable, "-c", "import time; time.sleep(30)"],
    }


def test_every_step_is_recorded_whatever_becomes_of_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpu_check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "gpu", lambda: {"name": "stand-in"})
    monkeypatch.setattr(gpu_check, "commands", stand_ins)
    monkeypatch.setitem(gpu_check.LIMITS, "bench", 1)
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["-o", str(out), "--updates", "7"]) == 1  # not every step passed
    result = json.loads(out.read_text())
    steps = result["steps"]
    assert steps["tests"]["status"] == "passed" and steps["tests"]["figures"] == {"passed": 5}
    assert steps["train"]["status"] == "failed (exit 3)" and steps["train"]["figures"] == {
        "valid_bleu": 12.0,
        "updates": 7,
    }
    assert steps["bench"]["status"] == "timed out after 1 s" and steps["bench"]["seconds"] < 10
    assert result["gpu"] == {"name": "stand-in"} and result["cpu_flags"] == gpu_check.cpu_flags()
    assert "gpu_check: train: failed (exit 3)" in capsys.readouterr().err
    # each step's whole log is kept beside the JSON
    assert (tmp_path / "gpu_tests.log").read_text() == "5 passed in 0.1s\n"
    assert steps["tests"]["log"].endswith("gpu_tests.log") and (tmp_path / "gpu_bench.log").exists()


def test_the_train_steps_arguments_are_ones_lookback_train_accepts(tmp_path):
    """The step's command line, parsed by lookback's own parser: every override reaches --set."""
    from lookback.cli import build_parser

    cmd = gpu_check.commands(250, tmp_path)["train"]
    assert cmd[1:4] == ["-m", "lookback", "train"]
    args = build_parser().parse_args(cmd[3:])
    assert args.set == [
        "train.device=cuda",
        "train.precision=bf16",
        "train.max_steps=250",
        "train.valid_every=250",
        f"train.run_dir={tmp_path / 'run'}",
        "train.time_limit=0",
    ]


def test_the_compiled_step_trains_the_same_run_compiled_on_request(tmp_path, capsys):
    """`compiled`: the train step's updates, seed and batches with train.compile=true, in its own
    run directory; named in --steps only (the default check stays under 10 minutes)."""
    from lookback.cli import build_parser

    train, compiled = (gpu_check.commands(250, tmp_path)[k] for k in ("train", "compiled"))
    args, same = build_parser().parse_args(compiled[3:]), build_parser().parse_args(train[3:])
    assert args.config == same.config == gpu_check.CONFIG
    run_dir = f"train.run_dir={tmp_path / 'compiled'}"
    assert args.set == [*same.set[:4], run_dir, same.set[5], "train.compile=true"]
    assert gpu_check.main(["--plan"]) == 0
    assert "compiled" not in capsys.readouterr().out
    assert gpu_check.main(["--plan", "--steps", "train", "compiled"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("compiled (at most 240 s)") and "train.compile=true" in lines[1]
