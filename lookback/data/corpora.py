"""Named corpora: Multi30k, found on disk or downloaded, and checked.

``multi30k:SPLIT`` (a corpus spec, see data.py) reads the Multi30k task 1
files ``SPLIT.{src,tgt}.gz`` (Elliott et al. 2016) from `data.multi30k_dir`,
else $LOOKBACK_MULTI30K, else the user cache; a missing file is downloaded
there. Every file is checked against the SHA-256 sums shipped in
``multi30k.sha256``, and an interrupted download never leaves a partial file.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

from ..errors import DataError

logger = logging.getLogger(__name__)

MULTI30K_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/{name}"
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr")
MULTI30K_LANGS = ("en", "fr", "de")
_SUMS_FILE = Path(__file__).with_name("multi30k.sha256")

# SHA-256 of files already hashed, keyed by (path, mtime, size): a changed file is hashed again.
_DIGESTS: dict[tuple[str, int, int], str] = {}


def multi30k_dir(configured: str | None) -> Path:
    """The Multi30k folder: `configured`, else $LOOKBACK_MULTI30K, else the user cache."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get("LOOKBACK_MULTI30K"):
        return Path(os.environ["LOOKBACK_MULTI30K"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "lookback" / "multi30k"


def _expected_sums() -> dict[str, str]:
    """File name -> SHA-256 hex digest, from the shipped ``multi30k.sha256``."""
    lines = _SUMS_FILE.read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, name in (line.split() for line in lines if line.strip())}


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _DIGESTS:
        _DIGESTS[key] = hashlib.sha256(path.read_bytes()).hexdigest()  # files are ~1 MB
    return _DIGESTS[key]


def _verify(path: Path, expected: str) -> None:
    actual = _sha256(path)
    if actual != expected:
        raise DataError(
            f"{path}: SHA-256 is {actual}, expected {expected} "
            f"(a corrupt or partial file? delete it to download it again)"
        )


def _download(url: str, path: Path, expected: str) -> None:
    """Fetch `url` into a temporary file beside `path`, check its sum, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temporary name, so that an interrupted download never leaves a partial file at `path`.
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    tmp_path = Path(name)
    try:
        with os.fdopen(fd, "wb") as tmp, urllib.request.urlopen(url, timeout=30) as response:
            shutil.copyfileobj(response, tmp)
        actual = _sha256(tmp_path)
        if actual != expected:
            raise DataError(f"{url}: downloaded file has SHA-256 {actual}, expected {expected}")
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)  # a no-op once renamed
    logger.info("downloaded %s to %s", url, path)


def multi30k_paths(split: str, langs: list[str], directory: Path, download: bool = True) -> list[Path]:
    """Paths of the Multi30k files ``{split}.{lang}.gz``, downloading any that are missing.

    Args:
        split: one of MULTI30K_SPLITS.
        langs: languages, each one of MULTI30K_LANGS.
        directory: where the files are, or are downloaded to.
        download: fetch missing files from MULTI30K_URL; if False a missing file is an error.

    Returns:
        One path per language, every file checked against its SHA-256 sum.
    """
    if split not in MULTI30K_SPLITS:
        raise DataError(f"multi30k: unknown split '{split}' (valid: {', '.join(MULTI30K_SPLITS)})")
    for lang in langs:
        if lang not in MULTI30K_LANGS:
            raise DataError(f"multi30k: unknown language '{lang}' (valid: {', '.join(MULTI30K_LANGS)})")
    sums = _expected_sums()
    names = [f"{split}.{lang}.gz" for lang in langs]
    paths = [directory / name for name in names]
    for name, path in zip(names, paths, strict=True):
        if path.exists():
            _verify(path, sums[name])
            continue
        if not download:
            raise DataError(f"{path}: no such file")
        url = MULTI30K_URL.format(name=name)
        try:
            _download(url, path, sums[name])
        except OSError as exc:  # urllib.error.URLError and timeouts are OSErrors too
            reason = str(getattr(exc, "reason", None) or exc).replace("\n", " ")
            raise DataError(
                f"cannot download {url} ({reason}); put the Multi30k files "
                f"({', '.join(names)}) in {directory} or point $LOOKBACK_MULTI30K "
                f"(or data.multi30k_dir) at a folder that has them"
            ) from None
    return paths
