"""python -m bench variants: training speed of the attention variants, on this CPU, as ratios to additive.

    python -m bench variants -o results/bench/variants.json [--updates 20] [--rounds 3] [--threads 2]

Every variant is the shipped additive config (configs/multi30k_en_fr_additive.yaml) with a few
keys changed, and trains on the same Multi30k batches (1,000 target tokens, the config's
own), from the same initial weights, one after the other in one process. Coverage and
scheduled sampling are timed both ways (issue 36): the fast paths (coverage: the RNN over the
whole target, attention stepping; sampling: two passes) and `train.stepwise`, the decoder one
step at a time. An update is what training does: the loss, backward, clipping, Adam's step.

The figure is target tokens/s (real tokens, `</s>` included): the median over `rounds`
rounds, each timing `updates` updates of each variant in turn, after 3 untimed ones, so that
a slow spell of the machine falls on every variant alike. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from lookback.config import load_config
from lookback.data.batch import collate, encode_corpus, token_batches
from lookback.data.read import read_parallel
from lookback.data.tokenizer import train_tokenizers
from lookback.device import cpu_name
from lookback.model.seq2seq import LossTerms, build_model
from lookback.training.schedule import parameter_groups

from .common import cpu_flags, versions, write_json

CONFIG = "configs/multi30k_en_fr_additive.yaml"
SAMPLING = ["train.teacher_forcing=0.75"]  # the floor of the study's decay: eps = 0.75 throughout
VARIANTS = {
    "additive": [],
    "coverage": ["model.coverage=true", "train.coverage_loss=1.0"],
    "coverage, stepwise": ["model.coverage=true", "train.coverage_loss=1.0", "train.stepwise=true"],
    "sampling": SAMPLING,
    "sampling, stepwise": [*SAMPLING, "train.stepwise=true"],
    "dot": ["model.attention=dot", "model.dec_hidden_size=512"],
    "general": ["model.attention=general"],
    "local_p": ["model.window=local_p", "model.window_size=10"],
    "previous": ["model.attend_from=previous"],
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench variants", description=__doc__.split("\n")[0])
    parser.add_argument("-o", "--output", required=True, help="results JSON")
    parser.add_argument("--updates", type=int, default=20, help="timed updates per variant and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all variants")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    base = load_config(CONFIG)
    src, tgt = read_parallel(base.data.train, base.data.src_lang, base.data.tgt_lang, base.data.multi30k_dir)
    with tempfile.TemporaryDirectory() as folder:
        src_tok, tgt_tok = train_tokenizers(base.tokenizer, src, tgt, "en", "fr", Path(folder))
    pairs = encode_corpus(src, tgt, src_tok, tgt_tok, base.data.max_len, base.data.src_eos).pairs
    plan = token_batches([(len(s), len(t)) for s, t in pairs], base.train.max_tokens, seed=1)
    needed = args.rounds * (3 + args.updates)
    batches = [collate([pairs[i] for i in idx]) for idx in plan[:needed]]
    runs = {}
    for name, sets in VARIANTS.items():
        cfg = load_config(CONFIG, sets)
        torch.manual_seed(1)
        model = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size).train()
        runs[name] = (cfg, model, torch.optim.Adam(parameter_groups(model, cfg.train), lr=cfg.train.lr))
    speeds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for r in range(args.rounds):
        chunk = batches[r * (3 + args.updates) : (r + 1) * (3 + args.updates)]
        for name, (cfg, model, optimizer) in runs.items():
            for i, batch in enumerate(chunk):
                if i == 3:
                    start = time.perf_counter()
                t = cfg.train
                optimizer.zero_grad(set_to_none=True)
                terms = LossTerms(
                    coverage=t.coverage_loss, teacher_forcing=t.teacher_forcing, stepwise=t.stepwise
                )
                loss = model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, terms)
                (loss / batch.n_tokens).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip)
                optimizer.step()
            tokens = sum(b.n_tokens for b in chunk[3:])
            speeds[name].append(tokens / (time.perf_counter() - start))
            print(f"round {r + 1}: {name}: {speeds[name][-1]:,.0f} target tokens/s", file=sys.stderr)
    additive = statistics.median(speeds["additive"])
    result = {
        "device": f"cpu ({cpu_name()}), {torch.get_num_threads()} threads",
        "cpu_flags": cpu_flags(),
        "versions": versions(),
        "config": CONFIG,
        "updates": args.updates,
        "rounds": args.rounds,
        "variants": {
            name: {
                "sets": VARIANTS[name],
                "tokens_per_s": round(statistics.median(s)),
                "rounds": [round(x) for x in s],
                "ratio_to_additive": round(statistics.median(s) / additive, 3),
            }
            for name, s in speeds.items()
        },
    }
    write_json(Path(args.output), result)
    for name, v in result["variants"].items():
        print(f"{name:>20}: {v['tokens_per_s']:>6,} target tokens/s, {v['ratio_to_additive']:.2f} x additive")
