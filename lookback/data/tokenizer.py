"""Tokenizers: text <-> token ids, SentencePiece subwords or Moses words.

`SentencePieceTokenizer` splits text into subword pieces (Kudo and Richardson
2018), unigram (Kudo 2018) or BPE (Sennrich et al. 2016), so that no word is
out of vocabulary. `WordTokenizer` is for teaching: Moses splits words and
punctuation, and every word outside the most frequent ones becomes <unk>,
which shows why subwords are used.

Both share the special ids PAD, UNK, BOS and EOS below. `encode` adds no BOS
or EOS; the model adds them where it needs them. `encode` takes any Python
string (a lone surrogate, which undecodable input bytes become, is read as
U+FFFD); `decode` takes ids in [0, vocab_size) and raises ValueError for others.
"""

from __future__ import annotations

import json
import logging
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm
from sacremoses import MosesDetokenizer, MosesTokenizer

from ..config import TokenizerConfig
from ..errors import first_line

logger = logging.getLogger(__name__)

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")  # pieces of ids 0..3
_MOSES_SPLIT = {"escape": False, "aggressive_dash_splits": False}  # keep "&", "'" and "-" as text
_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer(ABC):
    """Text <-> ids; ids 0..3 are PAD, UNK, BOS and EOS."""

    vocab_size: int

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without BOS or EOS."""

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Detokenised text of `ids`; PAD, BOS and EOS are dropped wherever they are."""

    @abstractmethod
    def id_to_piece(self, i: int) -> str:
        """The token string of id `i`."""

    @abstractmethod
    def piece_to_id(self, piece: str) -> int:
        """The id of token string `piece`, UNK if it is not in the vocabulary."""

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """Readable token strings of `ids` (such as "▁chat"), to label attention plots."""
        return [self.id_to_piece(int(i)) for i in ids]


def _unicode(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD: SentencePiece cannot take them, nor can JSON."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _content(ids: Iterable[int], vocab_size: int) -> list[int]:
    """`ids` as ints without PAD, BOS and EOS (ids may be a tensor); ValueError if one is out of range."""
    ids = [int(i) for i in ids]
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is out of range: the vocabulary has ids 0 to {vocab_size - 1}")
    return [i for i in ids if i not in (PAD, BOS, EOS)]


class SentencePieceTokenizer(Tokenizer):
    """A trained SentencePiece model (a ``.model`` file)."""

    def __init__(self, model_file: Path):
        self.model_file = Path(model_file)
        try:
            self.sp = spm.SentencePieceProcessor(model_file=str(self.model_file))
        except (OSError, RuntimeError) as exc:
            raise ValueError(f"{self.model_file}: not a SentencePiece model ({first_line(exc)})") from None
        self.vocab_size = self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(_unicode(text), out_type=int)

    def decode(self, ids: Iterable[int]) -> str:
        return self.sp.decode(_content(ids, self.vocab_size))

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(i)

    def piece_to_id(self, piece: str) -> int:
        return self.sp.piece_to_id(piece)


class WordTokenizer(Tokenizer):
    """Moses words of one language; ids 4, 5, ... are `words`, most frequent first.

    Saved as JSON ``{"lang": ..., "words": [...]}`` (the specials are not listed).
    """

    def __init__(self, lang: str, words: list[str]):
        self.lang = lang
        self.words = list(words)
        self.vocab = [*SPECIALS, *self.words]
        self.ids = {w: i for i, w in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self._moses = MosesTokenizer(lang)
        self._detok = MosesDetokenizer(lang)

    def split(self, text: str) -> list[str]:
        """Moses words and punctuation of `text`: "L'homme est là." -> L' homme est là ."""
        return self._moses.tokenize(text, **_MOSES_SPLIT)

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(w, UNK) for w in self.split(_unicode(text))]

    def decode(self, ids: Iterable[int]) -> str:
        return self._detok.detokenize([self.vocab[i] for i in _content(ids, self.vocab_size)])

    def id_to_piece(self, i: int) -> str:
        return self.vocab[i]

    def piece_to_id(self, piece: str) -> int:
        return self.ids.get(piece, UNK)

    def save(self, path: Path) -> None:
        data = {"lang": self.lang, "words": self.words}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=0), encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> WordTokenizer:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls(data["lang"], data["words"])
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
            raise ValueError(f"{path}: not a word vocabulary ({reason})") from None


def _word_counts(texts: list[str], lang: str) -> Counter[str]:
    moses = MosesTokenizer(lang)
    return Counter(w for text in texts for w in moses.tokenize(text, **_MOSES_SPLIT))


def _frequent_words(counts: Counter[str], cfg: TokenizerConfig) -> list[str]:
    """Words seen `cfg.min_freq` times or more, most frequent first, that fit in `cfg.vocab_size`.

    The specials count towards `vocab_size`. Ties are broken alphabetically, so the same
    texts give the same vocabulary.
    """
    ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
    words = [w for w, c in ranked if c >= cfg.min_freq and w not in SPECIALS]
    return words[: cfg.vocab_size - len(SPECIALS)]


def _train_sentencepiece(cfg: TokenizerConfig, texts: list[str], prefix: Path) -> Path:
    """Train a SentencePiece model on `texts`; returns the ``.model`` file."""
    spm.set_random_generator_seed(1)  # the same texts give the same model
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(texts),
            model_prefix=str(prefix),
            model_type=cfg.model_type,
            vocab_size=cfg.vocab_size,
            pad_id=PAD,
            unk_id=UNK,
            bos_id=BOS,
            eos_id=EOS,
            character_coverage=1.0,  # keep every character: é, ß and « » are all frequent here
            num_threads=2,
            input_sentence_size=0,  # 0: read every sentence, no sampling
            hard_vocab_limit=False,  # a tiny corpus gets fewer pieces instead of an error
            minloglevel=2,  # quiet: only errors
        )
    except RuntimeError as exc:
        raise ValueError(
            f"{prefix}.model: SentencePiece training failed with "
            f"tokenizer.vocab_size={cfg.vocab_size} ({exc})"
        ) from None
    return prefix.with_name(f"{prefix.name}.model")


def train_tokenizers(
    cfg: TokenizerConfig,
    src_texts: list[str],
    tgt_texts: list[str],
    src_lang: str,
    tgt_lang: str,
    out_dir: Path,
) -> tuple[Tokenizer, Tokenizer]:
    """Train source and target tokenizers and save them in `out_dir`.

    With `cfg.joint` both sides share one vocabulary (one SentencePiece model,
    or one word list split by each side's Moses rules). ``tokenizer.json``
    records what was written, for `load_tokenizers`. The language codes pick the word
    tokenizer's Moses rules; `out_dir` is created if needed. Returns (source tokenizer,
    target tokenizer): the same object twice for joint SentencePiece.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.kind == "sentencepiece":
        if cfg.joint:
            joint_texts = src_texts + tgt_texts
            src_file = tgt_file = _train_sentencepiece(cfg, joint_texts, out_dir / "spm.joint")
        else:
            src_file = _train_sentencepiece(cfg, src_texts, out_dir / "spm.src")
            tgt_file = _train_sentencepiece(cfg, tgt_texts, out_dir / "spm.tgt")
    else:
        src_counts = _word_counts(src_texts, src_lang)
        tgt_counts = _word_counts(tgt_texts, tgt_lang)
        if cfg.joint:
            src_counts = tgt_counts = src_counts + tgt_counts
        src_file, tgt_file = out_dir / "words.src.json", out_dir / "words.tgt.json"
        WordTokenizer(src_lang, _frequent_words(src_counts, cfg)).save(src_file)
        WordTokenizer(tgt_lang, _frequent_words(tgt_counts, cfg)).save(tgt_file)
    manifest = {
        "kind": cfg.kind,
        "src": src_file.name,
        "tgt": tgt_file.name,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
    }
    (out_dir / "tokenizer.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    src_tok, tgt_tok = load_tokenizers(out_dir)
    sizes = f"{src_tok.vocab_size} source, {tgt_tok.vocab_size} target"
    logger.info("%s tokenizers in %s: %s ids", cfg.kind, out_dir, sizes)
    return src_tok, tgt_tok


def load_tokenizers(out_dir: Path) -> tuple[Tokenizer, Tokenizer]:
    """Load the tokenizers that `train_tokenizers` saved in `out_dir`.

    Returns:
        (source tokenizer, target tokenizer).
    """
    path = Path(out_dir) / "tokenizer.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        kind, src_name, tgt_name = manifest["kind"], manifest["src"], manifest["tgt"]
    except FileNotFoundError:
        shared = "under torchrun, train.run_dir must be on a filesystem every node shares"
        raise ValueError(f"{path}: no such file (train the tokenizers first; {shared})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{path}: not a tokenizer description ({reason})") from None
    folder = path.parent
    if kind == "sentencepiece":
        src_tok = SentencePieceTokenizer(folder / src_name)
        joint = tgt_name == src_name  # one model, loaded once, for both sides
        return src_tok, src_tok if joint else SentencePieceTokenizer(folder / tgt_name)
    if kind == "word":
        return WordTokenizer.load(folder / src_name), WordTokenizer.load(folder / tgt_name)
    raise ValueError(f"{path}: unknown tokenizer kind {kind!r} (expected sentencepiece or word)")
