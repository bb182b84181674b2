"""lookback translate, evaluate, compare, export: translations, their scores, and a model to share."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

from ..config import search_width
from .flags import (
    add_load_flags,
    add_output,
    add_run_dir,
    add_runtime_flags,
    add_search_flags,
    add_test_flags,
    load_translator,
    nonnegative_int,
    positive_int,
    runtime_choice,
    search_changes,
    test_set,
)


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("translate", help="translate stdin to stdout")
    add_run_dir(p, several="ensemble")
    add_load_flags(p)
    add_search_flags(p)
    add_runtime_flags(p)
    p.add_argument(
        "--nbest",
        type=positive_int,
        default=1,
        help="print the K best as 'index<TAB>score<TAB>text' (the beam is raised to K if smaller)",
    )
    p.set_defaults(func=translate)

    p = sub.add_parser("evaluate", help="translate a test set and score it")
    add_run_dir(p, several="ensemble")
    add_load_flags(p)
    add_search_flags(p)
    add_runtime_flags(p)
    add_test_flags(p)
    add_output(p, "write the translations to this file")
    p.add_argument("--show", type=nonnegative_int, default=3, help="print this many example translations")
    p.add_argument("--json", action="store_true", help="print scores as JSON, with BLEU by length")
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="also attention diagnostics by source length: entropy, unattended tokens, parking, backward",
    )
    p.set_defaults(func=evaluate)

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
    p.set_defaults(func=compare)

    p = sub.add_parser("export", help="write a model to share: safetensors weights, config, tokenizers, card")
    p.add_argument("run_dir", help="run directory")
    add_output(p, "the directory to write (new, or an earlier export)", required=True)
    p.add_argument("--checkpoint", default="best", help="best, last, averaged or step_N (default best)")
    add_test_flags(p, "also score this test set (corpus spec) and put it in the model card")
    p.add_argument("--beam", type=positive_int, help="beam size for --test (default: the run's decode.beam)")
    p.add_argument(
        "--onnx",
        action="store_true",
        help="also write the encoder and decoder step as ONNX graphs, fp32 and int8 (--backend onnxruntime)",
    )
    p.set_defaults(func=export)


def translate(args: argparse.Namespace) -> None:
    translator = load_translator(args.run_dirs, args, runtime_choice(args), search_changes(args))
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


def evaluate(args: argparse.Namespace) -> None:
    from ..decoding.evaluate import bleu_by_length, format_by_length, score
    from ..device import machine
    from ..explain import diagnostics
    from ..model import coverage

    translator = load_translator(args.run_dirs, args, runtime_choice(args), search_changes(args))
    spec, src, ref = test_set(args.test, args.multi30k_dir, translator)
    beam = args.beam or translator.decode.beam
    translations = translator.translate(src, beam=beam)
    hyps = [t.text for t in translations]
    scores = score(hyps, ref, translator.config.data.tgt_lang)
    by_length = bleu_by_length(src, hyps, ref)
    covered = coverage.coverage_report([(t.attention, t.src_tokens, t.tokens) for t in translations])
    attention = diagnostics.diagnostics_by_length(src, translations) if args.diagnostics else None
    if args.output:
        Path(args.output).write_text("\n".join(hyps) + "\n", encoding="utf-8")
    if args.json:
        report = {"test": spec, "beam": beam, **scores.to_dict(), "by_length": by_length, "coverage": covered}
        report["machine"] = machine()  # the CPU and its flags, beside every figure
        print(json.dumps(report | ({"diagnostics": attention} if args.diagnostics else {}), indent=2))
        return
    print(f"{spec}, beam {beam}:")
    print(scores.summary())
    print(coverage.format_report(covered))
    print(format_by_length(by_length))
    if args.diagnostics:
        print(diagnostics.format_by_length(attention))
    for i in range(min(args.show, len(src))):
        print(f"  src: {src[i]}\n  ref: {ref[i]}\n  hyp: {hyps[i]}")


def compare(args: argparse.Namespace) -> None:
    from ..data.read import read_lines, read_parallel
    from ..decoding.significance import check_room, paired_test, report

    a, b = (read_lines(Path(f)) for f in args.outputs)
    if args.ref:
        refs = read_lines(Path(args.ref))
    else:
        src_lang, tgt_lang = args.langs.split("-", 1)
        refs = read_parallel(args.test, src_lang, tgt_lang, args.multi30k_dir)[1]
    names = tuple(args.names) if args.names else tuple(args.outputs)
    check_room(len(refs), {"--bs-samples": args.bs_samples, "--ar-trials": args.ar_trials})  # named as typed
    result = paired_test(a, b, refs, names, args.bs_samples, args.ar_trials)
    print(json.dumps(result, indent=2) if args.json else report(result))


def export(args: argparse.Namespace) -> None:
    from ..decoding.evaluate import score
    from ..runtime.export import export
    from ..translator import Translator

    test = None
    if args.test:
        translator = Translator.load(args.run_dir, args.checkpoint)
        spec, src, ref = test_set(args.test, args.multi30k_dir, translator)
        beam = args.beam or translator.decode.beam
        hyps = [t.text for t in translator.translate(src, beam=beam)]
        s = score(hyps, ref, translator.config.data.tgt_lang)
        test = {"spec": spec, "beam": beam, "bleu": s.bleu, "chrf": s.chrf}
        test |= {"bleu_signature": s.bleu_signature, "chrf_signature": s.chrf_signature}
    info = export(args.run_dir, args.output, args.checkpoint, test, onnx=args.onnx)
    scores = f"; test BLEU {test['bleu']:.2f} on {test['spec']}, beam {test['beam']}" if test else ""
    graphs = "; ONNX graphs (fp32 and int8) in onnx/" if args.onnx else ""
    print(f"wrote {args.output}: {info['parameters']:,} parameters from {info['checkpoint']}{scores}{graphs}")
