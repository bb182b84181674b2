"""The Python API that the CLI and the tests call: a `TextTranslator` that loads itself.

from lookback import Translator
t = Translator.load("runs/additive")
out = t.translate(["A dog runs."], beam=5)[0]
out.text, out.tokens, out.score, out.attention   # attention: (len(tokens), len(src_tokens))
"""

from __future__ import annotations

from pathlib import Path

import torch

from .data.tokenizer import Tokenizer
from .decoding.ensemble import Ensemble
from .decoding.translate import NBest, TextTranslator, Translation
from .errors import CheckpointError
from .runtime.export import is_export, load_export
from .runtime.fast import ONNX_DIR, fast_model
from .training.checkpoint import load_run

__all__ = ["NBest", "Translation", "Translator"]


class Translator(TextTranslator):
    """Translates sentences with a trained model: from a run directory, an export (`lookback
    export`), several runs as one ensemble, on PyTorch or ONNX Runtime, in fp32, bf16 or int8."""

    @classmethod
    def load(
        cls,
        run_dir: str | Path,
        checkpoint: str = "best",
        device: str | torch.device = "cpu",
        precision: str | None = None,
        backend: str = "torch",
        quantize: str | None = None,
        threads: int = 0,
    ) -> Translator:
        """Rebuild model, tokenizers and decoding settings from a run directory, or from an
        exported model (`lookback export`: safetensors weights, read without any pickle).

        backend "onnxruntime" runs the network on ONNX Runtime (the export's onnx/ graphs, or
        graphs exported now); quantize "int8" quantises its weights (runtime.py); `threads`
        are ONNX Runtime's (0: as many as PyTorch uses). Both run on the CPU only.
        """
        if is_export(run_dir):
            if checkpoint != "best":
                raise CheckpointError(f"{run_dir}: an export has one set of weights, no {checkpoint!r}")
            model, cfg, src_tok, tgt_tok = load_export(run_dir)
        else:
            model, cfg, src_tok, tgt_tok, _, _ = load_run(run_dir, checkpoint)
        if backend != "torch" or quantize:  # fp32 and int8 arithmetic: no autocast
            if (precision or cfg.decode.precision) not in ("auto", "fp32"):
                raise ValueError(
                    f"backend {backend}, quantize {quantize}: computes in fp32 and int8, not "
                    f"{precision or cfg.decode.precision}; set --precision fp32"
                )
            graphs = Path(run_dir) / ONNX_DIR if is_export(run_dir) else None
            model = fast_model(model, backend, quantize, threads, torch.device(device), graphs)
            precision = "fp32"
        return cls(model, src_tok, tgt_tok, cfg.decode, cfg, device=device, precision=precision)

    @classmethod
    def ensemble(
        cls,
        run_dirs: list[str | Path],
        checkpoint: str = "best",
        device: str | torch.device = "cpu",
        precision: str | None = None,
        backend: str = "torch",
        quantize: str | None = None,
        threads: int = 0,
    ) -> Translator:
        """Several runs that translate as one (lookback.ensemble): the mean of their next-token
        distributions. They must share their tokenizers; the first run's decode settings apply."""
        if len(run_dirs) == 1:
            return cls.load(run_dirs[0], checkpoint, device, precision, backend, quantize, threads)
        first, *others = [
            cls.load(d, checkpoint, device, precision, backend, quantize, threads) for d in run_dirs
        ]
        for run_dir, t in zip(run_dirs[1:], others, strict=True):
            differs = [
                what
                for what, a, b in (("source", first.src_tok, t.src_tok), ("target", first.tgt_tok, t.tgt_tok))
                if _vocab(a) != _vocab(b)
            ]
            differs = [f"{' and '.join(differs)} vocabulary"] if differs else []
            if first.config.data.src_eos != t.config.data.src_eos:
                differs.append("data.src_eos")
            if differs:
                raise ValueError(
                    f"{run_dir}: its {' and '.join(differs)} differ from {run_dirs[0]}'s; "
                    "the members of an ensemble must share them"
                )
        model = Ensemble([first.model, *(t.model for t in others)])
        return cls(
            model,
            first.src_tok,
            first.tgt_tok,
            first.decode,
            first.config,
            device=device,
            precision=first.precision,
        )


def _vocab(tok: Tokenizer) -> list[str]:
    return tok.pieces(range(tok.vocab_size))
