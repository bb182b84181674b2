"""data.store: the training corpus tokenised once into an on-disk store and streamed from it,
giving the same batches, the same training and the same resume as the in-memory path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lookback.config import from_dict
from lookback.data.batch import UpdatePlan, encode_corpus, token_batches
from lookback.data.read import DataError, iter_parallel, read_parallel, sample_pairs
from lookback.data.store import TokenStore, build_store
from lookback.data.tokenizer import WordTokenizer
from lookback.training.checkpoint import load_checkpoint
from lookback.training.train import Trainer

from ..helpers import tiny_train_config, toy_pairs, write_corpus

TOK = WordTokenizer("en", ["the", "cat", "dog", "sees", "a", "."])


def _config(tmp: Path, name: str, store: bool, **train) -> dict:
    raw = tiny_train_config(tmp)
    raw["data"].update({"store": store, "cache_dir": str(tmp / "cache")})
    raw["train"].update(
        {"run_dir": str(tmp / name), "max_steps": 8, "valid_every": 4, "log_every": 1, **train}
    )
    return raw


def _records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def test_a_store_holds_what_encode_corpus_gives(tmp_path):
    src = ["the cat .", "", "the dog sees a cat the cat", "a dog .", "zebra"]
    tgt = ["the cat .", "a", "the dog", "a dog .", "zebra"]
    expected = encode_corpus(src, tgt, TOK, TOK, max_len=5, src_eos=True)
    store = build_store(zip(src, tgt, strict=True), TOK, TOK, tmp_path / "s", max_len=5, src_eos=True)
    assert len(store) == len(expected.pairs) == 3  # the empty and the over-long pair are skipped
    assert list(store) == expected.pairs and store[-1] == expected.pairs[-1]
    assert store.lengths.tolist() == [[len(s), len(t)] for s, t in expected.pairs]
    assert store.meta["skipped"] == 2 and store.meta["dtype"] == "uint16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no temporary folder left
    with pytest.raises(IndexError):
        store[3]


def test_a_build_that_dies_midway_leaves_no_store(tmp_path):
    def pairs():
        yield "the cat", "the cat"
        raise KeyboardInterrupt  # killed while tokenising

    with pytest.raises(KeyboardInterrupt):
        build_store(pairs(), TOK, TOK, tmp_path / "s")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"s: not a complete token store \(FileNotFoundError"):
        TokenStore(tmp_path / "s")


def test_streamed_pairs_are_the_pairs_read_whole(tmp_path, caplog):
    pairs = toy_pairs(50, seed=4) + [("", "x"), ("y" * 10_001, "z")]
    prefix = write_corpus(tmp_path, "c", pairs)
    assert list(iter_parallel(prefix, "en", "fr")) == list(
        zip(*read_parallel(prefix, "en", "fr"), strict=True)
    )
    assert "skipped 1 pairs with an empty side" in caplog.text
    tsv = tmp_path / "c.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    assert list(iter_parallel(str(tsv), "en", "fr")) == list(
        zip(*read_parallel(str(tsv), "en", "fr"), strict=True)
    )
    (tmp_path / "c.fr").write_text("one line\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"c.fr has 1 lines but .*c.en has more$"):
        list(iter_parallel(prefix, "en", "fr"))


def test_sample_pairs_draws_n_in_corpus_order_the_same_for_a_seed():
    pairs = [(f"s{i}", f"t{i}") for i in range(1000)]
    assert sample_pairs(iter(pairs), 0, 1) == ([s for s, _ in pairs], [t for _, t in pairs])
    src, tgt = sample_pairs(iter(pairs), 100, 1)
    assert len(src) == 100 and [int(s[1:]) for s in src] == sorted(int(s[1:]) for s in src)
    assert [s[1:] for s in src] == [t[1:] for t in tgt]
    assert sample_pairs(iter(pairs), 100, 1) == (src, tgt) and sample_pairs(iter(pairs), 100, 2)[0] != src
    assert max(int(s[1:]) for s in src) > 800  # drawn from the whole corpus, not its head


def test_the_store_gives_the_same_batches_and_the_same_training_as_memory(tmp_path):
    memory = Trainer(from_dict(_config(tmp_path, "memory", store=False)))
    stored = Trainer(from_dict(_config(tmp_path, "stored", store=True)))
    assert isinstance(stored.train_pairs, TokenStore) and isinstance(memory.train_pairs, list)
    a, b = iter(UpdatePlan(memory.train_pairs, memory.plan.epoch_batches)), iter(stored.plan)
    for _ in range(12):  # more than an epoch: 300 pairs are about 5 batches
        (x,), (y,) = next(a), next(b)
        assert all(
            np.array_equal(getattr(x, k), getattr(y, k)) for k in ("src", "src_len", "tgt_in", "tgt_out")
        )
    memory.train()
    again = _config(tmp_path, "stored2", store=True)  # writes the corpus files again: a new store
    again["train"]["run_dir"] = str(tmp_path / "stored3")
    Trainer(from_dict(again)).train()
    built = {p: (p / "meta.json").stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()}
    Trainer(from_dict(again), resume=True)  # the same files and tokenizers: the store is reused
    assert {p: (p / "meta.json").stat().st_mtime_ns for p in (tmp_path / "cache").iterdir()} == built
    ours, theirs = _records(tmp_path / "memory", "train"), _records(tmp_path / "stored3", "train")
    assert [r["loss"] for r in ours] == [r["loss"] for r in theirs]  # the very same updates
    assert len(list((tmp_path / "cache").iterdir())) == 2  # one per version of the corpus files


def test_a_stored_run_resumes_exactly(tmp_path):
    Trainer(from_dict(_config(tmp_path, "straight", store=True))).train()
    Trainer(from_dict(_config(tmp_path, "stopped", store=True, max_steps=4))).train()
    Trainer(from_dict(_config(tmp_path, "stopped", store=True)), resume=True).train()
    a, b = (
        load_checkpoint(tmp_path / "straight" / "last.pt"),
        load_checkpoint(tmp_path / "stopped" / "last.pt"),
    )
    assert all(np.array_equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert [r["loss"] for r in _records(tmp_path / "straight", "train")] == [
        r["loss"] for r in _records(tmp_path / "stopped", "train")
    ]


def test_the_ranks_split_a_store_as_they_split_a_list(tmp_path):
    pairs = [(("the cat " * (i % 4 + 1)).strip(), ("a dog " * (i % 3 + 1)).strip()) for i in range(60)]
    store = build_store(pairs, TOK, TOK, tmp_path / "s")
    batches = lambda epoch: token_batches(store.lengths, 40, 3, epoch)  # noqa: E731
    one = iter(UpdatePlan(list(store), batches, per_update=2))
    ranks = [iter(UpdatePlan(store, batches, per_update=2, rank=r, world=2)) for r in (0, 1)]
    for _ in range(6):
        rows = lambda update: sorted(tuple(r) for b in update for r in b.tgt_out.tolist())  # noqa: E731
        assert rows(next(one)) == sorted(rows(next(ranks[0])) + rows(next(ranks[1])))


def test_a_changed_corpus_gets_a_new_store(tmp_path):
    Trainer(from_dict(_config(tmp_path, "first", store=True)))
    raw = _config(tmp_path, "second", store=True)
    write_corpus(
        Path(raw["data"]["train"]).parent, "train", toy_pairs(310, seed=1)
    )  # the same files, changed
    Trainer(from_dict(raw))
    stores = list((tmp_path / "cache").iterdir())
    assert sorted(TokenStore(s).meta["pairs"] for s in stores) == [300, 310]


def _hf_folder(tmp: Path, pairs: list[tuple[str, str]], columns: bool = False) -> Path:
    """A local Hugging Face dataset: a folder of JSON lines, as load_dataset reads data files."""
    folder = tmp / "hf"
    folder.mkdir(exist_ok=True)
    rows = [{"en": s, "fr": t} if columns else {"translation": {"en": s, "fr": t}} for s, t in pairs]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def test_hf_corpora_load_through_datasets_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    pairs = toy_pairs(40, seed=5) + [("", "vide")]
    spec = f"hf:{_hf_folder(tmp_path, pairs)}:train"
    src, tgt = read_parallel(spec, "en", "fr")
    assert list(zip(src, tgt, strict=True)) == pairs[:40]  # the empty pair skipped, as from files
    assert list(iter_parallel(spec, "en", "fr")) == pairs[:40]
    assert read_parallel(spec, "fr", "en")[0] == tgt  # either direction of the same set
    other = tmp_path / "cols"
    other.mkdir()
    spec_columns = f"hf:{_hf_folder(other, pairs[:5], columns=True)}:train"
    assert read_parallel(spec_columns, "en", "fr") == ([s for s, _ in pairs[:5]], [t for _, t in pairs[:5]])
    with pytest.raises(DataError, match=r"translates \['en', 'fr'\], not en and de$"):
        read_parallel(spec, "en", "de")
    with pytest.raises(DataError, match=r"^hf:x: expected hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT"):
        read_parallel("hf:x", "en", "fr")
    with pytest.raises(DataError, match=r"^hf:.*nowhere:train: cannot load \("):
        read_parallel(f"hf:{tmp_path / 'nowhere'}:train", "en", "fr")


def test_a_run_trains_from_an_hf_corpus_through_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    raw = _config(tmp_path, "hf", store=True, max_steps=4, valid_every=4)
    raw["data"]["train"] = f"hf:{_hf_folder(tmp_path, toy_pairs(300, seed=1))}:train"
    trainer = Trainer(from_dict(raw))
    assert isinstance(trainer.train_pairs, TokenStore) and len(trainer.train_pairs) == 300
    assert trainer.train().step == 4
