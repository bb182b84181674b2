"""A study on Ray against the same study run serially, on this machine: wall time and outputs.

    python -m bench ray-study [--runs 4] [--steps 400] [--cpus N] [-o results/bench/ray_study.json]

The study trains `--runs` small models (additive attention, d = 64, one thread each, `--steps`
updates, seeds 1..runs) on a synthetic reverse corpus of 5-30 symbols and evaluates each with
greedy search. It runs once serially (`lookback study`: one run after another, each on its one
thread) and once on a local Ray instance of `--cpus` CPUs (`lookback study --ray`: as many runs at
once as there are CPUs, one each), into separate folders, and reports both wall times, their
ratio, Ray's start-up, and whether every output is the same. With C CPUs and R runs the ideal
ratio is ceil(R / C) / R; on a cluster of N machines of C cores each, ceil(R / (N C)) / R, plus
Ray's start-up once. Run it alone: another process on the cores changes both timings.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

import yaml

from .common import machine_record, write_json


def study_file(folder: Path, runs: int, steps: int) -> Path:
    """The study: `runs` seeds of one model on the reverse task, in `folder`."""
    from lookback.data.synth import synth_corpus

    sizes = {"train": 5000, "val": 100, "test": 200}
    data = synth_corpus("reverse", folder / "data", (5, 30), seed=1, sizes=sizes)
    base = {
        "data": {
            "src_lang": "src",
            "tgt_lang": "tgt",
            "train": str(data["train"]),
            "valid": str(data["val"]),
        },
        "tokenizer": {"kind": "word", "vocab_size": 100, "joint": False},
        "model": {"emb_size": 64, "hidden_size": 64, "dec_hidden_size": 64, "attention_size": 64},
        "train": {
            "max_steps": steps,
            "valid_every": steps,
            "max_tokens": 2000,
            "lr": 0.005,
            "threads": 1,
            "precision": "fp32",
            "log_every": steps,
        },
        "decode": {"precision": "fp32"},
    }
    (folder / "base.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    study = {
        "name": "ray_bench",
        "base": "base.yaml",
        "models": {"additive": {"model.attention": "additive"}},
        "seeds": {"additive": list(range(2, runs + 1))},
        "tests": [str(data["test"])],
        "beam": [1],
        "flops_lengths": [10],
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(study), encoding="utf-8")
    return path


def outputs(out: Path) -> dict:
    import lzma

    kept = json.loads(lzma.decompress((out / "evaluations.json.xz").read_bytes()))
    return {run: {s: t["beam1"]["outputs"] for s, t in e["tests"].items()} for run, e in kept.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench ray-study", description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs in the study (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=400, help="updates per run (default: %(default)s)")
    ap.add_argument("--cpus", type=int, default=0, help="the local Ray instance's CPUs (0: all cores)")
    ap.add_argument("-o", "--output", help="results JSON")
    args = ap.parse_args(argv)

    import ray

    from lookback.device import cores
    from lookback.study.fanout import start as start_ray
    from lookback.study.run import load_study, run_study

    cpus = args.cpus or cores()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = study_file(folder, args.runs, args.steps)
        serial = load_study(path)
        serial.out_dir = str(folder / "serial")
        start = time.perf_counter()
        run_study(serial)
        serial_s = time.perf_counter() - start

        start = time.perf_counter()
        start_ray("local", cpus=cpus)
        startup_s = time.perf_counter() - start
        on_ray = load_study(path)
        on_ray.out_dir = str(folder / "ray")
        run_study(on_ray, ray="local")
        ray_s = time.perf_counter() - start
        ray.shutdown()
        same = outputs(folder / "serial") == outputs(folder / "ray")

    ideal = math.ceil(args.runs / cpus) / args.runs
    print(
        f"{args.runs} runs of {args.steps} updates, 1 thread each: serial {serial_s:.1f} s, on Ray with "
        f"{cpus} CPUs {ray_s:.1f} s (of which Ray's start {startup_s:.1f} s): {ray_s / serial_s:.2f} of the "
        f"serial time (ideal {ideal:.2f}); outputs the same: {same}",
        flush=True,
    )
    if args.output:
        write_json(
            args.output,
            machine_record(
                "bench ray-study",
                argv,
                runs=args.runs,
                steps=args.steps,
                ray_cpus=cpus,
                serial_seconds=serial_s,
                ray_seconds=ray_s,
                ray_startup_seconds=startup_s,
                ratio=ray_s / serial_s,
                ideal_ratio=ideal,
                same_outputs=same,
            ),
        )
    return 0 if same else 1
