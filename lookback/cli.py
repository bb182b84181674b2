"""The `lookback` command: thin subcommands over the Python API.

    lookback train CONFIG [--set key=value ...] [--resume [--accept-changes]]
    lookback translate RUN_DIR [RUN_DIR ...] [--beam N] [--nbest K]   (stdin -> stdout; several: an ensemble)
    lookback evaluate RUN_DIR [RUN_DIR ...] [--test SPEC] [--beam N] [--diagnostics]
    lookback average RUN_DIR [--last N]   (then --checkpoint averaged)
    lookback study STUDY.yaml [--evaluate-only]
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

Every command that loads a model takes the same --checkpoint, --device and
--precision (and --beam where it searches), and says on stderr where it runs.
Errors that the user can fix, bad flags included, print one line and exit
with status 2; `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from tqdm import tqdm

from .config import load_config, search_width
from .data.synth import DEFAULT_SIZES, SPLITS, TASKS, parse_lengths, synth_corpus
from .errors import CheckpointError, ConfigError, DataError, first_line
from .runtime.fast import BACKENDS, QUANTIZE
from .training.distributed import is_main

USER_ERRORS = (ConfigError, DataError, CheckpointError, FileNotFoundError, FileExistsError, ValueError)


class TqdmHandler(logging.Handler):
    """Log lines that do not tear the progress bar."""

    def emit(self, record: logging.LogRecord) -> None:
        tqdm.write(self.format(record), file=sys.stderr)


# Commands.


def cmd_train(args: argparse.Namespace) -> None:
    from .training.train import train

    cfg = load_config(args.config, args.set)
    if args.accept_changes and not args.resume:
        raise ValueError("--accept-changes goes with --resume")
    run_dir = train(cfg, resume=args.resume, accept_changes=args.accept_changes)
    if is_main():  # under torchrun, once
        print(f"run directory: {run_dir}")


def _translator(args: argparse.Namespace):
    """The model of args.run_dir, on args.device in args.precision; says on stderr where it runs."""
    from .device import describe, resolve_device
    from .translator import Translator

    device = resolve_device(args.device, "--device")
    run_dirs = [args.run_dir] if "run_dir" in args else args.run_dirs  # several: an ensemble
    fast = (
        dict(backend=args.backend, quantize=args.quantize, threads=args.threads) if "backend" in args else {}
    )
    if fast.get("threads"):
        import torch

        torch.set_num_threads(args.threads)
    translator = Translator.ensemble(run_dirs, args.checkpoint, device, args.precision, **fast)
    for key in ("length_penalty", "max_ratio", "hard_attention", "coverage_penalty"):  # this run only
        if getattr(args, key, None) is not None:
            setattr(translator.decode, key, getattr(args, key))
    where = describe(translator.device, translator.precision)
    if fast and (args.backend != "torch" or args.quantize):
        where += f"; backend {args.backend}{', int8 weights' if args.quantize else ''}"
    print(f"lookback: {where}", file=sys.stderr)
    return translator


def cmd_translate(args: argparse.Namespace) -> None:
    translator = _translator(args)
    beam = search_width(args.beam or translator.decode.beam, args.nbest)

    def show(lines: list[str], offset: int) -> None:
        for i, outs in enumerate(translator.translate_nbest(lines, beam, args.nbest)):
            if args.nbest == 1:
                print(outs[0].text, flush=True)
            for out in outs if args.nbest > 1 else []:
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


def _test_set(args: argparse.Namespace, translator) -> tuple[str, list[str], list[str]]:
    """The test set that --test names (default: the run's data.test): its spec, sources, references."""
    from .data.read import read_parallel

    data_cfg = translator.config.data
    spec = args.test or data_cfg.test
    multi30k = args.multi30k_dir or data_cfg.multi30k_dir
    return spec, *read_parallel(spec, data_cfg.src_lang, data_cfg.tgt_lang, multi30k)


def cmd_evaluate(args: argparse.Namespace) -> None:
    from .decoding.evaluate import bleu_by_length, score
    from .explain.diagnostics import diagnostics_by_length
    from .model.coverage import coverage_report

    translator = _translator(args)
    spec, src, ref = _test_set(args, translator)
    data_cfg = translator.config.data
    beam = args.beam or translator.decode.beam
    translations = translator.translate(src, beam=beam)
    hyps = [t.text for t in translations]
    scores = score(hyps, ref, data_cfg.tgt_lang)
    coverage = coverage_report([(t.attention, t.src_tokens, t.tokens) for t in translations])
    diagnostics = diagnostics_by_length(src, translations) if args.diagnostics else None
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    if args.json:
        print(
            json.dumps(
                {
                    "test": spec,
                    "beam": beam,
                    **scores.to_dict(),
                    "by_length": bleu_by_length(src, hyps, ref),
                    "coverage": coverage,
                    **({"diagnostics": diagnostics} if args.diagnostics else {}),
                },
                indent=2,
            )
        )
        return
    print(f"{spec}, beam {beam}:")
    print(scores.summary())
    print(_coverage_line(coverage))
    print("by source length (words): sentences, BLEU, output/reference length")
    for label, b in bleu_by_length(src, hyps, ref).items():
        print(f"  {label:>6}  {b['sentences']:5d}  {b['bleu']:6.2f}  {b['length_ratio']:.3f}")
    if args.diagnostics:
        print(_diagnostics_table(diagnostics))
    for i in range(min(args.show, len(src))):
        print(f"  src: {src[i]}\n  ref: {ref[i]}\n  hyp: {hyps[i]}")


def _diagnostics_table(by_length: dict[str, dict]) -> str:
    """diagnostics.diagnostics_by_length as text, one line per source-length bucket."""
    if not by_length:
        return "attention diagnostics: no attention"
    lines = [
        "attention diagnostics by source length (words), in % unless said (diagnostics.py):",
        "  bucket  sents  entropy  near-uniform  unattended  over-attended  parking (uniform)  backward",
    ]
    pct = lambda x: "     -" if x is None else f"{100 * x:6.1f}"  # noqa: E731
    for label, d in by_length.items():
        entropy = "     -" if d["entropy"] is None else f"{d['entropy']:6.3f}"
        lines.append(
            f"  {label:>6}  {d['sentences']:5d}   {entropy}        {pct(d['near_uniform'])}      "
            f"{pct(d['unattended'])}         {pct(d['over_attended'])}   {pct(d['parking'])} "
            f"({pct(d['parking_share'])})    {pct(d['backward'])}"
        )
    return "\n".join(lines)


def _coverage_line(c: dict) -> str:
    """coverage.coverage_report as one line: signs of under- and over-translation."""
    repeats = f"{100 * (c['repeated_bigrams'] or 0):.1f}% of output bigrams repeated"
    if c["under_covered"] is None:
        return f"coverage: no attention; {repeats}"
    return (
        f"coverage: {100 * c['under_covered']:.1f}% of source tokens under-covered (total attention "
        f"< 0.5), {100 * c['over_covered']:.1f}% over-covered (> 1.5); {repeats}"
    )


def cmd_faithfulness(args: argparse.Namespace) -> None:
    from .explain.faithfulness import COUNTERFACTUALS, faithfulness

    translator = _translator(args)
    spec, src, ref = _test_set(args, translator)
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    kinds = tuple(args.kinds.split(",")) if args.kinds else COUNTERFACTUALS
    report = faithfulness(translator, src, ref, kinds, seed=args.seed)
    report = {"run_dir": args.run_dir, "test": spec, **report}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{args.run_dir} on {spec}: {report['sentences']} sentences, attention {report['attention']}")
    if report["control"]:
        print("no attention: nothing to replace; this model is the control (its outputs cannot change)")
    print("by source length (words): greedy BLEU, then per counterfactual attention: mean Jensen-Shannon")
    print("divergence of P(y_t) (bits), share of steps whose argmax flips, BLEU decoded that way (change)")
    for label, row in report["by_length"].items():
        cells = [f"{label:>6} {row['sentences']:5d}  greedy {row['greedy']['bleu']:6.2f}"]
        for kind in report["counterfactuals"]:
            r = row[kind]
            cells.append(
                f"{kind} {r['js_divergence']:.3f} {100 * r['flipped_steps']:4.1f}% "
                f"{r['bleu']:6.2f} ({r['bleu_change']:+.2f})"
            )
        print("  " + "  |  ".join(cells))


def cmd_align(args: argparse.Namespace) -> None:
    from .data.read import read_lines, read_parallel
    from .explain.alignment import align, alignment_error, eflomal_links, pharaoh, read_gold

    srcs, tgts = (read_lines(path) for path in (args.src, args.tgt))
    if len(srcs) != len(tgts):
        raise ValueError(f"{args.src} has {len(srcs)} lines but {args.tgt} has {len(tgts)}")
    gold = None
    if args.gold:
        lines = read_lines(args.gold)
        if len(lines) != len(srcs):
            raise ValueError(f"{args.gold} has {len(lines)} lines but {args.src} has {len(srcs)}")
        gold = [read_gold(line, args.one_based, f"{args.gold} line {n}") for n, line in enumerate(lines, 1)]
    translator = _translator(args)
    predicted = align(translator, srcs, tgts, args.method, args.threshold)
    text = "".join(pharaoh(p) + "\n" for p in predicted)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    report = sys.stderr if not args.output else sys.stdout  # the links alone on stdout
    pct = lambda x: "-" if x is None else f"{100 * x:.2f}"  # noqa: E731
    if gold is not None:
        r = alignment_error(predicted, [s for s, _ in gold], [p for _, p in gold])
        print(
            f"lookback align: AER {pct(r['aer'])}  precision {pct(r['precision'])}  recall {pct(r['recall'])}"
            f"  ({r['links']} links, {r['sure']} sure gold links, {r['sentences']} sentences, {args.method})",
            file=report,
        )
    if args.eflomal:
        data = translator.config.data
        train = read_parallel(args.eflomal, data.src_lang, data.tgt_lang, data.multi30k_dir)
        theirs = eflomal_links(srcs, tgts, *train)
        r = alignment_error(predicted, theirs, theirs)
        print(
            f"lookback align: agreement with eflomal's forward links (learned on {args.eflomal} and these "
            f"{len(srcs)} pairs; an aligner, not gold): {pct(r['precision'])}% of attention's links are "
            f"eflomal's, {pct(r['recall'])}% of eflomal's are attention's, 1 - AER {pct(1 - r['aer'])}",
            file=report,
        )


def cmd_takeoff(args: argparse.Namespace) -> None:
    from .explain.diagnostics import plot_takeoff
    from .serve.app import parse_run_dirs

    runs = parse_run_dirs(args.run_dirs)
    drawn = plot_takeoff({name: str(d) for name, d in runs.items()}, args.output)
    missing = [name for name in runs if name not in drawn]
    note = f"; no attention statistics in {', '.join(missing)}" if missing else ""
    print(f"wrote {args.output}{note}")


def cmd_curves(args: argparse.Namespace) -> None:
    from .explain.curves import plot_curves
    from .serve.app import parse_run_dirs

    runs = parse_run_dirs(args.run_dirs)
    plot_curves({name: str(d) for name, d in runs.items()}, args.output, args.title)
    print(f"wrote {args.output}")


def cmd_compare(args: argparse.Namespace) -> None:
    from .data.read import read_lines, read_parallel
    from .decoding.significance import paired_test, report

    a, b = (read_lines(Path(f)) for f in args.outputs)
    if args.ref:
        refs = read_lines(Path(args.ref))
    else:
        src_lang, tgt_lang = args.langs.split("-", 1)
        refs = read_parallel(args.test, src_lang, tgt_lang, args.multi30k_dir)[1]
    names = tuple(args.names) if args.names else tuple(args.outputs)
    result = paired_test(a, b, refs, names, args.bs_samples, args.ar_trials)
    print(json.dumps(result, indent=2) if args.json else report(result))


def cmd_study(args: argparse.Namespace) -> None:
    from .study.run import load_study, run_study

    study = load_study(args.study)
    only = args.models.split(",") if args.models else None
    result = run_study(study, train=not args.evaluate_only, extra=args.set, only=only)
    print(
        f"study {study.name}: {len(result['models'])} models, {len(result['tests'])} test sets, "
        f"{result['wall_seconds'] / 60:.1f} min; report: {Path(study.out_dir) / 'report.md'}"
    )


def cmd_attention(args: argparse.Namespace) -> None:
    from .explain.alignment import plot_alignment

    if not args.sentence.strip():
        raise ValueError("nothing to translate: the sentence is empty")
    translator = _translator(args)
    beam = search_width(args.beam, args.hypothesis + 1)
    outs = translator.translate_nbest([args.sentence], beam, args.hypothesis + 1)[0]
    if not outs[0].src_tokens:  # e.g. only control characters: the tokenizer keeps nothing
        raise ValueError(f"nothing to translate: {args.sentence!r} has no source tokens")
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
    from .explain.trace import format_trace, lecture, lecture_numbers, trace

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
    from .explain.neighbours import neighbours

    pieces, near = neighbours(_translator(args), args.word, side=args.side, k=args.k)
    how = "" if len(pieces) == 1 else f" (the mean of its pieces {' '.join(pieces)})"
    print(f"nearest to {args.word!r}{how} in the {args.side} embeddings, by cosine similarity:")
    for piece, sim in near:
        print(f"  {sim:7.3f}  {piece}")


def cmd_export(args: argparse.Namespace) -> None:
    from .decoding.evaluate import score
    from .runtime.export import export
    from .translator import Translator

    test = None
    if args.test:
        translator = Translator.load(args.run_dir, args.checkpoint)
        spec, src, ref = _test_set(args, translator)
        beam = args.beam or translator.decode.beam
        hyps = [t.text for t in translator.translate(src, beam=beam)]
        s = score(hyps, ref, translator.config.data.tgt_lang)
        test = {
            "spec": spec,
            "beam": beam,
            "bleu": s.bleu,
            "chrf": s.chrf,
            "bleu_signature": s.bleu_signature,
            "chrf_signature": s.chrf_signature,
        }
    info = export(args.run_dir, args.output, args.checkpoint, test, onnx=args.onnx)
    scores = f"; test BLEU {test['bleu']:.2f} on {test['spec']}, beam {test['beam']}" if test else ""
    graphs = "; ONNX graphs (fp32 and int8) in onnx/" if args.onnx else ""
    print(f"wrote {args.output}: {info['parameters']:,} parameters from {info['checkpoint']}{scores}{graphs}")


def cmd_average(args: argparse.Namespace) -> None:
    from .training.checkpoint import RunDir, average_checkpoints, save_checkpoint

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


def cmd_serve(args: argparse.Namespace) -> None:
    from .device import describe, resolve_device
    from .serve.app import serve

    device = resolve_device(args.device, "--device")
    precision = args.precision or "each run's decode.precision"
    print(f"lookback: {describe(device, precision)}", file=sys.stderr)
    serve(
        args.run_dirs,
        host=args.host,
        port=args.port,
        checkpoint=args.checkpoint,
        device=str(device),
        precision=args.precision,
        max_chars=args.max_chars,
        workers=args.workers,
    )


def cmd_synth(args: argparse.Namespace) -> None:
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


# The parser.


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors: `lookback COMMAND: error: ...`, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


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


def _kinds(text: str) -> str:
    """An argparse type: comma-separated counterfactual kinds of faithfulness.py."""
    from .explain.faithfulness import COUNTERFACTUALS

    wrong = [k for k in text.split(",") if k not in COUNTERFACTUALS]
    if wrong:
        raise argparse.ArgumentTypeError(f"got {wrong[0]!r}, expected some of {','.join(COUNTERFACTUALS)}")
    return text


def _add_model_flags(
    p: argparse.ArgumentParser, nargs: str | None = None, beam: bool = True, greedy: bool = False
) -> None:
    """The flags of every command that loads a model: its run directory, --checkpoint, --device,
    --precision and, where it searches, --beam.

    Args:
        nargs: of the run directory: None (one), "?" (explain --lecture needs none), "+" (serve),
            "ensemble" (translate, evaluate: several runs translate as one).
        beam: add --beam (neighbours does not search).
        greedy: --beam defaults to 1 rather than to the config's decode.beam.
    """
    if nargs == "ensemble":
        text = "run directory written by `lookback train`; several translate as an ensemble"
        p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help=text)
    elif nargs == "+":
        text = "run directories written by `lookback train` (NAME=DIR names one)"
        p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help=text)
    else:
        p.add_argument("run_dir", nargs=nargs, help="run directory written by `lookback train`")
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
    if beam:
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


def _add_runtime_flags(p: argparse.ArgumentParser) -> None:
    """--backend, --quantize and --threads: fast CPU decoding (runtime.py)."""
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="torch",
        help="onnxruntime: run the network on ONNX Runtime (an export's --onnx graphs, or exported now)",
    )
    p.add_argument("--quantize", choices=QUANTIZE, help="int8: dynamic int8 quantisation of the weights")
    p.add_argument("--threads", type=nonnegative_int, default=0, help="CPU threads (0: one per core)")


def _add_hypothesis(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hypothesis",
        type=nonnegative_int,
        default=0,
        help="which beam hypothesis, 0 = the best (the beam is raised to hold it)",
    )


def _add_set(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=text)


def _add_synth(sub: argparse._SubParsersAction) -> None:
    """lookback data synth."""
    data = sub.add_parser("data", help="make corpora")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    p = data_sub.add_parser("synth", help="write a synthetic parallel corpus (copy, reverse, translate)")
    p.add_argument("--task", required=True, choices=TASKS, help="what the target is made from the source")
    p.add_argument(
        "--lengths", required=True, metavar="LO-HI", help="source lengths in words, LO-HI, e.g. 5-100"
    )
    p.add_argument(
        "--seed", type=nonnegative_int, default=1, help="seed of the train split; val and test use seed+1, +2"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="folder for {train,val,test}.{src,tgt}")
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
    p.set_defaults(func=cmd_synth)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="lookback", description="RNN encoder-decoder NMT with attention.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("train", help="train a model from a YAML config")
    p.add_argument("config", help="YAML config file (see configs/)")
    _add_set(p, "override a config value, e.g. --set train.lr=0.0005 (repeatable)")
    p.add_argument("--resume", action="store_true", help="continue the run in train.run_dir from last.pt")
    p.add_argument(
        "--accept-changes",
        action="store_true",
        help="with --resume: go on although the config changes a key an exact resume needs (seed, "
        "batch size, data, tokenizer, model); the run's config.yaml then records the new values",
    )
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("translate", help="translate stdin to stdout")
    _add_model_flags(p, nargs="ensemble")
    _add_runtime_flags(p)
    p.add_argument(
        "--nbest",
        type=positive_int,
        default=1,
        help="print the K best as 'index<TAB>score<TAB>text' (the beam is raised to K if smaller)",
    )
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser("evaluate", help="translate a test set and score it")
    _add_model_flags(p, nargs="ensemble")
    _add_runtime_flags(p)
    p.add_argument("--test", help="corpus spec, e.g. multi30k:test_2016_flickr (default: data.test)")
    p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")
    p.add_argument("--output", help="write the translations to this file")
    p.add_argument("--show", type=nonnegative_int, default=3, help="print this many example translations")
    p.add_argument("--json", action="store_true", help="print scores as JSON, with BLEU by length")
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also attention diagnostics by source length: entropy, unattended tokens, parking, backward",
    )
    p.set_defaults(func=cmd_evaluate)

    _add_synth(sub)  # lookback data synth

    p = sub.add_parser("align", help="word alignments from attention along given translations; AER")
    _add_model_flags(p, beam=False)
    p.add_argument("--src", required=True, help="source sentences, one per line (words split on spaces)")
    p.add_argument("--tgt", required=True, help="their translations, one per line (words split on spaces)")
    p.add_argument("--gold", help="gold links per line: i-j sure, ipj or i?j possible; prints AER")
    p.add_argument("--one-based", action="store_true", help="the gold links count words from 1")
    p.add_argument(
        "--method", default="argmax", choices=("argmax", "threshold"), help="one link per target word, or all"
    )
    p.add_argument(
        "--threshold",
        type=float_at_least(0.0, open_=True),
        default=0.5,
        help="with --method threshold: link every word pair whose weight is at least this",
    )
    p.add_argument(
        "--eflomal",
        metavar="TRAIN_SPEC",
        help="also learn a statistical aligner (eflomal) on this corpus spec plus the given pairs, "
        "and print attention's agreement with it",
    )
    p.add_argument("--output", help="write the links here (default: stdout); scores then go to stdout")
    p.set_defaults(func=cmd_align)

    p = sub.add_parser(
        "faithfulness", help="replace attention by counterfactual weights and measure what changes"
    )
    _add_model_flags(p, beam=False)
    p.add_argument("--test", help="corpus spec, e.g. multi30k:test_2016_flickr (default: data.test)")
    p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")
    p.add_argument("--limit", type=nonnegative_int, default=0, help="only the first N pairs (0: all)")
    p.add_argument(
        "--kinds", type=_kinds, help="comma-separated: uniform,permute,drop_max,other (default: all)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the permutations")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_faithfulness)

    p = sub.add_parser("study", help="train and compare models by source length (the bottleneck study)")
    p.add_argument("study", help="study YAML file (see configs/study/)")
    p.add_argument("--evaluate-only", action="store_true", help="evaluate the existing run directories")
    p.add_argument("--models", help="comma-separated names: run only these models of the study")
    _add_set(p, "override a config value of every model (repeatable)")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("attention", help="plot the alignment matrix of one translation")
    _add_model_flags(p, greedy=True)
    p.add_argument("sentence", help="the source sentence")
    p.add_argument("-o", "--output", required=True, help="image file: .png, .svg or .pdf")
    p.add_argument("--words", action="store_true", help="merge subword pieces into words")
    _add_hypothesis(p)
    p.set_defaults(func=cmd_attention)

    p = sub.add_parser("takeoff", help="plot when attention starts to look at the source, beside BLEU")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (NAME=DIR names one)")
    p.add_argument("-o", "--output", required=True, help="image file: .png, .svg or .pdf")
    p.set_defaults(func=cmd_takeoff)

    p = sub.add_parser("curves", help="plot runs' training loss and validation BLEU by updates and minutes")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (NAME=DIR names one)")
    p.add_argument("-o", "--output", required=True, help="image file: .png, .svg or .pdf")
    p.add_argument("--title", help="the figure's title")
    p.set_defaults(func=cmd_curves)

    p = sub.add_parser("compare", help="is B better than A? paired bootstrap and randomisation (sacreBLEU)")
    p.add_argument("outputs", nargs=2, metavar="HYP", help="two systems' outputs, one line per sentence")
    refs = p.add_mutually_exclusive_group(required=True)
    refs.add_argument("--ref", help="the references, one line per sentence")
    refs.add_argument("--test", help="or the corpus spec whose targets are the references")
    p.add_argument("--langs", default="en-fr", help="with --test: source-target languages (default en-fr)")
    p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")
    p.add_argument("--names", nargs=2, metavar="NAME", help="the two systems' names (default: the files')")
    p.add_argument("--bs-samples", type=positive_int, default=1000, help="bootstrap resamples (1000)")
    p.add_argument("--ar-trials", type=positive_int, default=10000, help="randomisation trials (10000)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("explain", help="trace a translation step by step (or --lecture: the notes' examples)")
    _add_model_flags(p, nargs="?", greedy=True)
    p.add_argument("sentence", nargs="?", help="the source sentence")
    p.add_argument("--lecture", action="store_true", help="run the lecture notes' worked examples")
    p.add_argument("--json", action="store_true", help="print the trace as JSON")
    p.add_argument("--step", type=positive_int, help="show only this output step (from 1)")
    _add_hypothesis(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("neighbours", help="nearest words in a learned embedding table")
    _add_model_flags(p, beam=False)
    p.add_argument("word", help="the word to look up (a word split into pieces: the mean of theirs)")
    p.add_argument("--side", choices=("source", "target"), default="source", help="which embedding table")
    p.add_argument("-k", type=positive_int, default=10, help="how many neighbours")
    p.set_defaults(func=cmd_neighbours)

    p = sub.add_parser("export", help="write a model to share: safetensors weights, config, tokenizers, card")
    p.add_argument("run_dir", help="run directory")
    p.add_argument("-o", "--output", required=True, help="the directory to write (new, or an earlier export)")
    p.add_argument("--checkpoint", default="best", help="best, last, averaged or step_N (default best)")
    p.add_argument("--test", help="also score this test set (corpus spec) and put it in the model card")
    p.add_argument("--beam", type=positive_int, help="beam size for --test (default: the run's decode.beam)")
    p.add_argument(
        "--onnx",
        action="store_true",
        help="also write the encoder and decoder step as ONNX graphs, fp32 and int8 (--backend onnxruntime)",
    )
    p.add_argument("--multi30k-dir", help="folder holding the Multi30k files")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("average", help="average the weights of a run's last checkpoints into averaged.pt")
    p.add_argument("run_dir", help="run directory trained with train.keep_checkpoints >= 2")
    p.add_argument(
        "--last", type=positive_int, metavar="N", help="average the N newest kept checkpoints (default: all)"
    )
    p.set_defaults(func=cmd_average)

    p = sub.add_parser("serve", help="the web explorer: translations and attention, models side by side")
    _add_model_flags(p, nargs="+", beam=False)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument(
        "--port", type=int_range(0, 65535), default=8000, help="port to listen on (0: any free port)"
    )
    p.add_argument("--max-chars", type=positive_int, default=500, help="longest input sentence accepted")
    p.add_argument(
        "--workers",
        type=positive_int,
        help="requests translated at once, over all models (default: the CPU cores); more wait their turn",
    )
    p.set_defaults(func=cmd_serve)
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
        lines = str(exc).splitlines() if isinstance(exc, ConfigError) else []  # a config: every problem
        for line in lines or [first_line(exc, limit=1000)]:
            print(f"lookback: error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lookback: interrupted", file=sys.stderr)
        return 130
    return 0
