"""The bench cannot rot unseen: `python -m bench RUN` is its one entry point, every module with
a main is a named run, every run starts, most on a tiny stand-in, and every lookback import in the
bench (in its code, or in the code it hands a child process as a string) still resolves."""

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as entry
from bench import settings

from ..helpers import TINY_TRANSFORMER, real_multi30k, tiny_train_config, train_tiny, write_corpus

BENCH = Path(entry.__file__).parent
CHILDREN = {"lookback_run"}  # run by the bench itself in a fresh process, not by a person


def modules_with_a_main() -> set[str]:
    found = set()
    for path in BENCH.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body):
            found.add(path.stem)
    return found - {"__main__"} - CHILDREN


def test_every_module_with_a_main_is_a_named_run():
    assert {run.replace("-", "_") for run in entry.RUNS} == modules_with_a_main()


def test_python_m_bench_lists_the_runs_and_refuses_an_unknown_one():
    root = BENCH.parent
    listed = subprocess.run([sys.executable, "-m", "bench"], cwd=root, capture_output=True, text=True)
    assert listed.returncode == 0 and all(f"  {run} " in listed.stdout for run in entry.RUNS)
    wrong = subprocess.run([sys.executable, "-m", "bench", "x"], cwd=root, capture_output=True, text=True)
    assert wrong.returncode == 2 and wrong.stderr.startswith("python -m bench: error: no run named 'x'")


@pytest.mark.parametrize("run", entry.RUNS)
def test_every_run_starts_and_names_itself(run, capsys):
    with pytest.raises(SystemExit) as done:
        entry.main([run, "--help"])
    assert done.value.code == 0
    assert f"python -m bench {run}" in capsys.readouterr().out


LOOKBACK_IMPORT = re.compile(
    r"from (lookback[\w.]*) import \(([^)]*)\)"  # from lookback.x import (a, b)
    r"|from (lookback[\w.]*) import ([\w ,]+)"  # from lookback.x import a, b
    r"|import (lookback[\w.]*)"
)


def lookback_imports() -> list[tuple[str, str, list[str]]]:
    """(file, module, names) of every lookback import in the bench's code, its child processes'
    code given as strings included (results/bench/ holds one-off scripts of past runs: not code)."""
    found = []
    for path in sorted([*BENCH.glob("*.py"), *BENCH.glob("peers/*.py")]):
        for m in LOOKBACK_IMPORT.finditer(path.read_text(encoding="utf-8")):
            module = m.group(1) or m.group(3) or m.group(5)
            names = [n.split(" as ")[0].strip() for n in (m.group(2) or m.group(4) or "").split(",")]
            found.append((path.name, module, [n for n in names if n]))
    return found


def test_every_lookback_import_in_the_bench_resolves():
    imports = lookback_imports()
    assert ("store.py", "lookback.training.train", ["train"]) in imports  # a child's code, as a string
    broken = []
    for file, module, names in imports:
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            broken.append(f"{file}: {module}: {exc}")
            continue
        broken += [f"{file}: {module} has no {name}" for name in names if not hasattr(loaded, name)]
    assert not broken


# -- tiny stand-in runs, for the runs that no other test in tests/bench/ starts ------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny trained run and a test set in its languages."""
    tmp = tmp_path_factory.mktemp("bench_runs")
    run = train_tiny(tmp, "additive")
    test = write_corpus(tmp / "data", "test", [("the dog runs .", "le chien court .")] * 4)
    return run, test, tmp


def test_kernels_and_the_output_layer_start(tmp_path):
    assert entry.main(["kernels", "--rows", "4", "--threads", "1", "-o", str(tmp_path / "k.json")]) == 0
    assert json.loads((tmp_path / "k.json").read_text())["cpu_flags"]
    args = ["--rows", "4", "--size", "8", "--vocab", "16", "--threads", "1", "-o", str(tmp_path / "o.json")]
    assert entry.main(["output-layer", *args]) == 0
    assert (tmp_path / "o.json").exists()


def test_stopping_starts_on_a_tiny_run(tiny, capsys):
    run, test, _ = tiny
    assert entry.main(["stopping", str(run), "--tests", test, "--beams", "1,2"]) == 0
    assert capsys.readouterr().out


def test_same_translations_of_one_version_against_itself(tiny, capsys):
    run, test, _ = tiny
    repo = str(BENCH.parent)
    assert entry.main(["same-translations", str(run), f"{test}.en", "--before", repo, "--after", repo]) == 0
    assert "every hypothesis identical 4/4" in capsys.readouterr().out


def test_onnx_agreement_starts_on_a_tiny_export(tiny, tmp_path):
    from lookback.cli import main as lookback

    run, test, _ = tiny
    assert lookback(["export", str(run), "-o", str(tmp_path / "model"), "--onnx"]) == 0
    out = tmp_path / "agreement.json"
    assert entry.main(["onnx-agreement", str(tmp_path / "model"), "--test", test, "-o", str(out)]) == 0
    assert json.loads(out.read_text())


def test_scores_and_curves_start_on_a_stand_in_bench_run(tiny, tmp_path, capsys):
    _, test, _ = tiny
    folder = tmp_path / "feed"
    folder.mkdir()
    data = Path(test).parent
    (data / f"test.{settings.TGT_LANG}").write_text("le chien court .\n" * 4, encoding="utf-8")
    (folder / "spec.json").write_text(json.dumps({"data_dir": str(data), "test": "test"}), encoding="utf-8")
    (folder / "lookback.beam5.txt").write_text("le chien court .\n" * 4, encoding="utf-8")
    assert entry.main(["scores", str(folder), "--json", str(tmp_path / "scores.json")]) == 0
    assert json.loads((tmp_path / "scores.json").read_text())["lookback.beam5"]["bleu"] == pytest.approx(100)
    train = {"train": {"figures": {"curve": [{"seconds": 60, "bleu": 10.0}, {"seconds": 120, "bleu": 20.0}]}}}
    result = {"config": "feed", "machine": {"cpu_model": "a CPU"}, "systems": {"lookback": train}}
    (tmp_path / "result.json").write_text(json.dumps(result), encoding="utf-8")
    assert entry.main(["curves", str(tmp_path / "result.json"), "-o", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0


def test_loadtest_starts_on_a_tiny_run(tiny, tmp_path):
    run, _, _ = tiny
    out = tmp_path / "load.json"
    assert entry.main(["loadtest", str(run), "--requests", "6", "--clients", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())


def test_transformer_peer_trains_tests_and_keeps_each_lookback_system(tmp_path, capsys):
    import yaml

    configs = {}
    for name, model in (("main", {"attention": "additive"}), ("transformer", TINY_TRANSFORMER)):
        raw = tiny_train_config(tmp_path, model=model, train={"max_steps": 30, "valid_every": 15})
        configs[name] = tmp_path / f"{name}.yaml"
        configs[name].write_text(yaml.safe_dump(raw), encoding="utf-8")
    test = str(tmp_path / "data" / "test")
    out = tmp_path / "peer.json"
    argv = ["transformer-peer", "--skip-joey", "--minutes", "1", "--test", test]
    argv += [f"--system={n}={c}" for n, c in configs.items()]
    argv += ["--work-dir", str(tmp_path / "work"), "-o", str(out)]
    assert entry.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["cpu_flags"] and set(record["systems"]) == {"main", "transformer"}
    for system in record["systems"].values():
        assert system["updates"] == 30 and len(system["curve"]) == 2 and system["parameters"] > 0
        assert 0 <= system["test"]["beam1"]["bleu"] <= 100 and 0 <= system["test"]["beam5"]["bleu"] <= 100
    table = out.with_suffix(".md").read_text()
    assert "| main | fp32 |" in table and "| transformer | fp32 |" in table
    capsys.readouterr()
    assert entry.main(argv) == 0  # again: each system's result is kept, nothing trains
    assert capsys.readouterr().err.count("is done") == 2
    assert json.loads(out.read_text())["systems"] == record["systems"]


@pytest.mark.slow
def test_variants_store_and_the_written_out_gru_start_on_multi30k(tmp_path):
    real_multi30k()
    assert entry.main(["variants", "-o", str(tmp_path / "v.json"), "--updates", "1", "--rounds", "1"]) == 0
    args = ["--pairs", "2000", "--steps", "25", "--repeats", "1", "--out", str(tmp_path / "s.json")]
    assert entry.main(["store", *args]) == 0
    gru = ["written-out-gru", "--threads", "1", "--repeats", "1", "-o", str(tmp_path / "g.json")]
    assert entry.main(gru) == 0
