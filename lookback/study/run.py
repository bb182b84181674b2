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
    seeds: {none: [2, 3], additive: [2, 3]}  # optional: more runs of a model, named none#2, ...
    compare: [none]                          # optional: every model against these, paired tests
    beam: [1, 5]                             # greedy and beam 5; one size may be named alone
    hard_attention: [1, 2]                   # optional: also greedy with the k largest weights only
    flops_lengths: [10, 20, 40, 80]          # source lengths at which cost.py counts FLOPs
    synth: {task: reverse, lengths: 5-60, seed: 1, out: data/synth/reverse}  # optional: made if missing

The file is checked as configs are (the Study dataclass below, built by
config.build): every problem at once, with its dotted key and a did-you-mean,
and then every model's config. `lookback study FILE` writes into `out_dir` (default: studies/NAME): a run
directory per model (a finished one is not trained again; an interrupted one
resumes; `--set train.time_limit=20` lets every model train on to the new
budget), then results.json.gz, CSV tables, report.md and plots (BLEU and chrF by length, gain over
the model without attention, compression, under- and over-translation, hard against soft
attention, translation time and attention FLOPs by source length), and how each model learned
(learning.csv, learning.png: validation BLEU against minutes). Two files keep what the runs gave,
so that a fresh clone reports without them: evaluations.json.xz (each run's evaluation: every
beam's scores, the widest beam's outputs) and curves.jsonl.xz (each run's metrics.jsonl, every
record with its "run").

A difference between two models is called one only where the seeds and a test agree
(significance.py): each model's outputs are written to outputs/, its score is given as the
mean and range over its seeds, and each model is compared with the `compare` models (by
default those without attention) by sacreBLEU's paired bootstrap and approximate
randomisation on the first seed's outputs, over the whole test set and by length.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import itertools
import json
import logging
import lzma
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import sacrebleu
import torch

from ..config import (
    Config,
    ConfigError,
    at_least,
    build,
    find_config,
    load_config,
    positive_ints,
    ranged,
    required,
    save_config,
)
from ..data.read import read_parallel
from ..data.synth import TASKS, parse_lengths, sequence_accuracy, synth_corpus
from ..decoding.evaluate import bleu_and_length, group_by_length
from ..decoding.significance import compare_runs, family
from ..device import cpu_flags, cpu_name, kernels, set_threads
from ..explain.cost import step_flops
from ..explain.curves import history, read_metrics, records_of
from ..explain.diagnostics import DIAGNOSTICS, plot_takeoff, pooled, sentence_diagnostics
from ..figures import legend_beside, save_figure, seed_groups
from ..model.coverage import coverage_report
from ..model.seq2seq import count_parameters
from ..training.train import Trainer
from ..translator import Translator
from ..yamlfile import read_yaml
from . import fanout

logger = logging.getLogger(__name__)
EVALUATIONS = "evaluations.json.xz"  # every run's evaluation, the widest beam's outputs: run -> evaluation
CURVES = "curves.jsonl.xz"  # every run's metrics.jsonl, each record with its "run"


def _lengths_ok(lengths: str | int) -> bool:
    try:
        parse_lengths(str(lengths))
    except ValueError:
        return False
    return True


_LENGTHS = (_lengths_ok, "LO-HI with 1 <= LO <= HI, such as 5-60, or one length")
_BEAMS = (lambda v: v != [] and all(k >= 1 for k in _as_list(v)), "an integer >= 1, or a list of them")


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else [value]


@dataclass
class SynthSpec:
    """A synthetic corpus that the study writes before anything else, unless it is there (lookback.synth)."""

    task: Literal[TASKS] = required()  # what the target is made from the source: one of synth.TASKS
    lengths: str | int = required(str, _LENGTHS)  # source lengths in words: LO-HI such as 5-60, or one
    out: str = required()  # folder for {train,val,test}.{src,tgt}
    seed: int = at_least(1, 0)  # seed of the train split; val and test use seed + 1 and seed + 2
    vocab: int = at_least(50, 2)  # distinct source words


@dataclass
class Study:
    """A study file, typed and checked as configs are: every problem at once, with did-you-mean."""

    name: str = required()  # the study's name; output goes to studies/NAME unless out_dir says
    base: str = required()  # base config file, relative to the study file (resolved by load_study)
    out_dir: str = ""  # where the runs, tables and plots go (default: studies/NAME)
    set: dict[str, Any] | None = None  # config overrides of every model, e.g. {train.time_limit: 8}
    models: dict[str, dict[str, Any] | None] = required(dict)  # model name -> its config overrides
    grid: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # label -> overrides, x every model
    tests: list[str] = required(list)  # corpus specs of the test sets
    beam: int | list[int] = ranged(1, _BEAMS[0], _BEAMS[1])  # beam sizes of the evaluation (1: greedy)
    hard_attention: list[int] = positive_ints()  # also greedy with only each step's k largest weights
    flops_lengths: list[int] = positive_ints(10, 20, 40, 80)  # source lengths at which cost.py counts
    synth: SynthSpec | None = None  # a synthetic corpus to write first, if it is missing
    seeds: dict[str, list[int]] = field(default_factory=dict)  # model -> more seeds, each a run MODEL#SEED
    compare: list[str] = field(default_factory=list)  # models all are tested against (default: no attention)

    def configs(self, extra: list[str] = (), only: list[str] | None = None) -> dict[str, Config]:
        """One validated config per model (x grid cell), each with its run directory;
        `only` keeps the named models, or single runs of them (MODEL#SEED, MODEL@CELL): one seed
        of every model can so be trained on one machine. Every model's problems are reported at once."""
        runs = {name for model in self.models for name in self._runs(model)}
        unknown = sorted(set(only or []) - set(self.models) - runs)
        if unknown:
            raise ConfigError(
                f"study {self.name}: no model or run named {unknown[0]!r} "
                f"(models: {', '.join(self.models)}; a run: MODEL#SEED)"
            )
        out: dict[str, Config] = {}
        problems: dict[str, list[str]] = {}  # problem -> the models that have it
        for model in self.models:
            for name, (label, seed) in self._runs(model).items():
                if only and model not in only and name not in only:
                    continue
                run_dir = Path(self.out_dir) / "runs" / name
                cell, own = as_sets(self.grid.get(label)), as_sets(self.models[model])
                seeded = [] if seed is None else [f"train.seed={seed}"]
                sets = [*as_sets(self.set), *cell, *own, *extra, *seeded, f"train.run_dir={run_dir}"]
                try:
                    out[name] = load_config(self.base, sets)
                except ConfigError as exc:
                    for line in str(exc).splitlines():
                        problems.setdefault(line, []).append(name)
        if problems:
            raise ConfigError(
                "\n".join(f"{line} (in {', '.join(names)})" for line, names in problems.items())
            )
        return out

    def _runs(self, model: str) -> dict[str, tuple[str, int | None]]:
        """A model's runs by name (MODEL, MODEL#SEED, MODEL@CELL#SEED): its grid cell and seed."""
        runs = {}
        for label, seed in itertools.product(self.grid or [""], [None, *self.seeds.get(model, [])]):
            name = (f"{model}@{label}" if label else model) + (f"#{seed}" if seed is not None else "")
            runs[name] = label, seed
        return runs


def as_sets(values: dict[str, Any] | None) -> list[str]:
    """Overrides {key: value} as --set strings (a study's models and cells, a search's values)."""
    return [f"{k}={json.dumps(v)}" for k, v in (values or {}).items()]  # JSON scalars are YAML scalars


def load_study(path: str | Path) -> Study:
    """Read and check a study file and every model config it makes; each problem is one line
    naming the file and the dotted key, all of them at once."""
    path = find_config(path)
    raw = read_yaml(path)
    if isinstance(raw, dict) and isinstance(raw.get("tests"), str):
        raw["tests"] = [raw["tests"]]  # one test set may be named alone
    study: Study = build(Study, raw, str(path))
    study.beam = _as_list(study.beam)  # one beam size may be named alone
    study.base = str(path.parent / study.base)
    study.out_dir = study.out_dir or str(Path("studies") / study.name)
    for key, names in (("seeds", list(study.seeds)), ("compare", study.compare)):
        for name in names:
            if name not in study.models:
                models = ", ".join(study.models)
                raise ConfigError(f"{path}: {key}: no model named {name!r} (models: {models})")
    study.configs()  # validate every model's config now, before any work starts
    return study


def _make_synth(spec: SynthSpec) -> None:
    """Write the study's synthetic corpus unless it is there already."""
    out = Path(spec.out)
    if (out / "test.src").exists():
        return
    synth_corpus(spec.task, out, parse_lengths(str(spec.lengths)), spec.seed, vocab=spec.vocab)
    logger.info("study: wrote the %s corpus to %s", spec.task, out)


def train_models(configs: dict[str, Config]) -> dict[str, float]:
    """Train each model, resuming any that has a checkpoint: a finished one stops at once,
    an interrupted one goes on, and one given a larger budget trains on. Returns seconds each took."""
    seconds = {}
    for name, cfg in configs.items():
        logger.info("study: %s", name)
        progress = Trainer(cfg, resume=_run_here(cfg)).train()
        seconds[name] = progress.seconds  # training time across resumes
    return seconds


def evaluate_model(
    translator: Translator, src: list[str], ref: list[str], beam: int
) -> tuple[dict[str, dict], list[str]]:
    """Per source-length bucket: sentences, BLEU, chrF, output/reference length, sequence
    accuracy, signs of under- and over-translation (coverage.py), ms per sentence, tokens;
    and the outputs, in the order of `src`."""
    out, outputs = {}, [""] * len(src)
    for label, idx in group_by_length(src).items():
        srcs, refs = [src[i] for i in idx], [ref[i] for i in idx]
        start = time.perf_counter()
        translations = translator.translate(srcs, beam=beam)
        seconds = time.perf_counter() - start
        hyps = [t.text for t in translations]
        for i, hyp in zip(idx, hyps, strict=True):
            outputs[i] = hyp
        report = coverage_report([(t.attention, t.src_tokens, t.tokens) for t in translations])
        looks = [
            sentence_diagnostics(t.attention, t.src_tokens) for t in translations if t.attention is not None
        ]
        out[label] = {
            **bleu_and_length(hyps, refs),  # sentences, bleu, length_ratio
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            "sequence_accuracy": sequence_accuracy(hyps, refs),
            **{k: report[k] for k in ("under_covered", "over_covered", "repeated_bigrams")},
            "ms_per_sentence": 1000 * seconds / len(idx),
            "mean_src_words": sum(len(s.split()) for s in srcs) / len(idx),
            "mean_src_tokens": sum(len(translator.src_tok.encode(s)) for s in srcs) / len(idx),
            "attention": pooled(looks) if looks else None,  # diagnostics.py; None without attention
        }
    return out, outputs


def _evaluate_hard(translator: Translator, src: list[str], ref: list[str], k: int) -> dict:
    """Greedy with only the k largest attention weights of each step kept: its buckets."""
    soft = translator.decode
    translator.decode = dataclasses.replace(soft, hard_attention=k)  # this evaluation's, not the run's
    try:
        return evaluate_model(translator, src, ref, 1)[0]
    finally:
        translator.decode = soft


def compression_rows(cfg: Config, buckets: dict[str, dict]) -> list[dict]:
    """The notes' compression table for one model: numbers in, numbers kept, their ratio."""
    kept = cfg.model.enc_out_size  # size of c
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
    """The model without attention in the same grid cell as `name`, and of its encoder size when
    there are several (a study may vary the fixed context's size); None for one without attention."""
    if configs[name].model.attention == "none":
        return None
    cell = name.split("@", 1)[1] if "@" in name else None
    size = configs[name].model.enc_out_size
    candidates = [
        other
        for other, cfg in configs.items()
        if cfg.model.attention == "none" and (other.split("@", 1)[1] if "@" in other else None) == cell
    ]
    same_size = [other for other in candidates if configs[other].model.enc_out_size == size]
    return (same_size or candidates or [None])[0]


def _device() -> str:
    return f"cpu ({cpu_name()}), {torch.get_num_threads()} threads"


def _slug(spec: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec).strip("_")


def _write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        return
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _plot(path: Path, per_beam: dict[int, dict[str, dict]], key: str, ylabel: str, title: str) -> None:
    """One line per model and beam size: solid for the first size, dashed for the next, ..."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (k, results) in enumerate(per_beam.items()):
        style = ["-", "--", ":", "-."][i % 4]
        for color, (name, buckets) in enumerate(results.items()):
            label = name if len(per_beam) == 1 else f"{name}, {'greedy' if k == 1 else f'beam {k}'}"
            xs, ys = list(buckets), [b[key] for b in buckets.values()]  # short to long
            ax.plot(xs, ys, style, color=f"C{color}", marker="o", label=label)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    for suffix in (".png", ".svg"):
        save_figure(fig, path.with_suffix(suffix))
    plt.close(fig)


def run_study(
    study: Study,
    train: bool = True,
    extra: list[str] = (),
    only: list[str] | None = None,
    ray: str | None = None,
) -> dict:
    """Train (unless `train` is False), evaluate, and write every table and plot; with `ray`
    (an address, or 'local'), each run trains and is evaluated as a task on Ray (fanout.py).

    Each run's evaluation is kept in out_dir/evaluations.json.xz (its outputs included), with
    the checkpoint it came from: a run evaluated before, whose run directory is gone (another
    machine, a fresh clone of a committed study), is neither trained nor evaluated again, and
    the report covers every run evaluated so far. A study can so be run a few models at a time."""
    start = time.perf_counter()
    if ray is not None:
        fanout.require_ray()  # one line without Ray, before any work
    chosen = set(study.configs(extra, only))  # trained and evaluated here
    configs = study.configs(extra)  # reported: every model evaluated so far, the others as before
    if study.synth is not None:
        _make_synth(study.synth)
    out = Path(study.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kept = _kept_evaluations(out)
    todo = {n: c for n, c in configs.items() if n in chosen and (_run_here(c) or n not in kept)}
    first = next(iter(configs.values())).data
    data = {
        spec: read_parallel(spec, first.src_lang, first.tgt_lang, first.multi30k_dir) for spec in study.tests
    }
    records: dict[str, list[dict]] = {}  # the training logs that Ray's tasks brought back
    if ray is None:
        train_seconds = train_models(todo) if train else {}
    else:
        train_seconds, records = _on_ray(ray, study, todo, data, kept, train)
    evaluations = {}
    for name, cfg in configs.items():
        # a model not asked for: its evaluation as kept, if it has one
        evaluation = _evaluation(study, name, cfg, data, kept.get(name)) if name in chosen else kept.get(name)
        if evaluation is None:
            if name in chosen:
                logger.warning("study: %s is neither trained nor evaluated here: left out", name)
            continue
        evaluations[name] = evaluation
        if evaluation is not kept.get(name):  # evaluated now: kept at once, lest a kill lose it
            _keep(out, kept, name, evaluation, max(study.beam))
    configs = {n: c for n, c in configs.items() if n in evaluations}
    result: dict[str, Any] = {
        "study": study.name,
        "device": _device(),
        "cpu_flags": cpu_flags(),
        "kernels": kernels(),
        "torch": torch.__version__,
        "models": {
            name: {
                "overrides": _overrides(study, name),
                "parameters": e["parameters"],
                "train_seconds": train_seconds.get(name),
                "evaluated_on": e["device"],
            }
            for name, e in evaluations.items()
        },
        "tests": {},
    }
    report = [f"# Study: {study.name}", ""]
    for spec, (src, ref) in data.items():
        per_beam = {
            k: {n: e["tests"][spec][f"beam{k}"]["buckets"] for n, e in evaluations.items()}
            for k in study.beam
        }
        outputs = {  # the widest beam's of every run; a narrower beam's of the runs evaluated now
            k: {
                n: got["outputs"]
                for n, e in evaluations.items()
                if "outputs" in (got := e["tests"][spec][f"beam{k}"])
            }
            for k in study.beam
        }
        result["tests"][spec] = {f"beam{k}": per_model for k, per_model in per_beam.items()}
        report += _write_test_outputs(out, spec, per_beam, configs)
        _write_outputs(out / "outputs", spec, outputs)
        k = max(study.beam)  # the seeds and paired tests at the widest beam
        significance = compare_runs(ref, outputs[k], _compared(study, configs), group_by_length(src))
        result["tests"][spec]["significance"] = {"beam": k, **significance}
        report += _write_significance(out, spec, k, significance)
        if study.hard_attention:
            soft = {n: e["tests"][spec]["soft"] for n, e in evaluations.items() if e["attends"]}
            hard = {
                k: {n: e["tests"][spec][f"hard{k}"] for n, e in evaluations.items() if e["attends"]}
                for k in study.hard_attention
            }
            result["tests"][spec].update({f"hard{k}": per_model for k, per_model in hard.items()})
            report += _write_hard(out, spec, soft, hard)
    flops = [{"model": name, **row} for name, e in evaluations.items() for row in e["flops"]]
    result["attention_flops"] = flops
    report += _write_flops(out, flops)
    learned = _curves(out, study.configs(extra), records)  # every model trained so far, here or before
    result["learning"] = learning_rows(learned)
    report += _write_learning(out, learned, result["learning"])
    result["wall_seconds"] = time.perf_counter() - start
    _write_gzip(out / "results.json.gz", json.dumps(result, indent=1).encode("utf-8"))
    (out / "results.json").unlink(missing_ok=True)  # as studies wrote it before
    (out / "report.md").write_text("\n".join(report) + "\n", encoding="utf-8")
    (out / "configs").mkdir(exist_ok=True)
    for name, cfg in configs.items():
        save_config(cfg, out / "configs" / f"{name}.yaml")
    return result


def _on_ray(
    address: str, study: Study, todo: dict[str, Config], data: dict, kept: dict[str, dict], train: bool
) -> tuple[dict[str, float], dict[str, list[dict]]]:
    """Train (if `train`) and evaluate each run of `todo` as a Ray task, keeping each evaluation
    in evaluations.json.xz as its task ends; the training seconds and logs the tasks brought back."""
    fanout.start(address)
    out = Path(study.out_dir)

    def keep(name: str, outcome: fanout.Outcome) -> None:
        if outcome.evaluation is not None:
            _keep(out, kept, name, outcome.evaluation, max(study.beam))

    outcomes = fanout.fan_out(
        train_and_evaluate, todo, lambda name, cfg: (study, name, cfg, data, kept.get(name), train), keep
    )
    seconds = {n: o.seconds for n, o in outcomes.items() if o.seconds is not None}
    return seconds, {n: o.records for n, o in outcomes.items() if o.records}


def train_and_evaluate(
    study: Study, name: str, cfg: Config, data: dict, cached: dict | None, train: bool = True
) -> fanout.Outcome:
    """One run from start to end, as a Ray task runs it: trained on cfg.train.threads threads
    (resuming its last.pt), then evaluated (or its `cached` evaluation, if still its own)."""
    set_threads(cfg.train.threads)
    seconds = None
    if train:
        seconds = Trainer(cfg, resume=_run_here(cfg)).train().seconds
    metrics = Path(cfg.train.run_dir) / "metrics.jsonl"
    return fanout.Outcome(
        seconds=seconds,
        evaluation=_evaluation(study, name, cfg, data, cached),
        records=read_metrics(metrics) if metrics.exists() else [],
    )


def _curves(
    out: Path, configs: dict[str, Config], brought: dict[str, list[dict]] | None = None
) -> dict[str, list[dict]]:
    """Each model's training log: its run directory's metrics.jsonl, else the records a Ray
    task `brought` back, else those that an earlier report kept in curves.jsonl.xz; models with
    none are left out."""
    kept: dict[str, list[dict]] = {}
    if (out / CURVES).exists():
        for r in read_metrics(out / CURVES):
            kept.setdefault(r.pop("run"), []).append(r)
    kept.update(brought or {})
    curves = {}
    for name, cfg in configs.items():
        run = Path(cfg.train.run_dir) / "metrics.jsonl"
        records = read_metrics(run) if run.exists() else kept.get(name)
        if records:
            curves[name] = records
    return curves


def _run_here(cfg: Config) -> bool:
    """Whether the run has a checkpoint on this machine."""
    return (Path(cfg.train.run_dir) / "last.pt").exists()


def _checkpoint_stamp(cfg: Config) -> dict | None:
    """What identifies the weights a run is evaluated with (best.pt): its size and time; None
    without one."""
    path = Path(cfg.train.run_dir) / "best.pt"
    if not path.exists():
        return None
    stat = path.stat()
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _evaluation(study: Study, name: str, cfg: Config, data: dict, cached: dict | None) -> dict | None:
    """One run's evaluation on every test set at every beam size (buckets and outputs), with
    hard attention, its FLOPs and parameters: the `cached` one (kept before), computed again only when
    the run's checkpoint or the study's evaluation settings differ. None when the run has neither."""
    settings = {
        "tests": study.tests,
        "beam": study.beam,
        "hard_attention": study.hard_attention,
        "flops_lengths": study.flops_lengths,
        "precision": cfg.decode.precision,
    }
    stamp = _checkpoint_stamp(cfg)
    if stamp is None or (cached and cached["checkpoint"] == stamp and cached["settings"] == settings):
        return cached
    t = Translator.load(cfg.train.run_dir, precision=cfg.decode.precision)  # the study's, not the run's
    attends = t.model.decoder.attends
    tests = {}
    for spec, (src, ref) in data.items():
        tests[spec] = {}
        for k in study.beam:
            buckets, outputs = evaluate_model(t, src, ref, k)
            corpus = bleu_and_length(outputs, ref)  # the whole test set, as the buckets are not
            tests[spec][f"beam{k}"] = {"corpus": corpus, "buckets": buckets, "outputs": outputs}
        if study.hard_attention and attends:
            tests[spec]["soft"] = (
                tests[spec]["beam1"]["buckets"] if 1 in study.beam else evaluate_model(t, src, ref, 1)[0]
            )
            for k in study.hard_attention:
                tests[spec][f"hard{k}"] = _evaluate_hard(t, src, ref, k)
    evaluation = {
        "run": name,
        "checkpoint": stamp,
        "settings": settings,
        "device": _device(),
        "cpu_flags": cpu_flags(),
        "kernels": kernels(),
        "parameters": count_parameters(t.model),
        "attends": attends,
        "tests": tests,
        "flops": [step_flops(t.model, S) for S in study.flops_lengths],
    }
    return evaluation


def _keep(out: Path, kept: dict[str, dict], name: str, evaluation: dict, widest: int) -> None:
    """`evaluation` into `kept` and out/evaluations.json.xz, as the file keeps it: the widest
    beam's outputs (the paired tests read them), a narrower beam's scores alone (its outputs went
    to outputs/ when it was made). Both beams' outputs would double the file, which git keeps for
    every study."""
    tests = {
        spec: {
            key: {k: v for k, v in got.items() if k != "outputs" or key == f"beam{widest}"}
            if key.startswith("beam")
            else got
            for key, got in per_beam.items()
        }
        for spec, per_beam in evaluation["tests"].items()
    }
    kept[name] = {**evaluation, "tests": tests}
    _write_xz(out / EVALUATIONS, json.dumps(dict(sorted(kept.items()))).encode("utf-8"))


def _write_xz(path: Path, data: bytes) -> None:
    """`data` into `path` by xz: a study's evaluations are its models' outputs, much alike, which
    xz's large window packs 3-4 times smaller than gzip's."""
    path.write_bytes(lzma.compress(data, preset=9))


def _write_gzip(path: Path, data: bytes) -> None:
    """`data` gzipped into `path`, with mtime 0: the same bytes for the same data, so git sees no change."""
    with gzip.GzipFile(path, "wb", mtime=0) as f:
        f.write(data)


def _kept_evaluations(out: Path) -> dict[str, dict]:
    """The evaluations kept in out/evaluations.json.xz (run -> evaluation); none before the first."""
    if not (out / EVALUATIONS).exists():
        return {}
    return json.loads(lzma.decompress((out / EVALUATIONS).read_bytes()))


LEVELS = (20, 30, 40, 45, 50)  # validation BLEU levels whose first minute the learning table gives


def validation_curve(metrics: str | Path | list[dict]) -> tuple[list[dict], float | None]:
    """A run's validation records and its median training tokens/s, from its metrics.jsonl (a
    run directory, the file itself, or its records)."""
    records = records_of(metrics)  # as the run finally went: a resume's repeated updates once
    speeds = sorted(r["tokens_per_s"] for r in history(records, "train") if "tokens_per_s" in r)
    return history(records, "valid"), speeds[len(speeds) // 2] if speeds else None


def learning_rows(sources: dict[str, str | Path | list[dict]]) -> list[dict]:
    """How each model learned, from its metrics.jsonl (model -> a run directory, the file, or its
    records; runs not there yet are left out): updates, minutes, speed, final and best validation
    BLEU, and the first minute (wall clock, validations included) at which validation BLEU reached
    each level."""
    rows = []
    for name, source in sources.items():
        if not isinstance(source, list):
            source = Path(source)
            if not (
                source if source.name.endswith((".jsonl", ".gz", ".xz")) else source / "metrics.jsonl"
            ).exists():
                continue  # not trained (yet)
        valid, speed = validation_curve(source)
        if not valid:
            continue
        row = {
            "model": name,
            "updates": valid[-1]["step"],
            "minutes": round(valid[-1]["seconds"] / 60, 1),
            "tokens_per_s": round(speed) if speed else None,
            "final_bleu": round(valid[-1]["bleu"], 2),
            "best_bleu": round(max(r["bleu"] for r in valid), 2),
        }
        for level in LEVELS:
            first = next((r for r in valid if r["bleu"] >= level), None)
            row[f"min_to_{level}"] = round(first["seconds"] / 60, 1) if first else None
        rows.append(row)
    return rows


def _write_learning(out: Path, curves: dict[str, list[dict]], rows: list[dict]) -> list[str]:
    """Every model's training log beside the report (curves.jsonl.xz), the learning table, and
    validation BLEU against minutes in one plot; `curves`: model -> its metrics.jsonl's records."""
    if not rows:
        return []
    lines = (json.dumps({"run": name, **r}) + "\n" for name, records in curves.items() for r in records)
    _write_xz(out / CURVES, "".join(lines).encode("utf-8"))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # against minutes, the figure to optimise, and against updates, which a machine whose speed
    # varies from run to run does not move
    fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    groups = seed_groups(list(curves))  # a model's seeds in one colour, one legend entry
    for name, records in curves.items():
        valid, _ = validation_curve(records)
        bleu = [r["bleu"] for r in valid]
        group, colour, first = groups[name]
        style = {"marker": "o", "markersize": 3, "color": colour, "label": group if first else None}
        by_time.plot([r["seconds"] / 60 for r in valid], bleu, **style)
        by_step.plot([r["step"] for r in valid], bleu, **style)
    by_time.set_xlabel("training minutes (wall clock, validations included)")
    by_time.set_ylabel("validation BLEU, greedy")
    by_step.set_xlabel("updates")
    fig.suptitle(f"How each model learned, on {cpu_name()} (one colour: a model's seeds)")
    for ax in (by_time, by_step):
        ax.grid(alpha=0.3)
    fig.tight_layout(rect=legend_beside(fig, by_step))
    for suffix in (".png", ".svg"):
        save_figure(fig, out / f"learning{suffix}")
    plt.close(fig)
    _write_csv(out / "learning.csv", rows)
    table = _markdown(rows, "How each model learned (validation set; curves.jsonl.xz)")
    takeoff = plot_takeoff(
        curves, str(out / "takeoff.png"), f"Take-off: when attention starts to look, on {cpu_name()}"
    )
    shown = ["![attention entropy and diagonal weight against updates](takeoff.png)", ""] if takeoff else []
    return ["## Learning", "", table, "![validation BLEU against minutes](learning.png)", "", *shown]


def _write_test_outputs(out: Path, spec: str, per_beam: dict, configs: dict[str, Config]) -> list[str]:
    """CSV tables, plots and the report section of one test set; `per_beam`: beam -> model -> buckets.
    A model is compared with the model without attention at the same beam size."""
    slug = _slug(spec)
    table, gains, compression, cost, translation, looks = [], [], [], [], [], []
    for k, per_model in per_beam.items():
        for name, buckets in per_model.items():
            base = _baseline(name, configs)
            for label, b in buckets.items():
                row = {"model": name, "beam": k, "bucket": label}
                table.append(
                    {
                        **row,
                        "sentences": b["sentences"],
                        "bleu": round(b["bleu"], 2),
                        "chrf": round(b["chrf"], 2),
                        "length_ratio": round(b["length_ratio"], 3),
                        "sequence_accuracy": round(b["sequence_accuracy"], 2),
                    }
                )
                translation.append(
                    {
                        **row,
                        **{k: _round(b[k], 3) for k in ("under_covered", "over_covered", "repeated_bigrams")},
                    }
                )
                if b.get("attention"):
                    looks.append({**row, **{k: _round(b["attention"][k], 3) for k in DIAGNOSTICS}})
                cost.append(
                    {
                        **row,
                        "ms_per_sentence": round(b["ms_per_sentence"], 3),
                        "mean_src_words": round(b["mean_src_words"], 1),
                    }
                )
                if base and base != name and label in per_model[base]:
                    ref = per_model[base][label]["bleu"]
                    gains.append(
                        {
                            **row,
                            "baseline": base,
                            "bleu": round(b["bleu"], 2),
                            "baseline_bleu": round(ref, 2),
                            "gain": round(b["bleu"] - ref, 2),
                            "gain_percent": round(100 * (b["bleu"] - ref) / ref, 1) if ref > 0 else None,
                        }
                    )
            if configs[name].model.attention == "none":
                rows = compression_rows(configs[name], buckets)
                compression += [{"model": name, "beam": k, **row} for row in rows]
    _write_csv(out / f"bleu_by_length_{slug}.csv", table)
    _write_csv(out / f"gain_over_none_{slug}.csv", gains)
    _write_csv(out / f"compression_{slug}.csv", compression)
    _write_csv(out / f"cost_{slug}.csv", cost)
    _write_csv(out / f"coverage_{slug}.csv", translation)
    _write_csv(out / f"attention_diagnostics_{slug}.csv", looks)
    _plot(out / f"bleu_by_length_{slug}", per_beam, "bleu", "BLEU", f"BLEU by source length: {spec}")
    _plot(out / f"cost_{slug}", per_beam, "ms_per_sentence", "ms per sentence", f"Translation time: {spec}")
    return [
        f"## {spec}",
        "",
        _markdown(table, "BLEU, chrF, output/reference length and sequence accuracy by source length"),
        _markdown(gains, "Gain over the model without attention"),
        _markdown(compression, "The compression table (models without attention)"),
        _markdown(cost, "Cost: translation time per sentence"),
        _markdown(
            translation,
            "Under- and over-translation: shares of source tokens with a total attention under 0.5 "
            "or over 1.5 (the closing </s> left out), and of output bigrams repeated in the sentence",
        ),
        _markdown(
            looks,
            "Attention diagnostics (diagnostics.py): mean normalised entropy, shares of near-uniform "
            "steps, of source tokens never the focus and over-attended, weight on </s> and punctuation "
            "(beside the share uniform weights would give), argmax moves backward",
        ),
        f"![BLEU by length](bleu_by_length_{slug}.png)",
        "",
    ]


def _overrides(study: Study, run: str) -> list[str]:
    """What a run 'model@cell#seed' sets over the study's base: its model's, cell's and seed's."""
    (model, _, cell), seed = family(run).partition("@"), run.partition("#")[2]
    return (
        as_sets(study.models[model])
        + as_sets(study.grid.get(cell))
        + ([f"train.seed={seed}"] if seed else [])
    )


def _compared(study: Study, configs: dict[str, Config]) -> dict[str, list[str]]:
    """Model (with its grid cell) -> the models it is tested against: the study's `compare`
    models, or those without attention, in the same grid cell."""
    models = list(dict.fromkeys(family(name) for name in configs))  # 'dot@h128', seeds together
    plain = {family(n).partition("@")[0] for n, cfg in configs.items() if cfg.model.attention == "none"}
    bases = set(study.compare) or plain
    return {
        m: [b for b in models if b.partition("@")[0] in bases and b.partition("@")[2] == m.partition("@")[2]]
        for m in models
    }


def _write_outputs(folder: Path, spec: str, outputs: dict[int, dict[str, list[str]]]) -> None:
    """Each run's outputs on a test set, one file per beam size: what `lookback compare` reads."""
    folder.mkdir(exist_ok=True)
    for k, per_run in outputs.items():
        for name, hyps in per_run.items():
            path = folder / f"{name}.{_slug(spec)}.beam{k}.txt"
            path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")


def _write_significance(out: Path, spec: str, beam: int, result: dict) -> list[str]:
    """The models' BLEU over their seeds, and the paired tests, as CSV tables and report sections."""
    slug = _slug(spec)
    seeds = [
        {"model": m, "bucket": label, **{k: round(v, 2) if k != "seeds" else v for k, v in b.items()}}
        for m, buckets in result["models"].items()
        for label, b in buckets.items()
    ]
    pairs = [
        {k: round(v, 4 if k.startswith("p_") else 2) if isinstance(v, float) else v for k, v in row.items()}
        for row in result["pairs"]
    ]
    _write_csv(out / f"seeds_{slug}.csv", seeds)
    _write_csv(out / f"significance_{slug}.csv", pairs)
    what = f"beam {beam}" if beam > 1 else "greedy"
    return [
        _markdown(seeds, f"BLEU over each model's seeds ({what}; all sentences, then by source length)"),
        _markdown(
            pairs,
            "Paired tests (sacreBLEU: bootstrap, approximate randomisation) of every seed: seed "
            "against seed, or a one-seed model against each seed of the other (`pairings`), the "
            "largest p of each test kept; a difference is 'better' or 'worse' only where both p < 0.05 "
            "and the difference of the means exceeds `seed_range`: the larger of the two models' seed "
            "ranges, a one-seed model's taken as the largest range of any model with seeds",
        ),
    ]


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _write_hard(out: Path, spec: str, soft: dict, hard: dict) -> list[str]:
    """Hard against soft attention at inference, greedy: `soft` model -> buckets, `hard` k -> model
    -> buckets."""
    rows = [
        {
            "model": name,
            "k": k,
            "bucket": label,
            "soft_bleu": round(soft[name][label]["bleu"], 2),
            "hard_bleu": round(b["bleu"], 2),
            "change": round(b["bleu"] - soft[name][label]["bleu"], 2),
        }
        for k, per_model in hard.items()
        for name, buckets in per_model.items()
        for label, b in buckets.items()
    ]
    _write_csv(out / f"hard_attention_{_slug(spec)}.csv", rows)
    title = "Hard against soft attention at inference (greedy; k = 1: argmax one-hot, else the k largest)"
    return [_markdown(rows, title)]


def _write_flops(out: Path, rows: list[dict]) -> list[str]:
    """cost.py's measurements for every model by source length: a table and a plot."""
    _write_csv(out / "attention_flops.csv", rows)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (per_sentence, share) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, name in enumerate(dict.fromkeys(r["model"] for r in rows)):
        mine = [r for r in rows if r["model"] == name]
        xs = [r["source_tokens"] for r in mine]
        style = ["-", "--", ":"][i // 10 % 3]  # ten colours, then the next line style
        look = {"color": f"C{i % 10}", "linestyle": style, "marker": "o", "label": name}
        per_sentence.plot(xs, [r["attention_flops_per_sentence"] / 1e6 for r in mine], **look)
        share.plot(xs, [100 * r["attention_share"] for r in mine], **look)
    per_sentence.set_ylabel("attention MFLOPs per sentence (T = S outputs)")
    share.set_ylabel("attention's share of a decoder step (%)")
    for ax in (per_sentence, share):
        ax.set_xlabel("source tokens S")
        ax.grid(alpha=0.3)
    share.legend(fontsize="small")
    fig.suptitle("What attention costs (torch.utils.flop_counter: matrix products)")
    fig.tight_layout()
    for suffix in (".png", ".svg"):
        save_figure(fig, out / f"attention_flops{suffix}")
    plt.close(fig)
    title = "Attention FLOPs by source length (cost.py: one greedy step, batch 1; per sentence T = S)"
    return ["## Cost of attention", "", _markdown(rows, title), "![attention FLOPs](attention_flops.png)", ""]


def _markdown(rows: list[dict], title: str) -> str:
    if not rows:
        return ""
    head = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join("" if r[k] is None else str(r[k]) for k in head) + " |" for r in rows]
    return "\n".join(lines) + "\n"
