"""Where do outputs end? Greedy against beam search, and runs against runs (issue 13).

    python -m bench stopping RUN_DIR [RUN_DIR ...] --tests multi30k:val concat:4:multi30k:val \
        [--beams 1,5] [--json OUT.json]

Each run's best checkpoint translates each test set at each beam size. Per (run, test, beam):
sacreBLEU and the output/reference length ratio, overall and by source length; how outputs
end (longer than the reference in target pieces; running past it, the reference a proper
prefix of the output in words; cut short, the output a proper prefix of the reference; at
the length limit); and for each beam above 1, the sentences whose returned hypothesis scores
below greedy's output under beam search's own objective (log-probability over the length
penalty): a search error, beam search returning less than a hypothesis greedy found. No
figure is timed, so the machine need not be idle.
"""

from __future__ import annotations

import argparse
import json

import torch

from lookback.data.read import read_parallel
from lookback.decoding.evaluate import bleu_and_length, bleu_by_length
from lookback.decoding.search import lp, max_lengths
from lookback.device import cpu_name
from lookback.translator import Translator


def _proper_prefix(a: list, b: list) -> bool:
    return len(a) < len(b) and b[: len(a)] == a


def measure(t: Translator, src: list[str], ref: list[str], beam: int, greedy: list | None) -> dict:
    """The figures of one run on one test set at one beam size; `greedy`: its greedy outputs."""
    outs = t.translate(src, beam=beam)
    hyps = [o.text for o in outs]
    ref_ids = [t.tgt_tok.encode(r) for r in ref]
    limits = max_lengths(torch.tensor([len(o.src_ids) for o in outs]), t.decode.max_ratio).tolist()
    n = len(src)
    result = {
        **bleu_and_length(hyps, ref),  # sentences, bleu, length_ratio
        "longer_than_reference": sum(len(o.ids) > len(r) for o, r in zip(outs, ref_ids, strict=True)) / n,
        "runs_past_reference": sum(
            _proper_prefix(r.split(), h.split()) for h, r in zip(hyps, ref, strict=True)
        ),
        "cut_short": sum(_proper_prefix(h.split(), r.split()) for h, r in zip(hyps, ref, strict=True)),
        "at_length_limit": sum(len(o.ids) + 1 >= m for o, m in zip(outs, limits, strict=True)),
        "by_length": bleu_by_length(src, hyps, ref),
    }
    if greedy is not None:  # beam search's objective of greedy's output: its log-probability over lp
        alpha = t.decode.length_penalty
        floor = [g.score / lp(len(g.ids) + 1, alpha) for g in greedy]
        result["below_greedy"] = sum(o.score < f - 1e-4 for o, f in zip(outs, floor, strict=True))
        result["above_greedy"] = sum(o.score > f + 1e-4 for o, f in zip(outs, floor, strict=True))
    return result, outs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench stopping", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="trained run directories")
    ap.add_argument("--tests", nargs="+", required=True, help="corpus specs, e.g. concat:4:multi30k:val")
    ap.add_argument("--beams", default="1,5", help="beam sizes, greedy (1) first (default 1,5)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args(argv)
    beams = [int(b) for b in args.beams.split(",")]
    if beams[0] != 1:
        ap.error("--beams: the first size must be 1 (greedy), the floor of the others")
    report = {"device": f"cpu ({cpu_name()}), {torch.get_num_threads()} threads", "results": {}}
    head = "run | test | beam | BLEU | length ratio | longer | past ref | cut short | at limit | below greedy"
    print(f"| {head} |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in args.runs:
        t = Translator.load(run)
        d = t.config.data
        for spec in args.tests:
            src, ref = read_parallel(spec, d.src_lang, d.tgt_lang, d.multi30k_dir)
            greedy = None
            for beam in beams:
                r, outs = measure(t, src, ref, beam, greedy)
                greedy = greedy or outs
                report["results"].setdefault(run, {}).setdefault(spec, {})[f"beam{beam}"] = r
                below = f"{r['below_greedy']} of {len(src)}" if "below_greedy" in r else ""
                print(
                    f"| {run} | {spec} | {beam} | {r['bleu']:.2f} | {r['length_ratio']:.3f} "
                    f"| {100 * r['longer_than_reference']:.1f}% | {r['runs_past_reference']} "
                    f"| {r['cut_short']} | {r['at_length_limit']} | {below} |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return 0
