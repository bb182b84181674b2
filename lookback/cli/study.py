"""lookback study, tune, data synth: compare models by source length, search a recipe, make corpora."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..data.synth import DEFAULT_SIZES, SPLITS, TASKS, parse_lengths, synth_corpus
from .flags import add_set, int_range, nonnegative_int


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="train and compare models by source length (the bottleneck study)")
    p.add_argument(
        "study", help="study YAML file, or a shipped one by name: study/reverse (see lookback configs)"
    )
    p.add_argument("--evaluate-only", action="store_true", help="evaluate the existing run directories")
    p.add_argument("--models", help="comma-separated names: run only these models of the study")
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run each model and seed as a Ray task: alone, on a local Ray instance of this machine's "
        "CPUs; with an address (auto, ray://HOST:PORT), on that cluster (pip install 'lookback[ray]')",
    )
    add_set(p, "override a config value of every model (repeatable)")
    p.set_defaults(func=study)

    p = sub.add_parser(
        "tune", help="search a config's recipe on validation BLEU (Ray Tune, Optuna, ASHA): best.yaml"
    )
    p.add_argument("search", help="search YAML file, or a shipped one by name: tune/quickstart")
    p.add_argument(
        "-o", "--out", metavar="DIR", help="where the trials and results go (default: the file's out_dir)"
    )
    p.add_argument(
        "--ray",
        default="local",
        metavar="ADDRESS",
        help="the Ray cluster the trials run on: auto, ray://HOST:PORT (default: a local instance)",
    )
    p.set_defaults(func=tune)

    data = sub.add_parser("data", help="make corpora")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("synth", help=f"write a synthetic parallel corpus ({', '.join(TASKS)})")
    p.add_argument("--task", required=True, choices=TASKS, help="what the target is made from the source")
    p.add_argument(
        "--lengths", required=True, metavar="LO-HI", help="source lengths in words, LO-HI, e.g. 5-100"
    )
    p.add_argument(
        "--seed", type=nonnegative_int, default=1, help="seed of the train split; val and test use seed+1, +2"
    )
    p.add_argument(
        "-o",
        "--output",
        "--out",
        dest="out",
        required=True,
        metavar="DIR",
        help="folder for {train,val,test}.{src,tgt}",
    )
    p.add_argument(
        "--vocab", type=int_range(2), default=50, metavar="N", help="number of distinct source words"
    )
    for split in SPLITS:
        p.add_argument(
            f"--{split}",
            type=nonnegative_int,
            default=DEFAULT_SIZES[split],
            metavar="N",
            help=f"pairs in the {split} split",
        )
    p.set_defaults(func=synth)


def study(args: argparse.Namespace) -> None:
    from ..study.run import load_study, run_study

    study = load_study(args.study)
    only = args.models.split(",") if args.models else None
    result = run_study(study, train=not args.evaluate_only, extra=args.set, only=only, ray=args.ray)
    print(
        f"study {study.name}: {len(result['models'])} models, {len(result['tests'])} test sets, "
        f"{result['wall_seconds'] / 60:.1f} min; report: {Path(study.out_dir) / 'report.md'}"
    )


def tune(args: argparse.Namespace) -> None:
    from ..study.tune import load_search, run_search

    search = load_search(args.search)
    search.out_dir = args.out or search.out_dir
    result = run_search(search, args.ray)
    best = result["best"]
    shown = {k: f"{best[k]:.4g}" if isinstance(best[k], float) else best[k] for k in search.space}
    values = ", ".join(f"{k}={v}" for k, v in shown.items())
    print(
        f"tune {search.name}: {len(result['trials'])} trials, {result['wall_seconds'] / 60:.1f} min; best "
        f"validation BLEU {best['bleu']:.2f} ({values}); config: {Path(search.out_dir) / 'best.yaml'}"
    )


def synth(args: argparse.Namespace) -> None:
    sizes = {"train": args.train, "val": args.val, "test": args.test}
    prefixes = synth_corpus(
        args.task, Path(args.out), parse_lengths(args.lengths), args.seed, sizes, args.vocab
    )
    for split, prefix in prefixes.items():
        print(f"{split}: {prefix}.src / {prefix}.tgt ({sizes[split]} pairs)")
    keys = [
        "tokenizer.kind=word",
        "data.src_lang=src",
        "data.tgt_lang=tgt",
        f"data.train={prefixes['train']}",
        f"data.valid={prefixes['val']}",
        f"data.test={prefixes['test']}",
    ]
    print("config:", " ".join(f"--set {k}" for k in keys))
