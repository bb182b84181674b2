"""Reading parallel corpora: sentence pairs as two aligned lists of strings.

A corpus is named by a spec string (the `data.train`, `data.valid` and
`data.test` config keys), in one of three forms:

- ``multi30k:SPLIT``: the Multi30k task 1 files ``SPLIT.{src,tgt}.gz``
  (Elliott et al. 2016), found or downloaded and checked by `corpora.py`.
- ``path/file.tsv`` (or ``.tsv.gz``): one pair per line, ``src<TAB>tgt``.
- ``path/prefix``: two line-aligned files ``prefix.SRC`` and ``prefix.TGT``
  (``train.en`` and ``train.fr``), each also tried with ``.gz`` appended.
- ``hf:NAME[:CONFIG]:SPLIT``: a Hugging Face dataset through `datasets.load_dataset`
  (``hf:iwslt2017:iwslt2017-en-fr:train``, ``hf:wmt14:fr-en:train``,
  ``hf:Helsinki-NLP/europarl:en-fr:train``; NAME may be a local folder of data
  files). Each example holds a ``translation`` mapping of language codes to
  text, as the translation sets of the Hub do, or one column per language.
  Needs ``pip install 'lookback[hf]'``.
- ``concat:K:SPEC``: long pairs from any other SPEC, for the bottleneck study
  (``concat:3:multi30k:test_2016_flickr``). Each group of K consecutive
  pairs becomes one pair, sources joined by a space and targets joined by a
  space; a tail of fewer than K pairs is dropped. K may be a range ``1-4``:
  the corpus is cut, in order, into groups whose sizes cycle 1, 2, 3, 4, 1,
  2, ... (no randomness, so a training mix of lengths is reproducible); the
  tail too short for the next size is dropped.

Two kinds of pair are skipped, each with a warning that counts them: pairs
with an empty side (blank lines included), and pairs with a side over
MAX_CHARS characters (a whole document on one line, or a file that is not
text). Every other problem (missing or empty file, bad UTF-8, a TSV line
without exactly two columns, files of different lengths) is a `DataError`
whose message is one line naming the file, and the line where there is one.
"""

from __future__ import annotations

import gzip
import itertools
import logging
import random
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import DataError, first_line
from .corpora import multi30k_dir, multi30k_paths

logger = logging.getLogger(__name__)

MAX_CHARS = 10_000  # a side longer than this is not a sentence: the pair is skipped
_CONCAT = re.compile(r"concat:([0-9]+)(?:-([0-9]+))?:(.+)")  # concat:K:SPEC or concat:LO-HI:SPEC


def iter_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, one at a time, gzipped if its name ends in ``.gz``.

    Lines end at ``\\n`` only, not at other Unicode line breaks, which would
    misalign parallel files; only the ``\\n`` (and a ``\\r`` before it) is removed.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")  # -sig: drop a BOM
                except UnicodeDecodeError as exc:
                    raise DataError(
                        f"{path}:{lineno}: invalid UTF-8 (byte {raw[exc.start]:#04x} at column "
                        f"{exc.start + 1}); the corpus must be UTF-8 text"
                    ) from None
                yield line.removesuffix("\n").removesuffix("\r")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: truncated
        raise DataError(f"{path}: cannot read ({exc})") from None
    if not lineno:
        raise DataError(f"{path}: file is empty")


def read_lines(path: Path) -> list[str]:
    """All the lines of a text file (`iter_lines`)."""
    return list(iter_lines(path))


def _tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    """(source, target) of each ``src<TAB>tgt`` line; a blank line is an empty pair."""
    for lineno, line in enumerate(iter_lines(path), start=1):
        columns = line.split("\t") if line.strip() else ["", ""]
        if len(columns) != 2:
            raise DataError(f"{path}:{lineno}: expected 2 tab-separated columns, found {len(columns)}")
        yield columns[0], columns[1]


def read_tsv(path: Path) -> tuple[list[str], list[str]]:
    """(sources, targets) from a file of ``src<TAB>tgt`` lines, plain or ``.gz``.

    A blank line is an empty pair (which `read_parallel` skips), not a missing column.
    """
    pairs = list(_tsv_pairs(path))
    return [s for s, _ in pairs], [t for _, t in pairs]


def _prefix_path(prefix: str, lang: str) -> Path:
    """``prefix.lang``, else ``prefix.lang.gz``."""
    plain = Path(f"{prefix}.{lang}")
    gzipped = Path(f"{prefix}.{lang}.gz")
    if plain.exists() or not gzipped.exists():
        return plain  # when neither exists, read_lines names the plain file as missing
    return gzipped


def _good_pairs(pairs: Iterable[tuple[str, str]], where: str) -> Iterator[tuple[str, str]]:
    """The pairs that are sentence pairs, one at a time; the others are skipped, with a warning at
    the end that counts each kind. An empty side leaves nothing to translate from, or nothing to
    learn; a side over MAX_CHARS characters is a document or a file that is not text."""
    empty = too_long = kept = 0
    for s, t in pairs:
        if not (s.strip() and t.strip()):
            empty += 1
        elif len(s) > MAX_CHARS or len(t) > MAX_CHARS:
            too_long += 1
        else:
            kept += 1
            yield s, t
    if empty:
        logger.warning("skipped %d pairs with an empty side in %s", empty, where)
    if too_long:
        logger.warning("skipped %d pairs with a side over %d characters in %s", too_long, MAX_CHARS, where)
    if not kept:
        raise DataError(
            f"{where}: no sentence pairs with text on both sides (of at most {MAX_CHARS} characters)"
        )


def _drop_bad_pairs(src: list[str], tgt: list[str], where: str) -> tuple[list[str], list[str]]:
    """`_good_pairs` of two aligned lists, as two lists."""
    return _unzip(_good_pairs(zip(src, tgt, strict=True), where))


def concat_pairs(src: list[str], tgt: list[str], k_lo: int, k_hi: int) -> tuple[list[str], list[str]]:
    """Join consecutive pairs of `src` and the aligned `tgt` by spaces into longer ones, in groups
    whose sizes cycle k_lo, ..., k_hi (k_lo == k_hi: one size); a tail shorter than its group is
    dropped. Returns (sources, targets)."""
    if not 1 <= k_lo <= k_hi:
        raise ValueError(f"group sizes {k_lo}-{k_hi}: expected 1 <= lo <= hi")
    out_src, out_tgt, start = [], [], 0
    for k in itertools.cycle(range(k_lo, k_hi + 1)):
        if start + k > len(src):
            break
        out_src.append(" ".join(src[start : start + k]))
        out_tgt.append(" ".join(tgt[start : start + k]))
        start += k
    return out_src, out_tgt


def _parse_concat(spec: str) -> tuple[int, int, str]:
    """'concat:1-4:multi30k:train' -> (1, 4, 'multi30k:train'); K alone gives (K, K)."""
    match = _CONCAT.fullmatch(spec)
    if not match or not 1 <= int(match[1]) <= int(match[2] or match[1]):
        raise DataError(
            f"{spec}: expected concat:K:SPEC, with K an integer >= 1 or a range LO-HI such as 1-4 "
            f"and SPEC another corpus spec"
        )
    return int(match[1]), int(match[2] or match[1]), match[3]


def read_parallel(
    spec: str, src_lang: str, tgt_lang: str, multi30k: str | None = None
) -> tuple[list[str], list[str]]:
    """(sources, targets) of the corpus named by `spec` (its forms: the module docstring),
    aligned, without empty or over-long pairs. The language codes are the suffixes of prefix
    files; `multi30k` is the configured Multi30k folder (`data.multi30k_dir`), if any."""
    if spec.startswith("concat:"):
        k_lo, k_hi, inner = _parse_concat(spec)
        src, tgt = concat_pairs(*read_parallel(inner, src_lang, tgt_lang, multi30k), k_lo, k_hi)
        if not src:
            raise DataError(f"{spec}: {inner} has fewer than {k_lo} pairs, too few to join")
        return src, tgt
    if spec.startswith("hf:"):
        return _unzip(_good_pairs(_hf_pairs(spec, src_lang, tgt_lang), spec))
    if spec.startswith("multi30k:"):
        directory = multi30k_dir(multi30k)
        src_path, tgt_path = multi30k_paths(spec.split(":", 1)[1], [src_lang, tgt_lang], directory)
    elif spec.endswith((".tsv", ".tsv.gz")):
        src, tgt = read_tsv(Path(spec))
        return _drop_bad_pairs(src, tgt, spec)
    else:
        src_path, tgt_path = _prefix_path(spec, src_lang), _prefix_path(spec, tgt_lang)
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return _drop_bad_pairs(src, tgt, f"{src_path} / {tgt_path}")


def _streams(spec: str) -> bool:
    """Whether `iter_parallel` reads `spec` line by line (files), rather than whole."""
    return not spec.startswith(("concat:", "multi30k:"))


def corpus_files(spec: str, src_lang: str, tgt_lang: str, multi30k: str | None = None) -> list[Path]:
    """The files the corpus `spec` is read from (what a cache of it must notice changing)."""
    if spec.startswith("concat:"):
        return corpus_files(_parse_concat(spec)[2], src_lang, tgt_lang, multi30k)
    if spec.startswith("multi30k:"):
        return multi30k_paths(spec.split(":", 1)[1], [src_lang, tgt_lang], multi30k_dir(multi30k))
    if spec.startswith("hf:"):
        return [Path(f["filename"]) for f in _hf_dataset(spec).cache_files]
    if spec.endswith((".tsv", ".tsv.gz")):
        return [Path(spec)]
    return [_prefix_path(spec, src_lang), _prefix_path(spec, tgt_lang)]


def iter_parallel(
    spec: str, src_lang: str, tgt_lang: str, multi30k: str | None = None
) -> Iterator[tuple[str, str]]:
    """The pairs of `spec`, as `read_parallel` gives them, one at a time: files are streamed, so
    a corpus larger than memory can be read (Multi30k and concat: corpora, small, are read whole).
    Skipped pairs are counted and reported at the end, as `read_parallel` does."""
    if not _streams(spec):
        yield from zip(*read_parallel(spec, src_lang, tgt_lang, multi30k), strict=True)
        return
    if spec.startswith("hf:"):
        pairs, where = _hf_pairs(spec, src_lang, tgt_lang), spec
    elif spec.endswith((".tsv", ".tsv.gz")):
        pairs, where = _tsv_pairs(Path(spec)), spec
    else:
        src_path, tgt_path = _prefix_path(spec, src_lang), _prefix_path(spec, tgt_lang)
        pairs, where = _aligned(src_path, tgt_path), f"{src_path} / {tgt_path}"
    yield from _good_pairs(pairs, where)


def _aligned(src_path: Path, tgt_path: Path) -> Iterator[tuple[str, str]]:
    """The lines of two parallel files side by side; a DataError if one ends first."""
    n = 0
    for n, (s, t) in enumerate(itertools.zip_longest(iter_lines(src_path), iter_lines(tgt_path)), start=1):
        if s is None or t is None:
            longer, shorter = (tgt_path, src_path) if s is None else (src_path, tgt_path)
            raise DataError(f"{shorter} has {n - 1} lines but {longer} has more")
        yield s, t


def sample_pairs(pairs: Iterable[tuple[str, str]], n: int, seed: int) -> tuple[list[str], list[str]]:
    """(sources, targets) of `n` pairs drawn uniformly from `pairs` in one pass, holding only
    those n (reservoir sampling, Vitter 1985's algorithm R), kept in corpus order; n = 0: all."""
    if not n:
        kept = list(pairs)
    else:
        rng = random.Random(seed)
        reservoir: list[tuple[int, tuple[str, str]]] = []
        for i, pair in enumerate(pairs):
            if i < n:
                reservoir.append((i, pair))
            elif (j := rng.randrange(i + 1)) < n:
                reservoir[j] = (i, pair)
        kept = [pair for _, pair in sorted(reservoir, key=lambda x: x[0])]
    return [s for s, _ in kept], [t for _, t in kept]


def _unzip(pairs: Iterable[tuple[str, str]]) -> tuple[list[str], list[str]]:
    src, tgt = [], []
    for s, t in pairs:
        src.append(s)
        tgt.append(t)
    return src, tgt


def _hf_dataset(spec: str):
    """The split that ``hf:NAME[:CONFIG]:SPLIT`` names, loaded (and cached) by `datasets`."""
    parts = spec[3:].split(":")
    if len(parts) not in (2, 3) or not all(parts):
        raise DataError(f"{spec}: expected hf:NAME:SPLIT or hf:NAME:CONFIG:SPLIT (a Hugging Face dataset)")
    name, config, split = parts[0], (parts[1] if len(parts) == 3 else None), parts[-1]
    try:
        import datasets
    except ImportError:
        raise DataError(
            f"{spec}: hf: corpora need the datasets package: pip install 'lookback[hf]'"
        ) from None
    datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 -- datasets raises many kinds; each becomes one line
        raise DataError(f"{spec}: cannot load ({type(exc).__name__}: {first_line(exc)})") from None


def _hf_pairs(spec: str, src_lang: str, tgt_lang: str) -> Iterator[tuple[str, str]]:
    """The (source, target) texts of a Hugging Face translation set, one example at a time: from
    its ``translation`` column ({lang: text}), or from columns named by the languages."""
    dataset = _hf_dataset(spec)
    columns = dataset.column_names
    if "translation" in columns:
        for n, example in enumerate(dataset):
            pair = example["translation"]
            if src_lang not in pair or tgt_lang not in pair:
                raise DataError(
                    f"{spec}: example {n} translates {sorted(pair)}, not {src_lang} and {tgt_lang}"
                )
            yield pair[src_lang], pair[tgt_lang]
    elif src_lang in columns and tgt_lang in columns:
        for example in dataset:
            yield example[src_lang], example[tgt_lang]
    else:
        raise DataError(
            f"{spec}: no 'translation' column, and no columns {src_lang!r} and {tgt_lang!r} ({columns})"
        )
