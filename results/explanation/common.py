"""What make.py and uniform_steps.py share: their flags, the study's models and test set, and a
results file that --add extends."""

import argparse
import json
from pathlib import Path

import torch

from lookback.data.read import read_parallel
from lookback.device import cpu_flags, cpu_name
from lookback.study.run import load_study

HERE = Path(__file__).parent


def parser(out: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--models", help="comma-separated study models (default: every trained one)")
    p.add_argument("--limit", type=int, default=0, help="only the first N test pairs (0: all)")
    p.add_argument("--out", default=str(HERE / out), help="where the results go")
    p.add_argument("--study", default=str(HERE.parents[1] / "configs" / "study" / "attention_variants.yaml"))
    p.add_argument("--add", action="store_true", help="keep the models already in --out, add these")
    return p


def study_test_set(args: argparse.Namespace):
    """The chosen models' configs, the study's test spec, its data config, sources and references."""
    study = load_study(args.study)
    configs = study.configs(only=args.models.split(",") if args.models else None)
    (spec,) = study.tests
    data = next(iter(configs.values())).data
    src, ref = read_parallel(spec, data.src_lang, data.tgt_lang, data.multi30k_dir)
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    return configs, spec, data, src, ref


def new_results(args: argparse.Namespace, spec: str, **fields) -> dict:
    """The results to fill: the device and test, and with --add the models measured before."""
    device = f"cpu ({cpu_name()}), {torch.get_num_threads()} threads"
    results = {"device": device, "cpu_flags": cpu_flags(), "test": spec, **fields}
    results["models"] = {}
    if args.add and Path(args.out).exists():  # measured before: kept, and these models added or replaced
        results["models"] = json.loads(Path(args.out).read_text(encoding="utf-8"))["models"]
    return results
