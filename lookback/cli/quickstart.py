"""lookback quickstart, configs: the main job, and the configs that ship with lookback.

`lookback quickstart` is the README's first command in one process, from any directory after a
plain `pip install`: train the shipped `quickstart` config (12 minutes), translate three sentences
with beam 5, score test_2016_flickr with beam 5. Run again, it continues the run it finds in
train.run_dir (runs/quickstart), or just reports it when it is finished.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import SHIPPED, load_config, shipped_configs
from .flags import add_set

SENTENCES = (
    "A little girl is playing with a red ball.",
    "Two men are sitting on a bench in the park.",
    "A dog runs through the snow.",
)
BEAM = 5


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="the main job: train the shipped quickstart config, translate three sentences, print test BLEU",
    )
    add_set(p, "override a value of the quickstart config, e.g. --set train.time_limit=2 (repeatable)")
    p.set_defaults(func=quickstart)

    p = sub.add_parser("configs", help="list the shipped configs, each usable by name (lookback train NAME)")
    p.set_defaults(func=configs)


def quickstart(args: argparse.Namespace) -> None:
    from ..training.train import train
    from ..translator import Translator
    from . import build_parser

    cfg = load_config("quickstart", args.set)
    run_dir = Path(cfg.train.run_dir)
    train(cfg, resume=(run_dir / "last.pt").is_file())  # a second run continues (or reports) the first
    print(f"\n== translating a few sentences (beam {BEAM})")
    outputs = Translator.load(run_dir).translate(list(SENTENCES), beam=BEAM)
    for src, out in zip(SENTENCES, outputs, strict=True):
        print(f"  {src}\n    {out.text}")
    print(f"\n== {cfg.data.test}, beam {BEAM}")
    argv = ["evaluate", str(run_dir), "--test", cfg.data.test, "--beam", str(BEAM)]
    evaluate = build_parser().parse_args(argv)  # exactly `lookback evaluate`, not a copy of it
    evaluate.func(evaluate)


def configs(args: argparse.Namespace) -> None:
    names = shipped_configs()
    width = max(map(len, names))
    for name in names:
        first = (SHIPPED / f"{name}.yaml").read_text(encoding="utf-8").splitlines()[0]
        about = first.removeprefix("#").strip() if first.startswith("#") else ""
        print(f"{name:<{width}}  {about[:100]}")
    print(f"\n{len(names)} configs in {SHIPPED}: use one by name (lookback train NAME), or copy it")
