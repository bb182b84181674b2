"""What a model does at the steps where its attention is near uniform: the notes' last question.
For each study model with attention, on the study's test set, greedy outputs: the steps split by
the normalised entropy of their weights (peaked < 0.3 <= middle < 0.9 <= near uniform), and per
group the share of steps, how far P(y_t) moves when the weights are made uniform or permuted
(Jensen-Shannon divergence in bits, share of flipped argmax), the share of outputs that are
punctuation or </s>, and the most frequent output pieces. Writes uniform_steps.json beside this file:

    python results/explanation/uniform_steps.py [--models scaled_dot,additive] [--limit N] [--add]
"""

import json
import math
from collections import Counter
from pathlib import Path

import torch
from common import new_results, parser, study_test_set

from lookback.data.batch import pad
from lookback.explain.diagnostics import NEAR_UNIFORM, is_parking
from lookback.explain.faithfulness import Counterfactual, decode, step_effects
from lookback.translator import Translator

PEAKED = 0.3
args = parser("uniform_steps.json").parse_args()
configs, spec, _, src, _ = study_test_set(args)
results = new_results(args, spec)


def group(entropy: float) -> str:
    return "near_uniform" if entropy >= NEAR_UNIFORM else "peaked" if entropy < PEAKED else "middle"


for name, cfg in configs.items():
    if cfg.model.attention == "none" or not (Path(cfg.train.run_dir) / "best.pt").exists():
        continue
    t = Translator.load(cfg.train.run_dir)
    ids = [x for x in t.source_ids(src) if len(x) > 1]  # one source piece has no entropy to speak of
    steps = {
        g: {"steps": 0, "uniform": [0.0, 0], "permute": [0.0, 0], "parking": 0, "pieces": Counter()}
        for g in ("peaked", "middle", "near_uniform")
    }
    size = t.decode.batch_size
    with torch.no_grad():
        for i in range(0, len(ids), size):
            s, n = pad(ids[i : i + size])
            outs, alphas = decode(t.model, s, n, None, t.decode.max_ratio)
            changes = {k: Counterfactual(k, seed=0) for k in ("uniform", "permute")}
            effects = step_effects(t.model, s, n, outs, changes)
            for b, (out, alpha) in enumerate(zip(outs, alphas, strict=True)):
                S = alpha.size(1)
                H = -(alpha * alpha.clamp_min(1e-12).log()).sum(-1) / math.log(S)  # (T + 1,)
                pieces = [t.tgt_tok.id_to_piece(y) for y in out] + ["</s>"]
                for k, (h, piece) in enumerate(zip(H.tolist(), pieces, strict=True)):
                    g = steps[group(h)]
                    g["steps"] += 1
                    g["parking"] += is_parking(piece)
                    g["pieces"][piece] += 1
                    for kind in changes:
                        div, flip = effects[kind][b][0][k], effects[kind][b][1][k]
                        g[kind][0] += div
                        g[kind][1] += flip
    total = sum(g["steps"] for g in steps.values())
    results["models"][name] = {
        label: {
            "share": g["steps"] / total,
            "steps": g["steps"],
            **{
                kind: {"js_divergence": g[kind][0] / g["steps"], "flipped": g[kind][1] / g["steps"]}
                for kind in ("uniform", "permute")
                if g["steps"]
            },
            "punctuation_or_end": g["parking"] / g["steps"] if g["steps"] else None,
            "top_pieces": g["pieces"].most_common(8),
        }
        for label, g in steps.items()
    }
    print(name, {k: round(v["share"], 3) for k, v in results["models"][name].items()}, flush=True)
Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
