"""The benchmark configuration: one set of sizes for every system, and its named variants.

Multi30k English -> French; joint SentencePiece unigram, 8,000 pieces;
embeddings 256, bidirectional GRU encoder 256 per direction, GRU decoder
256, additive (Bahdanau) attention from the new decoder state s_t with
bridge initialisation s_0 = tanh(W_b c); dropout 0.3; Adam 1e-3, gradient
norm clipped at 1.0, loss averaged over target tokens; batches of 80
sentences (bench/common.py says why sentences); fp32. The named
configurations differ only in input feeding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SRC_LANG, TGT_LANG = "en", "fr"
TEST_SET = "test_2016_flickr"

TOKENIZER = {"kind": "sentencepiece", "model_type": "unigram", "vocab_size": 8000, "joint": True}

MODEL = {
    "cell": "gru",
    "emb_size": 256,
    "hidden_size": 256,  # per direction
    "dec_hidden_size": 256,
    "enc_layers": 1,
    "dec_layers": 1,
    "bidirectional": True,
    "dropout": 0.3,
    "attention": "additive",
    "attention_size": 256,
    "attend_from": "current",  # Joey's RecurrentDecoder attends from the new state s_t
}

TRAIN = {
    "batch_sentences": 80,  # the peer file's batch
    "lr": 1e-3,
    "clip": 1.0,
    "seed": 1,
    "max_len": 100,  # training pairs longer than this (SentencePiece pieces) are left out
}

DECODE = {"batch_size": 64, "beams": [1, 5], "length_penalty": 1.0}

# Joey NMT's training recipes. "same": the like-for-like system "joey", lookback's optimiser
# setting (Adam 1e-3, constant) and the same batches. `python -m bench headline --joey-best NAME
# [--joey-set KEY=VALUE]` adds the system "joey_best", Joey trained by the recipe NAME:
# "peer", the peer file's run (../shared/peers/joeynmt.md): Adam 1e-3, 80 sentences, Joey's
# plateau scheduler with its defaults (factor 0.1, patience 10); "iwslt", Joey's own recurrent
# recipe (its configs/iwslt14_deen_bpe.yaml): Adam 2e-4, 80 sentences, plateau with factor 0.7,
# patience 8. Joey steps its plateau scheduler after each validation on its early-stopping
# metric; here that is the harness's validation (every 2 training minutes) and its greedy BLEU
# ("early_stopping_metric: bleu", so mode max).
JOEY_RECIPES: dict[str, dict[str, Any]] = {
    "same": {"lr": TRAIN["lr"], "batch_sentences": TRAIN["batch_sentences"], "schedule": "constant"},
    "peer": {
        "lr": 1e-3,
        "batch_sentences": 80,
        "schedule": "plateau",
        "decrease_factor": 0.1,
        "patience": 10,
    },
    "iwslt": {
        "lr": 2e-4,
        "batch_sentences": 80,
        "schedule": "plateau",
        "decrease_factor": 0.7,
        "patience": 8,
    },
    # Joey's Transformer for small data (its configs/iwslt14_deen_sp.yaml): pre-norm layers,
    # Xavier-uniform weights, zero biases, scaled embeddings tied across source, target and
    # output (one joint vocabulary), dropout 0.1, label smoothing 0.1, AdamW, peak 2e-4 after a
    # linear warm-up of 4,000 updates, then 1/sqrt(step) (Joey's warmupinversesquareroot,
    # stepped every update). Sized to lookback's attention-only config (6.74M parameters): d 256
    # with 4 heads, 3 + 3 layers as Joey's configs/transformer_small.yaml, a feed-forward of 3 d
    # (between its small config's 2 d and IWSLT's 4 d) so that the whole is 6.8M; batches of 80
    # sentences (about 1,100 target tokens) where IWSLT takes 4 x 8,192 tokens, about 30 times as many
    # per update, which a 2-core CPU would make only a few dozen of in 12 minutes.
    "transformer": {
        "arch": "transformer",
        "lr": 2e-4,
        "batch_sentences": 80,
        "schedule": "warmupinversesquareroot",
        "warmup": 4000,
        "label_smoothing": 0.1,
        "layers": 3,
        "heads": 4,
        "d_model": 256,
        "ff_size": 768,
        "dropout": 0.1,
    },
}
# normalization: what Joey divides the summed loss by before the gradient clip, "tokens" (the
# harness's choice: lookback's mean over target tokens) or "batch" (Joey's default: sentences);
# hidden_dropout: dropout before Joey's attentional layer (the harness's MODEL dropout; Joey's
# default 0). Neither is stated in the peer file.
JOEY_KEYS = {
    "lr": float,
    "batch_sentences": int,
    "schedule": str,
    "decrease_factor": float,
    "patience": int,
    "normalization": str,
    "hidden_dropout": float,
    "warmup": int,
    "layers": int,
}
SCHEDULES = ("constant", "plateau", "warmupinversesquareroot")
NORMALIZATIONS = ("tokens", "batch")
JOEY_DEFAULTS = {
    "decrease_factor": 0.1,
    "patience": 10,
    "normalization": "tokens",
    "hidden_dropout": MODEL["dropout"],
    "arch": "recurrent",  # the bench's model (MODEL); "transformer": the recipe's own
    "warmup": 0,  # updates of linear warm-up (warmupinversesquareroot only)
    "label_smoothing": 0.0,
}


def joey_recipe(name: str, overrides: list[str] = ()) -> dict[str, Any]:
    """A named Joey recipe with `KEY=VALUE` overrides (--joey-set); ValueError names a bad one."""
    if name not in JOEY_RECIPES:
        raise ValueError(f"--joey-best: {name!r} is none of {', '.join(JOEY_RECIPES)}")
    recipe = {**JOEY_DEFAULTS, **JOEY_RECIPES[name]}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or key not in JOEY_KEYS:
            raise ValueError(
                f"--joey-set {item!r}: expected KEY=VALUE with KEY one of {', '.join(JOEY_KEYS)}"
            )
        try:
            recipe[key] = JOEY_KEYS[key](value)
        except ValueError:
            kind = "a whole number" if JOEY_KEYS[key] is int else "a number"
            raise ValueError(f"--joey-set {item!r}: {value!r} is not {kind}") from None
    if recipe["schedule"] not in SCHEDULES:
        raise ValueError(f"--joey-set schedule={recipe['schedule']}: expected one of {', '.join(SCHEDULES)}")
    if recipe["lr"] <= 0 or recipe["batch_sentences"] < 1 or recipe["patience"] < 0:
        raise ValueError(
            f"--joey-set: lr must be positive, batch_sentences at least 1, patience at least 0: {recipe}"
        )
    if recipe["normalization"] not in NORMALIZATIONS:
        raise ValueError(
            f"--joey-set normalization={recipe['normalization']}: expected one of {', '.join(NORMALIZATIONS)}"
        )
    if not 0 <= recipe["hidden_dropout"] < 1:
        raise ValueError(f"--joey-set hidden_dropout={recipe['hidden_dropout']}: must lie in [0, 1)")
    if recipe["schedule"] == "warmupinversesquareroot" and recipe["warmup"] < 1:
        raise ValueError(f"--joey-set warmup={recipe['warmup']}: warmupinversesquareroot needs at least 1")
    if recipe["arch"] != "transformer" and "layers" in recipe:
        raise ValueError("--joey-set layers: only a transformer recipe has it")
    if not 0 < recipe["decrease_factor"] < 1:
        raise ValueError(f"--joey-set decrease_factor={recipe['decrease_factor']}: must lie between 0 and 1")
    recipe["name"] = name
    return recipe


# name -> what differs from MODEL
CONFIGS: dict[str, dict[str, Any]] = {
    "feed": {"input_feeding": True},  # Joey's default and the peer file's setup
    "nofeed": {"input_feeding": False},
}

# The full run and the --quick smoke run.
# validate_every_s: seconds of training between validations (greedy BLEU on VALID_SET)
FULL = {"budget_s": 30 * 60, "warmup_steps": 20, "test_limit": 0, "validate_every_s": 120}
QUICK = {"budget_s": 30, "warmup_steps": 3, "test_limit": 100, "validate_every_s": 10}
VALID_SET = "val"  # all 1,014 pairs: the time-to-quality curve
QUALITY_LEVELS = (20.0, 40.0, 50.0)  # validation BLEU levels whose training minutes are reported


# `python -m bench headline --recipe [CONFIG]` adds a third system, "recipe": lookback trained as its own
# config file says (model, learning rate and schedule, batches of max_tokens with length
# bucketing), on the same data, tokenizer and clock, against the same Joey run.
RECIPE_SYSTEM = "recipe"
JOEY_BEST = (
    "joey_best"  # python -m bench headline --joey-best RECIPE: Joey with its own recipe, a fourth system
)
RECIPE_DEFAULT = Path(__file__).resolve().parent.parent / "configs" / "multi30k_en_fr_additive.yaml"
# what the recipe takes from train: (run_dir, limits, validation and precision stay the bench's)
RECIPE_TRAIN_KEYS = (
    "seed", "max_tokens", "accumulate", "lr", "schedule", "warmup", "clip", "label_smoothing",
    "guide", "guide_updates", "lr_factor", "lr_patience", "min_lr",
)  # fmt: skip


def recipe_settings(path: str | Path, minutes: float | None = None) -> dict[str, Any]:
    """The model and training recipe of a lookback config file, for the "recipe" system.

    Its tokenizer must be the bench's (both systems read the same pieces); its data, run
    directory, limits and precision are replaced by the bench's. `minutes`, the recipe's
    budget, becomes its train.time_limit: the bench stops it, but a schedule by time
    (cosine without max_steps) ends there.
    """
    from lookback.config import load_config
    from lookback.yamlfile import read_yaml

    from .common import shown

    cfg = load_config(path)  # a one-line error for a bad file or key
    raw = read_yaml(path)
    tok = {k: getattr(cfg.tokenizer, k) for k in TOKENIZER}
    if tok != TOKENIZER:
        raise SystemExit(f"bench: {path}: tokenizer {tok} is not the bench's {TOKENIZER}")
    train = {k: v for k, v in (raw.get("train") or {}).items() if k in RECIPE_TRAIN_KEYS}
    if minutes is not None:
        train["time_limit"] = minutes
    return {"path": shown(path), "model": dict(raw.get("model") or {}), "train": train}


def model_settings(config: str) -> dict[str, Any]:
    return {**MODEL, **CONFIGS[config]}


def lookback_config(
    config: str, run_dir: str, data_dir: str, overrides: list[str] = (), recipe: dict | None = None
) -> dict[str, Any]:
    """The lookback config (a raw dict for lookback.config.from_dict) of a named configuration.

    `overrides` are lookback's own `--set` items (train.precision=bf16); they make the
    configuration differ from Joey's, and are recorded with the results. `recipe`
    (recipe_settings) replaces the model and the training recipe by a config file's.
    """
    from lookback.config import parse_override  # lookback is only needed on lookback's side

    raw: dict[str, Any] = {
        "data": {
            "src_lang": SRC_LANG,
            "tgt_lang": TGT_LANG,
            "train": f"{data_dir}/train_kept",
            "valid": f"{data_dir}/val",
            "test": f"{data_dir}/{TEST_SET}",
            "max_len": TRAIN["max_len"],
        },
        "tokenizer": dict(TOKENIZER),
        "model": {**model_settings(config), "context": "final", "tie_embeddings": False},
        "train": {
            "run_dir": run_dir,
            "seed": TRAIN["seed"],
            "lr": TRAIN["lr"],
            "clip": TRAIN["clip"],
            "label_smoothing": 0.0,
            "precision": "fp32",
        },
        "decode": {  # fp32 as in training: auto would translate in bf16 on a CPU with avx512_bf16
            "batch_size": DECODE["batch_size"],
            "length_penalty": DECODE["length_penalty"],
            "precision": "fp32",
        },
    }
    if recipe:
        raw["model"] = dict(recipe["model"])
        raw["train"].update(recipe["train"])
    for item in overrides:
        keys, value = parse_override(item)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return raw
