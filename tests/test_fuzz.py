"""Property-based tests: arbitrary input never raises an unexpected exception, never a silent wrong length.

Over the tokenizers, the corpus readers, config loading and the translate API (Python and HTTP):
arbitrary Unicode (control characters, lone surrogates, the empty string), arbitrary bytes and
very long inputs. Each property either checks the result against an independent oracle or
accepts the project's own one-line error type, nothing else.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lookback.config import Config, ConfigError, from_dict, load_config
from lookback.data.read import MAX_CHARS, DataError, read_lines, read_parallel
from lookback.data.tokenizer import BOS, EOS, PAD, WordTokenizer, train_tokenizers
from lookback.serve.app import create_app
from lookback.training.train import train
from lookback.translator import Translator

from .helpers import spm_config, syllable_corpus, tiny_train_config


def _surrogate(c: str) -> bool:
    return "\ud800" <= c <= "\udfff"


FUZZ = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

ANY_CHAR = st.characters(exclude_categories=())  # every code point: controls, lone surrogates, unassigned
ANY_TEXT = st.text(ANY_CHAR, max_size=80)
LONG_TEXT = st.builds(lambda s, n: s * n, st.text(ANY_CHAR, min_size=1, max_size=20), st.integers(500, 3000))
TEXT = st.one_of(ANY_TEXT, LONG_TEXT, st.sampled_from(["", " ", "\n", "\t\r\n", "\x00", "\ud800", "\ufeff"]))


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """A SentencePiece model and a word vocabulary, trained on helpers' made-up syllable corpus."""
    src, tgt = syllable_corpus()
    folder = tmp_path_factory.mktemp("fuzz_tok")
    sp, _ = train_tokenizers(spm_config(), src, tgt, "en", "fr", folder / "spm")
    word, _ = train_tokenizers(spm_config(kind="word"), src, tgt, "en", "fr", folder / "word")
    return {"sentencepiece": sp, "word": word}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("fuzz_run")
    return train(from_dict(tiny_train_config(tmp, train={"max_steps": 30, "valid_every": 30})))


# Tokenizers.


@pytest.mark.parametrize("kind", ["sentencepiece", "word"])
def test_encode_takes_any_string_and_decode_takes_its_ids(tokenizers, kind):
    tok = tokenizers[kind]

    @FUZZ
    @given(TEXT)
    def check(text):
        ids = tok.encode(text)
        assert all(isinstance(i, int) and 0 <= i < tok.vocab_size for i in ids)
        assert not set(ids) & {PAD, BOS, EOS}  # encode adds no specials
        if isinstance(tok, WordTokenizer):  # one id per word: nothing dropped between the two
            assert len(ids) == len(tok.split("".join("\ufffd" if _surrogate(c) else c for c in text)))
        out = tok.decode(ids)
        assert isinstance(out, str)
        out.encode("utf-8")  # no lone surrogate comes back out
        assert len(tok.pieces(ids)) == len(ids)

    check()


@pytest.mark.parametrize("kind", ["sentencepiece", "word"])
def test_decode_of_any_ids_is_text_or_a_value_error(tokenizers, kind):
    tok = tokenizers[kind]

    @FUZZ
    @given(st.lists(st.integers(-(2**40), 2**40) | st.integers(0, tok.vocab_size - 1), max_size=50))
    def check(ids):
        if all(0 <= i < tok.vocab_size for i in ids):
            assert isinstance(tok.decode(ids), str)
        else:  # never an IndexError, never a negative index read from the end of the vocabulary
            with pytest.raises(ValueError, match="out of range"):
                tok.decode(ids)

    check()


# Corpus readers.


def _expected_lines(content: bytes) -> list[str] | None:
    """What read_lines must return for `content`: lines split at \\n only; None if it must refuse."""
    if not content:
        return None
    raw = content.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    try:
        lines = [r.decode("utf-8-sig" if i == 0 else "utf-8") for i, r in enumerate(raw)]
    except UnicodeDecodeError:
        return None
    return [line.removesuffix("\r") for line in lines]


UNICODE = ANY_CHAR.filter(lambda c: not _surrogate(c))  # what a UTF-8 file can hold
BYTES = st.one_of(
    st.binary(max_size=300),
    st.lists(st.text(UNICODE, max_size=30), max_size=20).map(lambda lines: "\n".join(lines).encode("utf-8")),
)


@FUZZ
@given(BYTES, st.sampled_from(["plain", "gzip", "gzip, one byte changed", "gz name, plain bytes"]), st.data())
def test_read_lines_returns_every_line_or_a_data_error(content, form, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("c.en" if form == "plain" else "c.en.gz")
        stored = gzip.compress(content, mtime=0) if form.startswith("gzip") else content
        if form == "gzip, one byte changed":
            at = data.draw(st.integers(0, len(stored) - 1))
            stored = stored[:at] + bytes([stored[at] ^ data.draw(st.integers(1, 255))]) + stored[at + 1 :]
        path.write_bytes(stored)
        expected = _expected_lines(content)
        try:
            lines = read_lines(path)
        except DataError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(path))
            assert expected is None or form in ("gzip, one byte changed", "gz name, plain bytes")
            return
        if form == "gz name, plain bytes":  # only bytes that begin like gzip could be read at all
            assert content.startswith(b"\x1f\x8b")
        else:  # a changed byte that gzip does not check (its timestamp, say) changes nothing
            assert lines == expected


def _as_read(lines: list[str]) -> list[str]:
    """`lines` as read_lines gives them back: a BOM at the start and one \\r at each end removed."""
    out = [line.removesuffix("\r") for line in lines]
    return [out[0].removeprefix("\ufeff"), *out[1:]] if out else out


def _kept(src: list[str], tgt: list[str]) -> list[tuple[str, str]]:
    """The pairs that read_parallel keeps: text on both sides, neither over MAX_CHARS."""
    return [
        (s, t)
        for s, t in zip(src, tgt, strict=False)  # unequal files are refused before this matters
        if s.strip() and t.strip() and len(s) <= MAX_CHARS and len(t) <= MAX_CHARS
    ]


LINE = st.one_of(
    st.text(UNICODE.filter(lambda c: c != "\n"), max_size=20),
    st.sampled_from(["x" * MAX_CHARS, "y" * (MAX_CHARS + 1), "\ufeff", "\r", " \t"]),
)


@FUZZ
@given(st.lists(LINE, min_size=0, max_size=15), st.lists(LINE, min_size=0, max_size=15))
def test_read_parallel_keeps_pairs_aligned_or_raises_a_data_error(src_lines, tgt_lines):
    with tempfile.TemporaryDirectory() as tmp:
        prefix = Path(tmp) / "c"
        Path(f"{prefix}.en").write_bytes("".join(s + "\n" for s in src_lines).encode("utf-8"))
        Path(f"{prefix}.fr").write_bytes("".join(t + "\n" for t in tgt_lines).encode("utf-8"))
        kept = _kept(_as_read(src_lines), _as_read(tgt_lines))
        try:
            src, tgt = read_parallel(str(prefix), "en", "fr")
        except DataError as exc:
            assert "\n" not in str(exc)
            assert not src_lines or not tgt_lines or len(src_lines) != len(tgt_lines) or not kept
            return
        assert list(zip(src, tgt, strict=True)) == kept


@FUZZ
@given(st.lists(LINE, min_size=1, max_size=15))
def test_read_tsv_pairs_every_two_column_line_or_names_the_bad_one(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.tsv"
        path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
        rows = _as_read(lines)
        bad = [i for i, r in enumerate(rows, 1) if r.strip() and r.count("\t") != 1]
        try:
            src, tgt = read_parallel(str(path), "en", "fr")
        except DataError as exc:
            message = str(exc)
            assert "\n" not in message
            if bad:
                assert message.startswith(f"{path}:{bad[0]}: expected 2 tab-separated columns")
            else:
                assert "no sentence pairs" in message
            return
        assert not bad
        pairs = [r.split("\t") for r in rows if r.strip()]
        assert list(zip(src, tgt, strict=True)) == _kept([p[0] for p in pairs], [p[1] for p in pairs])


# Config loading.

KEYS = st.sampled_from(
    ["data", "tokenizer", "model", "train", "decode", "lr", "beam", "cell", "max_len", "seed", "x", "trian"]
)
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(ANY_CHAR, max_size=20),
)
VALUE = st.recursive(
    LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4)
)


def _check_config_error(exc: ConfigError, *sources: str) -> None:
    """One problem per line, each naming where it comes from."""
    lines = str(exc).splitlines()
    assert lines and all(line.startswith(sources) for line in lines)


@FUZZ
@given(st.dictionaries(KEYS | st.text(ANY_CHAR, max_size=8), VALUE, max_size=5))
def test_from_dict_gives_a_config_or_a_config_error(raw):
    try:
        cfg = from_dict(raw)
    except ConfigError as exc:
        _check_config_error(exc, "config: ")
        return
    assert isinstance(cfg, Config)
    assert from_dict(cfg.to_dict()) == cfg  # what validates, saves and reloads the same


@FUZZ
@given(st.one_of(st.text(ANY_CHAR, max_size=200), VALUE.map(lambda v: yaml.safe_dump(v, allow_unicode=True))))
def test_load_config_gives_a_config_or_a_config_error(text):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            _check_config_error(exc, str(path))
        else:
            assert from_dict(cfg.to_dict()) == cfg  # what loads is a config that validates again


@FUZZ
@given(
    st.lists(
        st.text(UNICODE, max_size=30) | st.sampled_from(["train.lr=1e-3", "model=", "a.b.c=1"]), max_size=4
    )
)
def test_overrides_give_a_config_or_a_config_error(items):
    try:
        cfg = load_config(None, items)
    except ConfigError as exc:
        _check_config_error(exc, "config: ", "--set ")
    else:
        assert from_dict(cfg.to_dict()) == cfg


# The translate API: Python, then HTTP.


def test_translate_returns_one_translation_per_input(run_dir):
    translator = Translator.load(run_dir)

    @FUZZ
    @given(st.lists(TEXT, max_size=6), st.integers(1, 4))
    def check(sentences, beam):
        outs = translator.translate(sentences, beam=beam)
        assert len(outs) == len(sentences)
        for out in outs:
            assert isinstance(out.text, str) and len(out.src_tokens) <= translator.max_src_len
            if out.attention is not None:
                assert tuple(out.attention.shape) == (len(out.tokens), len(out.src_tokens))

    check()


GOOD_TEXT = st.sampled_from(["the dog runs .", "a small cat sleeps .", "un chien"])


def _body(value) -> bytes:
    return json.dumps(value).encode()  # ensure_ascii: lone surrogates travel as \\udXXX escapes


def test_the_http_api_answers_200_404_413_or_422_and_never_500(run_dir):
    app = create_app([f"tiny={run_dir}"], max_chars=200)
    client = TestClient(app, raise_server_exceptions=False)
    headers = {"Content-Type": "application/json"}
    nearly_valid = st.fixed_dictionaries(  # mostly answered 200: the length check runs
        {"text": GOOD_TEXT, "model": st.just("tiny")},
        optional={
            "beam": st.integers(1, 10),
            "nbest": st.integers(1, 10),
            "models": st.lists(st.sampled_from(["tiny", "tiny", "../tiny"]), max_size=3),
            "hypothesis": st.integers(0, 9),
        },
    )
    anything = st.fixed_dictionaries(
        {},
        optional={
            "text": TEXT | GOOD_TEXT | LEAF,
            "beam": st.integers(-2, 12) | LEAF,
            "nbest": st.integers(-2, 12) | LEAF,
            "models": st.lists(st.sampled_from(["tiny", "../tiny", "x"]) | ANY_TEXT, max_size=3) | LEAF,
            "model": st.sampled_from(["tiny", "/etc/passwd"]) | ANY_TEXT | LEAF,
            "hypothesis": st.integers(-1, 12) | LEAF,
            "other": VALUE,
        },
    )
    too_large = st.just(_body({"text": "a" * 70_000}))  # over the 64 KiB limit: 413
    bodies = st.one_of(  # one_of draws each branch alike: nearly_valid twice is twice as likely
        nearly_valid.map(_body),
        nearly_valid.map(_body),
        anything.map(_body),
        VALUE.map(_body),
        st.binary(),
        too_large,
    )
    answered = []

    @settings(FUZZ, max_examples=100)
    @given(bodies, st.sampled_from(["/api/translate", "/api/explain"]))
    def check(body, path):
        response = client.post(path, content=body, headers=headers)
        assert response.status_code in (200, 404, 413, 422), response.text
        answer = response.json()
        assert str(run_dir) not in response.text
        answered.append((path, response.status_code))
        if response.status_code == 200 and path == "/api/translate":
            asked = json.loads(body).get("models")
            assert len(answer["results"]) == (1 if asked is None else len(dict.fromkeys(asked)))

    check()
    assert ("/api/translate", 200) in answered and ("/api/explain", 200) in answered
