"""python -m bench store: training memory and speed from an on-disk token store (data.store).

Three measurements, each in a fresh process so that its peak memory is its own:

1. a synthetic corpus of --pairs pairs (a toy lexicon, 4-30 words a side, written as
   prefix files), trained from with `data.store: true` for --steps updates: the one-off
   tokenisation into the store (seconds), peak RSS while training, target tokens/s;
2. the same with a tenth of the pairs: peak RSS must not grow with the corpus;
3. Multi30k's train split, in memory and from a store, --steps updates each: tokens/s,
   --repeats times each in alternating order (memory, store, store, memory, ...), so that
   neither side always runs first; each side's median is reported, and every run's figures.

Writes results/bench/store.json with the CPU named:

    python -m bench store [--pairs 5000000] [--steps 200] [--repeats 3] [--out results/bench/store.json]
    python -m bench store --pairs 0 --repeats 4     # the Multi30k comparison only
    python -m bench store --profile --out results/bench/store_profile.json

--profile trains on Multi30k once a side, in this process, under cProfile, and
reports where the store could cost time: the seconds spent making batches (the
update plan's iteration: reading the pairs, from a list or from the store, and
padding them) against the seconds in the updates themselves; then again with the
store's run first (the second run in a process can be the slower one).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import cpu_flags, cpu_model, write_json

ROOT = Path(__file__).resolve().parents[1]
WORDS = [f"w{i}" for i in range(2000)]


def write_synthetic(prefix: Path, pairs: int, seed: int = 1) -> None:
    """prefix.en / prefix.fr: random sentences of a 2,000-word lexicon, the French word for
    word (w12 -> v12), 4 to 30 words."""
    rng = random.Random(seed)
    with open(f"{prefix}.en", "w", encoding="utf-8") as en, open(f"{prefix}.fr", "w", encoding="utf-8") as fr:
        for _ in range(pairs):
            words = rng.choices(WORDS, k=rng.randint(4, 30))
            en.write(" ".join(words) + "\n")
            fr.write(" ".join(w.replace("w", "v") for w in words) + "\n")


def train_once(config: dict, folder: Path) -> dict:
    """Train in a child process; its peak RSS (ru_maxrss of the child), wall time and the
    tokens/s of its log."""
    path = folder / f"{config['train']['run_dir'].rsplit('/', 1)[-1]}.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code = (
        "import json, sys, logging; logging.basicConfig(level=logging.INFO);"
        "from lookback.config import from_dict; from lookback.training.train import train;"
        f"train(from_dict(json.load(open({str(path)!r}))));"
        "import resource; r = resource.getrusage(resource.RUSAGE_SELF);"
        "print('PEAK_KIB', r.ru_maxrss, 'MINFLT', r.ru_minflt)"
    )
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    peak = int(done.stdout.split("PEAK_KIB")[-1].split()[0])  # the child's own peak RSS, KiB (Linux)
    faults = int(done.stdout.split("MINFLT")[-1].split()[0])  # its minor page faults: memory it touched anew
    run = Path(config["train"]["run_dir"])
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    rates = [r["tokens_per_s"] for r in records if r["kind"] == "train"][1:]  # after the first window
    store = [line for line in done.stderr.splitlines() if "store:" in line and "tokenised into" in line]
    return {
        "wall_seconds": round(wall, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "minor_page_faults": faults,
        "tokens_per_s": round(sum(rates) / len(rates)) if rates else None,
        "store_line": store[-1] if store else None,
    }


def config(data: dict, run_dir: Path, steps: int, cache: Path, store: bool) -> dict:
    return {
        "data": {**data, "store": store, "cache_dir": str(cache), "max_len": 100},
        "tokenizer": {"vocab_size": 8000, "sample": 200_000},
        "model": {"emb_size": 128, "hidden_size": 128, "dec_hidden_size": 256, "attention": "additive"},
        "train": {
            "run_dir": str(run_dir),
            "max_steps": steps,
            "valid_every": 10**9,
            "log_every": 10,
            "max_tokens": 1000,
            "probe": 0,
            "early_stopping": 0,
        },
    }


def profile_sides(steps: int, folder: Path, store_first: bool = False) -> dict:
    """One Multi30k run a side under cProfile, in this process, memory's first unless
    `store_first`: cumulative seconds in batching and in updates."""
    import cProfile
    import pstats

    from lookback.config import from_dict
    from lookback.training.train import Trainer

    def seconds(stats: dict, file: str, name: str) -> float:
        return round(sum(v[3] for k, v in stats.items() if k[0].endswith(file) and k[2] == name), 3)

    out, data = {}, {"train": "multi30k:train", "valid": "multi30k:val"}
    sides = (("multi30k_memory", False), ("multi30k_store", True))
    for label, store in sides[::-1] if store_first else sides:
        trainer = Trainer(from_dict(config(data, folder / f"run_{label}", steps, folder / "cache", store)))
        profile = cProfile.Profile()
        profile.runcall(trainer.train)
        stats = pstats.Stats(profile).stats  # (file, line, function) -> (.., .., tottime, cumtime, ..)
        out[label] = {
            "batches_s": seconds(stats, "lookback/data/batch.py", "__iter__"),  # UpdatePlan: read + pad
            "store_reads_s": seconds(stats, "lookback/data/store.py", "__getitem__"),
            "updates_s": seconds(stats, "lookback/training/train.py", "train_step"),
        }
        out[label]["batches_per_update_ms"] = round(1000 * out[label]["batches_s"] / steps, 2)
        # cProfile's cost per call weighs on the side with more calls: the reads alone, unprofiled
        batches, pairs = trainer.plan.epoch_batches(0)[:steps], trainer.plan.pairs
        start = time.perf_counter()
        for idx in batches:
            [pairs[i] for i in idx]
        reading = (time.perf_counter() - start) / len(batches)
        out[label]["reading_pairs_per_update_ms"] = round(1000 * reading, 3)
        metrics = (folder / f"run_{label}" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        losses = [json.loads(line)["loss"] for line in metrics if '"kind": "train"' in line]
        out[label]["train_losses"] = losses  # the same batches and arithmetic: the same losses
        print(label, out[label], flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench store", description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=5_000_000)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3, help="Multi30k runs per side, in alternating order")
    p.add_argument("--out", default=str(ROOT / "results" / "bench" / "store.json"))
    p.add_argument("--profile", action="store_true", help="where the time goes, one run a side (above)")
    args = p.parse_args(argv)
    results = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "threads": os.cpu_count(),
        "pairs": args.pairs,
        "steps": args.steps,
    }
    if args.profile:
        for order, store_first in (("memory_first", False), ("store_first", True)):  # both orders
            with tempfile.TemporaryDirectory() as tmp:
                results[f"profile_{order}"] = profile_sides(args.steps, Path(tmp), store_first)
        write_json(Path(args.out), results)
        print(f"wrote {args.out}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        synthetic = (("synthetic", args.pairs), ("synthetic_tenth", args.pairs // 10)) if args.pairs else ()
        for label, n in synthetic:
            start = time.perf_counter()
            write_synthetic(tmp / label, n)
            valid = tmp / f"{label}_valid"
            write_synthetic(valid, 200, seed=2)
            written = time.perf_counter() - start
            data = {"train": str(tmp / label), "valid": str(valid), "src_lang": "en", "tgt_lang": "fr"}
            row = train_once(config(data, tmp / f"run_{label}", args.steps, tmp / "cache", True), tmp)
            results[label] = {"pairs": n, "write_seconds": round(written, 1), **row}
            print(label, results[label], flush=True)
        multi30k = {"train": "multi30k:train", "valid": "multi30k:val"}
        sides = {"multi30k_memory": False, "multi30k_store": True}
        runs: dict[str, list[dict]] = {label: [] for label in sides}
        for i in range(args.repeats):
            for label in list(sides)[:: 1 if i % 2 == 0 else -1]:  # ABBA: neither side always first
                cfg = config(multi30k, tmp / f"run_{label}_{i}", args.steps, tmp / "cache", sides[label])
                runs[label].append(train_once(cfg, tmp))
                print(label, i, runs[label][-1], flush=True)
        for label, rows in runs.items():
            rates = [r["tokens_per_s"] for r in rows]
            results[label] = {
                "tokens_per_s": statistics.median(rates),
                "tokens_per_s_runs": rates,
                "peak_rss_mib": max(r["peak_rss_mib"] for r in rows),
                "runs": rows,  # every run's own figures
            }
        memory, store = (results[label]["tokens_per_s"] for label in sides)
        results["multi30k_store_vs_memory"] = round(store / memory, 4)
        print("store / memory tokens/s, medians:", results["multi30k_store_vs_memory"], flush=True)
    write_json(Path(args.out), results)
    print(f"wrote {args.out}")
