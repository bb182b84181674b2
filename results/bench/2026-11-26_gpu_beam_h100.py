"""Beam 5 and greedy on the GPU with the search before (search_old: lookback/decoding/search.py at
commit a84965a, copied beside it) and after batching its host copies (the commit after).
Run as: python results/bench/2026-11-26_gpu_beam_h100.py RUN_DIR, on the lookback run of the
bench call in 2026-11-26_173020_cuda_feed_h100.json; output: 2026-11-26_gpu_beam_h100.log."""

import gzip
import os
import sys
import time

import lookback.decoding.search_old as old  # type: ignore[import-not-found]
import sacrebleu
import torch

import lookback.decoding.search as new
import lookback.decoding.translate as T
from lookback.translator import Translator

run = sys.argv[1]
data = os.environ["LOOKBACK_MULTI30K"]
with gzip.open(f"{data}/test_2016_flickr.en.gz", "rt") as f:
    src = f.read().splitlines()
with gzip.open(f"{data}/test_2016_flickr.fr.gz", "rt") as f:
    ref = f.read().splitlines()
tr = Translator.load(run, checkpoint="last", device="cuda")
print(torch.cuda.get_device_name(), torch.__version__, "batch", tr.decode.batch_size)
outs = {}
for rep in range(2):
    for name, mod in (("new", new), ("old", old)):
        T.beam_search, T.greedy = mod.beam_search, mod.greedy
        for beam in (1, 5):
            tr.translate(src[:64], beam=beam)  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            hyps = [o.text for o in tr.translate(src, beam=beam)]
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            outs.setdefault((name, beam), hyps)
            bleu = sacrebleu.corpus_bleu(hyps, [ref]).score
            print(f"rep {rep} {name} beam {beam}: {len(src) / dt:.1f} sentences/s, BLEU {bleu:.2f}")
for beam in (1, 5):
    same = sum(a == b for a, b in zip(outs[("new", beam)], outs[("old", beam)], strict=True))
    print(f"beam {beam}: {same} of {len(src)} outputs the same, old and new")
