"""Tokenizers: SentencePiece (unigram, BPE, joint or separate) and Moses words."""

import json
from pathlib import Path

import pytest

from lookback.config import TokenizerConfig
from lookback.data.tokenizer import (
    BOS,
    EOS,
    PAD,
    UNK,
    SentencePieceTokenizer,
    WordTokenizer,
    load_tokenizers,
    train_tokenizers,
)

from ..helpers import spm_config, syllable_corpus


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
@pytest.mark.parametrize("joint", [True, False])
def test_sentencepiece_round_trip(tmp_path: Path, model_type: str, joint: bool) -> None:
    src, tgt = syllable_corpus()
    cfg = spm_config(model_type=model_type, joint=joint)
    src_tok, tgt_tok = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path)
    assert isinstance(src_tok, SentencePieceTokenizer)
    assert (src_tok is tgt_tok) == joint
    assert 40 <= src_tok.vocab_size <= 100
    for tok, text in [(src_tok, src[0]), (tgt_tok, tgt[0]), (src_tok, "kalo mine .")]:
        ids = tok.encode(text)
        assert ids and all(i > EOS for i in ids)  # no specials added, nothing unknown
        assert tok.decode(ids) == text
        assert "".join(tok.pieces(ids)).replace("▁", " ").strip() == text


def test_sentencepiece_files(tmp_path: Path) -> None:
    src, tgt = syllable_corpus()
    train_tokenizers(spm_config(joint=True), src, tgt, "en", "fr", tmp_path / "joint")
    manifest = json.loads((tmp_path / "joint" / "tokenizer.json").read_text())
    assert manifest == {
        "kind": "sentencepiece",
        "src": "spm.joint.model",
        "tgt": "spm.joint.model",
        "src_lang": "en",
        "tgt_lang": "fr",
    }
    train_tokenizers(spm_config(joint=False), src, tgt, "en", "fr", tmp_path / "sep")
    assert (tmp_path / "sep" / "spm.src.model").exists()
    assert (tmp_path / "sep" / "spm.tgt.model").exists()


def test_sentencepiece_special_ids(tmp_path: Path) -> None:
    src, tgt = syllable_corpus()
    tok, _ = train_tokenizers(spm_config(), src, tgt, "en", "fr", tmp_path)
    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    assert [tok.id_to_piece(i) for i in (PAD, UNK, BOS, EOS)] == specials
    assert [tok.piece_to_id(p) for p in specials] == [PAD, UNK, BOS, EOS]
    assert tok.piece_to_id("no such piece") == UNK
    ids = tok.encode("kalo mine .")
    assert tok.decode([BOS, *ids, EOS, PAD, PAD]) == "kalo mine ."
    assert tok.decode([BOS, *ids[:2], EOS, *ids[2:]]) == "kalo mine ."  # EOS is dropped, not a stop
    assert UNK in tok.encode("kalo 我 .")  # a character never seen


def test_sentencepiece_save_load(tmp_path: Path) -> None:
    src, tgt = syllable_corpus()
    trained = train_tokenizers(spm_config(joint=False), src, tgt, "en", "fr", tmp_path)
    loaded = load_tokenizers(tmp_path)
    for before, after, text in zip(trained, loaded, [src[5], tgt[5]], strict=True):
        assert after.vocab_size == before.vocab_size
        assert after.encode(text) == before.encode(text)


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_sentencepiece_training_is_deterministic(tmp_path: Path, model_type: str) -> None:
    src, tgt = syllable_corpus(seed=1)
    cfg = spm_config(model_type=model_type)
    first, _ = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path / "a")
    second, _ = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path / "b")
    assert [first.encode(s) for s in src + tgt] == [second.encode(s) for s in src + tgt]
    assert first.pieces(range(first.vocab_size)) == second.pieces(range(second.vocab_size))


def test_sentencepiece_vocab_too_small(tmp_path: Path) -> None:
    src, tgt = syllable_corpus()
    with pytest.raises(ValueError, match="tokenizer.vocab_size=8"):
        train_tokenizers(spm_config(vocab_size=8), src, tgt, "en", "fr", tmp_path)


@pytest.mark.parametrize(
    "lang, text, words",
    [
        ("fr", "L'homme est là.", ["L'", "homme", "est", "là", "."]),
        ("en", "The man's dog isn't here, is it?", None),
        ("de", "Ein Mann mit Hut – und Schirm.", None),
    ],
)
def test_word_split_and_detokenize(lang: str, text: str, words: list[str] | None) -> None:
    vocab = WordTokenizer(lang, []).split(text)
    if words is not None:
        assert vocab == words
    tok = WordTokenizer(lang, vocab)
    ids = tok.encode(text)
    assert UNK not in ids
    assert tok.decode(ids) == text
    assert tok.pieces(ids) == vocab


def test_word_unknown_words(tmp_path: Path) -> None:
    tok = WordTokenizer("fr", ["L'", "homme", "est", "."])
    ids = tok.encode("L'homme est là.")
    assert ids == [4, 5, 6, UNK, 7]
    assert tok.decode([BOS, *ids, EOS, PAD]) == "L'homme est <unk>."
    assert tok.piece_to_id("là") == UNK
    assert tok.id_to_piece(UNK) == "<unk>"


def test_word_min_freq_and_vocab_cap(tmp_path: Path) -> None:
    src = ["a cat .", "a dog .", "a cat sat ."]  # a:3 .:3 cat:2 dog:1 sat:1
    tgt = ["un chat .", "un chien .", "un chat assis ."]
    cfg = TokenizerConfig(kind="word", joint=False, min_freq=2, vocab_size=100)
    src_tok, tgt_tok = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path / "freq")
    assert src_tok.words == [".", "a", "cat"]  # most frequent first, ties alphabetical
    assert tgt_tok.words == [".", "un", "chat"]
    assert src_tok.encode("a dog .") == [5, UNK, 4]

    cfg = TokenizerConfig(kind="word", joint=False, min_freq=1, vocab_size=6)
    src_tok, _ = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path / "cap")
    assert src_tok.vocab_size == 6
    assert src_tok.words == [".", "a"]


def test_word_joint_vocabulary_and_save_load(tmp_path: Path) -> None:
    src = ["The man's here.", "A cat."]
    tgt = ["L'homme est là.", "Un chat."]
    cfg = TokenizerConfig(kind="word", joint=True, vocab_size=100)
    src_tok, tgt_tok = train_tokenizers(cfg, src, tgt, "en", "fr", tmp_path)
    assert src_tok.words == tgt_tok.words
    assert (src_tok.lang, tgt_tok.lang) == ("en", "fr")  # each side keeps its Moses rules
    assert src_tok.encode("chat") == tgt_tok.encode("chat") != [UNK]
    loaded_src, loaded_tgt = load_tokenizers(tmp_path)
    assert isinstance(loaded_tgt, WordTokenizer) and loaded_tgt.lang == "fr"
    assert loaded_tgt.encode(tgt[0]) == tgt_tok.encode(tgt[0])
    assert loaded_tgt.decode(loaded_tgt.encode(tgt[0])) == tgt[0]
    assert loaded_src.decode(loaded_src.encode(src[0])) == src[0]


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"tokenizer\.json: no such file"):
        load_tokenizers(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer\.json: not a tokenizer description"):
        load_tokenizers(tmp_path)
    manifest = {"kind": "sentencepiece", "src": "m.model", "tgt": "m.model"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(manifest))
    (tmp_path / "m.model").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"m\.model: not a SentencePiece model") as info:
        load_tokenizers(tmp_path)
    assert "\n" not in str(info.value)
    manifest = {"kind": "word", "src": "w.json", "tgt": "w.json"}
    (tmp_path / "tokenizer.json").write_text(json.dumps(manifest))
    (tmp_path / "w.json").write_text('{"lang": "en"}')
    with pytest.raises(ValueError, match=r"w\.json: not a word vocabulary"):
        load_tokenizers(tmp_path)
