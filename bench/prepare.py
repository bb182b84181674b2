"""What every measurement starts from: plain-text data, the SentencePiece model, untrained runs.

The work directory (outside the repository by default) holds

    data/{train,val,test_2016_flickr}.{en,fr}    Multi30k as plain text (Joey reads no .gz)
    data/train_kept.{en,fr}                      the training pairs lookback keeps (<= max_len
                                                 pieces, no empty side): both systems train on
                                                 these, so a pair index means the same pair
    data/test_2016_flickr_100.{en,fr}            the --quick slice
    data/warmup.{en,fr}                          64 val pairs, translated before the timing starts
    seed/<config>/                               a lookback run directory at step 0: config,
                                                 tokenizer (spm.joint.model) and last.pt
    seed/<config>-recipe/                        the same for --recipe's model, with <config>'s
                                                 tokenizer files
    joey_vocab.txt                               the SentencePiece pieces in id order, Joey's
                                                 vocabulary file, so both see the same pieces

Seeds are kept between runs while the settings and lookback's source are unchanged.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from . import settings
from .common import read_json, write_json

logger = logging.getLogger(__name__)

SPLITS = ("train", "val", settings.TEST_SET)
WARMUP_SENTENCES = 64
TOKENIZER_FILES = ("spm.joint.model", "spm.joint.vocab", "tokenizer.json")  # a joint SentencePiece run's
REPO = Path(__file__).resolve().parent.parent


class MissingData(SystemExit):
    pass


def multi30k_dir() -> Path:
    """$LOOKBACK_MULTI30K, checked to hold the splits the benchmark reads; a one-line error otherwise."""
    value = os.environ.get("LOOKBACK_MULTI30K")
    if not value:
        raise MissingData(
            "bench: set LOOKBACK_MULTI30K to the folder holding the Multi30k files (train.en.gz, ...)"
        )
    folder = Path(value).expanduser()
    names = [f"{s}.{lang}.gz" for s in SPLITS for lang in (settings.SRC_LANG, settings.TGT_LANG)]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise MissingData(f"bench: LOOKBACK_MULTI30K={folder} lacks {', '.join(missing)}")
    return folder


def _write_pair(prefix: Path, src: list[str], tgt: list[str]) -> None:
    for lang, lines in ((settings.SRC_LANG, src), (settings.TGT_LANG, tgt)):
        Path(f"{prefix}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _source_key(config: str, overrides: list[str], recipe: dict | None = None) -> str:
    """Changes when the settings or any lookback source file change: then the seed is rebuilt."""
    h = hashlib.sha256()
    raw = settings.lookback_config(config, "", "", overrides, recipe)
    h.update(json.dumps([raw], sort_keys=True).encode())
    for path in sorted((REPO / "lookback").rglob("*.py")):
        h.update(str(path.relative_to(REPO)).encode() + path.read_bytes())
    return h.hexdigest()


def prepare_data(work: Path, test_limit: int) -> Path:
    from lookback.data.read import read_parallel

    folder = multi30k_dir()
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        if not Path(f"{data / split}.{settings.TGT_LANG}").exists():
            src, tgt = read_parallel(f"multi30k:{split}", settings.SRC_LANG, settings.TGT_LANG, str(folder))
            _write_pair(data / split, src, tgt)
    warm_src, warm_tgt = (
        Path(f"{data / 'val'}.{lang}").read_text(encoding="utf-8").splitlines()[:WARMUP_SENTENCES]
        for lang in (settings.SRC_LANG, settings.TGT_LANG)
    )
    _write_pair(data / "warmup", warm_src, warm_tgt)  # translated untimed before the timed runs
    if test_limit:
        src, tgt = (
            Path(f"{data / settings.TEST_SET}.{lang}").read_text(encoding="utf-8").splitlines()[:test_limit]
            for lang in (settings.SRC_LANG, settings.TGT_LANG)
        )
        _write_pair(data / f"{settings.TEST_SET}_{test_limit}", src, tgt)
    return data


def prepare_seed(work: Path, config: str, overrides: list[str], recipe: dict | None = None) -> Path:
    """A lookback run directory at step 0 for `config`; every lookback measurement resumes a copy.

    With `recipe` (settings.recipe_settings), the recipe system's seed: its own model, and the
    tokenizer files of `config`'s seed (made first), so that every system reads the same pieces.
    """
    from lookback.config import from_dict
    from lookback.data.batch import encode_corpus
    from lookback.data.read import read_parallel
    from lookback.training.train import Trainer

    data = work / "data"
    shared = prepare_seed(work, config, overrides) if recipe else None
    seed = work / "seed" / (f"{config}-{settings.RECIPE_SYSTEM}" if recipe else config)
    key = _source_key(config, overrides, recipe)
    marker = seed / "bench_seed.json"
    if marker.exists() and read_json(marker).get("key") == key and (data / "train_kept.en").exists():
        return seed
    shutil.rmtree(seed, ignore_errors=True)
    raw = settings.lookback_config(config, str(seed), str(data), overrides, recipe)
    raw["data"]["train"] = str(data / "train")  # the tokenizer learns from all of train
    trainer = Trainer(from_dict(raw, source=f"bench config {config}"))  # trains the SentencePiece model
    trainer.save("last")
    if shared:  # step-0 weights depend on the vocabulary's size only, which is the same
        for name in TOKENIZER_FILES:
            shutil.copyfile(shared / name, seed / name)
        write_json(marker, {**read_json(shared / "bench_seed.json"), "key": key})
        return seed
    # the pairs the trainer keeps (within data.max_len after tokenising): Joey trains on the same
    d = trainer.cfg.data
    text = read_parallel(d.train, d.src_lang, d.tgt_lang, d.multi30k_dir)
    kept = encode_corpus(*text, trainer.src_tok, trainer.tgt_tok, d.max_len, d.src_eos)
    _write_pair(data / "train_kept", kept.src, kept.tgt)
    sp = trainer.src_tok.sp  # joint: one model for both sides
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    (work / "joey_vocab.txt").write_text("".join(p + "\n" for p in pieces), encoding="utf-8")
    write_json(marker, {"key": key, "train_pairs": len(kept.pairs), "vocab_size": len(pieces)})
    logger.info("seed run for %s: %d training pairs, %d pieces", config, len(kept.pairs), len(pieces))
    return seed
