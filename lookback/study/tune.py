"""A recipe search for your data: `lookback tune SEARCH.yaml`, on Ray Tune with Optuna's sampler.

A search file names a base config, the keys to search and where each may go, and how many
trials to run; each trial trains the base config with its values on the config's own clock
(train.time_limit minutes, else train.max_steps updates) and reports its validation BLEU
(greedy, the trainer's own, on data.valid: never a test set) at every validation. Optuna's
TPE sampler proposes the next trial's values from those before; Ray Tune's ASHA scheduler
stops a trial that, at a rung of its clock (`grace`, grace x reduction, ...), is not in the
top 1/reduction of the trials that reached that rung. So most trials cost a few minutes and
the promising ones get the whole clock. On a clock in minutes every trial also validates each
`grace` minutes (train.valid_minutes), so it reaches a rung on time whatever its batch size.

    name: quickstart
    base: ../quickstart.yaml                     # relative to this file
    set: {train.valid_every: 250}                # for every trial
    space:
      train.lr: {log: [0.0003, 0.01]}            # log-uniform in [lo, hi]
      model.dropout: {range: [0.0, 0.5]}         # uniform in [lo, hi]
      train.warmup: {int: [0, 1000]}             # an integer in [lo, hi]
      train.max_tokens: {choice: [2000, 4000, 8000]}
    trials: 20
    grace: 3                                     # first rung: 3 minutes (or updates) of training
    reduction: 3                                 # 1/3 of the trials go on at each rung
    seed: 1                                      # the sampler's

`lookback tune FILE` writes into out_dir (default: tunes/NAME): a run directory per trial
(trials/ID), best.yaml (the base config with the best trial's values: train it with `lookback
train`), trials.csv and trials.md (every trial's values, best validation BLEU, clock used and
whether ASHA stopped it), curves.png (validation BLEU against the clock, the best trial
drawn over the others) and results.json (the same, with the machine). Killed, the same command
goes on: Ray Tune restores the search (its sampler and scheduler too) from out_dir/ray, and a
trial cut short resumes its run from last.pt.

Every trial holds what its config declares (fanout.holds: train.threads CPUs, a GPU when it
trains on one), so on one 2-core machine trials run one at a time, and on a cluster as many at
once as its machines hold; Ray is an optional extra (`pip install 'lookback[ray]'`).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Config, ConfigError, at_least, build, find_config, load_config, required, save_config
from ..device import cpu_flags, cpu_name, kernels
from ..explain.curves import history, read_metrics
from ..figures import save_figure
from ..yamlfile import read_yaml
from . import fanout
from .run import as_sets

logger = logging.getLogger(__name__)

KINDS = {  # a space entry's one key -> what its value must be
    "log": "[lo, hi] with 0 < lo < hi",
    "range": "[lo, hi] with lo < hi",
    "int": "[lo, hi], integers with lo <= hi",
    "choice": "a list of one or more values",
}


@dataclass
class Search:
    """A search file, typed and checked as configs are: every problem at once, with did-you-mean."""

    name: str = required()  # output goes to tunes/NAME unless out_dir says
    base: str = required()  # base config file, relative to the search file (resolved by load_search)
    out_dir: str = ""  # trials, tables and plots (default: tunes/NAME)
    set: dict[str, Any] | None = None  # config overrides of every trial
    space: dict[str, dict[str, Any]] = required(dict)  # config key -> {log|range|int|choice: ...}
    trials: int = at_least(20, 1)  # trials in all
    grace: float = at_least(3.0, 0)  # ASHA's first rung, in the trial's clock (minutes or updates)
    reduction: int = at_least(3, 2)  # 1/reduction of the trials at a rung go on
    seed: int = at_least(1, 0)  # the sampler's seed

    def config(self, values: dict[str, Any], run_dir: str | None = None) -> Config:
        """The base config with `set`, then a trial's `values` (and its run directory). On a clock
        in minutes a trial also validates every `grace` minutes unless train.valid_minutes says
        otherwise, so that it reports at every rung (grace x reduction^k) whatever its batch."""
        sets = [*as_sets(self.set), *as_sets(values)]
        cfg = load_config(self.base, sets + ([f"train.run_dir={run_dir}"] if run_dir else []))
        if cfg.train.time_limit and not cfg.train.valid_minutes:
            cfg.train.valid_minutes = self.grace
        return cfg

    def clock(self) -> tuple[str, float]:
        """What a trial's clock counts, and how far it goes: ('minutes', train.time_limit), else
        ('updates', train.max_steps)."""
        t = self.config({}).train
        return ("minutes", t.time_limit) if t.time_limit else ("updates", float(t.max_steps))


def _check_space(space: dict[str, dict[str, Any]], where: str) -> list[str]:
    """One problem per space entry that is not one of KINDS with a value of its shape."""
    problems = []
    for key, spec in space.items():
        kind = next(iter(spec)) if isinstance(spec, dict) and len(spec) == 1 else None
        if kind not in KINDS:
            got = ", ".join(spec) if isinstance(spec, dict) else type(spec).__name__
            problems.append(f"{where}: space.{key}: expected one of {', '.join(KINDS)}, got {got}")
            continue
        v = spec[kind]
        pair = isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v)
        ok = {
            "log": pair and 0 < v[0] < v[1],
            "range": pair and v[0] < v[1],
            "int": pair and all(isinstance(x, int) for x in v) and v[0] <= v[1],
            "choice": isinstance(v, list) and len(v) >= 1,
        }[kind]
        if not ok:
            problems.append(f"{where}: space.{key}.{kind}: expected {KINDS[kind]}, got {v!r}")
    return problems


def load_search(path: str | Path) -> Search:
    """Read and check a search file, and the config of each end of its space; every problem is
    one line naming the file and the key, all of them at once."""
    path = find_config(path)
    search: Search = build(Search, read_yaml(path), str(path))
    search.base = str(path.parent / search.base)
    search.out_dir = search.out_dir or str(Path("tunes") / search.name)
    problems = _check_space(search.space, str(path))
    if "train.run_dir" in search.space:
        problems.append(f"{path}: space.train.run_dir: each trial has its own; search other keys")
    if problems:
        raise ConfigError("\n".join(problems))
    for end in (0, -1):  # each key exists and each end of its range is a valid value
        values = {k: next(iter(s.values()))[end] for k, s in search.space.items()}
        try:
            search.config(values)
        except ConfigError as exc:
            which = "lowest" if end == 0 else "highest"
            raise ConfigError(f"{path}: with the space's {which} values: {exc}") from None
    unit, length = search.clock()
    if not length:
        raise ConfigError(f"{path}: a trial needs a clock: train.time_limit or train.max_steps in its base")
    if search.grace >= length:
        raise ConfigError(f"{path}: grace: {search.grace:g} {unit} is not less than a trial's {length:g}")
    return search


def _domain(spec: dict[str, Any]):
    """Ray Tune's sampling domain of a space entry."""
    from ray import tune

    kind, v = next(iter(spec.items()))
    return {
        "log": lambda: tune.loguniform(*v),
        "range": lambda: tune.uniform(*v),
        "int": lambda: tune.randint(v[0], v[1] + 1),  # randint's upper end is left out
        "choice": lambda: tune.choice(v),
    }[kind]()


def _trial(values: dict[str, Any], search: Search, cwd: str) -> None:  # pragma: no cover - in a Ray worker
    """One trial: train the base config with `values` on the config's clock, reporting each
    validation to Tune; a trial run again (a kill, a restored search) resumes its run."""
    from ray import tune

    from ..training.train import Trainer

    fanout.in_worker(cwd)
    run_dir = Path(search.out_dir) / "trials" / tune.get_context().get_trial_id()
    cfg = search.config(values, str(run_dir))
    trainer = Trainer(cfg, resume=(run_dir / "last.pt").exists())
    clock = "minutes" if cfg.train.time_limit else "step"  # as Search.clock says
    trainer.on_validation = lambda r: tune.report({**r, "clock": r[clock]})
    trainer.train()


def run_search(search: Search, address: str = "local") -> dict:
    """Run (or go on with) the search on Ray at `address` ('local': this machine); then write
    best.yaml, the tables, the plot and results.json. Returns the results."""
    fanout.require_ray()  # one line without Ray, before any work
    try:
        import optuna  # noqa: F401  (OptunaSearch's sampler)
        from ray import tune
        from ray.tune.schedulers import ASHAScheduler
        from ray.tune.search.optuna import OptunaSearch
    except ImportError as exc:
        raise ConfigError(
            f"lookback tune needs Ray Tune and Optuna ({exc.name} is missing): pip install 'lookback[ray]'"
        ) from None

    start = time.perf_counter()
    out = Path(search.out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    fanout.start(address)
    unit, length = search.clock()
    node_cpus, gpus = fanout.cluster()
    need = fanout.holds(search.config({}), node_cpus, gpus)
    trainable = tune.with_resources(
        tune.with_parameters(_trial, search=search, cwd=os.getcwd()),
        {"cpu": need["num_cpus"], "gpu": need["num_gpus"]},
    )
    storage = out / "ray"
    if tune.Tuner.can_restore(storage):
        logger.info("tune: going on with the search in %s", storage)
        tuner = tune.Tuner.restore(str(storage), trainable, resume_unfinished=True, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space={key: _domain(spec) for key, spec in search.space.items()},
            tune_config=tune.TuneConfig(
                metric="bleu",
                mode="max",
                num_samples=search.trials,
                search_alg=OptunaSearch(seed=search.seed),
                scheduler=ASHAScheduler(
                    time_attr="clock",
                    max_t=length,
                    grace_period=search.grace,
                    reduction_factor=search.reduction,
                ),
            ),
            run_config=tune.RunConfig(name="ray", storage_path=str(out), verbose=0),
        )
    tuner.fit()
    return write_results(search, out, time.perf_counter() - start, need)


def trial_rows(search: Search, out: Path) -> list[dict]:
    """One row per trial that left a run directory: its values (from its config.yaml), best
    validation BLEU and where, the clock it used, and its validation records."""
    unit, length = search.clock()
    rows = []
    for run in sorted((out / "trials").glob("*/metrics.jsonl")):
        saved = load_config(run.parent / "config.yaml")
        valid = history(read_metrics(run), "valid")
        if not valid:
            continue
        best = max(valid, key=lambda r: r["bleu"])
        used = valid[-1]["seconds"] / 60 if unit == "minutes" else valid[-1]["step"]
        flat = saved.to_dict()
        values = {k: _get(flat, k) for k in search.space}
        rows.append(
            {
                "trial": run.parent.name,
                **values,
                "bleu": round(best["bleu"], 2),
                "at_step": best["step"],
                unit: round(used, 2),
                "stopped_early": used < length * 0.95,
                "curve": [
                    {"step": r["step"], "minutes": r["seconds"] / 60, "bleu": r["bleu"]} for r in valid
                ],
            }
        )
    return sorted(rows, key=lambda r: -r["bleu"])


def _get(tree: dict, key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


def write_results(search: Search, out: Path, seconds: float, need: dict[str, float]) -> dict:
    """best.yaml, trials.csv, trials.md, curves.png and results.json from the trials' run directories."""
    unit, length = search.clock()
    rows = trial_rows(search, out)
    if not rows:
        raise RuntimeError(f"tune: no trial of {search.name} validated even once; see the log above")
    best = rows[0]
    save_config(search.config({k: best[k] for k in search.space}), out / "best.yaml")
    table = [{k: v for k, v in r.items() if k != "curve"} for r in rows]
    with (out / "trials.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    (out / "trials.md").write_text(_markdown(table, search, unit, length), encoding="utf-8")
    _plot(out / "curves.png", rows, unit)
    result = {
        "search": search.name,
        "device": cpu_name(),
        "cpu_flags": cpu_flags(),
        "kernels": kernels(),
        "clock": {"unit": unit, "length": length},
        "trial_holds": need,
        "wall_seconds": seconds,
        "best": {k: v for k, v in best.items() if k != "curve"},
        "trials": rows,
    }
    (out / "results.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    return result


def _markdown(table: list[dict], search: Search, unit: str, length: float) -> str:
    head = list(table[0])
    lines = [
        f"# Search: {search.name}",
        "",
        f"{len(table)} trials of up to {length:g} {unit}; validation BLEU (greedy), best first; "
        f"ASHA stopped those marked, at a rung of {search.grace:g} x {search.reduction}^k {unit}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for r in table:
        cells = [f"{v:.4g}" if isinstance(v, float) and not math.isnan(v) else str(v) for v in r.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(path: Path, rows: list[dict], unit: str) -> None:
    """Validation BLEU of every trial against its clock, the best drawn over the others."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = "minutes" if unit == "minutes" else "step"
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for r in reversed(rows):  # the best last, on top
        best = r is rows[0]
        ax.plot(
            [p[x] for p in r["curve"]],
            [p["bleu"] for p in r["curve"]],
            color="C3" if best else "0.6",
            lw=2 if best else 1,
            marker="o" if best else None,
            ms=3,
            label=f"best: trial {r['trial']}" if best else None,
        )
    ax.set_xlabel("training minutes" if unit == "minutes" else "updates")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.set_title(f"{len(rows)} trials; ASHA stops the weak ones early")
    ax.legend(loc="lower right")
    save_figure(fig, path)
    plt.close(fig)
