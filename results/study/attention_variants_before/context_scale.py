"""The scale of a trained model's context vector against its encoder states, and how saturated
its readout ~s_t = tanh(W_c [s_t; c_t]) is, teacher-forced on the first N validation pairs of
its own config. Why the first multi-head model of the study did not learn (docs/study.md):

    python results/study/attention_variants_before/context_scale.py RUN_DIR [RUN_DIR ...] [--pairs 64] [--json F]
"""

import argparse
import json

import torch

from lookback.data.batch import collate
from lookback.data.read import read_parallel
from lookback.translator import Translator

p = argparse.ArgumentParser()
p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="NAME=DIR names one")
p.add_argument("--pairs", type=int, default=64)
p.add_argument("--checkpoint", default="best")
p.add_argument("--json", help="also write the numbers here")
args = p.parse_args()
out = {}
for run in args.runs:
    name, _, path = run.rpartition("=")
    t = Translator.load(path, checkpoint=args.checkpoint)
    d = t.config.data
    src, tgt = read_parallel(d.valid, d.src_lang, d.tgt_lang, d.multi30k_dir)
    ids = t.source_ids(src[: args.pairs])  # as the model reads them (with </s> where trained so)
    pairs = [(s, t.tgt_tok.encode(y)) for s, y in zip(ids, tgt[: args.pairs], strict=True)]
    b = collate(pairs)
    with torch.no_grad():
        enc = t.model.encode(b.src, b.src_len)
        o = t.model.decoder(b.tgt_in, enc, t.model.decoder.init_state(enc), project=False)
    real = b.tgt_out != 0  # (B, T) real target tokens
    out[name or path] = row = {
        "mean_abs_h": enc.h[enc.src_mask].abs().mean().item(),
        "mean_abs_c": o.c[real].abs().mean().item(),
        "readout_saturated": (o.s_tilde[real].abs() > 0.99).float().mean().item(),  # |tanh| > 0.99
    }
    print(
        f"{name or path}: mean |h| {row['mean_abs_h']:.2f}, mean |c| {row['mean_abs_c']:.2f}, "
        f"readout units with |~s| > 0.99: {100 * row['readout_saturated']:.0f}%"
    )
if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
