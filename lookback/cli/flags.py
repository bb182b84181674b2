"""The flags that several commands share, each spelled one way, and what they load.

Every command that loads a model takes its run directory (or several), --checkpoint, --device and
--precision; those that search also take --beam and the decoding flags, which change this run's
decoding only. A command says which of these it has by calling the matching add_* function, and
reads them back through the matching function below: nothing looks into the parsed arguments to
guess.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable

from ..config import MAX_THREADS
from ..runtime.fast import BACKENDS, QUANTIZE

SEARCH_FLAGS = ("length_penalty", "max_ratio", "hard_attention", "coverage_penalty")  # decode.*


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (no upper bound when hi is None)."""
    expected = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not a number, or one of over 4,300 digits
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            shown = text if len(text) <= 20 else text[:17] + "..."
            raise argparse.ArgumentTypeError(f"got {shown!r}, expected {expected}")
        return value

    return parse


def float_at_least(lo: float, open_: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number >= lo (> lo when open_)."""
    expected = f"a number {'>' if open_ else '>='} {lo:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < lo or (open_ and value == lo):
            shown = text if len(text) <= 20 else text[:17] + "..."
            raise argparse.ArgumentTypeError(f"got {shown!r}, expected {expected}")
        return value

    return parse


positive_int = int_range(1)
nonnegative_int = int_range(0)


def add_run_dir(p: argparse.ArgumentParser, several: str | None = None, optional: bool = False) -> None:
    """The run directory: one (`run_dir`), or several (`run_dirs`): "ensemble" (they translate as
    one) or "named" (each a model of its own, NAME=DIR naming it)."""
    if several == "ensemble":
        text = "run directory written by `lookback train`; several translate as an ensemble"
        p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help=text)
    elif several == "named":
        text = "run directories written by `lookback train` (NAME=DIR names one)"
        p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help=text)
    else:
        text = "run directory written by `lookback train`"
        p.add_argument("run_dir", nargs="?" if optional else None, help=text)


def add_load_flags(p: argparse.ArgumentParser) -> None:
    """--checkpoint, --device and --precision: which weights, where, and in what precision."""
    p.add_argument(
        "--checkpoint",
        default="best",
        choices=("best", "last", "averaged"),
        help="which checkpoint (best: else last; averaged: written by lookback average)",
    )
    p.add_argument(
        "--device", default="auto", choices=("auto", "cpu", "cuda"), help="auto: the GPU if torch sees one"
    )
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16", "fp16"),
        help="autocast the search; auto: bf16 where the device runs it natively (default: decode.precision)",
    )


def add_search_flags(p: argparse.ArgumentParser, greedy: bool = False) -> None:
    """--beam and the decoding flags; greedy: --beam defaults to 1 rather than to decode.beam."""
    default = "1: greedy" if greedy else "the config's decode.beam"
    p.add_argument(
        "--beam", type=positive_int, default=1 if greedy else None, help=f"beam size (default {default})"
    )
    p.add_argument(
        "--length-penalty",
        type=float_at_least(0),
        metavar="A",
        help="beam search ranks finished outputs by log P / ((5 + length) / 6) ** A (GNMT); 0 ranks by "
        "log P alone, which favours short outputs (default: decode.length_penalty)",
    )
    p.add_argument(
        "--max-ratio",
        type=float_at_least(0, open_=True),
        metavar="R",
        help="the length limit: an output has at most R x source tokens + 5, </s> included; one cut "
        "there still pays for its </s> (default: decode.max_ratio)",
    )
    p.add_argument(
        "--hard-attention",
        type=int_range(0),
        metavar="K",
        help="keep only the K largest attention weights of each step, renormalised (1: the argmax, "
        "hard alignment; 0: all, soft; default: decode.hard_attention)",
    )
    p.add_argument(
        "--coverage-penalty",
        type=float_at_least(0),
        metavar="B",
        help="beam search adds B x sum over source tokens of log min(their total attention, 1), GNMT's "
        "penalty for source words left untranslated (0: none; default: decode.coverage_penalty)",
    )


def add_runtime_flags(p: argparse.ArgumentParser) -> None:
    """--backend, --quantize and --threads: fast CPU decoding (runtime/fast.py)."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="torch",
        help="onnxruntime: run the network on ONNX Runtime (an export's --onnx graphs, or exported now)",
    )
    p.add_argument("--quantize", choices=QUANTIZE, help="int8: dynamic int8 quantisation of the weights")
    p.add_argument(
        "--threads", type=int_range(0, MAX_THREADS), default=0, help="CPU threads (0: one per core)"
    )


def add_test_flags(p: argparse.ArgumentParser, what: str = "") -> None:
    """--test (a corpus spec) and --multi30k-dir."""
    p.add_argument(
        "--test", help=what or "corpus spec, e.g. multi30k:test_2016_flickr (default: the run's data.test)"
    )
    p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")


def add_output(p: argparse.ArgumentParser, what: str, required: bool = False) -> None:
    """-o/--output, the one spelling of every command that writes a file."""
    p.add_argument("-o", "--output", required=required, help=what)


def add_hypothesis(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hypothesis",
        type=nonnegative_int,
        default=0,
        help="which beam hypothesis, 0 = the best (the beam is raised to hold it)",
    )


def add_set(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=text)


def search_changes(args: argparse.Namespace) -> dict:
    """The decoding flags given on this command line (add_search_flags), as decode.* changes."""
    return {key: getattr(args, key) for key in SEARCH_FLAGS if getattr(args, key) is not None}


def runtime_choice(args: argparse.Namespace) -> dict:
    """--backend, --quantize and --threads (add_runtime_flags), as Translator.load's arguments."""
    return {"backend": args.backend, "quantize": args.quantize, "threads": args.threads}


def load_translator(
    run_dirs: list[str], args: argparse.Namespace, runtime: dict | None = None, search: dict | None = None
):
    """The model of `run_dirs` (several: an ensemble) with add_load_flags' choices, and `runtime`
    (runtime_choice) and `search` (search_changes) where the command has those flags; says on
    stderr where it runs."""
    import torch

    from ..device import describe, resolve_device
    from ..translator import Translator

    device = resolve_device(args.device, "--device")
    runtime = runtime or {}
    if runtime.get("threads"):
        torch.set_num_threads(runtime["threads"])
    translator = Translator.ensemble(run_dirs, args.checkpoint, device, args.precision, **runtime)
    if search:  # this run only: a new DecodeConfig, the run's own left as it was
        translator.decode = dataclasses.replace(translator.decode, **search)
    where = describe(translator.device, translator.precision)
    if runtime.get("backend", "torch") != "torch" or runtime.get("quantize"):
        where += f"; backend {runtime['backend']}{', int8 weights' if runtime['quantize'] else ''}"
    print(f"lookback: {where}", file=sys.stderr)
    return translator


def test_set(spec: str | None, multi30k_dir: str | None, translator) -> tuple[str, list[str], list[str]]:
    """The test set `spec` names (default: the run's data.test): its spec, sources, references."""
    from ..data.read import read_parallel

    data = translator.config.data
    spec = spec or data.test
    return spec, *read_parallel(spec, data.src_lang, data.tgt_lang, multi30k_dir or data.multi30k_dir)
