"""A tokenised training corpus on disk, read pair by pair: corpora larger than memory.

With `data.store: true` the training corpus is tokenised once, streaming,
into a folder of flat binary files, and training reads each batch's pairs
from them. Nothing of the corpus stays in Python objects: memory holds only
the pairs' lengths (8 bytes a pair), and each epoch's plan of batches
(indices, 8 bytes a pair), so a corpus of 36 million pairs trains in the
memory of one of 30 thousand plus about 600 MB.

Why flat NumPy-typed files and not Hugging Face `datasets` (Arrow): a pair
is two short runs of integers, and that is all the store holds; two data
files and two offset arrays say it with no dependency, no schema and no
conversion, and `os.pread` of a few hundred bytes per pair costs
microseconds. Reading with pread rather than a memory map keeps the pages
out of the process's resident memory: the figure does not grow as an epoch
touches the whole corpus. (`hf:` corpora still come through `datasets`,
which is where they live.)

The folder, in the cache (`data.cache_dir`, else $LOOKBACK_CACHE/stores, else
~/.cache/lookback/stores), is named by a key of everything that decides its
contents: the corpus spec and the size and time of its files, the tokenizer
files, `data.max_len` and `data.src_eos`. A store is written to a temporary
folder and renamed when complete, so a killed preparation leaves nothing
that could be mistaken for a store.

    src.bin, tgt.bin      token ids, pair after pair (uint16, or uint32 for vocabularies over 65,535)
    src.idx, tgt.idx      int64 offsets: pair i is bin[idx[i]:idx[i+1]]
    lengths.npy           (n, 2) int32 source and target lengths
    meta.json             pairs, dtype, what was skipped, what it was built from
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np

from ..config import DataConfig
from .read import corpus_files, iter_parallel
from .tokenizer import EOS, Tokenizer

logger = logging.getLogger(__name__)

CHUNK = 10_000  # pairs tokenised and written at a time
VERSION = 1  # of the layout: a change makes every key new


class TokenStore:
    """The pairs of a store folder: `store[i]` is (source ids, target ids), as `encode_corpus`
    gives them; `lengths` is an (n, 2) array of their lengths."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._files: list[int] | None = None  # opened on first use: after a fork, each process its own
        meta_path = self.folder / "meta.json"
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
            self.dtype = np.dtype(self.meta["dtype"])
            self.lengths = np.load(self.folder / "lengths.npy")
            self._idx = [np.fromfile(self.folder / f"{side}.idx", dtype=np.int64) for side in ("src", "tgt")]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"{self.folder}: not a complete token store ({type(exc).__name__}: {exc})"
            ) from None
        n = self.meta["pairs"]
        if self.lengths.shape != (n, 2) or any(len(idx) != n + 1 for idx in self._idx):
            raise ValueError(f"{self.folder}: not a complete token store (its files disagree on {n} pairs)")

    def __len__(self) -> int:
        return self.meta["pairs"]

    def _read(self, side: int, i: int) -> list[int]:
        start, end = int(self._idx[side][i]), int(self._idx[side][i + 1])
        size = self.dtype.itemsize
        data = os.pread(self._files[side], (end - start) * size, start * size)
        return np.frombuffer(data, dtype=self.dtype).tolist()

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of a store of {len(self)}")
        i = int(i) % len(self)
        if self._files is None:
            self._files = [os.open(self.folder / f"{side}.bin", os.O_RDONLY) for side in ("src", "tgt")]
        return self._read(0, i), self._read(1, i)

    def __iter__(self) -> Iterator[tuple[list[int], list[int]]]:
        return (self[i] for i in range(len(self)))

    def close(self) -> None:
        if self._files is not None:
            for fd in self._files:
                os.close(fd)
            self._files = None

    def __del__(self):
        self.close()


def cache_root(configured: str | None = None) -> Path:
    """Where stores go: `data.cache_dir`, else $LOOKBACK_CACHE/stores, else ~/.cache/lookback/stores."""
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("LOOKBACK_CACHE")
    return Path(base).expanduser() / "stores" if base else Path.home() / ".cache" / "lookback" / "stores"


def store_key(
    sources: list[Path], tokenizer_files: list[Path], spec: str, max_len: int, src_eos: bool
) -> str:
    """The name of the store of these inputs: it changes when any of them does."""
    h = hashlib.sha256(json.dumps([VERSION, spec, max_len, src_eos]).encode())
    for path in sources:
        stat = Path(path).stat()
        h.update(f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    for path in tokenizer_files:
        h.update(Path(path).read_bytes())
    return h.hexdigest()[:24]


def build_store(
    pairs: Iterable[tuple[str, str]],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    folder: str | Path,
    max_len: int | None = None,
    src_eos: bool = False,
    about: dict | None = None,
) -> TokenStore:
    """Tokenise `pairs` (streamed: any iterable of text pairs) into a store at `folder`, as
    `encode_corpus` would: pairs empty after tokenisation or over `max_len` tokens on a side
    are skipped, and with `src_eos` every source ends with </s>. Written to `folder`.tmp-PID
    first and renamed at the end."""
    folder = Path(folder)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    vocab = max(src_tok.vocab_size, tgt_tok.vocab_size)
    dtype = np.dtype(np.uint16 if vocab <= 2**16 else np.uint32)
    start, kept, seen = time.perf_counter(), 0, 0
    lengths: list[np.ndarray] = []
    offsets: list[list[np.ndarray]] = [[np.zeros(1, np.int64)], [np.zeros(1, np.int64)]]
    totals = [0, 0]  # ids written so far, per side
    try:
        with open(tmp / "src.bin", "wb") as src_bin, open(tmp / "tgt.bin", "wb") as tgt_bin:
            for chunk in _chunks(pairs, CHUNK):
                seen += len(chunk)
                src_ids, tgt_ids = [], []
                for s, t in chunk:
                    x, y = src_tok.encode(s), tgt_tok.encode(t)
                    if x and y and (max_len is None or max(len(x), len(y)) <= max_len):
                        src_ids.append(x + [EOS] if src_eos else x)
                        tgt_ids.append(y)
                if not src_ids:
                    continue
                kept += len(src_ids)
                sizes = []
                for side, ids, out in ((0, src_ids, src_bin), (1, tgt_ids, tgt_bin)):
                    n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))  # (pairs,)
                    out.write(np.fromiter(chain.from_iterable(ids), dtype=dtype, count=int(n.sum())))
                    offsets[side].append(totals[side] + np.cumsum(n))
                    totals[side] += int(n.sum())
                    sizes.append(n)
                lengths.append(np.stack(sizes, 1).astype(np.int32))  # (pairs, 2)
        if not kept:
            raise ValueError(
                f"{folder}: no pair of the corpus is left after tokenisation (max_len {max_len})"
            )
        for side, name in ((0, "src"), (1, "tgt")):
            np.concatenate(offsets[side]).astype(np.int64).tofile(tmp / f"{name}.idx")
        np.save(tmp / "lengths.npy", np.concatenate(lengths))
        meta = {
            "pairs": kept,
            "skipped": seen - kept,
            "dtype": dtype.name,
            "seconds": round(time.perf_counter() - start, 1),
            **(about or {}),
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if seen > kept:
        logger.info(
            "store: skipped %d of %d pairs (empty after tokenisation, or over %s tokens)",
            seen - kept,
            seen,
            max_len,
        )
    logger.info("store: %d pairs tokenised into %s in %.0f s", kept, folder, meta["seconds"])
    return TokenStore(folder)


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def prepare_store(
    data: DataConfig,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    tokenizer_dir: Path,
    main: bool = True,
    barrier: Callable[[], None] = lambda: None,
) -> TokenStore:
    """The store of `data.train` tokenised by the tokenizers in `tokenizer_dir`, built by the main
    process when the cache has none (the others wait at `barrier`: the cache must be shared)."""
    files = corpus_files(data.train, data.src_lang, data.tgt_lang, data.multi30k_dir)
    manifest = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer_files = [
        Path(tokenizer_dir) / name for name in ("tokenizer.json", manifest["src"], manifest["tgt"])
    ]
    key = store_key(files, tokenizer_files, data.train, data.max_len, data.src_eos)
    folder = cache_root(data.cache_dir) / key
    if main and not (folder / "meta.json").exists():
        logger.info(
            "store: tokenising %s into %s (once; later runs with these tokenizers reuse it)",
            data.train,
            folder,
        )
        pairs = iter_parallel(data.train, data.src_lang, data.tgt_lang, data.multi30k_dir)
        about = {"corpus": data.train, "files": [str(f) for f in files]}
        build_store(pairs, src_tok, tgt_tok, folder, data.max_len, data.src_eos, about)
    barrier()
    store = TokenStore(folder)
    logger.info("store: %d training pairs from %s", len(store), folder)
    return store
