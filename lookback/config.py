"""Configuration: a typed dataclass tree loaded from YAML.

This module is the single home of every default. A config file only names
what differs from these defaults; unknown keys, wrong types and values out
of range are all reported at once, each with its dotted key, before any work
starts. `--set train.lr=1e-3` style overrides are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A config problem; the message lists every problem found, one per line."""


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


@dataclass
class TrainConfig:
    run_dir: str = "runs/default"  # everything a run writes goes here
    seed: int = 1  # seeds initialisation, dropout and batch order
    max_tokens: int = 2000  # batch size in target tokens (padding included)
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


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Ranges checked after types: (dotted key, test, what was expected).
_RANGES = [
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
    ("train.max_tokens", lambda v: v >= 1, "an integer >= 1"),
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
    ("train.threads", lambda v: v >= 0, "an integer >= 0"),
    ("decode.beam", lambda v: v >= 1, "an integer >= 1"),
    ("decode.nbest", lambda v: v >= 1, "an integer >= 1"),
    ("decode.length_penalty", lambda v: v >= 0, "a number >= 0"),
    ("decode.max_ratio", lambda v: v > 0, "a number > 0"),
    ("decode.batch_size", lambda v: v >= 1, "an integer >= 1"),
]


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
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value, "a number"
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
        dotted = f"{prefix}.{key}" if prefix else str(key)
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
            problems.append(f"{dotted}: got {value!r}, expected {expected}")
    return obj


def _get(cfg: Config, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _cross_checks(cfg: Config) -> list[str]:
    """Problems that involve more than one key."""
    m, problems = cfg.model, []
    enc_out = m.hidden_size * (2 if m.bidirectional else 1)
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
            problems.append(f"{dotted}: got {value!r}, expected {expected}")
    if not problems:
        problems = _cross_checks(cfg)
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
    return cfg


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_override(item: str) -> tuple[list[str], Any]:
    """'train.lr=1e-3' -> (['train', 'lr'], 0.001); values are YAML scalars."""
    if "=" not in item:
        raise ConfigError(f"--set {item}: expected KEY=VALUE, for example train.lr=0.001")
    key, text = item.split("=", 1)
    try:
        value = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        value = text
    if isinstance(value, str) and _FLOAT.fullmatch(value):  # YAML 1.1 reads 1e-3 as a string
        value = float(value)
    return key.strip().split("."), value


def load_config(path: str | Path | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Read a YAML config (or start from defaults), apply --set overrides, validate."""
    raw: dict[str, Any] = {}
    source = "config"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
        try:
            raw = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f":{mark.line + 1}" if mark else ""
            raise ConfigError(f"{path}{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
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
