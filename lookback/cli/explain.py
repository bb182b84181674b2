"""lookback attention, explain, neighbours, faithfulness, align, takeoff, curves: inside a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import search_width
from .flags import (
    add_hypothesis,
    add_load_flags,
    add_output,
    add_run_dir,
    add_search_flags,
    add_test_flags,
    float_at_least,
    load_translator,
    nonnegative_int,
    positive_int,
    search_changes,
    test_set,
)


def _kinds(text: str) -> str:
    """An argparse type: comma-separated counterfactual kinds of explain/faithfulness.py."""
    from ..explain.faithfulness import COUNTERFACTUALS

    wrong = [k for k in text.split(",") if k not in COUNTERFACTUALS]
    if wrong:
        raise argparse.ArgumentTypeError(f"got {wrong[0]!r}, expected some of {','.join(COUNTERFACTUALS)}")
    return text


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("attention", help="plot the alignment matrix of one translation")
    add_run_dir(p)
    add_load_flags(p)
    add_search_flags(p, greedy=True)
    p.add_argument("sentence", help="the source sentence")
    add_output(p, "image file: .png, .svg or .pdf", required=True)
    p.add_argument("--words", action="store_true", help="merge subword pieces into words")
    add_hypothesis(p)
    p.set_defaults(func=attention)

    p = sub.add_parser("explain", help="trace a translation step by step (or --lecture: the notes' examples)")
    add_run_dir(p, optional=True)
    add_load_flags(p)
    add_search_flags(p, greedy=True)
    p.add_argument("sentence", nargs="?", help="the source sentence")
    p.add_argument("--lecture", action="store_true", help="run the lecture notes' worked examples")
    p.add_argument("--json", action="store_true", help="print the trace as JSON")
    p.add_argument("--step", type=positive_int, help="show only this output step (from 1)")
    add_hypothesis(p)
    p.set_defaults(func=explain)

    p = sub.add_parser(
        "neighbours", help="nearest words in a learned embedding table, or of a word's state in its sentence"
    )
    add_run_dir(p)
    add_load_flags(p)
    p.add_argument("word", help="the word to look up (a word split into pieces: the mean of theirs)")
    p.add_argument("--side", choices=("source", "target"), default="source", help="which embedding table")
    p.add_argument("-k", type=positive_int, default=10, help="how many neighbours")
    p.add_argument(
        "--in",
        dest="sentence",
        metavar="SENTENCE",
        help="the word's encoder state in this sentence, against its states in the --corpus sentences",
    )
    p.add_argument(
        "--corpus",
        metavar="SPEC",
        help="with --in: the sentences to search, a corpus spec or prefix (default: the run's data.train)",
    )
    p.add_argument(
        "--multi30k-dir", help="where the Multi30k files are (default: the run's data.multi30k_dir)"
    )
    p.set_defaults(func=neighbours)

    p = sub.add_parser(
        "faithfulness", help="replace attention by counterfactual weights and measure what changes"
    )
    add_run_dir(p)
    add_load_flags(p)
    add_test_flags(p)
    p.add_argument("--limit", type=nonnegative_int, default=0, help="only the first N pairs (0: all)")
    p.add_argument(
        "--kinds", type=_kinds, help="comma-separated: uniform,permute,drop_max,other (default: all)"
    )
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the permutations")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=faithfulness)

    p = sub.add_parser("align", help="word alignments from attention along given translations; AER")
    add_run_dir(p)
    add_load_flags(p)
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
    add_output(p, "write the links here (default: stdout); scores then go to stdout")
    p.set_defaults(func=align)

    p = sub.add_parser("takeoff", help="plot when attention starts to look at the source, beside BLEU")
    add_run_dir(p, several="named")
    add_output(p, "image file: .png, .svg or .pdf", required=True)
    p.set_defaults(func=takeoff)

    p = sub.add_parser("curves", help="plot runs' training loss and validation BLEU by updates and minutes")
    add_run_dir(p, several="named")
    add_output(p, "image file: .png, .svg or .pdf", required=True)
    p.add_argument("--title", help="the figure's title")
    p.set_defaults(func=curves)


def attention(args: argparse.Namespace) -> None:
    from ..explain.alignment import plot_alignment

    if not args.sentence.strip():
        raise ValueError("nothing to translate: the sentence is empty")
    translator = load_translator([args.run_dir], args, search=search_changes(args))
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
    title = f"{out.text}  ({search})"
    plot_alignment(out.attention, out.src_tokens, out.tokens, args.output, title=title, words=args.words)
    print(out.text)
    print(f"alignment: {args.output}")


def explain(args: argparse.Namespace) -> None:
    from ..explain.trace import format_trace, lecture, lecture_numbers, trace

    if args.lecture:
        print(json.dumps(lecture_numbers(), indent=2) if args.json else lecture())
        return
    if not args.run_dir or args.sentence is None:
        raise ValueError("explain needs RUN_DIR and a sentence (or --lecture)")
    translator = load_translator([args.run_dir], args, search=search_changes(args))
    tr = trace(translator, args.sentence, beam=args.beam, hypothesis=args.hypothesis)
    print(
        json.dumps(tr.to_dict(), indent=2, ensure_ascii=False) if args.json else format_trace(tr, args.step)
    )


def neighbours(args: argparse.Namespace) -> None:
    from ..data.read import read_parallel
    from ..explain.neighbours import contextual, format_contextual, format_neighbours, neighbours

    translator = load_translator([args.run_dir], args)
    if args.sentence is None:
        if args.corpus:
            raise ValueError(
                "--corpus goes with --in SENTENCE: the corpus where the word's states are sought"
            )
        pieces, near = neighbours(translator, args.word, side=args.side, k=args.k)
        print(format_neighbours(args.word, pieces, near, args.side))
        return
    if args.side != "source":
        raise ValueError("--in looks at the encoder's states: the source side only")
    data = translator.config.data
    spec = args.corpus or data.train
    src, _ = read_parallel(spec, data.src_lang, data.tgt_lang, args.multi30k_dir or data.multi30k_dir)
    print(format_contextual(contextual(translator, args.word, args.sentence, src, k=args.k)))


def faithfulness(args: argparse.Namespace) -> None:
    from ..explain.faithfulness import COUNTERFACTUALS, faithfulness, format_report

    translator = load_translator([args.run_dir], args)
    spec, src, ref = test_set(args.test, args.multi30k_dir, translator)
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    kinds = tuple(args.kinds.split(",")) if args.kinds else COUNTERFACTUALS
    report = faithfulness(translator, src, ref, kinds, seed=args.seed)
    report = {"run_dir": args.run_dir, "test": spec, **report}
    print(json.dumps(report, indent=2) if args.json else format_report(report, args.run_dir, spec))


def align(args: argparse.Namespace) -> None:
    from ..data.read import read_lines, read_parallel
    from ..explain import alignment

    srcs, tgts = (read_lines(path) for path in (args.src, args.tgt))
    if len(srcs) != len(tgts):
        raise ValueError(f"{args.src} has {len(srcs)} lines but {args.tgt} has {len(tgts)}")
    gold = None
    if args.gold:
        lines = read_lines(args.gold)
        if len(lines) != len(srcs):
            raise ValueError(f"{args.gold} has {len(lines)} lines but {args.src} has {len(srcs)}")
        where = f"{args.gold} line "
        gold = [alignment.read_gold(line, args.one_based, f"{where}{n}") for n, line in enumerate(lines, 1)]
    translator = load_translator([args.run_dir], args)
    predicted = alignment.align(translator, srcs, tgts, args.method, args.threshold)
    text = "".join(alignment.pharaoh(p) + "\n" for p in predicted)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    report = sys.stderr if not args.output else sys.stdout  # the links alone on stdout
    if gold is not None:
        r = alignment.alignment_error(predicted, [s for s, _ in gold], [p for _, p in gold])
        print(f"lookback align: {alignment.format_error(r, args.method)}", file=report)
    if args.eflomal:
        data = translator.config.data
        train = read_parallel(args.eflomal, data.src_lang, data.tgt_lang, data.multi30k_dir)
        theirs = alignment.eflomal_links(srcs, tgts, *train)
        r = alignment.alignment_error(predicted, theirs, theirs)
        print(f"lookback align: {alignment.format_agreement(r, args.eflomal, len(srcs))}", file=report)


def takeoff(args: argparse.Namespace) -> None:
    from ..explain.diagnostics import plot_takeoff
    from ..training.checkpoint import parse_run_dirs

    runs = parse_run_dirs(args.run_dirs)
    drawn = plot_takeoff({name: str(d) for name, d in runs.items()}, args.output)
    missing = [name for name in runs if name not in drawn]
    note = f"; no attention statistics in {', '.join(missing)}" if missing else ""
    print(f"wrote {args.output}{note}")


def curves(args: argparse.Namespace) -> None:
    from ..explain.curves import plot_curves
    from ..training.checkpoint import parse_run_dirs

    runs = parse_run_dirs(args.run_dirs)
    plot_curves({name: str(d) for name, d in runs.items()}, args.output, args.title)
    print(f"wrote {args.output}")
