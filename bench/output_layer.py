"""python -m bench output-layer: the output layer W_o alone, in fp32 and int8, on PyTorch and ONNX Runtime.

    python -m bench output-layer -o results/bench/output_layer.json [--rows 320] [--threads 1 2]

In beam search the output layer, logits = W_o ~s_t with W_o of D x V
(256 x 8,000 in the bench), is most of each step's arithmetic: rows x D x V
multiply-adds for rows = sentences x beam. This times that one product,
alone, as each backend runs it, and reports milliseconds and GFLOP/s, so
that the decoding figures of docs/performance.md can be read against what
the CPU can do at all. Random weights: speed does not depend on the values.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch import nn

from lookback.device import cpu_name
from lookback.runtime.fast import quantize_onnx, quantize_torch

from .common import cpu_flags


def timed(run, repeats: int = 30) -> float:
    """Milliseconds per call, after 3 untimed calls."""
    for _ in range(3):
        run()
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench output-layer", description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=320, help="rows: 64 sentences x beam 5 (default)")
    ap.add_argument("--size", type=int, default=256, help="D, the attentional vector's size")
    ap.add_argument("--vocab", type=int, default=8000, help="V")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("-o", "--output", type=Path, required=True)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    torch.manual_seed(0)
    layer = nn.Sequential(nn.Linear(args.size, args.vocab)).eval()
    x = torch.randn(args.rows, args.size)
    gflop = 2 * args.rows * args.size * args.vocab / 1e9
    result = {"cpu": cpu_name(), "cpu_flags": cpu_flags(), "rows": args.rows, "size": args.size}
    result.update(
        vocab=args.vocab, gflop_per_call=gflop, torch=torch.__version__, onnxruntime=ort.__version__
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                layer, (x,), str(path), dynamo=False, input_names=["x"], dynamic_axes={"x": {0: "R"}}
            )
        graphs = {"fp32": path, "int8": quantize_onnx(path)}
        int8 = quantize_torch(layer)
        rows = []
        for threads in args.threads:
            torch.set_num_threads(threads)
            with torch.no_grad():
                times = {"torch fp32": timed(lambda: layer(x)), "torch int8": timed(lambda: int8(x))}
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            for kind, graph in graphs.items():
                session = ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
                feed = {"x": x.numpy()}
                times[f"onnxruntime {kind}"] = timed(lambda s=session, f=feed: s.run(None, f))
            for name, ms in times.items():
                rows.append({"backend": name, "threads": threads, "ms": ms, "gflop_per_s": gflop / ms * 1000})
                print(
                    f"{name:18} {threads} thread(s): {ms:6.2f} ms, {gflop / ms * 1000:6.1f} GFLOP/s",
                    flush=True,
                )
    result["rows_timed"] = rows
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.output}")
    return 0
