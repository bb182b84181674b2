"""bench/prepare.py's seed run: the pairs both systems train on, and Joey's vocabulary file."""

from __future__ import annotations

from bench import prepare, settings

from ..helpers import toy_pairs, write_corpus


def test_the_seed_writes_the_pairs_lookback_keeps_and_the_pieces_in_id_order(tmp_path, monkeypatch):
    monkeypatch.setitem(settings.TOKENIZER, "vocab_size", 40)  # the toy corpus has few words
    monkeypatch.setitem(settings.TRAIN, "max_len", 60)
    pairs = toy_pairs(80, seed=5)
    long_pair = (" ".join(["the"] * 70) + " .", " ".join(["le"] * 70) + " .")  # over 60 pieces
    write_corpus(tmp_path / "data", "train", pairs[:40] + [long_pair] + pairs[40:])
    write_corpus(tmp_path / "data", "val", toy_pairs(10, seed=6))

    seed = prepare.prepare_seed(tmp_path, "feed", [])

    kept = (tmp_path / "data" / "train_kept.en").read_text(encoding="utf-8").splitlines()
    assert kept == [en for en, _ in pairs]  # the over-long pair is left out, the order kept
    french = (tmp_path / "data" / "train_kept.fr").read_text(encoding="utf-8").splitlines()
    assert french == [fr for _, fr in pairs]
    pieces = (tmp_path / "joey_vocab.txt").read_text(encoding="utf-8").splitlines()
    assert len(pieces) == 40 and pieces[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (seed / "last.pt").is_file() and (seed / "bench_seed.json").is_file()
    assert prepare.prepare_seed(tmp_path, "feed", []) == seed  # kept while nothing changed
