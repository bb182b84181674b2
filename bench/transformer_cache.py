"""What a transformer decoder's key and value cache saves: beam search with it, against recomputing the
whole prefix at every step, on one trained model.

    python -m bench transformer-cache RUN_DIR [--test multi30k:test_2016_flickr] [--beams 1,5] [--limit N]
        [-o results/bench/transformer_cache.json]

The cache (DecoderState.cache) holds each layer's keys and values of the steps so far, so that
step t computes one position. Without it, step t runs the decoder over all t positions again: what
a decoder that keeps no state must do. `Recompute` is that decoder, the same weights: it carries the
prefix's tokens in the state instead of its keys and values. Both must give the same translations;
the run checks it and reports sentences/s of each and their ratio, with the CPU and its flags.
Run it alone: another process on the cores changes both timings.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import Tensor, nn

from lookback.data.read import read_parallel
from lookback.model.decoder import SOFT, DecoderState, Look
from lookback.model.encoder import EncoderOutput
from lookback.translator import Translator

from .common import machine_record, write_json


class Recompute(nn.Module):
    """A transformer decoder without its cache: each step runs the whole prefix again. The state's
    `cache` slot carries the prefix's token ids, (1, R, t, 1), so that the beam reorders it."""

    attends = True

    def __init__(self, decoder: nn.Module):
        super().__init__()
        self.inner = decoder
        self.out = decoder.out  # search reads the vocabulary size from it
        self.state_size = decoder.state_size

    def prepare(self, enc: EncoderOutput) -> EncoderOutput:
        return self.inner.prepare(enc)

    def init_state(self, enc: EncoderOutput) -> DecoderState:
        return DecoderState(None, None, 0, cache=enc.h.new_zeros(1, enc.h.size(0), 0, 1))

    def forward(self, y_prev: Tensor, enc: EncoderOutput, state: DecoderState, look: Look = SOFT):
        ids = torch.cat([state.cache[0, :, :, 0].long(), y_prev], 1)  # (R, t + 1) the prefix
        R, L = ids.size(0), len(self.inner.layers)
        empty = DecoderState(None, None, 0, cache=enc.h.new_zeros(L, R, 0, self.inner.cache_size))
        out = self.inner(ids, enc, empty, look=look)  # every position again
        last = {
            name: None if x is None or name == "state" else x[:, -1:] for name, x in out._asdict().items()
        }
        state = DecoderState(None, None, state.step + 1, cache=ids.unsqueeze(0).unsqueeze(-1).to(enc.h.dtype))
        return out._replace(**{**last, "state": state, "self_alpha": None})


class NoCache(nn.Module):
    """`model` with the Recompute decoder: what search sees of a model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.decoder = model, Recompute(model.decoder)

    def encode(self, src: Tensor, src_len: Tensor) -> EncoderOutput:
        return self.model.encode(src, src_len)


def timed_translate(t: Translator, src: list[str], beam: int) -> tuple[list[str], float]:
    start = time.perf_counter()
    outs = t.translate(src, beam=beam)
    return [o.text for o in outs], time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench transformer-cache", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir", help="a run of a transformer decoder (lookback train)")
    ap.add_argument("--test", default="multi30k:test_2016_flickr", help="corpus spec (default: %(default)s)")
    ap.add_argument("--beams", default="1,5", help="beam sizes, comma-separated (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=0, help="the first N sentences only (0: all)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument("-o", "--output", help="results JSON")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cached = Translator.load(args.run_dir)
    if not hasattr(cached.model.decoder, "layers"):
        ap.error(f"{args.run_dir}: its decoder is an RNN, which has no key and value cache")
    recomputing = copy.copy(cached)
    recomputing.model = NoCache(cached.model).eval()
    data = cached.config.data
    src = read_parallel(args.test, data.src_lang, data.tgt_lang, data.multi30k_dir)[0]
    src = src[: args.limit] if args.limit else src
    rows = {}
    for beam in [int(b) for b in args.beams.split(",")]:
        with_cache, seconds = timed_translate(cached, src, beam)
        without, seconds_without = timed_translate(recomputing, src, beam)
        same = sum(a == b for a, b in zip(with_cache, without, strict=True))
        rows[f"beam{beam}"] = {
            "sentences": len(src),
            "cached_sentences_per_s": len(src) / seconds,
            "recomputed_sentences_per_s": len(src) / seconds_without,
            "speedup": seconds_without / seconds,
            "same_translations": same,
        }
        print(
            f"beam {beam}: {len(src) / seconds:.1f} sentences/s with the cache, "
            f"{len(src) / seconds_without:.1f} recomputing the prefix: {seconds_without / seconds:.2f}x; "
            f"{same} of {len(src)} translations the same",
            flush=True,
        )
    if args.output:
        write_json(
            args.output,
            machine_record("bench transformer-cache", argv, run_dir=args.run_dir, test=args.test, **rows),
        )
    return 0 if all(r["same_translations"] == r["sentences"] for r in rows.values()) else 1
