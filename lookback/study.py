"""The bottleneck study: train models that differ only in what the study varies,
evaluate them on the same test sets, and show how quality depends on source length.

The claim under test (notes, "Attention Results"): a fixed-size context loses
information as sentences grow, and attention removes that loss, so the gain
from attention grows with length. A study file names a base config, the
models (each a few `--set` style overrides of it), an optional grid crossed
with every model (e.g. hidden sizes), and the test sets:

    name: bottleneck
    base: ../multi30k_en_fr_additive.yaml    # relative to this file
    set: {train.time_limit: 8}               # for every model
    models:
      none: {model.attention: none}
      additive: {model.attention: additive}
    grid:                                    # optional; labels become name@label
      h128: {model.hidden_size: 128, model.dec_hidden_size: 128}
    tests: [multi30k:test_2016_flickr, "concat:3:multi30k:test_2016_flickr"]
    beam: 1
    synth: {task: reverse, lengths: 5-60, seed: 1, out: data/synth/reverse}  # optional: made if missing

`lookback study FILE` writes into `out_dir` (default: studies/NAME): a run
directory per model (a finished one is not trained again; an interrupted one
resumes; `--set train.time_limit=20` lets every model train on to the new
budget), then results.json, CSV tables, report.md and plots.
"""

from __future__ import annotations

import csv
import json
import logging
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from .checkpoint import load_checkpoint
from .config import Config, ConfigError, load_config
from .data import read_parallel
from .evaluate import BUCKETS, bucket_of, sequence_accuracy
from .synth import parse_lengths, synth_corpus
from .train import Trainer
from .translator import Translator

logger = logging.getLogger(__name__)

BUCKET_LABELS = [bucket_of(lo) for lo, _ in BUCKETS]


@dataclass
class Study:
    name: str
    path: Path  # the study file; relative paths in it are relative to its folder
    base: Path  # base config
    out_dir: Path
    overrides: list[str] = field(default_factory=list)  # for every model
    models: dict[str, list[str]] = field(default_factory=dict)  # name -> overrides
    grid: dict[str, list[str]] = field(default_factory=dict)  # label -> overrides
    tests: list[str] = field(default_factory=list)
    beam: int = 1
    synth: dict[str, Any] | None = None  # a synthetic corpus to write first, if it is missing

    def configs(self, extra: list[str] = (), only: list[str] | None = None) -> dict[str, Config]:
        """One validated config per model (x grid cell), each with its run directory;
        `only` keeps the named models."""
        cells = self.grid or {"": []}
        out = {}
        for model, model_set in self.models.items():
            if only and model not in only:
                continue
            for label, cell_set in cells.items():
                name = f"{model}@{label}" if label else model
                run_dir = self.out_dir / "runs" / name
                sets = [*self.overrides, *cell_set, *model_set, *extra, f"train.run_dir={run_dir}"]
                out[name] = load_config(self.base, sets)
        return out


def _as_sets(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of config keys to values")
    return [f"{k}={json.dumps(v)}" for k, v in value.items()]  # JSON scalars are YAML scalars


def load_study(path: str | Path) -> Study:
    """Read and check a study file; every problem is one line naming the file and key."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read study ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    known = {"name", "base", "out_dir", "set", "models", "grid", "tests", "beam", "synth"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown study key {unknown[0]!r} (valid: {', '.join(sorted(known))})")
    for key in ("name", "base", "models", "tests"):
        if not raw.get(key):
            raise ConfigError(f"{path}: '{key}' is required")
    folder = path.parent
    models = raw["models"]
    if not isinstance(models, dict):
        raise ConfigError(f"{path}: models: expected a mapping of model names to overrides")
    grid = raw.get("grid") or {}
    tests = raw["tests"] if isinstance(raw["tests"], list) else [raw["tests"]]
    study = Study(
        name=str(raw["name"]),
        path=path,
        base=folder / raw["base"],
        out_dir=Path(raw.get("out_dir") or Path("studies") / str(raw["name"])),
        overrides=_as_sets(raw.get("set"), f"{path}: set"),
        models={str(k): _as_sets(v, f"{path}: models.{k}") for k, v in models.items()},
        grid={str(k): _as_sets(v, f"{path}: grid.{k}") for k, v in grid.items()},
        tests=[str(t) for t in tests],
        beam=int(raw.get("beam", 1)),
        synth=raw.get("synth"),
    )
    if study.synth is not None and not {"task", "lengths", "out"} <= set(study.synth):
        raise ConfigError(f"{path}: synth: expected task, lengths and out (and optionally seed, vocab)")
    study.configs()  # validate every model's config now, before any work starts
    return study


def _make_synth(spec: dict[str, Any]) -> None:
    """Write the study's synthetic corpus unless it is there already."""
    out = Path(spec["out"])
    if (out / "test.src").exists():
        return
    lengths = parse_lengths(str(spec["lengths"]))
    synth_corpus(spec["task"], out, lengths, int(spec.get("seed", 1)), vocab=int(spec.get("vocab", 50)))
    logger.info("study: wrote the %s corpus to %s", spec["task"], out)


def train_models(configs: dict[str, Config]) -> dict[str, float]:
    """Train each model, resuming any that has a checkpoint: a finished one stops at once,
    an interrupted one goes on, and one given a larger budget trains on. Returns seconds each took."""
    seconds = {}
    for name, cfg in configs.items():
        run_dir = Path(cfg.train.run_dir)
        logger.info("study: %s", name)
        Trainer(cfg, resume=(run_dir / "last.pt").exists()).train()
        seconds[name] = load_checkpoint(run_dir / "last.pt")["progress"]["seconds"]
    return seconds


def evaluate_model(translator: Translator, src: list[str], ref: list[str], beam: int) -> dict[str, dict]:
    """Per source-length bucket: sentences, BLEU, sequence accuracy, ms per sentence, tokens."""
    import sacrebleu

    groups: dict[str, list[int]] = {}
    for i, s in enumerate(src):
        groups.setdefault(bucket_of(len(s.split())), []).append(i)
    out = {}
    for label in BUCKET_LABELS:
        if label not in groups:
            continue
        idx = groups[label]
        srcs, refs = [src[i] for i in idx], [ref[i] for i in idx]
        start = time.perf_counter()
        hyps = [t.text for t in translator.translate(srcs, beam=beam)]
        seconds = time.perf_counter() - start
        out[label] = {
            "sentences": len(idx),
            "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "sequence_accuracy": sequence_accuracy(hyps, refs),
            "ms_per_sentence": 1000 * seconds / len(idx),
            "mean_src_words": sum(len(s.split()) for s in srcs) / len(idx),
            "mean_src_tokens": sum(len(translator.src_tok.encode(s)) for s in srcs) / len(idx),
        }
    return out


def compression_rows(cfg: Config, buckets: dict[str, dict]) -> list[dict]:
    """The notes' compression table for one model: numbers in, numbers kept, their ratio."""
    kept = cfg.model.hidden_size * (2 if cfg.model.bidirectional else 1)  # size of c
    rows = []
    for label, b in buckets.items():
        numbers_in = b["mean_src_tokens"] * cfg.model.emb_size
        rows.append(
            {
                "bucket": label,
                "source_tokens": round(b["mean_src_tokens"], 1),
                "numbers_in": round(numbers_in),
                "numbers_kept": kept,
                "ratio": round(numbers_in / kept, 2),
                "bleu": round(b["bleu"], 2),
            }
        )
    return rows


def _baseline(name: str, configs: dict[str, Config]) -> str | None:
    """The model without attention in the same grid cell as `name`."""
    cell = name.split("@", 1)[1] if "@" in name else None
    for other, cfg in configs.items():
        other_cell = other.split("@", 1)[1] if "@" in other else None
        if cfg.model.attention == "none" and other_cell == cell:
            return other
    return None


def _device() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.machine()
    return f"cpu ({name}), {torch.get_num_threads()} threads"


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec).strip("_")


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _plot(path: Path, results: dict[str, dict[str, dict]], key: str, ylabel: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, buckets in results.items():
        labels = [b for b in BUCKET_LABELS if b in buckets]
        ax.plot(labels, [buckets[b][key] for b in labels], marker="o", label=name)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    for suffix in (".png", ".svg"):
        fig.savefig(path.with_suffix(suffix), dpi=120)
    plt.close(fig)


def run_study(study: Study, train: bool = True, extra: list[str] = (), only: list[str] | None = None) -> dict:
    """Train (unless `train` is False), evaluate, and write every table and plot."""
    unknown = sorted(set(only or []) - set(study.models))
    if unknown:
        raise ConfigError(f"{study.path}: no model named {unknown[0]!r} (models: {', '.join(study.models)})")
    start = time.perf_counter()
    if study.synth is not None:
        _make_synth(study.synth)
    configs = study.configs(extra, only)
    study.out_dir.mkdir(parents=True, exist_ok=True)
    train_seconds = train_models(configs) if train else {}
    translators = {name: Translator.load(cfg.train.run_dir) for name, cfg in configs.items()}
    first = next(iter(configs.values())).data
    result: dict[str, Any] = {
        "study": study.name,
        "device": _device(),
        "torch": torch.__version__,
        "models": {
            name: {
                "overrides": study.models[name.split("@")[0]] + study.grid.get(name.partition("@")[2], []),
                "parameters": sum(p.numel() for p in translators[name].model.parameters()),
                "train_seconds": train_seconds.get(name),
            }
            for name in configs
        },
        "tests": {},
    }
    report = [f"# Study: {study.name}", ""]
    for spec in study.tests:
        src, ref = read_parallel(spec, first.src_lang, first.tgt_lang, first.multi30k_dir)
        per_model = {name: evaluate_model(t, src, ref, study.beam) for name, t in translators.items()}
        result["tests"][spec] = per_model
        report += _write_test_outputs(study.out_dir, spec, per_model, configs)
    result["wall_seconds"] = time.perf_counter() - start
    (study.out_dir / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    (study.out_dir / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    for name, cfg in configs.items():
        cfg_path = study.out_dir / "configs" / f"{name}.yaml"
        cfg_path.parent.mkdir(exist_ok=True)
        cfg_path.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    return result


def _write_test_outputs(out: Path, spec: str, per_model: dict, configs: dict[str, Config]) -> list[str]:
    """CSV tables, plots and the report section of one test set."""
    slug = _slug(spec)
    table, gains, compression, cost = [], [], [], []
    for name, buckets in per_model.items():
        base = _baseline(name, configs)
        for label, b in buckets.items():
            table.append(
                {
                    "model": name,
                    "bucket": label,
                    "sentences": b["sentences"],
                    "bleu": round(b["bleu"], 2),
                    "sequence_accuracy": round(b["sequence_accuracy"], 2),
                }
            )
            cost.append(
                {
                    "model": name,
                    "bucket": label,
                    "ms_per_sentence": round(b["ms_per_sentence"], 3),
                    "mean_src_words": round(b["mean_src_words"], 1),
                }
            )
            if base and base != name and label in per_model[base]:
                ref = per_model[base][label]["bleu"]
                gains.append(
                    {
                        "model": name,
                        "baseline": base,
                        "bucket": label,
                        "bleu": round(b["bleu"], 2),
                        "baseline_bleu": round(ref, 2),
                        "gain": round(b["bleu"] - ref, 2),
                        "gain_percent": round(100 * (b["bleu"] - ref) / ref, 1) if ref > 0 else None,
                    }
                )
        if configs[name].model.attention == "none":
            compression += [{"model": name, **row} for row in compression_rows(configs[name], buckets)]
    _write_csv(out / f"bleu_by_length_{slug}.csv", table)
    _write_csv(out / f"gain_over_none_{slug}.csv", gains)
    _write_csv(out / f"compression_{slug}.csv", compression)
    _write_csv(out / f"cost_{slug}.csv", cost)
    _plot(out / f"bleu_by_length_{slug}", per_model, "bleu", "BLEU", f"BLEU by source length: {spec}")
    _plot(out / f"cost_{slug}", per_model, "ms_per_sentence", "ms per sentence", f"Translation time: {spec}")
    return [
        f"## {spec}",
        "",
        _markdown(table, "BLEU and sequence accuracy by source length"),
        _markdown(gains, "Gain over the model without attention"),
        _markdown(compression, "The compression table (models without attention)"),
        _markdown(cost, "Cost: translation time per sentence"),
        f"![BLEU by length](bleu_by_length_{slug}.png)",
        "",
    ]


def _markdown(rows: list[dict], title: str) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join("" if r[k] is None else str(r[k]) for k in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"
