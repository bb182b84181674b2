"""The measurements behind docs/attention_as_explanation.md, on the trained models of
configs/study/attention_variants.yaml (run `lookback study` first; missing models are skipped).

For each model, on the study's test set (Multi30k test_2016_flickr, pairs joined 1-4 at a time):
attention diagnostics by source length (greedy outputs), the counterfactual tests of
faithfulness.py, the agreement of attention with gradient x input and integrated gradients on the
first --attribution sentences, and the agreement of its word links (forced along the reference)
with eflomal's, learned on Multi30k train. Writes results.json beside this file:

    python results/explanation/make.py [--models additive,dot] [--attribution 40] [--limit N] [--add]
"""

import json
import time
from pathlib import Path

from common import new_results, parser, study_test_set

from lookback.data.read import read_parallel
from lookback.explain.alignment import align, alignment_error, eflomal_links
from lookback.explain.attribution import agreement, attribute
from lookback.explain.diagnostics import diagnostics_by_length
from lookback.explain.faithfulness import faithfulness
from lookback.translator import Translator

p = parser("results.json")
p.add_argument("--attribution", type=int, default=40, help="sentences for integrated gradients")
p.add_argument("--no-eflomal", action="store_true", help="leave out the aligner (for a quick try)")
args = p.parse_args()

configs, spec, first, src, ref = study_test_set(args)
train_src, train_tgt = read_parallel("multi30k:train", first.src_lang, first.tgt_lang, first.multi30k_dir)
start = time.perf_counter()
theirs = None if args.no_eflomal else eflomal_links(src, ref, train_src, train_tgt)  # for every model
results = new_results(args, spec, eflomal_seconds=time.perf_counter() - start)
for name, cfg in configs.items():
    if not (Path(cfg.train.run_dir) / "best.pt").exists():
        print(f"{name}: not trained, skipped")
        continue
    start = time.perf_counter()
    t = Translator.load(cfg.train.run_dir)
    out = t.translate(src, beam=1)
    row = {"attention": cfg.model.attention, "diagnostics": diagnostics_by_length(src, out)}
    row["faithfulness"] = faithfulness(t, src, ref)["by_length"]
    if t.model.decoder.score is not None:
        for method in ("grad_x_input", "integrated_gradients"):
            per, gaps = [], []
            for o in out[: args.attribution]:
                a, gap = attribute(t.model, o.src_ids, o.ids, method=method, n_steps=20)
                per.append(agreement(o.attention, a))
                gaps += [] if gap is None else gap.abs().tolist()
            n = sum(a["tokens"] for a in per)
            taus = [(a["kendall_tau"], a["tokens"]) for a in per if a["kendall_tau"] is not None]
            row[method] = {
                "sentences": len(per),
                "tokens": n,
                "kendall_tau": sum(x * w for x, w in taus) / sum(w for _, w in taus),
                "same_top": sum(a["same_top"] * a["tokens"] for a in per) / n,
            }
            if gaps:  # integrated gradients' completeness: |sum_i a_i - (f(x) - f(0))| per token
                row[method]["median_gap"] = sorted(gaps)[len(gaps) // 2]
        if theirs is not None:
            row["eflomal_agreement"] = alignment_error(align(t, src, ref), theirs, theirs)
    row["seconds"] = time.perf_counter() - start
    results["models"][name] = row
    print(f"{name}: {row['seconds']:.0f} s", flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
