"""python -m bench onnx-agreement MODEL: does ONNX Runtime translate as PyTorch does, on a real test set?

    python -m bench onnx-agreement ~/.cache/lookback/bench/runs/STAMP/feed/lookback.export \\
        --test multi30k:test_2016_flickr -o results/bench/onnx_agreement.json

MODEL is a run directory or an export (with --onnx graphs, else they are
made now). For greedy and beam 5, on fp32 ONNX Runtime and on both int8
paths, against PyTorch fp32: how many outputs differ, and, over the outputs
that are the same, the largest difference of an attention weight and of a
score (log-probability over the length penalty). Writes JSON with the
device and CPU flags.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

from lookback import device
from lookback.data.read import read_parallel
from lookback.decoding.evaluate import score
from lookback.device import cpu_name
from lookback.runtime.fast import INT8, INT8_VNNI, ONNX_DIR, int8_suffix
from lookback.translator import Translator

from .common import cpu_flags

PATHS = {  # name -> Translator.load options
    "onnxruntime": {"backend": "onnxruntime"},
    "torch int8": {"quantize": "int8"},
    "onnxruntime int8": {"backend": "onnxruntime", "quantize": "int8"},
}


def compare(reference: list, other: list) -> dict:
    same = [(a, b) for a, b in zip(reference, other, strict=True) if a.ids == b.ids]
    alpha = [float((a.attention - b.attention).abs().max()) for a, b in same if a.attention is not None]
    return {
        "outputs": len(reference),
        "differ": len(reference) - len(same),
        "max_attention_difference": max(alpha, default=None),
        "max_score_difference": max((abs(a.score - b.score) for a, b in same), default=None),
    }


def int8_graphs(model: Path) -> str:
    """The int8 graphs ONNX Runtime runs for `model`: an export's own (runtime.int8_suffix), or
    for a run directory both twins exported on the fly, chosen by the CPU alike."""
    folder = model / ONNX_DIR
    if (folder / "encoder.onnx").is_file():
        return int8_suffix(folder)
    return INT8_VNNI if device.vnni() else INT8


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench onnx-agreement", description=__doc__.split("\n")[0])
    ap.add_argument("model", help="run directory or export")
    ap.add_argument("--test", default="multi30k:test_2016_flickr", help="corpus spec")
    ap.add_argument("--checkpoint", default="best", help="of a run directory (best, last)")
    ap.add_argument("-o", "--output", type=Path, required=True, help="the JSON to write")
    ap.add_argument(
        "--seven-bit",
        action="store_true",
        help="ONNX Runtime int8 on the 7-bit graphs (NAME.int8.onnx) even where the CPU has VNNI",
    )
    args = ap.parse_args(argv)
    if args.seven_bit:
        device.vnni = lambda: False  # runtime.int8_suffix then picks the 7-bit graphs
    reference = Translator.load(args.model, args.checkpoint, precision="fp32")  # auto: bf16 on some CPUs
    data = reference.config.data
    src, ref = read_parallel(args.test, data.src_lang, data.tgt_lang, data.multi30k_dir)
    result = {
        "model": args.model,
        "test": args.test,
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "onnxruntime_int8_graphs": "8-bit" if int8_graphs(Path(args.model)) == INT8_VNNI else "7-bit",
        "beams": {},
    }
    for beam in (1, 5):
        base = reference.translate(src, beam=beam)
        row = {"torch fp32 BLEU": score([t.text for t in base], ref, data.tgt_lang).bleu}
        for name, options in PATHS.items():
            other = Translator.load(args.model, args.checkpoint, **options).translate(src, beam=beam)
            row[name] = {
                **compare(base, other),
                "BLEU": score([t.text for t in other], ref, data.tgt_lang).bleu,
            }
        result["beams"][f"beam{beam}"] = row
        print(f"beam {beam}: {json.dumps(row)}", flush=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"written: {args.output}")
    return 0
