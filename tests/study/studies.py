"""A tiny study that trains in seconds, and readers of what a study writes."""

import gzip
import json
import lzma
from pathlib import Path

import yaml

from ..helpers import WORDS, tiny_train_config, write_corpus

LENGTHS = [3, 5, 9, 12, 18, 65]  # source words: three sentences of 1-10, two of 11-20, one of 61+


def tiny_study(tmp_path: Path, out: str = "out", **train) -> Path:
    """study.yaml in tmp_path: models none and additive, 20 updates each (or as `train` says) on
    the toy lexicon, tested on sentences of LENGTHS words, output into tmp_path / out."""
    base = tmp_path / "base.yaml"
    raw = tiny_train_config(tmp_path, train={"max_steps": 20, "valid_every": 20, **train})
    base.write_text(yaml.safe_dump(raw), encoding="utf-8")
    words = sorted(WORDS)
    pairs = [
        (" ".join(words[i % 16] for i in range(n)), " ".join(WORDS[words[i % 16]] for i in range(n)))
        for n in LENGTHS
    ]
    study = {
        "name": "tiny",
        "base": "base.yaml",
        "out_dir": str(tmp_path / out),
        "set": {"train.lr": 0.005},
        "models": {"none": {"model.attention": "none"}, "additive": {"model.attention": "additive"}},
        "tests": [write_corpus(tmp_path / "data", "lengths", pairs)],
        "beam": [1, 3],
        "hard_attention": [1],
        "flops_lengths": [5, 20],
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False), encoding="utf-8")  # models in this order
    return path


def read_results(out):
    """A study's results.json.gz: every table's numbers."""
    with gzip.open(out / "results.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def kept_evaluations(out):
    """A study's evaluations.json.xz: run -> its evaluation (the widest beam's outputs)."""
    return json.loads(lzma.decompress((out / "evaluations.json.xz").read_bytes()))
