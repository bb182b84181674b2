"""Plain helpers that several test modules share: tiny models, toy corpora, tiny trained runs, `require`.

conftest.py holds the settings for every test; everything here is an ordinary function, imported by name.
"""

from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest
import torch

from lookback import device
from lookback.config import ModelConfig, TokenizerConfig, from_dict
from lookback.data.tokenizer import PAD
from lookback.model.seq2seq import build_model

WORDS = {  # a toy English -> French lexicon for corpora that a tiny model can learn
    "the": "le",
    "a": "un",
    "dog": "chien",
    "cat": "chat",
    "man": "homme",
    "boy": "garçon",
    "runs": "court",
    "sleeps": "dort",
    "eats": "mange",
    "sees": "voit",
    "big": "grand",
    "small": "petit",
    "red": "rouge",
    "house": "maison",
    "in": "dans",
    "park": "parc",
}


def threads() -> int:
    """The threads a test's training may use: every core, or this worker's share under pytest -n
    (conftest.py sets OMP_NUM_THREADS to it)."""
    return int(os.environ.get("OMP_NUM_THREADS") or 0) or device.cores()


SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "so", "vi", "pe", "da"]


def require(condition: object, reason: str) -> None:
    """Skip the test when `condition` is false, or fail it under CI (the variable CI set).

    For what a test needs from the machine (Multi30k, chromium, /proc): a developer without it
    sees a skip, while CI, which must run every test, sees a failure that says what is missing.
    """
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run this test")
    pytest.skip(reason)


def tiny_model_config(**overrides) -> ModelConfig:
    base = dict(emb_size=16, hidden_size=12, dec_hidden_size=20, attention_size=10, dropout=0.0)
    base.update(overrides)
    return from_dict({"model": base}).model


def tiny_model(vocab: int = 30, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_model(tiny_model_config(**overrides), vocab, vocab + 3).eval()


def toy_pairs(n: int, seed: int = 0, max_words: int = 6) -> list[tuple[str, str]]:
    """Sentence pairs of the toy lexicon: French is the word-by-word translation."""
    rng = random.Random(seed)
    words = sorted(WORDS)
    pairs = []
    for _ in range(n):
        en = [rng.choice(words) for _ in range(rng.randint(2, max_words))]
        pairs.append((" ".join(en) + " .", " ".join(WORDS[w] for w in en) + " ."))
    return pairs


def write_corpus(folder: Path, name: str, pairs: list[tuple[str, str]]) -> str:
    """Write prefix.en / prefix.fr and return the prefix spec."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.en").write_text("".join(e + "\n" for e, _ in pairs), encoding="utf-8")
    (folder / f"{name}.fr").write_text("".join(f + "\n" for _, f in pairs), encoding="utf-8")
    return str(folder / name)


def tiny_train_config(tmp_path: Path, **sections) -> dict:
    """A raw config dict for a model that trains in seconds on the toy corpus."""
    data = tmp_path / "data"
    raw = {
        "data": {
            "train": write_corpus(data, "train", toy_pairs(300, seed=1)),
            "valid": write_corpus(data, "valid", toy_pairs(20, seed=2)),
            "test": write_corpus(data, "test", toy_pairs(20, seed=3)),
        },
        "tokenizer": {"kind": "word", "vocab_size": 100, "joint": False},
        "model": {
            "emb_size": 24,
            "hidden_size": 24,
            "dec_hidden_size": 24,
            "attention_size": 24,
            "dropout": 0.0,
        },
        "train": {
            "run_dir": str(tmp_path / "run"),
            "max_steps": 40,
            "valid_every": 20,
            "max_tokens": 400,
            "max_epochs": 1000,
            "lr": 0.01,
            "threads": 1,
            "log_every": 10,
            "precision": "fp32",  # as in-process tests see auto (conftest.py), also in a child process
        },
        "decode": {"beam": 3, "batch_size": 16, "precision": "fp32"},
    }
    for section, values in sections.items():
        raw[section].update(values)
    return raw


TINY_TRANSFORMER = {  # model.* of a tiny attention-only model that learns the toy lexicon
    "encoder": "transformer",
    "decoder": "transformer",
    "attention": "scaled_dot",
    "heads": 4,
    "ff_size": 48,
    "enc_layers": 2,
    "dec_layers": 2,
}


def train_tiny(folder: Path, attention: str, name: str | None = None, **model) -> Path:
    """A tiny English -> French model of the toy lexicon, trained in seconds, in folder/NAME (default:
    the attention's name); `model`: more model.* keys. Returns its run directory."""
    from lookback.training.train import (
        train,
    )  # here, so that tests of a model alone do not import the trainer

    raw = tiny_train_config(
        folder,
        model={"attention": attention, **model},
        train={"run_dir": str(folder / (name or attention)), "max_steps": 120, "valid_every": 60},
    )
    return train(from_dict(raw))


def syllable_corpus(n: int = 300, seed: int = 0) -> tuple[list[str], list[str]]:
    """`n` pairs of made-up sentences: the target is the source reversed, with é and à."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(1, 3))) for _ in range(120)})
    src = [" ".join(rng.choices(words, k=rng.randint(3, 9))) + " ." for _ in range(n)]
    tgt = [s.replace("e", "é").replace("a", "à")[::-1] for s in src]
    return src, tgt


def spm_config(**changes) -> TokenizerConfig:
    return TokenizerConfig(**{"kind": "sentencepiece", "vocab_size": 100, **changes})


def real_multi30k() -> Path:
    """The folder with the real Multi30k files, which $LOOKBACK_MULTI30K names (.ci/run sets it);
    skip without it, fail under CI."""
    folder = os.environ.get("LOOKBACK_MULTI30K")
    require(
        bool(folder) and (Path(folder) / "val.en.gz").exists(), "no Multi30k files: set $LOOKBACK_MULTI30K"
    )
    return Path(folder)


def write(path: Path, text: str) -> Path:
    """Write `text` as UTF-8, gzipped if `path` ends in .gz."""
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_bytes(text.encode("utf-8"))
    return path


def assert_drawn(path: Path, min_marks: int = 1) -> None:
    """`path` is a figure with something drawn on it: a PNG whose pixels are not all one colour,
    or an SVG with at least `min_marks` drawn paths (a blank or empty figure fails)."""
    if path.suffix == ".svg":
        import xml.etree.ElementTree as ET

        marks = [e for e in ET.parse(path).iter() if e.tag.rsplit("}", 1)[-1] in ("path", "use")]
        assert len(marks) >= min_marks, f"{path}: {len(marks)} drawn paths"
        return
    import matplotlib.image

    pixels = matplotlib.image.imread(path)  # (H, W, channels), floats in [0, 1]
    assert pixels.shape[0] >= 100 and pixels.shape[1] >= 100, f"{path}: {pixels.shape}"
    assert float(pixels[..., :3].std()) > 0.01, f"{path}: one colour"


def assert_gradient_descends(loss_fn, param, step: float = 1e-3) -> None:
    """The gradient that `loss_fn()` sends to `param` is a real descent direction for it: moving
    `param` alone a little against it lowers the loss (zero, or a wrong gradient, fails)."""
    param.grad = None
    loss = loss_fn()
    loss.backward()
    grad = param.grad.detach().clone()
    assert torch.isfinite(grad).all() and grad.norm() > 0
    with torch.no_grad():
        param -= step * grad / grad.norm()
        lower = loss_fn()
        param += step * grad / grad.norm()
    assert float(lower) < float(loss), f"{float(lower)} not below {float(loss)}"


def assert_source_rows_learn(model, src) -> None:
    """The loss reached the source side: exactly the embedding rows of the tokens in src (B, S)
    have a gradient, every other row (padding's included) none."""
    grad = model.encoder.embed.weight.grad  # (V, E)
    used = set(src.unique().tolist()) - {PAD}
    learned = {i for i, row in enumerate(grad) if row.abs().sum() > 0}
    assert learned == used
