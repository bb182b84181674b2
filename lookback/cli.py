"""The `lookback` command: thin subcommands over the Python API.

    lookback train CONFIG [--set key=value ...] [--resume]
    lookback translate RUN_DIR [--beam N] [--nbest K]   (stdin -> stdout, or interactive)
    lookback evaluate RUN_DIR [--test SPEC] [--beam N]
    lookback study STUDY.yaml [--evaluate-only]
    lookback attention RUN_DIR "sentence" -o plot.png [--words]
    lookback explain RUN_DIR "sentence" [--json]   |   lookback explain --lecture
    lookback neighbours RUN_DIR WORD [--side target]
    lookback serve RUN_DIR [RUN_DIR ...] [--port 8000]
    lookback data synth --task reverse --lengths 5-100 --out DIR

Errors that the user can fix print one line and exit with status 2;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from .checkpoint import CheckpointError
from .config import ConfigError, load_config
from .data import DataError
from .distributed import is_main
from .synth import add_synth_parser

USER_ERRORS = (ConfigError, DataError, CheckpointError, FileNotFoundError, FileExistsError, ValueError)


class TqdmHandler(logging.Handler):
    """Log lines that do not tear the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


def cmd_train(args: argparse.Namespace) -> None:
    from .train import train

    cfg = load_config(args.config, args.set)
    run_dir = train(cfg, resume=args.resume)
    if is_main():  # under torchrun, once
        print(f"run directory: {run_dir}")


def _translator(args: argparse.Namespace):
    from .device import describe, resolve_device
    from .translator import Translator

    device = getattr(args, "device", "cpu")
    if device != "cpu":
        device = resolve_device(device, "--device")
    translator = Translator.load(
        args.run_dir, checkpoint=args.checkpoint, device=device, precision=getattr(args, "precision", None)
    )
    if hasattr(args, "device"):  # translate and evaluate say where they run, on stderr
        print(f"lookback: {describe(translator.device, translator.precision)}", file=sys.stderr)
    return translator


def cmd_translate(args: argparse.Namespace) -> None:
    translator = _translator(args)
    nbest = args.nbest or 1
    beam = max(args.beam or translator.decode.beam, nbest)

    def show(lines: list[str], offset: int) -> None:
        for i, outs in enumerate(translator.translate_nbest(lines, beam, nbest)):
            if nbest == 1:
                print(outs[0].text, flush=True)
            for out in outs if nbest > 1 else []:
                print(f"{offset + i}\t{out.score:.4f}\t{out.text}", flush=True)

    if sys.stdin.isatty():
        print(f"lookback: translating with beam {beam}; an empty line or Ctrl-D ends", file=sys.stderr)
        while True:
            print("> ", end="", file=sys.stderr, flush=True)  # the prompt stays off stdout
            line = sys.stdin.readline()
            if not line.strip():
                break
            show([line.strip()], 0)
        return
    lines = (line.rstrip("\n") for line in sys.stdin)
    for n, chunk in enumerate(iter(lambda: list(itertools.islice(lines, 512)), [])):
        show(chunk, n * 512)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from .data import read_parallel
    from .evaluate import bleu_by_length, score

    translator = _translator(args)
    data_cfg = translator.config.data
    spec = args.test or data_cfg.test
    src, ref = read_parallel(
        spec, data_cfg.src_lang, data_cfg.tgt_lang, args.multi30k_dir or data_cfg.multi30k_dir
    )
    beam = args.beam or translator.decode.beam
    hyps = [t.text for t in translator.translate(src, beam=beam)]
    scores = score(hyps, ref, data_cfg.tgt_lang)
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    if args.json:
        print(
            json.dumps(
                {"test": spec, "beam": beam, **scores.to_dict(), "by_length": bleu_by_length(src, hyps, ref)},
                indent=2,
            )
        )
        return
    print(f"{spec}, beam {beam}:")
    print(scores.summary())
    for i in range(min(args.show, len(src))):
        print(f"  src: {src[i]}\n  ref: {ref[i]}\n  hyp: {hyps[i]}")


def cmd_study(args: argparse.Namespace) -> None:
    from .study import load_study, run_study

    study = load_study(args.study)
    only = args.models.split(",") if args.models else None
    result = run_study(study, train=not args.evaluate_only, extra=args.set, only=only)
    print(
        f"study {study.name}: {len(result['models'])} models, {len(result['tests'])} test sets, "
        f"{result['wall_seconds'] / 60:.1f} min; report: {study.out_dir / 'report.md'}"
    )


def cmd_attention(args: argparse.Namespace) -> None:
    from .alignment import plot_alignment

    translator = _translator(args)
    beam = max(args.beam, args.hypothesis + 1)
    outs = translator.translate_nbest([args.sentence], beam, args.hypothesis + 1)[0]
    if args.hypothesis >= len(outs):
        raise ValueError(f"beam {beam} found {len(outs)} hypotheses; there is no number {args.hypothesis}")
    out = outs[args.hypothesis]
    if out.attention is None:
        kind = translator.config.model.attention if translator.config else "none"
        raise ValueError(
            f"{args.run_dir}: the model has attention {kind!r}, so there is no alignment to plot"
        )
    search = "greedy" if beam == 1 else f"beam {beam}, hypothesis {args.hypothesis + 1}"
    plot_alignment(
        out.attention,
        out.src_tokens,
        out.tokens,
        args.output,
        title=f"{out.text}  ({search})",
        words=args.words,
    )
    print(out.text)
    print(f"alignment: {args.output}")


def cmd_explain(args: argparse.Namespace) -> None:
    from .explain import format_trace, lecture, lecture_numbers, trace

    if args.lecture:
        print(json.dumps(lecture_numbers(), indent=2) if args.json else lecture())
        return
    if not args.run_dir or args.sentence is None:
        raise ValueError("explain needs RUN_DIR and a sentence (or --lecture)")
    tr = trace(_translator(args), args.sentence, beam=args.beam, hypothesis=args.hypothesis)
    print(
        json.dumps(tr.to_dict(), indent=2, ensure_ascii=False) if args.json else format_trace(tr, args.step)
    )


def cmd_neighbours(args: argparse.Namespace) -> None:
    from .neighbours import neighbours

    pieces, near = neighbours(_translator(args), args.word, side=args.side, k=args.k)
    how = "" if len(pieces) == 1 else f" (the mean of its pieces {' '.join(pieces)})"
    print(f"nearest to {args.word!r}{how} in the {args.side} embeddings, by cosine similarity:")
    for piece, sim in near:
        print(f"  {sim:7.3f}  {piece}")


def cmd_serve(args: argparse.Namespace) -> None:
    from .serve import serve

    serve(args.run_dirs, host=args.host, port=args.port, checkpoint=args.checkpoint, max_chars=args.max_chars)


def _add_set(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=text)


def _add_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    p.add_argument("--hypothesis", type=int, default=0, help="which beam hypothesis, 0 = the best")
    p.add_argument("--checkpoint", default="best", choices=("best", "last"), help="which checkpoint")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lookback", description="RNN encoder-decoder NMT with attention.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("config", help="YAML config file (see configs/)")
    _add_set(p, "override a config value, e.g. --set train.lr=0.0005 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in train.run_dir from last.pt")
    p.set_defaults(func=cmd_train)

    add_synth_parser(sub)  # lookback data synth

    p = sub.add_parser("study", help="train and compare models by source length (the bottleneck study)")
    p.add_argument("study", help="study YAML file (see configs/study/)")
    p.add_argument("--evaluate-only", action="store_true", help="evaluate the existing run directories")
    p.add_argument("--models", help="comma-separated names: run only these models of the study")
    _add_set(p, "override a config value of every model (repeatable)")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("attention", help="plot the alignment matrix of one translation")
    p.add_argument("run_dir", help="run directory written by `lookback train`")
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("-o", "--output", required=True, help="image file: .png, .svg or .pdf")
    p.add_argument("--words", action="store_true", help="merge subword pieces into words")
    _add_search(p)
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser("explain", help="trace a translation step by step (or --lecture: the notes' examples)")
    p.add_argument("run_dir", nargs="?", help="run directory written by `lookback train`")
    p.add_argument("sentence", nargs="?", help="the source sentence")
    p.add_argument("--lecture", action="store_true", help="run the lecture notes' worked examples")
    p.add_argument("--json", action="store_true", help="print the trace as JSON")
    p.add_argument("--step", type=int, help="show only this output step (from 1)")
    _add_search(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("neighbours", help="nearest words in a learned embedding table")
    p.add_argument("run_dir", help="run directory written by `lookback train`")
    p.add_argument("word")
    p.add_argument("--side", choices=("source", "target"), default="source", help="which embedding table")
    p.add_argument("-k", type=int, default=10, help="how many neighbours")
    p.add_argument("--checkpoint", default="best", choices=("best", "last"), help="which checkpoint")
    p.set_defaults(func=cmd_neighbours)

    p = sub.add_parser("serve", help="the web explorer: translations and attention, models side by side")
    p.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories to load (NAME=DIR names one)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-chars", type=int, default=500, help="longest input sentence accepted")
    p.add_argument("--checkpoint", default="best", choices=("best", "last"), help="which checkpoint")
    p.set_defaults(func=cmd_serve)

    for name, func, text in (
        ("translate", cmd_translate, "translate stdin to stdout"),
        ("evaluate", cmd_evaluate, "translate a test set and score it"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("run_dir", help="run directory written by `lookback train`")
        p.add_argument("--beam", type=int, help="beam size (1: greedy; default: the config's decode.beam)")
        p.add_argument("--checkpoint", default="best", choices=("best", "last"), help="which checkpoint")
        p.add_argument(
            "--device",
            default="auto",
            choices=("auto", "cpu", "cuda"),
            help="auto: the GPU if torch sees one",
        )
        p.add_argument(
            "--precision",
            choices=("fp32", "bf16", "fp16"),
            help="autocast the search (default: the config's decode.precision, fp32)",
        )
        p.set_defaults(func=func)
        if name == "translate":
            p.add_argument("--nbest", type=int, help="print the K best as 'index<TAB>score<TAB>text'")
        else:
            p.add_argument("--test", help="corpus spec, e.g. multi30k:test_2016_flickr (default: data.test)")
            p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")
            p.add_argument("--output", help="write the translations to this file")
            p.add_argument("--show", type=int, default=3, help="print this many example translations")
            p.add_argument("--json", action="store_true", help="print scores as JSON, with BLEU by length")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = TqdmHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    # under torchrun rank 0 tells the story; the other ranks speak only to warn
    logging.basicConfig(level=logging.INFO if is_main() else logging.WARNING, handlers=[handler])
    try:
        args.func(args)
    except USER_ERRORS as exc:
        if args.debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"lookback: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lookback: interrupted", file=sys.stderr)
        return 130
    return 0
