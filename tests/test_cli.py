"""The CLI end to end on a tiny synthetic corpus: train, translate, evaluate, errors; every flag's
help and range."""

import argparse
import io
import json
import subprocess
import sys
import time

import pytest
import torch
import yaml

from lookback.cli import build_parser, main

from .helpers import tiny_train_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    config = tmp / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp)), encoding="utf-8")
    assert main(["train", str(config), "--set", "train.max_steps=200", "--set", "train.valid_every=100"]) == 0
    return tmp / "run", config


def test_train_writes_a_run_directory(run):
    run_dir, _ = run
    assert (run_dir / "best.pt").exists() and (run_dir / "config.yaml").exists()
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["train"]["max_steps"] == 200  # the --set override is in the resolved config


def test_translate_reads_stdin_and_writes_one_line_per_input(run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog runs .\na small cat sleeps .\n"))
    assert main(["translate", str(run[0]), "--beam", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(lines)


def test_translate_nbest_prints_index_score_text(run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog runs .\n"))
    assert main(["translate", str(run[0]), "--beam", "3", "--nbest", "3"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3 and {r[0] for r in rows} == {"0"}
    scores = [float(r[1]) for r in rows]
    assert scores == sorted(scores, reverse=True)


def test_translate_says_its_device_and_precision_and_bf16_translates(run, monkeypatch, capsys):
    text = "the dog runs .\na small cat sleeps .\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["translate", str(run[0]), "--beam", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr()
    assert "device: cpu (" in out.err and "precision: fp32" in out.err
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["translate", str(run[0]), "--beam", "1", "--precision", "bf16"]) == 0
    bf16 = capsys.readouterr()
    assert "precision: bf16" in bf16.err
    assert len(bf16.out.splitlines()) == 2 and all(bf16.out.splitlines())


def test_a_beam_of_a_million_is_one_line_at_once(run, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog runs .\n"))
    start = time.perf_counter()
    assert main(["translate", str(run[0]), "--beam", "1000000"]) == 2
    assert time.perf_counter() - start < 5
    out = capsys.readouterr()
    where, error = out.err.strip().splitlines()  # where it runs, then the one error line
    assert where.startswith("lookback: device: ") and out.out == ""
    assert error.startswith("lookback: error: beam 1000000 is wider than the target vocabulary (")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_translate_on_a_missing_gpu_or_fp16_on_cpu_is_one_line(run, capsys):
    assert main(["translate", str(run[0]), "--device", "cuda"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "lookback: error: --device is 'cuda' but this torch sees no CUDA GPU; use 'auto' or 'cpu'"
    ]
    assert main(["evaluate", str(run[0]), "--precision", "fp16"]) == 2
    assert "fp16 needs a CUDA GPU" in capsys.readouterr().err


def test_evaluate_prints_bleu_with_signature_and_json(run, capsys):
    run_dir, _ = run
    assert main(["evaluate", str(run_dir), "--beam", "1"]) == 0
    out = capsys.readouterr().out
    assert "sacreBLEU signature: nrefs:1|case:mixed|eff:no|tok:13a" in out
    assert "Multi30k protocol (lowercased, Moses-normalised and -tokenised)" in out
    assert "  signature: lc+normalize-punctuation+tokenizer.perl:" in out
    assert (
        "length ratio" in out and "by source length (words): sentences, BLEU, output/reference length" in out
    )
    assert "% of source tokens under-covered (total attention < 0.5)" in out
    assert main(["evaluate", str(run_dir), "--json", "--output", str(run_dir / "hyp.txt")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (
        0 <= result["bleu"] <= 100 + 1e-9 and result["sentences"] == 20
    )  # sacreBLEU can say 100.00000000000004
    assert result["length_ratio"] > 0 and all(b["length_ratio"] > 0 for b in result["by_length"].values())
    assert len((run_dir / "hyp.txt").read_text().splitlines()) == 20
    coverage = result["coverage"]  # signs of under- and over-translation (coverage.py)
    assert coverage["source_tokens"] > 20 and 0 <= coverage["under_covered"] <= 1
    assert 0 <= coverage["over_covered"] <= 1 and 0 <= coverage["repeated_bigrams"] <= 1
    assert "diagnostics" not in result


def test_evaluate_diagnostics_by_length(run, capsys):
    run_dir, _ = run
    assert main(["evaluate", str(run_dir), "--beam", "1", "--diagnostics"]) == 0
    out = capsys.readouterr().out
    assert "attention diagnostics by source length" in out and "     all     20" in out
    assert main(["evaluate", str(run_dir), "--beam", "1", "--diagnostics", "--json"]) == 0
    diagnostics = json.loads(capsys.readouterr().out)["diagnostics"]
    assert diagnostics["all"]["sentences"] == 20 and list(diagnostics)[1] == "1-10"
    assert 0 <= diagnostics["all"]["entropy"] <= 1 and 0 <= diagnostics["all"]["parking"] <= 1
    assert diagnostics["all"]["parking_share"] > 0  # every toy source ends with " ."


def test_user_errors_are_one_line_with_exit_status_2(run, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  cel: gru\n", encoding="utf-8")
    assert main(["train", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lookback: error: {bad}: model.cel: unknown key (did you mean 'cell'?)"]
    assert main(["translate", str(tmp_path / "nowhere")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err
    assert main(["evaluate", str(run[0]), "--test", str(tmp_path / "missing")]) == 2
    assert "missing.en: no such file" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "lookback", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "translate" in out.stdout


def test_translate_is_interactive_on_a_terminal(run):
    import os
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lookback", "translate", str(run[0]), "--beam", "1"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(follower)
    os.write(leader, b"the dog runs .\n\n")
    out, err = proc.communicate(timeout=60)
    os.close(leader)
    assert proc.returncode == 0
    assert "an empty line or Ctrl-D ends" in err
    assert len([line for line in out.splitlines() if line.strip()]) == 1


def test_a_killed_run_resumes_to_the_same_parameters(tmp_path):
    """SIGKILL at some point after the first checkpoint, then --resume: same weights as no kill."""
    import os
    import signal
    import time

    import torch

    from lookback.training.checkpoint import load_checkpoint

    def config(name):
        raw = tiny_train_config(tmp_path / name, train={"max_steps": 150, "valid_every": 10})
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return path, tmp_path / name / "run"

    straight, straight_dir = config("straight")
    assert main(["train", str(straight)]) == 0

    killed, killed_dir = config("killed")
    cmd = [sys.executable, "-m", "lookback", "train", str(killed)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed_dir / "last.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)  # somewhere past the first checkpoint, maybe mid-write of the next
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    stopped_at = load_checkpoint(killed_dir / "last.pt")["progress"]["step"]
    assert 10 <= stopped_at < 150
    assert main(["train", str(killed), "--resume"]) == 0

    a = load_checkpoint(straight_dir / "last.pt")
    b = load_checkpoint(killed_dir / "last.pt")
    assert b["progress"]["step"] == 150
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_attention_explain_and_neighbours_from_the_cli(run, tmp_path, capsys):
    run_dir, _ = run
    plot = tmp_path / "a.svg"
    assert main(["attention", str(run_dir), "the dog sees a cat .", "-o", str(plot), "--beam", "3"]) == 0
    assert plot.stat().st_size > 1000 and "alignment" in capsys.readouterr().out
    assert main(["explain", str(run_dir), "the dog sees a cat .", "--step", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 1:" in out and "(2) weight" in out and "step 2:" not in out
    assert main(["explain", str(run_dir), "the dog .", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out)
    assert trace["steps"][-1]["token"] == "</s>"
    assert main(["explain", "--lecture"]) == 0
    assert "0.5251" in capsys.readouterr().out
    assert main(["neighbours", str(run_dir), "dog", "-k", "3"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 4
    assert main(["neighbours", str(run_dir), "zebra"]) == 2
    assert "not in the source vocabulary" in capsys.readouterr().err
    assert main(["neighbours", str(run_dir), "dog", "--in", "the dog sees a cat .", "-k", "2"]) == 0
    out = capsys.readouterr().out  # among the run's training sentences, its data.train
    assert "'dog' in 'the dog sees a cat .'" in out and len(out.strip().splitlines()) >= 4
    assert main(["neighbours", str(run_dir), "dog", "--corpus", "x"]) == 2
    assert "--corpus goes with --in" in capsys.readouterr().err
    assert main(["explain", str(run_dir)]) == 2
    assert "needs RUN_DIR and a sentence" in capsys.readouterr().err


# Flags: help on every one, ranges, the shared model flags, one policy for nbest > beam.


def _parsers(parser: argparse.ArgumentParser):
    """The parser and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from (p for sub in action.choices.values() for p in _parsers(sub))


def test_every_command_and_flag_has_help_and_shows_it():
    parsers = list(_parsers(build_parser()))
    assert {p.prog for p in parsers} >= {f"lookback {c}" for c in ("translate", "serve", "data synth")}
    for parser in parsers:
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                assert all(choice.help for choice in action._choices_actions), parser.prog
                continue
            assert action.help, f"{parser.prog}: {action.dest} has no help"
            shown = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            assert shown in text and action.help.split("%")[0][:20] in " ".join(text.split())


def test_every_command_that_loads_a_model_shares_its_flags():
    parsers = {p.prog.removeprefix("lookback "): p for p in _parsers(build_parser())}
    for name in ("translate", "evaluate", "attention", "explain", "neighbours", "serve"):
        flags = {a.dest: a for a in parsers[name]._actions}
        assert {"checkpoint", "device", "precision"} <= set(flags), name
        assert flags["device"].choices == ("auto", "cpu", "cuda") and flags["checkpoint"].default == "best"
        assert ("beam" in flags) == (name not in ("neighbours", "serve")), name


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["translate", "RUN", "--beam", "0"], "argument --beam: got '0', expected an integer >= 1"),
        (["translate", "RUN", "--beam", "-3"], "argument --beam: got '-3', expected an integer >= 1"),
        (["translate", "RUN", "--nbest", "0"], "argument --nbest: got '0', expected an integer >= 1"),
        (["evaluate", "RUN", "--beam", "two"], "argument --beam: got 'two', expected an integer >= 1"),
        (["evaluate", "RUN", "--show", "-1"], "argument --show: got '-1', expected an integer >= 0"),
        (
            ["attention", "RUN", "s", "-o", "a.png", "--hypothesis", "-1"],
            "argument --hypothesis: got '-1', expected an integer >= 0",
        ),
        (["explain", "RUN", "s", "--step", "0"], "argument --step: got '0', expected an integer >= 1"),
        (["explain", "RUN", "s", "--beam", "1.5"], "argument --beam: got '1.5', expected an integer >= 1"),
        (["neighbours", "RUN", "dog", "-k", "0"], "argument -k: got '0', expected an integer >= 1"),
        (
            ["serve", "RUN", "--port", "70000"],
            "argument --port: got '70000', expected an integer in [0, 65535]",
        ),
        (["serve", "RUN", "--port", "-1"], "argument --port: got '-1', expected an integer in [0, 65535]"),
        (["serve", "RUN", "--max-chars", "0"], "argument --max-chars: got '0', expected an integer >= 1"),
        (  # OpenMP fails to start tens of thousands of threads (libgomp, or a segmentation fault)
            ["translate", "RUN", "--threads", "100000"],
            "argument --threads: got '100000', expected an integer in [0, 1024]",
        ),
        (
            ["evaluate", "RUN", "--threads", "-1"],
            "argument --threads: got '-1', expected an integer in [0, 1024]",
        ),
        (
            ["translate", "RUN", "--beam", "9" * 5000],
            "argument --beam: got '99999999999999999...', expected an integer >= 1",
        ),
    ],
)
def test_numbers_out_of_range_are_one_line_with_exit_status_2(argv, problem, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"lookback {argv[0]}: error: {problem}"]


def _nbest(run_dir, monkeypatch, capsys, *flags) -> list[list[str]]:
    monkeypatch.setattr(sys, "stdin", io.StringIO("the dog sees a cat .\n"))
    assert main(["translate", str(run_dir), *flags]) == 0
    return [line.split("\t") for line in capsys.readouterr().out.splitlines()]


def test_nbest_above_the_beam_raises_the_beam(run, monkeypatch, capsys):
    """One policy (config.search_width): --nbest 3 with --beam 1 searches with beam 3."""
    raised = _nbest(run[0], monkeypatch, capsys, "--beam", "1", "--nbest", "3")
    assert raised == _nbest(run[0], monkeypatch, capsys, "--beam", "3", "--nbest", "3")
    assert len(raised) == 3
    (best,) = _nbest(run[0], monkeypatch, capsys, "--beam", "3")
    assert best == [raised[0][2]]
    plot = run[0].parent / "third.svg"  # attention --hypothesis 2 needs three hypotheses: beam 3
    args = ["attention", str(run[0]), "the dog sees a cat .", "-o", str(plot), "--hypothesis", "2"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == [raised[2][2], f"alignment: {plot}"]


@pytest.mark.parametrize("sentence", ["", "   "])
def test_attention_to_an_empty_sentence_says_so(run, tmp_path, capsys, sentence):
    assert main(["attention", str(run[0]), sentence, "-o", str(tmp_path / "a.png")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "lookback: error: nothing to translate: the sentence is empty"
    ]
    assert not (tmp_path / "a.png").exists()


def test_every_command_that_loads_a_model_says_where_it_runs(run, tmp_path, capsys, monkeypatch):
    run_dir = str(run[0])
    for argv in (
        ["attention", run_dir, "the dog .", "-o", str(tmp_path / "a.svg")],
        ["explain", run_dir, "the dog ."],
        ["neighbours", run_dir, "dog", "-k", "2"],
        ["evaluate", run_dir, "--beam", "1", "--show", "0"],
    ):
        assert main([*argv, "--device", "cpu", "--checkpoint", "last"]) == 0
        err = capsys.readouterr().err
        assert "lookback: device: cpu (" in err and "precision: fp32" in err, argv[0]
    import lookback.serve.app

    seen = {}
    monkeypatch.setattr(
        lookback.serve.app, "serve", lambda run_dirs, **kwargs: seen.update(kwargs, run_dirs=run_dirs)
    )
    argv = [
        "serve",
        f"tiny={run_dir}",
        run_dir,
        "--device",
        "cpu",
        "--precision",
        "bf16",
        "--checkpoint",
        "last",
    ]
    assert main([*argv, "--port", "8123", "--workers", "3"]) == 0
    assert "lookback: device: cpu (" in capsys.readouterr().err
    assert seen == {
        "run_dirs": [f"tiny={run_dir}", run_dir],
        "host": "127.0.0.1",
        "port": 8123,
        "checkpoint": "last",
        "device": "cpu",
        "precision": "bf16",
        "max_chars": 500,
        "workers": 3,
    }


def test_length_penalty_and_limit_flags_change_the_search(run, monkeypatch, capsys):
    run_dir, _ = run
    sources = ["the dog sees the cat in the house with the man .", "a man runs ."]

    def translate(*flags: str) -> list[str]:
        monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(sources) + "\n"))
        assert main(["translate", str(run_dir), "--beam", "3", *flags]) == 0
        return capsys.readouterr().out.splitlines()

    full = translate()
    assert len(full[0].split()) > 3  # the model writes the whole first sentence
    cut = translate("--max-ratio", "0.01")  # at most ceil(0.01 x source) + 5 = 6 tokens, </s> included
    assert all(len(line.split()) <= 5 for line in cut) and cut != full
    with pytest.raises(SystemExit) as exit_:
        main(["translate", str(run_dir), "--length-penalty", "-1"])
    assert exit_.value.code == 2
    assert "--length-penalty: got '-1', expected a number >= 0" in capsys.readouterr().err
