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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from .errors import ConfigError
from .yamlfile import read_yaml

_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-3, which YAML 1.1 leaves a string


def ranged(default: Any, test: Callable[[Any], bool], expected: str | Callable[[], str]) -> Any:
    """A field whose value, once of the right type, must pass `test`; else a problem says `expected`."""
    return field(default=default, metadata={"check": (test, expected)})


# The names some keys accept, each from the registry of the module that defines them:
# model/attention.py adds "model.attention" (its SCORES, with "none") and "model.attention_init"
# (what its scores declare), so that a registered score is a valid config value. The package
# imports that module before any config is read.
NAMES: dict[str, Callable[[], list[str]]] = {}
# Checks of several keys that belong to another module, run with _cross_checks: model/attention.py
# adds the one that holds model.* to what the chosen score declares it needs.
CHECKS: list[Callable[[Config], list[str]]] = []


def named(default: str, key: str, more: str = "") -> Any:
    """A string that must be one of the names registered for `key` in NAMES; `more` says how
    another name gets registered."""
    names = lambda: NAMES[key]()  # noqa: E731  (read when checked: registrations come later)
    return ranged(default, lambda v: v in names(), lambda: "one of " + ", ".join(names()) + more)


def at_least(default: int | float, lo: int) -> Any:
    """An integer (or a number, by the default's type) >= lo."""
    kind = "an integer" if isinstance(default, int) else "a number"
    return ranged(default, lambda v: v >= lo, f"{kind} >= {lo}")


def nonempty(default: str, what: str = "") -> Any:
    """A string with more than white space; `what` names what it is."""
    expected = f"{what} (a non-empty string)" if what else "a non-empty string"
    return ranged(default, lambda v: bool(v.strip()), expected)


def positive_ints(*default: int) -> Any:
    """A list of integers >= 1, `default` unless given."""
    check = (lambda v: all(k >= 1 for k in v), "a list of integers >= 1")
    return field(default_factory=lambda: list(default), metadata={"check": check})


def required(kind: type = str, check: tuple[Callable[[Any], bool], str] | None = None) -> Any:
    """A field that must be given, and not empty; `check` as in `ranged`."""
    return field(default_factory=kind, metadata={"required": True, "check": check})


_POSITIVE = (lambda v: v > 0, "a number > 0")
_FRACTION = (lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
_UNIT = (lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")
_OPEN_FRACTION = (lambda v: 0.0 < v < 1.0, "a number in (0, 1)")
_SEED = (lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)")  # what every RNG accepts
MAX_THREADS = 1024  # OpenMP fails to start some tens of thousands, and torch overflows above 2**31
_THREADS = (lambda v: 0 <= v <= MAX_THREADS, f"an integer in [0, {MAX_THREADS}]")
_CORPUS = "a corpus spec"


@dataclass
class DataConfig:
    src_lang: str = nonempty("en")  # source language code, the suffix of plain-text files
    tgt_lang: str = nonempty("fr")  # target language code
    train: str = nonempty("multi30k:train", _CORPUS)  # multi30k:SPLIT, a .tsv file, or a path prefix
    valid: str = nonempty("multi30k:val", _CORPUS)  # validation corpus spec
    test: str = nonempty("multi30k:test_2016_flickr", _CORPUS)  # default test corpus for `lookback evaluate`
    multi30k_dir: str | None = None  # Multi30k files; else $LOOKBACK_MULTI30K, else download to cache
    max_len: int = at_least(100, 1)  # training pairs longer than this (in tokens, either side) are skipped
    src_eos: bool = True  # end every source with </s>, so that attention has an end to find
    store: bool = False  # tokenise the training corpus once into an on-disk store and stream it (store.py)
    cache_dir: str | None = (
        None  # where stores go; else $LOOKBACK_CACHE/stores, else ~/.cache/lookback/stores
    )


@dataclass
class TokenizerConfig:
    kind: Literal["sentencepiece", "word"] = "sentencepiece"  # subwords, or Moses words (teaching)
    model_type: Literal["unigram", "bpe"] = "unigram"  # SentencePiece algorithm
    vocab_size: int = at_least(8000, 8)  # pieces per vocabulary (word: most frequent words kept)
    joint: bool = True  # one vocabulary shared by source and target
    min_freq: int = at_least(1, 1)  # word tokenizer: rarer words become <unk>
    sample: int = at_least(0, 0)  # train on this many pairs drawn from the corpus (0: all); for large corpora


@dataclass
class ModelConfig:
    encoder: Literal["rnn", "transformer"] = "rnn"  # reads the source: an RNN, or attention only
    decoder: Literal["rnn", "transformer"] = "rnn"  # generates: an RNN that attends, or attention only
    cell: Literal["rnn", "gru", "lstm"] = "gru"  # recurrent cell of an RNN encoder and decoder
    emb_size: int = at_least(256, 1)  # embedding size, source and target
    hidden_size: int = at_least(256, 1)  # encoder hidden size per direction (transformer: its d)
    dec_hidden_size: int = at_least(256, 1)  # decoder hidden size (s; transformer: its d)
    enc_layers: int = at_least(1, 1)  # stacked encoder layers
    dec_layers: int = at_least(1, 1)  # stacked decoder layers
    bidirectional: bool = True  # an RNN encoder reads both ways; h_i = [fwd_i; bwd_i]
    ff_size: int = at_least(1024, 1)  # transformer: inner size of each layer's feed-forward W_1
    norm_position: Literal["pre", "post"] = "pre"  # transformer: LayerNorm before each sub-layer, or after
    dropout: float = ranged(0.3, *_FRACTION)  # on embeddings, between layers and before the output layer
    word_dropout: float = ranged(0.0, *_FRACTION)  # zero whole source and target words in training
    attention: str = named(  # score(s, h): none, or a name in attention.SCORES
        "additive",
        "model.attention",
        " (a score of your own: lookback.register_score, or lookback --plugin FILE)",
    )
    normalizer: Literal["softmax", "sparsemax", "entmax15"] = "softmax"  # scores e -> weights alpha
    attention_size: int = at_least(256, 1)  # additive: size of W s + U h; multi-head: of all heads' q, k
    heads: int = at_least(1, 1)  # scaled_dot and transformers: attention heads, attention_size / heads wide
    window: Literal["global", "local_m", "local_p"] = "global"  # attend to all of h, or a window (local.py)
    window_size: int = at_least(10, 1)  # local: half-width D, 2D + 1 states per step (Luong: 10)
    coverage: bool = False  # additive: the running sum of past alphas joins the score (See et al. 2017)
    readout: Literal["luong", "bahdanau"] = "luong"  # ~s_t = tanh(W_c [s; c]) or Bahdanau's maxout
    context: Literal["final", "mean"] = "final"  # c = an RNN's final state, or mean of h (transformer: mean)
    attend_from: Literal["current", "previous"] = "current"  # query s_t (Luong) or s_{t-1} (Bahdanau)
    input_feeding: bool = False  # feed the previous attentional vector into the decoder RNN
    tie_embeddings: bool = False  # share target embeddings with the output layer
    layer_norm: bool = False  # LayerNorm on h_i and inside the readout, outside the RNN cells
    norm_gain: float | None = None  # the norm's first gain on h_i (None: the score's; dot, general: He^-0.5)
    # the layers' own, or one a score declares (Score.inits): additive's bahdanau, W, U ~ N(0, 0.001^2), v = 0
    attention_init: str = named("torch", "model.attention_init")

    @property
    def enc_out_size(self) -> int:
        """He, the size of each encoder state h_i and of the fixed context c: H x directions
        (a transformer encoder's d: hidden_size)."""
        if self.encoder == "transformer":
            return self.hidden_size
        return self.hidden_size * (2 if self.bidirectional else 1)


@dataclass
class TrainConfig:
    run_dir: str = nonempty("runs/default", "a directory")  # everything a run writes goes here
    seed: int = ranged(1, *_SEED)  # seeds initialisation, dropout and batch order
    max_tokens: int = at_least(2000, 1)  # batch size in target tokens (padding included)
    accumulate: int = at_least(1, 1)  # batches summed per update, per process: a bigger batch, same memory
    nonfinite: Literal["skip", "stop"] = "skip"  # a NaN/inf loss: skip the update (counted), or stop
    max_steps: int = at_least(0, 0)  # stop after this many updates (0: no limit)
    max_epochs: int = at_least(30, 1)  # stop after this many passes over the data
    time_limit: float = at_least(0.0, 0)  # stop after this many minutes of training (0: no limit)
    lr: float = ranged(1e-3, *_POSITIVE)  # Adam learning rate
    attention_lr: float | None = None  # the score's own parameters at lr x this (None: the score's own)
    schedule: Literal["plateau", "constant", "inverse_sqrt", "cosine"] = "plateau"  # lr over training
    warmup: int = at_least(0, 0)  # updates of linear warm-up to lr (0: none)
    clip: float = at_least(1.0, 0)  # gradient norm clipping (0: off)
    label_smoothing: float = ranged(0.0, *_FRACTION)  # epsilon of the cross-entropy
    guide: float = at_least(0.0, 0)  # guided alignment toward the diagonal: weight at update 1 (0: off)
    guide_updates: int = at_least(1000, 1)  # ... falling linearly to 0 at this update (guided.py)
    curriculum: list[int] = positive_ints()  # epoch i: targets of <= curriculum[i] pieces only (batch.py)
    coverage_loss: float = at_least(0.0, 0)  # weight of sum_t sum_i min(alpha, coverage) (coverage.py)
    coverage_start: int = at_least(0, 0)  # ... from this update on (See et al. 2017: only at the end)
    teacher_forcing: float = ranged(1.0, *_UNIT)  # P(feeding the true y_{t-1}); with a decay, its floor
    sampling_decay: Literal["none", "linear", "exponential", "inverse_sigmoid"] = "none"  # scheduled sampling
    sampling_k: float = ranged(5000.0, *_POSITIVE)  # the decay's k (sampling.py; Bengio et al. 2015)
    stepwise: bool = False  # decoder one step at a time, as search: scheduled sampling's exact form
    lr_factor: float = ranged(0.5, *_OPEN_FRACTION)  # ReduceLROnPlateau: multiply lr by this ...
    lr_patience: int = at_least(2, 0)  # ... after this many validations without a better BLEU
    min_lr: float = at_least(1e-5, 0)  # never below this
    valid_every: int = at_least(500, 1)  # validate every this many updates
    valid_minutes: float = at_least(0.0, 0)  # ... and at each multiple of this many training minutes (0: off)
    valid_sample: int = at_least(3, 0)  # translations printed at each validation
    probe: int = at_least(32, 0)  # validation pairs whose attention entropy and diagonal weight are logged
    probe_every: int = at_least(0, 0)  # also probe attention every N updates from 0 (0: validations only)
    keep_checkpoints: int = at_least(0, 0)  # keep the last N validations' weights (lookback average)
    ema: float = ranged(0.0, *_FRACTION)  # after each update ema <- this ema + (1 - this) w (0: off)
    early_stopping: int = at_least(8, 0)  # stop after this many validations without a better BLEU (0: off)
    log_every: int = at_least(50, 1)  # write a metrics line every this many updates
    threads: int = ranged(0, *_THREADS)  # torch CPU threads (0: all cores)
    compile: bool = False  # torch.compile the loss, or a stepping decoder's step (no gain: performance.md)
    bptt: Literal["auto", "autograd"] = "auto"  # auto: model/bptt.py's written backward where it covers
    fused_adam: bool = True  # Adam in one fused kernel (its step 3-4x faster on 2 CPU cores: performance.md)
    tensorboard: bool = False  # also log metrics to run_dir/tensorboard (pip install 'lookback[tensorboard]')
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: the GPU when torch sees one
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # autocast; auto: bf16 where native


@dataclass
class DecodeConfig:
    beam: int = at_least(5, 1)  # beam size (1: greedy)
    nbest: int = at_least(1, 1)  # hypotheses returned per sentence
    length_penalty: float = at_least(1.0, 0)  # beam score: log P / ((5 + len) / 6) ** this (0: none)
    max_ratio: float = ranged(2.0, *_POSITIVE)  # output at most max_ratio * source length + 5 tokens
    batch_size: int = at_least(64, 1)  # sentences translated at once
    hard_attention: int = at_least(0, 0)  # keep each step's k largest weights, renormalised (0: all)
    coverage_penalty: float = at_least(0.0, 0)  # beam score + beta sum_i log min(sum_t alpha, 1) (GNMT)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # translating (validations: train.precision)


def search_width(beam: int, nbest: int) -> int:
    """The beam that returns `nbest` hypotheses: raised to nbest, the one policy everywhere."""
    return max(beam, nbest)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    if hint is Any:
        return True, value, "anything"
    if origin is Literal:
        choices = typing.get_args(hint)
        return value in choices, value, "one of " + ", ".join(map(str, choices))
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return True, None, ""
        results = [_check_type(value, a) for a in typing.get_args(hint) if a is not type(None)]
        return next((r for r in results if r[0]), results[0])  # the first type that fits
    if origin is dict:
        return isinstance(value, dict), value, "a mapping"
    if origin is list:  # list[str], list[int]
        (item,) = typing.get_args(hint)
        ok = isinstance(value, list) and all(_check_type(v, item)[0] for v in value)
        return ok, value, f"a list of {'strings' if item is str else 'integers'}"
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


def _value(hint: Any, value: Any, dotted: str, problems: list[str]) -> Any:
    """`value` checked against `hint`: a dataclass built, a mapping checked entry by entry, a leaf by type."""
    args = typing.get_args(hint)
    cls = args[0] if len(args) == 2 and args[1] is type(None) else hint  # X of `X | None`
    if dataclasses.is_dataclass(cls):
        return None if value is None and cls is not hint else _build(cls, value, dotted, problems)
    if typing.get_origin(hint) is dict and isinstance(value, dict):
        item = typing.get_args(hint)[1]
        return {str(k): _value(item, v, f"{dotted}.{_shown(k)}", problems) for k, v in value.items()}
    ok, converted, expected = _check_type(value, hint)
    if not ok:
        problems.append(f"{dotted}: got {_show(value)}, expected {expected}")
    return converted


def _shown(key: Any) -> str:
    return key if isinstance(key, str) and key.isprintable() else _show(key)


def _build(cls: type, raw: Any, prefix: str, problems: list[str]) -> Any:
    """Build dataclass `cls` from a mapping, appending problems instead of raising."""
    obj = cls()
    if raw is not None and not isinstance(raw, dict):
        problems.append(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
        return obj
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    for key, value in (raw or {}).items():
        dotted = f"{prefix}.{_shown(key)}" if prefix else _shown(key)
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (valid: {', '.join(names)})"
            problems.append(f"{dotted}: unknown key{hint}")
        else:
            setattr(obj, key, _value(hints[key], value, dotted, problems))
    for f in fields:  # a required key: given and not empty
        if f.metadata.get("required") and not (raw or {}).get(f.name):
            problems.append(f"{prefix + '.' if prefix else ''}{f.name}: required, but missing or empty")
    return obj


def _check_ranges(obj: Any, prefix: str, problems: list[str]) -> None:
    """Append the range problems of `obj`'s fields in field order, skipping keys with a problem already."""
    for f in dataclasses.fields(obj):
        value, dotted = getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value):
            _check_ranges(value, dotted, problems)
        elif f.metadata.get("check") and not any(p.startswith(dotted + ":") for p in problems):
            test, expected = f.metadata["check"]
            if not test(value):
                expected = expected() if callable(expected) else expected
                problems.append(f"{dotted}: got {_show(value)}, expected {expected}")


def build(cls: type, raw: Any, source: str = "config", cross: Callable | None = None) -> Any:
    """Build and validate dataclass `cls` from a mapping; raise ConfigError listing every problem in
    `source`, one per line. `cross` (problems that involve several keys) runs once the keys are fine."""
    problems: list[str] = []
    obj = _build(cls, raw, "", problems)
    _check_ranges(obj, "", problems)
    if not problems and cross is not None:
        problems = cross(obj)
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems))
    return obj


def _cross_checks(cfg: Config) -> list[str]:
    """Problems that involve more than one key."""
    m, problems = cfg.model, []
    if m.norm_gain is not None and not m.layer_norm:
        problems.append("model.norm_gain: is the gain of model.layer_norm, which is off")
    if cfg.train.coverage_start and not cfg.train.coverage_loss:
        problems.append("train.coverage_start: starts train.coverage_loss, which is 0")
    if m.attention == "none":
        for key, on in (
            ("model.window", m.window != "global"),
            ("model.coverage", m.coverage),
            ("train.coverage_loss", cfg.train.coverage_loss > 0),
            ("decode.coverage_penalty", cfg.decode.coverage_penalty > 0),
        ):
            if on:
                problems.append(f"{key}: needs attention weights, but model.attention is 'none'")
    t = cfg.train
    if t.sampling_decay != "none" and t.teacher_forcing == 1:
        problems.append(
            f"train.sampling_decay: {t.sampling_decay} decays to train.teacher_forcing, which is 1 (no "
            "sampling ever); set its floor below 1, e.g. train.teacher_forcing=0.5"
        )
    if t.sampling_decay == "exponential" and not t.sampling_k < 1:
        problems.append(
            f"train.sampling_k: exponential decay k^i needs 0 < k < 1 (e.g. 0.9995), not {t.sampling_k}"
        )
    if t.sampling_decay == "inverse_sigmoid" and t.sampling_k < 1:
        problems.append(
            f"train.sampling_k: inverse sigmoid k / (k + exp(i / k)) needs k >= 1, not {t.sampling_k}"
        )
    if m.tie_embeddings and m.emb_size != m.dec_hidden_size:
        problems.append(
            f"model.tie_embeddings: needs model.emb_size ({m.emb_size}) == "
            f"model.dec_hidden_size ({m.dec_hidden_size})"
        )
    if t.schedule == "cosine" and (t.max_steps <= t.warmup if t.max_steps else not t.time_limit):
        problems.append(
            "train.schedule: cosine decays until train.max_steps or, without it, train.time_limit, "
            f"so it needs max_steps > warmup ({t.warmup}) or a time limit"
        )
    if cfg.decode.nbest > cfg.decode.beam:
        problems.append(f"decode.nbest: {cfg.decode.nbest} is more than decode.beam ({cfg.decode.beam})")
    for check in CHECKS:  # the registered ones: what the chosen score needs (model/attention.py)
        problems += check(cfg)
    return problems


def from_dict(raw: Any, source: str = "config") -> Config:
    """Build and validate a Config; raise ConfigError listing every problem in `source`."""
    return build(Config, raw, source, _cross_checks)


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


SHIPPED = Path(__file__).parent / "configs"  # the configs that ship in the wheel (package data)


def shipped_configs() -> list[str]:
    """The names of the shipped configs ('quickstart', 'study/reverse', ...), for `lookback configs`."""
    return sorted(p.relative_to(SHIPPED).with_suffix("").as_posix() for p in SHIPPED.rglob("*.yaml"))


def find_config(name: str | Path) -> Path:
    """A config file by its path, else a shipped config by its name.

    `quickstart`, `quickstart.yaml` and `configs/quickstart.yaml` all name the shipped main job, so
    the repository's commands work from any directory after a plain `pip install`; a file that
    exists is always read first.
    """
    path = Path(name)
    if path.is_file():
        return path
    stem = path.as_posix().removeprefix("configs/").removesuffix(".yaml")
    if (SHIPPED / f"{stem}.yaml").is_file():
        return SHIPPED / f"{stem}.yaml"
    if path.is_dir():
        raise ConfigError(f"{name}: a directory, not a config file (a YAML file or a shipped config's name)")
    close = difflib.get_close_matches(stem, shipped_configs(), n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    shipped = f"nor a shipped config ({hint}lookback configs lists them)"
    raise ConfigError(f"{name}: no such config file, {shipped}")


def load_config(path: str | Path | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Read a YAML config (a file, or a shipped config by name: find_config), or start from the
    defaults; apply --set overrides, validate."""
    raw: Any = {}
    source = "config"
    if path is not None:
        path = find_config(path)
        source = str(path)
        raw = read_yaml(path)
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
