"""python -m bench headline: measure lookback and Joey NMT on the same configuration, same run, same machine.

For each named configuration (bench/settings.py) and each system, two
fresh processes, so that each one's peak memory is its own:

1. train: from step-0 weights, on the shared batch plan, for the wall-clock
   budget; throughput after warm-up, peak memory; saves the weights;
2. translate: those weights on test_2016_flickr, greedy and beam 5;
   sentences/s and sacreBLEU.

With --recipe, a third system, "recipe": lookback trained as a config
file of its own says (by default the additive config the README's result
comes from), against the same Joey run.

Then a table with each figure as the ratio lookback / Joey, and one JSON
file per configuration in results/bench/ (results/bench/quick/ for
--quick), written whatever happened: a failed or timed-out measurement is
recorded with its error, not dropped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import settings
from .common import machine, minutes_to, read_json, shown, versions, write_json
from .prepare import multi30k_dir, prepare_data, prepare_seed
from .processes import JOEY_VENV, RESULTS, ensure_joey, run_child

# recipe: only with --recipe; joey_best: only with --joey-best
SYSTEMS = ("lookback", "joey", settings.RECIPE_SYSTEM, settings.JOEY_BEST)
TASKS = ("train", "translate")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench headline",
        description="Benchmark lookback against Joey NMT on Multi30k En-Fr (bench/README.md).",
    )
    ap.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: cuda if available"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {settings.QUICK['budget_s']} s of training, {settings.QUICK['test_limit']} test "
        f"sentences; results go to results/bench/quick/",
    )
    ap.add_argument(
        "--budget-minutes",
        type=float,
        help=f"wall-clock training budget per system and configuration "
        f"(default {settings.FULL['budget_s'] / 60:g}; --quick: {settings.QUICK['budget_s'] / 60:g})",
    )
    ap.add_argument(
        "--warmup-steps", type=int, help="updates left out of the throughput (default 20; --quick: 3)"
    )
    ap.add_argument(
        "--validate-every-minutes",
        type=float,
        help=f"training minutes between validations, the time-to-quality curve (default "
        f"{settings.FULL['validate_every_s'] / 60:g}; --quick: {settings.QUICK['validate_every_s'] / 60:g})",
    )
    ap.add_argument(
        "--max-steps", type=int, default=0, help="also stop training after this many updates (0: no limit)"
    )
    ap.add_argument(
        "--only",
        choices=[*SYSTEMS[:2], settings.JOEY_BEST],
        help="measure one system only (no ratios); joey_best with --joey-best",
    )
    ap.add_argument(
        "--recipe",
        nargs="?",
        const=settings.RECIPE_DEFAULT,
        type=Path,
        metavar="CONFIG",
        help="also train lookback as this config file says (model, learning rate, schedule, token "
        "batches; default %(const)s), against the same Joey run",
    )
    ap.add_argument(
        "--joey-from",
        type=Path,
        metavar="RUN_DIR|JSON",
        help="take Joey's results from an earlier run instead of training Joey again: its configuration "
        "folder (WORK_DIR/runs/STAMP/CONFIG, with Joey's test translations) or its results file "
        "(results/bench/STAMP_DEVICE_CONFIG.json, figures only, for a machine without that folder); "
        "recorded in the JSON",
    )
    ap.add_argument(
        "--recipe-budget-minutes",
        type=float,
        help="the recipe's own training budget (default: --budget-minutes); e.g. Joey trained to its "
        "plateau and the recipe for a third of that: `--only joey --recipe --budget-minutes 90 "
        "--recipe-budget-minutes 30`",
    )
    ap.add_argument(
        "--configs",
        nargs="+",
        choices=list(settings.CONFIGS),
        default=list(settings.CONFIGS),
        help="named configurations to measure (default: all)",
    )
    ap.add_argument(
        "--threads", type=int, default=0, help="torch threads in every measurement (0: torch's default)"
    )
    ap.add_argument(
        "--lookback-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a lookback config key (e.g. train.precision=bf16); recorded, and it makes the "
        "configurations differ",
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lookback" / "bench",
        help="plain-text data, SentencePiece model and seed runs (default: %(default)s)",
    )
    ap.add_argument(
        "--joey-venv", type=Path, default=JOEY_VENV, help="Joey NMT's venv (bench/peers/setup_joey.sh)"
    )
    ap.add_argument("--results-dir", type=Path, help="where the JSON goes (default bench/results[/quick])")
    ap.add_argument(
        "--joey-best",
        choices=list(settings.JOEY_RECIPES),
        metavar="RECIPE",
        help="also train Joey with its own recipe (a fourth system, joey_best): 'peer' (the peer file's: "
        "Joey's plateau scheduler), 'iwslt' (Joey's own recurrent config), 'transformer' (Joey's "
        "Transformer for small data, sized to lookback's attention-only config) or 'same'; "
        "bench/settings.py",
    )
    ap.add_argument(
        "--joey-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"change joey_best's {', '.join(settings.JOEY_KEYS)} (the search for Joey's best, judged "
        "on validation BLEU); recorded in the JSON",
    )
    ap.add_argument(
        "--joey-best-budget-minutes",
        type=float,
        help="joey_best's own training budget (default: --budget-minutes)",
    )
    ap.add_argument(
        "--decoding",
        action="store_true",
        help="then decoding alone on this run's weights (python -m bench decoding): the recipe's (else "
        "lookback's) against joey_best's (else joey's); PyTorch and ONNX Runtime, fp32 and int8, 1 and 2 "
        "threads (or --threads); its figures go into this run's JSON",
    )
    ap.add_argument(
        "--resume",
        type=Path,
        metavar="RUN_DIR",
        help="go on with a run that was killed (WORK_DIR/runs/STAMP), given the same command: what it "
        "finished is kept, a Joey training goes on from its last validation (its checkpoint), the rest "
        "is measured again; for trainings longer than a session",
    )
    args = ap.parse_args(argv)
    if args.resume and not args.resume.is_dir():
        ap.error(f"--resume {args.resume}: no such run folder")
    if args.decoding and (args.only or args.joey_from):
        ap.error("--decoding needs both tools' weights from this run: leave out --only and --joey-from")
    if args.only == settings.JOEY_BEST and not args.joey_best:
        ap.error("--only joey_best needs --joey-best RECIPE")
    if args.joey_set and not args.joey_best:
        ap.error("--joey-set changes joey_best's recipe: name one with --joey-best RECIPE")
    try:
        args.joey = settings.joey_recipe(args.joey_best, args.joey_set) if args.joey_best else None
    except ValueError as exc:
        ap.error(str(exc))
    return args


def resolve_device(choice: str) -> str:
    import torch

    if choice == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench: --device cuda, but torch sees no GPU")
    return choice


def make_spec(plan: Plan, config: str, out_dir: Path, seed_dir: Path) -> dict[str, Any]:
    """Everything a measurement process needs; the same file for both systems."""
    work = plan.args.work_dir
    return {
        "config": config,
        "device": plan.device,
        "threads": plan.args.threads,
        "model": settings.model_settings(config),
        **{k: settings.TRAIN[k] for k in ("seed", "lr", "clip", "batch_sentences", "max_len")},
        "budget_s": plan.budget_s,
        "validate_every_s": plan.validate_every_s,
        "valid": settings.VALID_SET,
        "warmup_steps": plan.warmup,
        "max_steps": plan.args.max_steps,
        "data_dir": str(work / "data"),
        "src_lang": settings.SRC_LANG,
        "tgt_lang": settings.TGT_LANG,
        "train_pairs": read_json(seed_dir / "bench_seed.json")["train_pairs"],
        "test": plan.test,
        "beams": settings.DECODE["beams"],
        "decode_batch_size": settings.DECODE["batch_size"],
        "length_penalty": settings.DECODE["length_penalty"],
        "spm_model": str(seed_dir / "spm.joint.model"),
        "joey_vocab": str(work / "joey_vocab.txt"),
        "lookback_seed": str(seed_dir),
        "lookback_overrides": plan.args.lookback_set,
        "out_dir": str(out_dir),
    }


# figure name, where it is in a system's results, how to show it
FIGURES = [
    ("training, target tokens/s", ("train", "target_tokens_per_s"), "{:,.0f}"),
    ("training, peak RSS (GB)", ("train", "peak_rss_bytes"), "{:.2f}"),
    ("training, peak GPU allocated (GB)", ("train", "peak_cuda_allocated_bytes"), "{:.2f}"),
    ("training, updates in the budget", ("train", "steps"), "{:,.0f}"),
    ("translate greedy, sentences/s", ("translate", "beam1", "sentences_per_s"), "{:,.1f}"),
    ("translate beam 5, sentences/s", ("translate", "beam5", "sentences_per_s"), "{:,.1f}"),
    ("BLEU greedy, after the budget", ("translate", "beam1", "bleu"), "{:.2f}"),
    ("BLEU beam 5, after the budget", ("translate", "beam5", "bleu"), "{:.2f}"),
    ("translate, peak RSS (GB)", ("translate", "peak_rss_bytes"), "{:.2f}"),
    ("parameters (M)", ("train", "parameters"), "{:.2f}"),
    ("training, MFLOP per target token", ("train", "flops_per_target_token"), "{:.1f}"),
]
PEAK_ROWS = ("training, GFLOP/s (matrix products)", "training, share of the fp32 GEMM peak")
SCALE = {
    "peak_rss_bytes": 1e-9,
    "peak_cuda_allocated_bytes": 1e-9,
    "parameters": 1e-6,
    "flops_per_target_token": 1e-6,
}


def figure(system: dict[str, dict], path: tuple[str, ...]) -> float | None:
    """A figure from {task: result}; peak memory lives beside 'figures', the rest inside it."""
    task, *keys = path
    result = system.get(task) or {}
    if result.get("error"):
        return None
    node: Any = result if keys[0] == "peak_rss_bytes" else result.get("figures") or {}
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return None if node is None else node * SCALE.get(keys[-1], 1)


def quality_figures(systems: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """Time to quality: training minutes each system needs to reach fixed validation BLEU
    levels, and Joey's own last one; the validation BLEU each ends at."""
    curves = {s: ((systems[s].get("train") or {}).get("figures") or {}).get("curve") for s in systems}
    levels = {f"minutes to validation BLEU {b:g}": b for b in settings.QUALITY_LEVELS}
    if curves.get("joey"):
        levels["minutes to Joey's final validation BLEU"] = curves["joey"][-1]["bleu"]
    if curves.get(settings.JOEY_BEST):
        levels["minutes to joey_best's final validation BLEU"] = curves[settings.JOEY_BEST][-1]["bleu"]
    table = {
        name: {s: minutes_to(c, level) if c else None for s, c in curves.items()}
        for name, level in levels.items()
    }
    table["validation BLEU at the end"] = {s: c[-1]["bleu"] if c else None for s, c in curves.items()}
    return table


def figures_and_ratios(
    systems: dict[str, dict], system: str = "lookback", peer: str = "joey", peak: dict | None = None
) -> tuple[dict, dict]:
    """Every figure of every system, and each one's ratio `system` / `peer`. With `peak` (the
    CPU's fp32 GEMM peak), also each system's training GFLOP/s in matrix products (its tokens/s
    x the FLOPs per target token it counted) and their share of the peak."""
    table = {name: {s: figure(systems[s], path) for s in systems} for name, path, _ in FIGURES}
    if peak:
        speed, mflop = table["training, target tokens/s"], table["training, MFLOP per target token"]
        gflops = {s: speed[s] * mflop[s] / 1e3 if speed[s] and mflop[s] else None for s in systems}
        share = {s: g / peak["fp32_peak_gflops"] if g else None for s, g in gflops.items()}
        table.update(dict(zip(PEAK_ROWS, (gflops, share), strict=True)))
    table.update(quality_figures(systems))
    return table, ratios_of(table, system, peer)


def ratios_of(table: dict[str, dict], system: str, peer: str) -> dict[str, float | None]:
    """Each figure of `table` as the ratio `system` / `peer` (None where either is missing)."""
    ratios = {}
    for name, values in table.items():
        mine, theirs = values.get(system), values.get(peer)
        ratios[name] = mine / theirs if mine is not None and theirs else None
    return ratios


def print_table(record: dict[str, Any]) -> None:
    s = record["settings"]
    m = record["machine"]
    recipe_s = s.get("recipe_budget_s")
    recipe_budget = f" (recipe {recipe_s / 60:g} min)" if recipe_s and recipe_s != s["budget_s"] else ""
    title = (
        f"config {record['config']} on {m['device']} ({m['gpu'] or m['cpu_model']}), "
        f"threads {s['threads'] or 'default'}, "
        f"budget {s['budget_s'] / 60:g} min{recipe_budget}, "
        f"test {s['test']} ({s['test_sentences']} sentences)"
        f"{', QUICK' if record['quick'] else ''}"
    )
    systems = [s for s in SYSTEMS if s in record["systems"]] or list(SYSTEMS[:2])
    ratio_columns = {"lookback/joey": record["ratios"]}
    if record.get("ratios_recipe") is not None:
        ratio_columns["recipe/joey"] = record["ratios_recipe"]
    if record.get("ratios_recipe_joey_best") is not None:
        ratio_columns["recipe/joey_best"] = record["ratios_recipe_joey_best"]
    print(f"\n{title}")
    print(
        f"{'figure':40}" + "".join(f" {s:>12}" for s in systems) + "".join(f" {r:>14}" for r in ratio_columns)
    )
    formats = {name: fmt for name, _, fmt in FIGURES}
    for name, values in record["figures"].items():
        fmt = formats.get(name, "{:.2f}")
        if all(v is None for v in values.values()) and "GPU" in name:
            continue
        cells = [fmt.format(values[s]) if values.get(s) is not None else "-" for s in systems]
        ratios = [r.get(name) for r in ratio_columns.values()]
        print(
            f"{name:40}"
            + "".join(f" {c:>12}" for c in cells)
            + "".join(f" {f'{r:.2f}' if r is not None else '-':>14}" for r in ratios)
        )
    for system, tasks in record["systems"].items():
        for task, result in tasks.items():
            if result.get("error"):
                print(f"  MISS {system} {task}: {result['error']} (log: {result.get('log')})")
    print(f"written: {record['path']}")


@dataclass
class Plan:
    """What one invocation measures, and where its files go."""

    args: argparse.Namespace
    device: str
    budget_s: float
    recipe_budget_s: float  # the recipe system's budget (--recipe-budget-minutes)
    validate_every_s: float
    warmup: int
    test: str  # file prefix in the data folder
    test_sentences: int
    systems: list[str]
    stamp: str  # names the result files
    runs_root: Path  # one folder per configuration: spec, logs, weights, hypotheses
    results_dir: Path
    joey_error: str | None  # Joey could not be installed
    recipe: dict | None  # --recipe: settings.recipe_settings of its config file
    joey_best_budget_s: float = 0.0  # --joey-best: its own budget
    peak: dict | None = None  # bench.machine.gemm_peak: this CPU's fp32 GEMM peak


def make_plan(args: argparse.Namespace) -> Plan:
    device = resolve_device(args.device)
    mode = settings.QUICK if args.quick else settings.FULL
    systems = [args.only] if args.only else list(SYSTEMS[:2])
    if args.recipe:
        systems.append(settings.RECIPE_SYSTEM)
    if args.joey_best and not args.only:
        systems.append(settings.JOEY_BEST)
    joeys = [s for s in systems if s == settings.JOEY_BEST or s == "joey" and not args.joey_from]
    joey_error = ensure_joey(args.joey_venv) if joeys else None
    print(f"bench: preparing data in {args.work_dir}", flush=True)
    data = prepare_data(args.work_dir, mode["test_limit"])
    test = f"{settings.TEST_SET}_{mode['test_limit']}" if mode["test_limit"] else settings.TEST_SET
    stamp = args.resume.name if args.resume else dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    quick_root = Path(tempfile.mkdtemp(prefix="lookback-bench-")) if args.quick and not args.resume else None
    budget_s = args.budget_minutes * 60 if args.budget_minutes is not None else mode["budget_s"]
    recipe_s = args.recipe_budget_minutes * 60 if args.recipe_budget_minutes is not None else budget_s
    return Plan(
        args=args,
        device=device,
        budget_s=budget_s,
        recipe_budget_s=recipe_s,
        validate_every_s=(
            args.validate_every_minutes * 60
            if args.validate_every_minutes is not None
            else mode["validate_every_s"]
        ),
        warmup=args.warmup_steps if args.warmup_steps is not None else mode["warmup_steps"],
        test=test,
        test_sentences=len((data / f"{test}.{settings.SRC_LANG}").read_text().splitlines()),
        systems=systems,
        stamp=stamp,
        runs_root=args.resume or quick_root or args.work_dir / "runs" / stamp,
        results_dir=args.results_dir or (RESULTS / "quick" if args.quick else RESULTS),
        joey_error=joey_error,
        recipe=settings.recipe_settings(args.recipe, recipe_s / 60) if args.recipe else None,
        joey_best_budget_s=(
            args.joey_best_budget_minutes * 60 if args.joey_best_budget_minutes is not None else budget_s
        ),
        peak=gemm_peak(device),
    )


def gemm_peak(device: str) -> dict | None:
    """This CPU's fp32 matrix-product peak (bench.machine), against which each system's training
    FLOP/s is read; about 10 s. None on a GPU."""
    if device != "cpu":
        return None
    from .machine import gemm_peak as measure_peak

    print("bench: measuring the CPU's fp32 GEMM peak", flush=True)
    return measure_peak()


def miss(system: str, task: str, error: str) -> dict[str, Any]:
    return {"system": system, "task": task, "error": error}


def measure(plan: Plan, config: str, out_dir: Path) -> tuple[dict, dict]:
    """(spec, {system: {task: result}}) of one configuration; failures are results too."""
    try:
        seed_dir = prepare_seed(plan.args.work_dir, config, plan.args.lookback_set)
    except Exception as exc:  # no seed, nothing to measure: recorded as a miss of every task
        from lookback.errors import first_line

        error = f"preparing the seed run failed: {type(exc).__name__}: {first_line(exc, limit=500)}"
        return {}, {s: {t: miss(s, t, error) for t in TASKS} for s in plan.systems}
    spec = make_spec(plan, config, out_dir, seed_dir)
    spec_paths = {s: out_dir / "spec.json" for s in plan.systems}  # one file, whichever systems run
    write_spec(out_dir / "spec.json", spec, plan.args.resume)  # also with --only joey
    recipe_error = None
    if plan.recipe:  # its own seed (model) and spec; the same data, tokenizer and clock
        spec_paths[settings.RECIPE_SYSTEM] = out_dir / "spec.recipe.json"
        try:
            recipe_seed = prepare_seed(plan.args.work_dir, config, plan.args.lookback_set, plan.recipe)
            recipe_spec = {
                **spec,
                "system": settings.RECIPE_SYSTEM,
                "recipe": plan.recipe,
                "budget_s": plan.recipe_budget_s,
                "lookback_seed": str(recipe_seed),
            }
            write_spec(spec_paths[settings.RECIPE_SYSTEM], recipe_spec, plan.args.resume)
        except Exception as exc:
            from lookback.errors import first_line

            recipe_error = (
                f"preparing the recipe's seed failed: {type(exc).__name__}: {first_line(exc, limit=500)}"
            )
    if settings.JOEY_BEST in plan.systems:  # Joey with its own recipe, and its own budget
        spec_paths[settings.JOEY_BEST] = out_dir / "spec.joey_best.json"
        best = {
            **spec,
            "system": settings.JOEY_BEST,
            "joey": plan.args.joey,
            "budget_s": plan.joey_best_budget_s,
        }
        write_spec(spec_paths[settings.JOEY_BEST], best, plan.args.resume)
    budgets = {settings.RECIPE_SYSTEM: plan.recipe_budget_s, settings.JOEY_BEST: plan.joey_best_budget_s}
    results: dict[str, dict] = {}
    for system in plan.systems:
        results[system] = {}
        for task in TASKS:
            if system == "joey" and plan.args.joey_from:
                results[system][task] = earlier_result(plan.args.joey_from, system, task, out_dir, config)
            elif system.startswith("joey") and plan.joey_error:
                results[system][task] = miss(system, task, plan.joey_error)
            elif system == settings.RECIPE_SYSTEM and recipe_error:
                results[system][task] = miss(system, task, recipe_error)
            elif task == "translate" and results[system]["train"].get("error"):
                results[system][task] = miss(system, task, "training failed")
            elif plan.args.resume and finished(out_dir / f"{system}.{task}.json"):
                print(f"bench: {config}: {system} {task}: finished before, kept", flush=True)
                results[system][task] = read_json(out_dir / f"{system}.{task}.json")
            else:
                print(f"bench: {config}: {system} {task} ...", flush=True)
                budget_s = budgets.get(system, plan.budget_s)
                timeout = budget_s + 900 if task == "train" else 3600
                results[system][task] = run_child(
                    system, task, spec_paths[system], out_dir, timeout, plan.args.joey_venv
                )
    return spec, results


def write_spec(path: Path, spec: dict[str, Any], resume: Path | None) -> None:
    """Write a measurement's spec; with --resume, the run's own spec must be this one (the same
    command), and the children are told to go on from their checkpoints."""
    if resume:
        before = read_json(path) if path.is_file() else None
        if before is None:
            raise SystemExit(f"bench: --resume: {path} is missing: that run measured something else")
        differ = sorted(k for k in {*before, *spec} - {"resume"} if before.get(k) != spec.get(k))
        if differ:
            raise SystemExit(
                f"bench: --resume: {path} was written by another command ({', '.join(differ)} differ)"
            )
        spec = {**spec, "resume": True}
    write_json(path, spec)


def finished(result_path: Path) -> bool:
    """A measurement's result file from an earlier process, without an error."""
    try:
        return read_json(result_path).get("error") is None
    except (OSError, ValueError, AttributeError):
        return False


def earlier_result(run_dir: Path, system: str, task: str, out_dir: Path, config: str) -> dict:
    """`system`'s result of `task` from an earlier run (--joey-from): from its configuration folder,
    with its test translations copied beside this run's so that bench.scores finds every system's;
    or from the results JSON it wrote, which holds the figures and curve but no translations."""
    if run_dir.is_file():
        try:
            record = read_json(run_dir)
            result = record["systems"][system][task]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return miss(system, task, f"--joey-from: {run_dir} holds no {system} {task} result ({exc!r})")
        if record.get("config") != config:
            measured = record.get("config")
            return miss(system, task, f"--joey-from: {run_dir} measured {measured!r}, not {config!r}")
        return {**result, "from": f"{run_dir}#systems.{system}.{task}"}
    path = run_dir / f"{system}.{task}.json"
    if not path.is_file():
        return miss(system, task, f"--joey-from: no {path}")
    result = read_json(path)
    result["from"] = str(path)
    for hyps in run_dir.glob(f"{system}.beam*.txt"):
        shutil.copyfile(hyps, out_dir / hyps.name)
    return result


def joey_versions(results: dict) -> dict | None:
    """Joey's environment, as its training child recorded it (joey's, else joey_best's)."""
    for system in ("joey", settings.JOEY_BEST):
        versions = ((results.get(system) or {}).get("train") or {}).get("versions")
        if versions:
            return versions
    return None


def make_record(plan: Plan, config: str, spec: dict, results: dict, machine_info: dict) -> dict[str, Any]:
    """The JSON of one configuration: machine, versions, settings, figures, ratios, raw results."""
    table, ratios = figures_and_ratios(results, peak=plan.peak)
    recipe_ratios = ratios_of(table, settings.RECIPE_SYSTEM, "joey") if plan.recipe else None
    best = plan.recipe and settings.JOEY_BEST in results
    best_ratios = ratios_of(table, settings.RECIPE_SYSTEM, settings.JOEY_BEST) if best else None
    errors = [f"{s} {t}: {r['error']}" for s, ts in results.items() for t, r in ts.items() if r.get("error")]
    return {
        "schema": 1,
        "created": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "status": "missed" if errors else "ok",
        "errors": errors,
        "quick": plan.args.quick,
        "config": config,
        "machine": machine_info,
        "versions": {
            "lookback_env": versions(),
            "joey_env": joey_versions(results),
        },
        "settings": {
            "model": settings.model_settings(config),
            "tokenizer": settings.TOKENIZER,
            "train": {k: settings.TRAIN[k] for k in ("seed", "lr", "clip", "batch_sentences", "max_len")},
            "batching": "per epoch a seeded permutation (bench/common.py) cut into batches of "
            "batch_sentences pairs; the same batches for both systems",
            "precision": "fp32",
            "budget_s": plan.budget_s,
            "recipe_budget_s": plan.recipe_budget_s if plan.recipe else None,
            "validate_every_s": plan.validate_every_s,
            "warmup_steps": plan.warmup,
            "max_steps": plan.args.max_steps,
            "threads": plan.args.threads,
            "test": plan.test,
            "test_sentences": plan.test_sentences,
            "beams": settings.DECODE["beams"],
            "decode_batch_size": settings.DECODE["batch_size"],
            "length_penalty": settings.DECODE["length_penalty"],
            "lookback_overrides": plan.args.lookback_set,  # any of these: not the same configuration
            "joey_best": plan.args.joey,  # --joey-best: Joey's recipe (settings.JOEY_RECIPES)
            "joey_best_budget_s": plan.joey_best_budget_s if plan.args.joey else None,
            "recipe": plan.recipe,  # the recipe system: its config file, model and training recipe
            "joey_from": str(plan.args.joey_from) if plan.args.joey_from else None,  # Joey not run again
            "resumed": bool(plan.args.resume),  # killed and resumed: the children's `processes` say where
        },
        "figures": table,
        "ratios": ratios,
        "ratios_recipe": recipe_ratios,  # recipe / Joey
        "ratios_recipe_joey_best": best_ratios,  # recipe / joey_best: each at its own recipe
        "systems": results,
        "run_dir": str(plan.runs_root / config),
        "path": shown(results_path(plan, config)),
    }


def decoding(plan: Plan, out_dir: Path) -> dict[str, Any]:
    """bench.decoding on this run's weights, each tool at its own recipe where the run has one:
    its rows, its file, and any error; a failure is recorded, not raised."""
    from . import decoding as decoding_bench

    mine = settings.RECIPE_SYSTEM if plan.recipe else "lookback"
    peer = settings.JOEY_BEST if settings.JOEY_BEST in plan.systems else "joey"
    argv = [str(out_dir), "--system", mine, "--joey-system", peer, "--joey-venv", str(plan.args.joey_venv)]
    argv += ["--results-dir", str(plan.results_dir)]
    argv += ["--threads", str(plan.args.threads)] if plan.args.threads else []
    entry: dict[str, Any] = {"systems": {"lookback": mine, "joey": peer}}
    print(f"bench: decoding alone, {mine} against {peer} ...", flush=True)
    try:
        record, path = decoding_bench.measure(decoding_bench.parse_args(argv))
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
        return entry | {"path": None, "rows": [], "errors": [f"{type(exc).__name__}: {exc}"]}
    decoding_bench.print_table(record)
    return entry | {"path": shown(path), "rows": record["rows"], "errors": record["errors"]}


def results_path(plan: Plan, config: str) -> Path:
    return plan.results_dir / f"{plan.stamp}_{plan.device}_{config}.json"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("lookback").setLevel(logging.WARNING)  # the seed runs' chatter
    multi30k_dir()  # a one-line error, before anything else, if the data is missing
    plan = make_plan(args)
    print(f"bench: run directories (weights, logs, hypotheses) in {plan.runs_root}", flush=True)
    status = 0
    for config in args.configs:
        out_dir = plan.runs_root / config
        out_dir.mkdir(parents=True, exist_ok=True)
        load_start = os.getloadavg()
        spec, results = measure(plan, config, out_dir)
        info = {**machine(plan.device), "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
        info["fp32_gemm"] = plan.peak  # bench.machine.gemm_peak, measured at the start
        record = make_record(plan, config, spec, results, info)
        write_json(results_path(plan, config), record)
        print_table(record)
        if args.decoding:
            record["decoding"] = decoding(plan, out_dir)
            if record["decoding"]["errors"]:
                record["errors"] += [f"decoding: {e}" for e in record["decoding"]["errors"]]
                record["status"] = "missed"
            write_json(results_path(plan, config), record)
        if args.quick:  # smoke-run weights are of no use; logs and hypotheses stay
            for weights in [*out_dir.rglob("*.pt"), *out_dir.rglob("*.ckpt")]:
                weights.unlink()
        status = status or (1 if record["errors"] else 0)
    return status
