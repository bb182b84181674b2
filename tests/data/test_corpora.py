"""data/corpora.py: Multi30k found on disk or downloaded, checked against its SHA-256 sums, with a
one-line error for each way it can go wrong."""

import hashlib
import io
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from lookback.data import corpora
from lookback.data.corpora import multi30k_dir, multi30k_paths
from lookback.data.read import DataError, read_parallel

from ..helpers import real_multi30k


def test_multi30k_dir_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("LOOKBACK_MULTI30K", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert multi30k_dir(str(tmp_path / "cfg")) == tmp_path / "cfg"
    assert multi30k_dir(None) == tmp_path / "env"
    monkeypatch.delenv("LOOKBACK_MULTI30K")
    assert multi30k_dir(None) == tmp_path / "cache" / "lookback" / "multi30k"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert multi30k_dir(None) == Path.home() / ".cache" / "lookback" / "multi30k"


def test_multi30k_real_files() -> None:
    folder = real_multi30k()
    src, tgt = read_parallel("multi30k:val", "en", "fr", multi30k=str(folder))
    assert len(src) == len(tgt) == 1014
    assert src[0] and tgt[0]


def test_multi30k_from_environment(monkeypatch) -> None:
    folder = real_multi30k()
    monkeypatch.setenv("LOOKBACK_MULTI30K", str(folder))
    src, tgt = read_parallel("multi30k:test_2016_flickr", "de", "en")
    assert len(src) == len(tgt) == 1000


@pytest.mark.parametrize(
    "split, langs, valid",
    [("dev", ["en"], "train, val"), ("val", ["en", "cs"], "en, fr, de")],
)
def test_multi30k_unknown_split_or_language(tmp_path: Path, split, langs, valid) -> None:
    with pytest.raises(DataError, match=valid):
        multi30k_paths(split, langs, tmp_path, download=False)


def test_multi30k_checksum_mismatch(tmp_path: Path) -> None:
    folder = real_multi30k()
    shutil.copy(folder / "val.fr.gz", tmp_path / "val.fr.gz")
    assert multi30k_paths("val", ["fr"], tmp_path, download=False) == [tmp_path / "val.fr.gz"]
    with (tmp_path / "val.fr.gz").open("ab") as f:
        f.write(b"corrupt")  # a new size, so the cached digest is not reused
    with pytest.raises(DataError, match=r"val\.fr\.gz: SHA-256 is [0-9a-f]{64}, expected ca3106f1"):
        multi30k_paths("val", ["fr"], tmp_path, download=False)


def test_multi30k_hashes_each_file_once(tmp_path: Path, monkeypatch) -> None:
    folder = real_multi30k()
    shutil.copy(folder / "val.en.gz", tmp_path / "val.en.gz")
    hashed = []
    sha256 = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda b: hashed.append(len(b)) or sha256(b))
    for _ in range(3):
        multi30k_paths("val", ["en"], tmp_path, download=False)
    assert hashed == [(folder / "val.en.gz").stat().st_size]


def test_multi30k_offline(tmp_path: Path, monkeypatch) -> None:
    def offline(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    target = tmp_path / "m30k"
    with pytest.raises(DataError) as info:
        read_parallel("multi30k:val", "en", "fr", multi30k=str(target))
    message = str(info.value)
    assert message == (
        f"cannot download {corpora.MULTI30K_URL.format(name='val.en.gz')} "
        f"([Errno -3] Temporary failure in name resolution); put the Multi30k files "
        f"(val.en.gz, val.fr.gz) in {target} or point $LOOKBACK_MULTI30K "
        f"(or data.multi30k_dir) at a folder that has them"
    )
    assert not list(target.iterdir())  # no partial file left behind


def test_multi30k_download(tmp_path: Path, monkeypatch) -> None:
    folder = real_multi30k()
    urls = []

    def fake_urlopen(url, timeout=None):
        urls.append(url)
        return io.BytesIO((folder / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    paths = multi30k_paths("val", ["en", "de"], tmp_path / "cache")
    assert paths == [tmp_path / "cache" / "val.en.gz", tmp_path / "cache" / "val.de.gz"]
    assert urls == [corpora.MULTI30K_URL.format(name=n) for n in ("val.en.gz", "val.de.gz")]
    assert paths[0].read_bytes() == (folder / "val.en.gz").read_bytes()
    multi30k_paths("val", ["en", "de"], tmp_path / "cache")
    assert len(urls) == 2  # present files are not fetched again


def test_multi30k_download_corrupt(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: io.BytesIO(b"<html>"))
    with pytest.raises(DataError, match=r"val\.en\.gz: downloaded file has SHA-256 .* expected"):
        multi30k_paths("val", ["en"], tmp_path)
    assert not list(tmp_path.iterdir())
