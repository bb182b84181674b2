"""Reading parallel corpora: file formats, spec forms, errors and Multi30k files."""

import gzip
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lookback.data import read as data
from lookback.data.read import DataError, concat_pairs, read_lines, read_parallel

from ..helpers import real_multi30k, tiny_train_config, write


@pytest.mark.parametrize("name", ["a.fr", "a.fr.gz"])
def test_read_lines_plain_and_gzip(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, "\ufeffune phrase\r\n  deux  \nlà\u2028aussi")
    # only \n ends a line; a BOM and the \r before \n go, other whitespace and U+2028 stay
    assert read_lines(path) == ["une phrase", "  deux  ", "là\u2028aussi"]


def test_read_lines_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.fr"
    path.write_bytes("un\nlà\n".encode() + b"caf\xe9\n")  # Latin-1 é on line 3
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:3: invalid UTF-8") as info:
        read_lines(path)
    assert "\n" not in str(info.value)


def test_read_lines_empty_and_missing(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"file is empty$"):
        read_lines(write(tmp_path / "empty.en", ""))
    with pytest.raises(DataError, match=r"file is empty$"):
        read_lines(write(tmp_path / "empty.en.gz", ""))
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'nope.en'))}: no such file$"):
        read_lines(tmp_path / "nope.en")


def test_read_lines_not_gzip(tmp_path: Path) -> None:
    path = tmp_path / "fake.en.gz"
    path.write_bytes(b"plain text, not gzip\n")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}: cannot read"):
        read_lines(path)


def test_tsv(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "a man\tun homme\na dog\tun chien\n")
    assert read_parallel(str(path), "en", "fr") == (["a man", "a dog"], ["un homme", "un chien"])
    gz = write(tmp_path / "c.tsv.gz", "a man\tun homme\n")
    assert read_parallel(str(gz), "en", "fr") == (["a man"], ["un homme"])


@pytest.mark.parametrize("line, found", [("only one column", 1), ("a\tb\tc", 3)])
def test_tsv_wrong_columns(tmp_path: Path, line: str, found: int) -> None:
    path = write(tmp_path / "c.tsv", f"a man\tun homme\n{line}\n")
    expected = f"{path}:2: expected 2 tab-separated columns, found {found}"
    with pytest.raises(DataError, match=f"^{re.escape(expected)}$"):
        read_parallel(str(path), "en", "fr")


def test_prefix_with_gz_fallback(tmp_path: Path) -> None:
    write(tmp_path / "train.en", "a man\na dog\n")
    write(tmp_path / "train.fr.gz", "un homme\nun chien\n")
    src, tgt = read_parallel(str(tmp_path / "train"), "en", "fr")
    assert src == ["a man", "a dog"]
    assert tgt == ["un homme", "un chien"]


def test_prefix_missing_side(tmp_path: Path) -> None:
    write(tmp_path / "train.en", "a man\n")
    with pytest.raises(DataError, match=r"train\.fr: no such file"):
        read_parallel(str(tmp_path / "train"), "en", "fr")


def test_mismatched_line_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "c.en", "one\ntwo\nthree\n")
    tgt = write(tmp_path / "c.fr", "un\ndeux\n")
    expected = f"{src} has 3 lines but {tgt} has 2"
    with pytest.raises(DataError, match=f"^{re.escape(expected)}$"):
        read_parallel(str(tmp_path / "c"), "en", "fr")


def test_pairs_with_an_empty_side_are_skipped(tmp_path: Path, caplog) -> None:
    write(tmp_path / "c.en", "one\n\nthree\n   \nfive\n")
    write(tmp_path / "c.fr", "un\ndeux\n\nquatre\ncinq\n")
    with caplog.at_level(logging.WARNING, logger="lookback.data"):
        src, tgt = read_parallel(str(tmp_path / "c"), "en", "fr")
    assert (src, tgt) == (["one", "five"], ["un", "cinq"])
    assert "skipped 3 pairs" in caplog.text
    assert str(tmp_path / "c.en") in caplog.text


def test_only_empty_pairs_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "c.tsv", "\tun\nan\t \n")
    with pytest.raises(DataError, match="no sentence pairs"):
        read_parallel(str(path), "en", "fr")


def test_concat_pairs_by_hand() -> None:
    src, tgt = ["a", "b", "c", "d", "e"], ["A", "B", "C", "D", "E"]
    assert concat_pairs(src, tgt, 2, 2) == (["a b", "c d"], ["A B", "C D"])  # "e" is a short tail
    assert concat_pairs(src, tgt, 1, 1) == (src, tgt)
    assert concat_pairs(src, tgt, 6, 6) == ([], [])


def test_concat_pairs_cycles_a_range() -> None:
    src = [str(i) for i in range(1, 14)]
    joined, _ = concat_pairs(src, src, 1, 3)
    # sizes 1, 2, 3, 1, 2, 3 take 12 pairs; the next size is 1 again, and "13" fits it
    assert joined == ["1", "2 3", "4 5 6", "7", "8 9", "10 11 12", "13"]
    joined, _ = concat_pairs(src[:11], src[:11], 1, 3)  # after 1+2+3+1+2 = 9, a group of 3 does not fit
    assert joined == ["1", "2 3", "4 5 6", "7", "8 9"]
    assert concat_pairs(src, src, 2, 3)[0] == ["1 2", "3 4 5", "6 7", "8 9 10", "11 12"]


def test_concat_spec(tmp_path: Path) -> None:
    write(tmp_path / "c.en", "a man\na dog\nruns\nsleeps\nhere\n")
    write(tmp_path / "c.fr", "un homme\nun chien\ncourt\ndort\nici\n")
    src, tgt = read_parallel(f"concat:2:{tmp_path / 'c'}", "en", "fr")
    assert (src, tgt) == (["a man a dog", "runs sleeps"], ["un homme un chien", "court dort"])
    src, _ = read_parallel(f"concat:1-2:{tmp_path / 'c'}", "en", "fr")
    assert src == ["a man", "a dog runs", "sleeps"]
    tsv = write(tmp_path / "c.tsv", "x\tX\ny\tY\nz\tZ\n")
    assert read_parallel(f"concat:3:{tsv}", "en", "fr") == (["x y z"], ["X Y Z"])
    assert read_parallel(f"concat:1:concat:2:{tsv}", "en", "fr") == (["x y"], ["X Y"])  # specs nest


@pytest.mark.parametrize("k", ["0", "x", "3-1", "0-2", "2-", "-2", "1.5", ""])
def test_concat_bad_k(tmp_path: Path, k: str) -> None:
    spec = f"concat:{k}:{tmp_path / 'c'}"
    with pytest.raises(DataError, match=r"expected concat:K:SPEC, with K an integer >= 1") as info:
        read_parallel(spec, "en", "fr")
    assert str(info.value).startswith(spec) and "\n" not in str(info.value)


def test_concat_without_inner_spec_or_enough_pairs(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="expected concat:K:SPEC"):
        read_parallel("concat:3", "en", "fr")
    with pytest.raises(DataError, match="expected concat:K:SPEC"):
        read_parallel("concat:3:", "en", "fr")
    tsv = write(tmp_path / "c.tsv", "x\tX\ny\tY\n")
    with pytest.raises(DataError, match=rf"^concat:3:{re.escape(str(tsv))}: .* has fewer than 3 pairs"):
        read_parallel(f"concat:3:{tsv}", "en", "fr")


def test_concat_multi30k() -> None:
    folder = real_multi30k()
    src, tgt = read_parallel("multi30k:test_2016_flickr", "en", "fr", multi30k=str(folder))
    long_src, long_tgt = read_parallel("concat:3:multi30k:test_2016_flickr", "en", "fr", multi30k=str(folder))
    assert len(long_src) == len(long_tgt) == 1000 // 3
    assert long_src[1] == " ".join(src[3:6]) and long_tgt[-1] == " ".join(tgt[996:999])
    mixed, _ = read_parallel("concat:1-4:multi30k:test_2016_flickr", "en", "fr", multi30k=str(folder))
    assert len(mixed) == 400 and mixed[3] == " ".join(src[6:10])  # 1000 = 100 cycles of 1+2+3+4


def test_corrupt_gzip_is_a_data_error(tmp_path: Path) -> None:
    """A gzip header over a damaged stream: zlib's own error must not escape."""
    damaged = bytearray(gzip.compress(b"a man\n" * 200))
    damaged[15:25] = b"\xff" * 10
    path = tmp_path / "c.en.gz"
    path.write_bytes(bytes(damaged))
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: cannot read \(.*decompressing"):
        read_lines(path)


def test_tsv_blank_lines_are_skipped_with_a_count(tmp_path: Path, caplog) -> None:
    path = write(tmp_path / "c.tsv", "a man\tun homme\n\n   \na dog\tun chien\n")
    with caplog.at_level(logging.WARNING, logger="lookback.data"):
        assert read_parallel(str(path), "en", "fr") == (["a man", "a dog"], ["un homme", "un chien"])
    assert f"skipped 2 pairs with an empty side in {path}" in caplog.text


@pytest.mark.parametrize("form", ["prefix", "tsv"])
def test_over_long_lines_are_skipped_with_a_count(tmp_path: Path, caplog, form: str) -> None:
    long = "word " * (data.MAX_CHARS // 5 + 1)  # just over the limit
    pairs = [("a man", "un homme"), (long, "court"), ("a dog", long), ("a cat", "un chat")]
    if form == "tsv":
        spec = str(write(tmp_path / "c.tsv", "".join(f"{s}\t{t}\n" for s, t in pairs)))
    else:
        write(tmp_path / "c.en", "".join(s + "\n" for s, _ in pairs))
        write(tmp_path / "c.fr", "".join(t + "\n" for _, t in pairs))
        spec = str(tmp_path / "c")
    with caplog.at_level(logging.WARNING, logger="lookback.data"):
        src, tgt = read_parallel(spec, "en", "fr")
    assert (src, tgt) == (["a man", "a cat"], ["un homme", "un chat"])
    assert f"skipped 2 pairs with a side over {data.MAX_CHARS} characters" in caplog.text
    at_limit = "x" * data.MAX_CHARS
    path = write(tmp_path / "limit.tsv", f"{at_limit}\tX\n")
    assert read_parallel(str(path), "en", "fr") == ([at_limit], ["X"])  # the limit itself is kept


# Every data problem through the CLI: one line naming the file (and line), exit 2; --debug: the traceback.


def _bad_corpora(tmp: Path) -> dict[str, tuple[str, str]]:
    """name -> (data.train spec, the expected error line after 'lookback: error: ')."""
    write(tmp / "short.en", "one\ntwo\nthree\n")
    write(tmp / "short.fr", "un\ndeux\n")
    (tmp / "latin1.en").write_bytes(b"a man\ncaf\xe9\n")
    write(tmp / "latin1.fr", "un homme\ncafé\n")
    write(tmp / "empty.en", "")
    write(tmp / "empty.fr", "")
    write(tmp / "blank.en", "\n \n")
    write(tmp / "blank.fr", "x\n\n")
    write(tmp / "cols.tsv", "a man\tun homme\na dog\n")
    (tmp / "notgz.en.gz").write_bytes(b"not gzip\n")
    write(tmp / "notgz.fr", "x\n")
    (tmp / "adir.en").mkdir()
    write(tmp / "adir.fr", "x\n")
    return {
        "missing file": (str(tmp / "nope"), f"{tmp / 'nope.en'}: no such file"),
        "empty file": (str(tmp / "empty"), f"{tmp / 'empty.en'}: file is empty"),
        "invalid UTF-8": (
            str(tmp / "latin1"),
            f"{tmp / 'latin1.en'}:2: invalid UTF-8 (byte 0xe9 at column 4); the corpus must be UTF-8 text",
        ),
        "line counts": (str(tmp / "short"), f"{tmp / 'short.en'} has 3 lines but {tmp / 'short.fr'} has 2"),
        "TSV columns": (
            str(tmp / "cols.tsv"),
            f"{tmp / 'cols.tsv'}:2: expected 2 tab-separated columns, found 1",
        ),
        "only empty lines": (
            str(tmp / "blank"),
            f"{tmp / 'blank.en'} / {tmp / 'blank.fr'}: no sentence pairs with text on both sides "
            f"(of at most {data.MAX_CHARS} characters)",
        ),
        "not gzip": (str(tmp / "notgz"), f"{tmp / 'notgz.en.gz'}: cannot read (Not a gzipped file (b'no'))"),
        "a directory": (str(tmp / "adir"), f"{tmp / 'adir.en'}: cannot read ([Errno 21] Is a directory: "),
    }


CASES = [
    "missing file",
    "empty file",
    "invalid UTF-8",
    "line counts",
    "TSV columns",
    "only empty lines",
    "not gzip",
    "a directory",
]


def _train_config(tmp: Path, spec: str) -> Path:
    raw = tiny_train_config(tmp / "cfg", data={"train": spec})
    path = tmp / "bad_data.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", CASES)
def test_cli_data_errors_are_one_line(tmp_path: Path, capsys, case: str) -> None:
    from lookback.cli import main

    spec, expected = _bad_corpora(tmp_path)[case]
    config = _train_config(tmp_path, spec)
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("lookback: error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"lookback: error: {expected}")
    assert "Traceback" not in err
    with pytest.raises(DataError):  # --debug lets the exception, and so its traceback, through
        main(["--debug", "train", str(config)])


def test_cli_data_error_in_a_real_process(tmp_path: Path) -> None:
    """The entry point in its own process: the one line on stderr, no traceback, status 2."""
    spec, expected = _bad_corpora(tmp_path)["invalid UTF-8"]
    config = _train_config(tmp_path, spec)
    cmd = [sys.executable, "-m", "lookback", "train", str(config)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines()[-1] == f"lookback: error: {expected}"
