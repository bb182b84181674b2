"""The bottleneck study: a tiny study end to end, the compression table by hand."""

import json

import pytest
import yaml

from lookback.cli import main
from lookback.config import ConfigError, from_dict
from lookback.study import compression_rows, load_study

from .helpers import tiny_train_config


@pytest.fixture
def study_file(tmp_path):
    base = tmp_path / "base.yaml"
    raw = tiny_train_config(tmp_path, train={"max_steps": 20, "valid_every": 20})
    base.write_text(yaml.safe_dump(raw), encoding="utf-8")
    study = {
        "name": "tiny",
        "base": "base.yaml",
        "out_dir": str(tmp_path / "out"),
        "set": {"train.lr": 0.005},
        "models": {"none": {"model.attention": "none"}, "additive": {"model.attention": "additive"}},
        "tests": [raw["data"]["test"]],
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def test_a_tiny_study_writes_every_table_and_plot(study_file, capsys):
    assert main(["study", str(study_file)]) == 0
    out = study_file.parent / "out"
    result = json.loads((out / "results.json").read_text())
    assert set(result["models"]) == {"none", "additive"}
    assert result["device"].startswith("cpu")
    (spec,) = result["tests"]
    slug = spec.strip("/").replace("/", "_")
    for name in ("bleu_by_length", "gain_over_none", "compression", "cost"):
        assert (out / f"{name}_{slug}.csv").stat().st_size > 0
    for suffix in ("png", "svg"):
        assert (out / f"bleu_by_length_{slug}.{suffix}").stat().st_size > 0
        assert (out / f"cost_{slug}.{suffix}").stat().st_size > 0
    assert "### Gain over the model without attention" in (out / "report.md").read_text()
    assert (out / "configs" / "additive.yaml").exists()
    first_mtime = (out / "runs" / "none" / "last.pt").stat().st_mtime
    # a second run trains nothing again, and --evaluate-only needs no training at all
    assert main(["study", str(study_file), "--evaluate-only"]) == 0
    assert main(["study", str(study_file)]) == 0
    assert (out / "runs" / "none" / "last.pt").stat().st_mtime == first_mtime
    assert main(["study", str(study_file), "--evaluate-only", "--models", "none"]) == 0
    assert set(json.loads((out / "results.json").read_text())["models"]) == {"none"}
    assert main(["study", str(study_file), "--models", "dot"]) == 2
    assert "no model named 'dot'" in capsys.readouterr().err


def test_the_compression_table_by_hand():
    cfg = from_dict({"model": {"emb_size": 100, "hidden_size": 128, "bidirectional": True}})
    buckets = {
        "1-10": {"mean_src_tokens": 7.0, "bleu": 35.2},
        "41-60": {"mean_src_tokens": 50.0, "bleu": 8.1},
    }
    rows = compression_rows(cfg, buckets)
    # notes: 7 words x 100 dims = 700 numbers in, into a context of 2 x 128 = 256 numbers
    assert rows[0] == {
        "bucket": "1-10",
        "source_tokens": 7.0,
        "numbers_in": 700,
        "numbers_kept": 256,
        "ratio": 2.73,
        "bleu": 35.2,
    }
    assert rows[1]["numbers_in"] == 5000 and rows[1]["ratio"] == 19.53


def test_study_files_are_checked_before_any_work(tmp_path, study_file):
    raw = yaml.safe_load(study_file.read_text())
    raw["models"]["dot"] = {"model.atention": "dot"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="model.atention: unknown key"):
        load_study(bad)
    bad.write_text(yaml.safe_dump({**raw, "modles": {}}), encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown study key 'modles'"):
        load_study(bad)


def test_a_study_writes_its_synthetic_corpus_when_missing(tmp_path, study_file, monkeypatch):
    from lookback.study import _make_synth

    raw = yaml.safe_load(study_file.read_text())
    raw["synth"] = {"task": "reverse", "lengths": "3-5", "seed": 2, "out": str(tmp_path / "rev")}
    path = tmp_path / "with_synth.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    study = load_study(path)
    _make_synth(study.synth)
    src = (tmp_path / "rev" / "test.src").read_text().splitlines()
    tgt = (tmp_path / "rev" / "test.tgt").read_text().splitlines()
    assert [t.split() for t in tgt] == [s.split()[::-1] for s in src]
    assert all(3 <= len(s.split()) <= 5 for s in src)
    raw["synth"] = {"task": "reverse"}
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ConfigError, match="synth: expected task, lengths and out"):
        load_study(path)
