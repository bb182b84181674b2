"""The `lookback` command: thin subcommands over the Python API.

    lookback quickstart [--set key=value ...]   (the main job: train, translate three sentences, test BLEU)
    lookback configs                             (the shipped configs, each usable by name)
    lookback train CONFIG [--set key=value ...] [--resume [--accept-changes]]   (a file or a shipped name)
    lookback translate RUN_DIR [RUN_DIR ...] [--beam N] [--nbest K]   (stdin -> stdout; several: an ensemble)
    lookback evaluate RUN_DIR [RUN_DIR ...] [--test SPEC] [--beam N] [--diagnostics]
    lookback average RUN_DIR [--last N]   (then --checkpoint averaged)
    lookback study STUDY.yaml [--evaluate-only] [--ray [ADDRESS]]
    lookback tune SEARCH.yaml [--ray ADDRESS]   (a recipe searched on validation: best.yaml)
    lookback faithfulness RUN_DIR [--test SPEC] [--limit N] [--json]   (counterfactual attention)
    lookback align RUN_DIR --src FILE --tgt FILE [--gold FILE] [--eflomal TRAIN_SPEC]   (Pharaoh; AER)
    lookback attention RUN_DIR "sentence" -o plot.png [--words]
    lookback takeoff RUN_DIR [RUN_DIR ...] -o takeoff.png   (attention statistics beside BLEU)
    lookback curves RUN_DIR [RUN_DIR ...] -o curves.png     (loss and BLEU by updates and minutes)
    lookback compare A.txt B.txt --ref REF.txt [--json]     (paired bootstrap and randomisation)
    lookback export RUN_DIR -o DIR [--test SPEC] [--onnx]   (a model to share: safetensors, no pickle)
    lookback explain RUN_DIR "sentence" [--json]   |   lookback explain --lecture
    lookback neighbours RUN_DIR WORD [--side target]
    lookback serve RUN_DIR [RUN_DIR ...] [--port 8000]
    lookback data synth --task reverse --lengths 5-100 --out DIR

`lookback --plugin FILE_OR_MODULE COMMAND ...` imports a Python file or module first, so that
what it registers (a score: `lookback.register_score`) is known to the command: a run trained
with a score of your own trains, translates, explains and serves this way.

Every command that loads a model takes the same --checkpoint, --device and
--precision (and --beam where it searches), and says on stderr where it runs;
every command that writes a file takes -o/--output. Each command's parser sits
beside its handler, in the module of its group: quickstart.py (quickstart, configs),
train.py (train, average), translate.py (translate, evaluate, compare, export), explain.py (attention,
explain, neighbours, faithfulness, align, takeoff, curves), study.py (study, tune,
data synth), serve.py; flags.py holds the flags they share.
Errors that the user can fix, bad flags included, print one line and exit
with status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from pathlib import Path
from typing import NoReturn

from tqdm import tqdm

from ..errors import CheckpointError, ConfigError, DataError, first_line
from ..training.distributed import is_main
from . import explain, quickstart, serve, study, train, translate

USER_ERRORS = (ConfigError, DataError, CheckpointError, FileNotFoundError, FileExistsError, ValueError)
GROUPS = (quickstart, train, translate, study, explain, serve)  # each adds its commands, in this order


class TqdmHandler(logging.Handler):
    """Log lines that do not tear the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `lookback COMMAND: error: ...`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lookback", description="RNN encoder-decoder NMT with attention.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE_OR_MODULE",
        help="import this Python file (or module) first, e.g. one calling register_score; repeatable",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.add(sub)
    return parser


def load_plugin(spec: str) -> None:
    """Import a Python file (a path ending in .py) or an importable module by name."""
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise FileNotFoundError(f"--plugin {spec}: no such file")
        name = f"lookback_plugin_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[name]
            raise ValueError(f"--plugin {spec}: {type(exc).__name__}: {first_line(exc)}") from exc
        return
    try:
        importlib.import_module(spec)
    except ImportError as exc:
        raise ValueError(f"--plugin {spec}: {first_line(exc)} (a file must end in .py)") from exc


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = TqdmHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    # under torchrun rank 0 tells the story; the other ranks speak only to warn
    logging.basicConfig(level=logging.INFO if is_main() else logging.WARNING, handlers=[handler])
    try:
        for plugin in args.plugin:
            load_plugin(plugin)
        args.func(args)
    except USER_ERRORS as exc:
        if args.debug:
            raise
        lines = str(exc).splitlines() if isinstance(exc, ConfigError) else []  # a config: every problem
        for line in lines or [first_line(exc, limit=1000)]:
            print(f"lookback: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lookback: interrupted", file=sys.stderr)
        return 130
    return 0
