"""python -m bench kernels: the few PyTorch CPU kernels a beam-search step spends its time in, timed
against the alternatives lookback chose, on this CPU.

    python -m bench kernels -o results/bench/kernels.json [--threads 1 2] [--rows 320 40]

A step of beam 5 over 64 sentences has R = 320 rows (fewer as sentences
finish). Apart from the matrix products, its time goes to three things,
each timed here against what lookback computes instead (the same numbers):

- additive attention's tanh over (R, S, A) = (R, 18, 256): torch.tanh
  against 2 sigmoid(2x) - 1 written out, and against the one sigmoid that
  AdditiveScore takes in float32 on a CPU (its 2s moved onto the small
  tensors and onto v);
- the log-normaliser of the logits (R, V) = (R, 8000): torch.logsumexp
  against torch.log_softmax (search.top_tokens reads the n best from it);
- the 10 best of each row: Tensor.topk against search.top_k, the top-k in
  blocks, for block sizes 16 to 256 (search.BLOCK is one of them).

Random inputs: these kernels' speed does not depend on the values. Each
figure is the median of 5 timings of 50 calls, in milliseconds a call.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from lookback.decoding import search

from .common import machine_record, median_call_seconds, write_json

BLOCKS = (16, 32, 64, 128, 256)


def timed(run, calls: int = 50, repeats: int = 5) -> float:
    """Milliseconds a call: the median of `repeats` timings of `calls` calls, after 5 untimed."""
    return round(median_call_seconds(run, calls, repeats, warmup=5) * 1000, 4)


def top_k_in(block: int):
    """search.top_k with BLOCK = block."""

    def run(x: torch.Tensor, n: int):
        saved, search.BLOCK = search.BLOCK, block
        try:
            return search.top_k(x, n)
        finally:
            search.BLOCK = saved

    return run


def measure(rows: int, V: int = 8000, S: int = 18, A: int = 256, n: int = 10) -> dict[str, float]:
    torch.manual_seed(0)
    pre, logits = torch.randn(rows, S, A), torch.randn(rows, V) * 3
    out = {
        "tanh: torch.tanh": timed(lambda: torch.tanh(pre)),
        "tanh: 2 sigmoid(2x) - 1": timed(lambda: torch.sigmoid(pre * 2) * 2 - 1),
        "tanh: sigmoid alone (AdditiveScore's)": timed(lambda: torch.sigmoid(pre)),
        "normaliser: torch.logsumexp": timed(lambda: torch.logsumexp(logits, -1, keepdim=True)),
        "normaliser: torch.log_softmax": timed(lambda: torch.log_softmax(logits, -1)),
        f"top {n}: Tensor.topk": timed(lambda: logits.topk(n, dim=-1)),
    }
    for block in BLOCKS:
        run = top_k_in(block)
        out[f"top {n}: search.top_k, blocks of {block}"] = timed(lambda run=run: run(logits, n))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench kernels", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("results/bench/kernels.json"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rows", type=int, nargs="+", default=[320, 40])
    args = ap.parse_args(argv)
    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for rows in args.rows:
            ms = measure(rows)
            results.append({"threads": threads, "rows": rows, "ms_per_call": ms})
            print(f"threads {threads}, rows {rows}:")
            for name, value in ms.items():
                print(f"  {name:<40} {value:8.3f} ms")
    record = machine_record("bench.kernels", argv, block_in_use=search.BLOCK, results=results)
    write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0
