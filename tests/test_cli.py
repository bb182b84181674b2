"""The CLI end to end on a tiny synthetic corpus: train, translate, evaluate, errors."""

import io
import json
import subprocess
import sys

import pytest
import torch
import yaml

from lookback.cli import main

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
    assert "Multi30k protocol (Moses-tokenised, lowercased" in out
    assert main(["evaluate", str(run_dir), "--json", "--output", str(run_dir / "hyp.txt")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert 0 <= result["bleu"] <= 100 and result["sentences"] == 20
    assert len((run_dir / "hyp.txt").read_text().splitlines()) == 20


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

    from lookback.checkpoint import load_checkpoint

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
    assert main(["explain", str(run_dir)]) == 2
    assert "needs RUN_DIR and a sentence" in capsys.readouterr().err
