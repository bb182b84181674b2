"""A training batch that would not fit the free memory is refused before the first step, in one
line naming train.max_tokens, its value and what fits; batches that fit pass. So is a model whose
weights, gradients and Adam's moments would not fit, naming its sizes."""

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from lookback.cli import main
from lookback.config import ConfigError, ModelConfig, load_config
from lookback.model.attention import SCORES, Score
from lookback.model.seq2seq import build_model, count_parameters
from lookback.training import train as training
from lookback.training.fit import check_batch, check_model, largest_batch, model_parameters, step_bytes

from ..helpers import tiny_train_config

GIB = 2**30


def test_step_bytes_by_hand():
    model = ModelConfig(emb_size=2, hidden_size=3, dec_hidden_size=4, attention_size=5)
    # W = E + He + D = 2 + 6 + 4 = 12; per position 3 V + 3 S A + 12 W = 30 + 3*7*5 + 144 = 279 floats
    assert step_bytes(model, vocab=10, positions=100, src_len=7) == 4 * 100 * 279
    dot = ModelConfig(emb_size=2, hidden_size=3, dec_hidden_size=6, attention="dot")
    assert step_bytes(dot, 10, 100, 7) == 4 * 100 * (30 + 3 * 7 + 12 * 14)  # e and alpha: no A
    none = ModelConfig(emb_size=2, hidden_size=3, dec_hidden_size=4, attention="none")
    assert step_bytes(none, 10, 100, 7) == 4 * 100 * (30 + 12 * 12)


def test_the_largest_batch_is_max_tokens_or_the_whole_corpus_padded():
    lengths = [(5, 3), (9, 12), (2, 2)]  # sizes max(s, t + 1): 5, 13, 3
    assert largest_batch(lengths, 20) == (20, 9)
    assert largest_batch(lengths, 10**8) == (3 * 13, 9)  # one batch: every pair, padded to 13
    assert largest_batch(lengths, 4) == (13, 9)  # a longer pair still gets a batch of its own


def multi30k_like_lengths(n=29_000, seed=0):
    """Pair lengths in pieces shaped like Multi30k's training split (mean ~15, longest 50)."""
    rng = np.random.default_rng(seed)
    src = np.clip(rng.normal(15, 5, n).round(), 3, 50).astype(int)
    return np.stack([src, np.clip(src + rng.integers(-2, 4, n), 2, 55)], axis=1)


def test_the_main_job_fits_a_laptop_and_a_total_for_a_batch_size_does_not():
    main_job = load_config("quickstart")
    lengths = multi30k_like_lengths()
    need = step_bytes(main_job.model, 8000, *largest_batch(lengths, main_job.train.max_tokens))
    assert 0.1 * GIB < need < 0.5 * GIB  # measured: about 0.2 GB a step beside 0.65 GB of the rest
    check_batch(main_job.model, 8000, lengths, 1000, free=4 * GIB)
    with pytest.raises(ConfigError) as refused:
        check_batch(main_job.model, 8000, lengths, 100_000_000, free=16 * GIB)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("train.max_tokens 100,000,000: ")
    assert "more than the 16.0 GiB free: at most " in message
    fits = int(message.split("at most ")[1].split(" fits")[0].replace(",", ""))
    positions, src_len = largest_batch(lengths, fits)
    assert step_bytes(main_job.model, 8000, positions, src_len) <= 16 * GIB  # what it says fits, fits
    assert step_bytes(main_job.model, 8000, positions + 200, src_len) > 16 * GIB


def test_train_refuses_before_the_first_step_and_the_cli_says_it_in_one_line(tmp_path, monkeypatch, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp_path)), encoding="utf-8")
    monkeypatch.setattr(training, "free_memory", lambda device: 2**20)  # a 1 MiB machine
    steps = []
    monkeypatch.setattr(training.Trainer, "train_step", lambda self, *b: steps.append(1))
    assert main(["train", str(config), "--set", "train.max_tokens=100000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lookback: error: train.max_tokens 100,000,000: its largest")
    assert "GiB free: at most " in err[0] and steps == []
    assert not (tmp_path / "run" / "last.pt").exists()


def test_a_model_too_large_to_train_is_refused_in_one_line_naming_its_sizes():
    main_job = load_config("quickstart").model
    n = model_parameters(main_job, 8000, 8000)
    assert n == count_parameters(build_model(main_job, 8000, 8000)) == 6_143_552  # meta counts as built
    check_model(main_job, 8000, 8000, copies=4, free=16 * n)  # 4 copies of 4 bytes: exactly fits
    with pytest.raises(ConfigError):
        check_model(main_job, 8000, 8000, copies=4, free=16 * n - 1)
    huge = dataclasses.replace(main_job, hidden_size=100_000)
    with pytest.raises(ConfigError) as refused:
        check_model(huge, 8000, 8000, copies=5, free=16 * GIB)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("model: ") and "hidden_size 100,000" in message
    big = model_parameters(huge, 8000, 8000)
    assert f"{big:,} parameters" in message and f"about {20 * big / GIB:.1f} GiB" in message
    assert "the average), more than the 16.0 GiB free" in message


def test_train_refuses_a_model_too_large_before_building_it(tmp_path, monkeypatch, capsys):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_train_config(tmp_path)), encoding="utf-8")
    monkeypatch.setattr(training, "check_batch", lambda *args: None)  # the batch passes: the model is asked
    monkeypatch.setattr(training, "free_memory", lambda device: 2**10)  # a 1 KiB machine
    built = []
    monkeypatch.setattr(training, "build_model", lambda *args: built.append(1))
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lookback: error: model: ") and "GiB free" in err[0]
    assert built == [] and not (tmp_path / "run" / "last.pt").exists()


class MetaShy(Score):
    """A score of one's own that cannot be built on the meta device, as a plugin's module may not."""

    @classmethod
    def build(cls, dec_size, enc_size, cfg):
        if torch.empty(0).device.type == "meta":
            raise RuntimeError("this score wants real memory")
        return cls()

    def forward(self, s, keys, coverage=None):
        return s @ keys.transpose(1, 2)


def test_a_model_that_cannot_be_counted_on_meta_is_left_to_its_real_build(monkeypatch):
    monkeypatch.setitem(SCORES, "meta_shy", MetaShy)
    shy = dataclasses.replace(load_config("quickstart").model, attention="meta_shy")
    assert model_parameters(shy, 8000, 8000) is None
    check_model(shy, 8000, 8000, copies=4, free=0)  # not refused: building it for real decides
