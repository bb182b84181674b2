"""lookback train, average: make a model, and average its last checkpoints."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import load_config
from ..training.distributed import is_main
from .flags import add_set, positive_int


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("config", help="YAML config file, or a shipped one by name: quickstart (lookback configs)")
    add_set(p, "override a config value, e.g. --set train.lr=0.0005 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in train.run_dir from last.pt")
    p.add_argument(
        "--accept-changes",
        action="store_true",
        help="with --resume: go on although the config changes a key an exact resume needs (seed, "
        "batch size, data, tokenizer, model); the run's config.yaml then records the new values",
    )
    p.set_defaults(func=train)

    p = sub.add_parser("average", help="average the weights of a run's last checkpoints into averaged.pt")
    p.add_argument("run_dir", help="run directory trained with train.keep_checkpoints >= 2")
    p.add_argument(
        "--last", type=positive_int, metavar="N", help="average the N newest kept checkpoints (default: all)"
    )
    p.set_defaults(func=average)


def train(args: argparse.Namespace) -> None:
    from ..training.train import train

    cfg = load_config(args.config, args.set)
    if args.accept_changes and not args.resume:
        raise ValueError("--accept-changes goes with --resume")
    run_dir = train(cfg, resume=args.resume, accept_changes=args.accept_changes)
    if is_main():  # under torchrun, once
        print(f"run directory: {run_dir}")


def average(args: argparse.Namespace) -> None:
    from ..training.checkpoint import RunDir, average_checkpoints, save_checkpoint

    kept = RunDir(args.run_dir).kept()
    paths = kept[-args.last :] if args.last else kept
    if len(paths) < 2:
        raise ValueError(
            f"{args.run_dir}: {len(kept)} kept checkpoint(s) (step_N.pt), and averaging needs 2 or more; "
            "train with --set train.keep_checkpoints=N"
        )
    out = Path(args.run_dir) / "averaged.pt"
    save_checkpoint(average_checkpoints(paths), out)
    print(f"{out}: the mean of {len(paths)} checkpoints, {paths[0].name} to {paths[-1].name}")
    print("use it with --checkpoint averaged (translate, evaluate, serve, ...)")
