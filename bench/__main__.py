"""python -m bench RUN [options]: the benchmark's one entry point, a named run per module.

    python -m bench headline --configs feed --recipe --decoding   # lookback against Joey NMT
    python -m bench machine -o results/bench/machine.json         # the CPU's peak, and its share
    python -m bench RUN --help                                    # a run's own options

`python -m bench` alone lists the runs. tests/bench/test_entry_points.py starts every one of
them, so a module that moves fails CI the day it moves.
"""

from __future__ import annotations

import importlib
import sys

# the runs, each a module of bench/ with main(argv) -> exit status; the first six are the
# measurements the docs cite, the rest the tools and single studies behind them
RUNS = {
    "headline": "lookback against Joey NMT: like for like, each at its own recipe, then decoding",
    "machine": "the machine's fp32 GEMM peak, and the share of it training and decoding use",
    "variants": "the training speed of each attention variant against additive",
    "decoding": "greedy and beam 5, PyTorch and ONNX Runtime, against Joey NMT on a headline run's weights",
    "loadtest": "the web explorer's API under concurrent clients",
    "gpu-check": "lookback on an NVIDIA GPU, checked in one command",
    "table": "the README's comparison table, from a headline results file",
    "curves": "time-to-quality curves from headline results files",
    "scores": "test BLEU of a headline run's systems under the Multi30k protocol",
    "joey-search": "Joey NMT's own recipe searched for its best, on validation only",
    "kernels": "the CPU kernels a beam-search step spends its time in",
    "store": "the token store against reading the corpus whole",
    "stopping": "where beam search stops, and when it scores below greedy",
    "output-layer": "the output layer in fp32 and int8, PyTorch and ONNX Runtime",
    "onnx-agreement": "does ONNX Runtime translate as PyTorch does, on a real test set",
    "same-translations": "do two versions of lookback translate a trained model identically",
    "written-out-gru": "a GRU with its backward written out, against nn.GRU",
    "transformer-cache": "a transformer's search with its key-value cache, against recomputing the prefix",
    "transformer-peer": "the attention-only model and the main job beside Joey NMT's Transformer",
    "ray-study": "a study on a local Ray instance against the same study run serially",
    "compiled": "the training update compiled by torch.compile, against eager, on the same batches",
}


def module_of(run: str):
    """The module that makes a run."""
    return importlib.import_module(f"bench.{run.replace('-', '_')}")


def usage() -> str:
    width = max(map(len, RUNS))
    lines = [f"  {name:<{width}}  {about}" for name, about in RUNS.items()]
    return "usage: python -m bench RUN [options]   (python -m bench RUN --help)\n\nruns:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in RUNS:
        print(f"python -m bench: error: no run named {argv[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    return module_of(argv[0]).main(argv[1:]) or 0


if __name__ == "__main__":
    sys.exit(main())
