"""Configuration: a typed dataclass tree loaded from YAML.

This module is the single home of every default. A config file only names
what differs from these defaults; unknown keys, wrong types and values out
of range are all reported at once, each with its dotted key, before any work
starts. `--set train.lr=1e-3` style overrides are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-3, which YAML 1.1 leaves a string


class ConfigError(ValueError):
    """A config problem; the message lists every problem found, one per line."""


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name if it has none), for one-line errors."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


@dataclass
class DataConfig:
    src_lang: str = "en"  # source language code, the suffix of plain-text files
    tgt_lang: str = "fr"  # target language code
    train: str = "multi30k:train"  # corpus spec: multi30k:SPLIT, a .tsv file, or a path prefix
    valid: str = "multi30k:val"  # validation corpus spec
    test: str = "multi30k:test_2016_flickr"  # default test corpus for `lookback evaluate`
    multi30k_dir: str | None = None  # Multi30k files; else $LOOKBACK_MULTI30K, else download to cache
    max_len: int = 100  # training pairs longer than this (in tokens, either side) are skipped


@dataclass
class TokenizerConfig:
    kind: Literal["sentencepiece", "word"] = "sentencepiece"  # subwords, or Moses words (teaching)
    model_type: Literal["unigram", "bpe"] = "unigram"  # SentencePiece algorithm
    vocab_size: int = 8000  # pieces per vocabulary (word: most frequent words kept)
    joint: bool = True  # one vocabulary shared by source and target
    min_freq: int = 1  # word tokenizer: rarer words become <unk>


@dataclass
class ModelConfig:
    cell: Literal["rnn", "gru", "lstm"] = "gru"  # recurrent cell of encoder and decoder
    emb_size: int = 256  # embedding size, source and target
    hidden_size: int = 256  # encoder hidden size per direction
    dec_hidden_size: int = 256  # decoder hidden size (s)
    enc_layers: int = 1  # stacked encoder layers
    dec_layers: int = 1  # stacked decoder layers
    bidirectional: bool = True  # encoder reads both ways; h_i = [fwd_i; bwd_i]
    dropout: float = 0.3  # on embeddings, between layers and before the output layer
    attention: Literal["none", "dot", "general", "additive"] = "additive"  # score(s, h)
    attention_size: int = 256  # additive attention: size of W s + U h
    context: Literal["final", "mean"] = "final"  # attention none: c = final state, or mean of h
    attend_from: Literal["current", "previous"] = "current"  # query s_t (Luong) or s_{t-1} (Bahdanau)
    input_feeding: bool = False  # feed the previous attentional vector into the decoder RNN
    tie_embeddings: bool = False  # share target embeddings with the output layer

    @property
    def enc_out_size(self) -> int:
        """He, the size of each encoder state h_i and of the fixed context c: H x directions."""
        return self.hidden_size * (2 if self.bidirectional else 1)


@dataclass
class TrainConfig:
    run_dir: str = "runs/default"  # everything a run writes goes here
    seed: int = 1  # seeds initialisation, dropout and batch order
    max_tokens: int = 2000  # batch size in target tokens (padding included)
    accumulate: int = 1  # batches summed into one update, per process: a bigger batch, same memory
    nonfinite: Literal["skip", "stop"] = "skip"  # a NaN/inf loss: skip the update (counted), or stop
    max_steps: int = 0  # stop after this many updates (0: no limit)
    max_epochs: int = 30  # stop after this many passes over the data
    time_limit: float = 0.0  # stop after this many minutes of training (0: no limit)
    lr: float = 1e-3  # Adam learning rate
    clip: float = 1.0  # gradient norm clipping (0: off)
    label_smoothing: float = 0.0  # epsilon of the cross-entropy
    lr_factor: float = 0.5  # ReduceLROnPlateau: multiply lr by this ...
    lr_patience: int = 2  # ... after this many validations without a better BLEU
    min_lr: float = 1e-5  # never below this
    valid_every: int = 500  # validate every this many updates
    valid_sample: int = 3  # translations printed at each validation
    early_stopping: int = 8  # stop after this many validations without a better BLEU (0: off)
    log_every: int = 50  # write a metrics line every this many updates
    threads: int = 0  # torch CPU threads (0: all cores)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: the GPU when torch sees one
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # bf16/fp16: autocast the forward (fp16: GPU only)


@dataclass
class DecodeConfig:
    beam: int = 5  # beam size (1: greedy)
    nbest: int = 1  # hypotheses returned per sentence
    length_penalty: float = 1.0  # alpha of ((5 + len) / 6) ** alpha
    max_ratio: float = 2.0  # output at most max_ratio * source length + 5 tokens
    batch_size: int = 64  # sentences translated at once
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"  # bf16: faster on CPUs with AVX-512 BF16


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _nonempty(v: str) -> bool:
    return bool(v.strip())


# Ranges checked after types: (dotted key, test, what was expected).
_RANGES = [
    ("data.src_lang", _nonempty, "a non-empty string"),
    ("data.tgt_lang", _nonempty, "a non-empty string"),
    ("data.train", _nonempty, "a corpus spec (a non-empty string)"),
    ("data.valid", _nonempty, "a corpus spec (a non-empty string)"),
    ("data.test", _nonempty, "a corpus spec (a non-empty string)"),
    ("data.max_len", lambda v: v >= 1, "an integer >= 1"),
    ("tokenizer.vocab_size", lambda v: v >= 8, "an integer >= 8"),
    ("tokenizer.min_freq", lambda v: v >= 1, "an integer >= 1"),
    ("model.emb_size", lambda v: v >= 1, "an integer >= 1"),
    ("model.hidden_size", lambda v: v >= 1, "an integer >= 1"),
    ("model.dec_hidden_size", lambda v: v >= 1, "an integer >= 1"),
    ("model.enc_layers", lambda v: v >= 1, "an integer >= 1"),
    ("model.dec_layers", lambda v: v >= 1, "an integer >= 1"),
    ("model.attention_size", lambda v: v >= 1, "an integer >= 1"),
    ("model.dropout", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)"),
    ("train.run_dir", _nonempty, "a directory (a non-empty string)"),
    ("train.seed", lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)"),  # what every RNG accepts
    ("train.max_tokens", lambda v: v >= 1, "an integer >= 1"),
    ("train.accumulate", lambda v: v >= 1, "an integer >= 1"),
    ("train.max_steps", lambda v: v >= 0, "an integer >= 0"),
    ("train.max_epochs", lambda v: v >= 1, "an integer >= 1"),
    ("train.time_limit", lambda v: v >= 0, "a number >= 0"),
    ("train.lr", lambda v: v > 0, "a number > 0"),
    ("train.clip", lambda v: v >= 0, "a number >= 0"),
    ("train.label_smoothing", lambda v: 0.0 <= v < 1.0, "a number in [0, 1)"),
    ("train.lr_factor", lambda v: 0.0 < v < 1.0, "a number in (0, 1)"),
    ("train.lr_patience", lambda v: v >= 0, "an integer >= 0"),
    ("train.min_lr", lambda v: v >= 0, "a number >= 0"),
    ("train.valid_every", lambda v: v >= 1, "an integer >= 1"),
    ("train.valid_sample", lambda v: v >= 0, "an integer >= 0"),
    ("train.early_stopping", lambda v: v >= 0, "an integer >= 0"),
    ("train.log_every", lambda v: v >= 1, "an integer >= 1"),
    ("train.threads", lambda v: 0 <= v <= 1024, "an integer in [0, 1024]"),  # torch overflows above 2**31
    ("decode.beam", lambda v: v >= 1, "an integer >= 1"),
    ("decode.nbest", lambda v: v >= 1, "an integer >= 1"),
    ("decode.length_penalty", lambda v: v >= 0, "a number >= 0"),
    ("decode.max_ratio", lambda v: v > 0, "a number > 0"),
    ("decode.batch_size", lambda v: v >= 1, "an integer >= 1"),
]


def _show(value: Any, limit: int = 60) -> str:
    """repr(value) cut to `limit` characters, so that each problem stays one short line."""
    try:
        text = repr(value)
    except ValueError:  # Python refuses to print an int of over 4,300 digits
        text = f"<an integer of {value.bit_length()} bits>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite(value: Any) -> float | None:
    """`value` as a finite float; None for bools, strings, nan, inf and ints too large for a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _check_type(value: Any, hint: Any) -> tuple[bool, Any, str]:
    """Return (ok, converted value, expected) for one leaf value against its type hint."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        return value in choices, value, "one of " + ", ".join(map(str, choices))
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return True, None, ""
        return _check_type(value, args[0])
    if hint is bool:
        return isinstance(value, bool), value, "true or false"
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value, "an integer"
    if hint is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):  # YAML 1.1 reads 1e-3 as a string
            value = float(value)
        number = _finite(value)
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        expected = "a finite number" if numeric else "a number"  # nan, inf, 10**400
        return number is not None, value if number is None else number, expected
    if hint is str:
        return isinstance(value, str), value, "a string"
    raise TypeError(f"unsupported config type {hint}")


def _build(cls: type, raw: Any, prefix: str, problems: list[str]) -> Any:
    """Build dataclass `cls` from a mapping, appending problems instead of raising."""
    obj = cls()
    if raw is None:
        return obj
    if not isinstance(raw, dict):
        problems.append(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
        return obj
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key, value in raw.items():
        shown = key if isinstance(key, str) and key.isprintable() else _show(key)
        dotted = f"{prefix}.{shown}" if prefix else shown
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(names)})"
            problems.append(f"{dotted}: unknown key{hint}")
            continue
        if dataclasses.is_dataclass(hints[key]):
            setattr(obj, key, _build(hints[key], value, dotted, problems))
            continue
        ok, converted, expected = _check_type(value, hints[key])
        if ok:
            setattr(obj, key, converted)
        else:
            problems.append(f"{dotted}: got {_show(value)}, expected {expected}")
    return obj


def _get(cfg: Config, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _cross_checks(cfg: Config) -> list[str]:
    """Problems that involve more than one key."""
    m, problems = cfg.model, []
    enc_out = m.enc_out_size
    if m.attention == "dot" and enc_out != m.dec_hidden_size:
        problems.append(
            f"model.attention: dot scores need s and h of one size, but the decoder has "
            f"{m.dec_hidden_size} and the encoder outputs {enc_out}; set model.dec_hidden_size="
            f"{enc_out} or use 'general'"
        )
    if m.tie_embeddings and m.emb_size != m.dec_hidden_size:
        problems.append(
            f"model.tie_embeddings: needs model.emb_size ({m.emb_size}) == "
            f"model.dec_hidden_size ({m.dec_hidden_size})"
        )
    if cfg.decode.nbest > cfg.decode.beam:
        problems.append(f"decode.nbest: {cfg.decode.nbest} is more than decode.beam ({cfg.decode.beam})")
    return problems


def from_dict(raw: Any, source: str = "config") -> Config:
    """Build and validate a Config; raise ConfigError listing every problem in `source`."""
    problems: list[str] = []
    cfg = _build(Config, raw, "", problems)
    for dotted, test, expected in _RANGES:
        value = _get(cfg, dotted)
        if not any(p.startswith(dotted + ":") for p in problems) and not test(value):
            problems.append(f"{dotted}: got {_show(value)}, expected {expected}")
    if not problems:
        problems = _cross_checks(cfg)
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
    return cfg


def parse_override(item: str) -> tuple[list[str], Any]:
    """'train.lr=0.001' -> (['train', 'lr'], 0.001); values are YAML scalars ('1e-3' stays a string)."""
    if "=" not in item:
        shown = item if item.isprintable() else _show(item)  # one line, whatever was typed
        raise ConfigError(f"--set {shown}: expected KEY=VALUE, for example train.lr=0.001")
    key, text = item.split("=", 1)
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        value = text
    return key.strip().split("."), value


class _DuplicateKey(yaml.YAMLError):
    """A key given twice in one YAML mapping, at `line` (from 1)."""

    def __init__(self, key: Any, line: int):
        super().__init__(f"key {key!r} is given twice in one mapping")
        self.key, self.line = key, line


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping: PyYAML keeps the last silently."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *base' may override keys
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # SafeLoader reports an unhashable key itself
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: str | Path) -> Any:
    """The YAML document in `path`; every way of failing is a one-line ConfigError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {exc.object[exc.start]:#04x})") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc}; delete one of them") from None
    except yaml.YAMLError as exc:
        mark, where = getattr(exc, "problem_mark", None), ""
        if mark is not None:
            where = f":{mark.line + 1}"
        elif getattr(exc, "position", None) is not None:  # a ReaderError: a character YAML refuses
            line = text.count("\n", 0, exc.position) + 1
            where = f":{line}"
        reason = str(getattr(exc, "problem", None) or exc).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({reason})") from None
    except RecursionError:  # thousands of nested brackets
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    except ValueError as exc:  # an integer of over 4,300 digits
        raise ConfigError(f"{path}: not valid YAML ({str(exc)[:100]})") from None


def load_config(path: str | Path | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Read a YAML config (or start from defaults), apply --set overrides, validate."""
    raw: Any = {}
    source = "config"
    if path is not None:
        source = str(path)
        raw = _read_yaml(path)
        if raw is None:  # an empty file: all defaults
            raw = {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    for item in overrides:
        keys, value = parse_override(item)
        node = raw
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
    return from_dict(raw, source)


def save_config(cfg: Config, path: Path) -> None:
    path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
