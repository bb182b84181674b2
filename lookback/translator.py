"""The Python API that the CLI, training's validation and the tests all call.

from lookback import Translator
t = Translator.load("runs/additive")
out = t.translate(["A dog runs."], beam=5)[0]
out.text, out.tokens, out.score, out.attention   # attention: (len(tokens), len(src_tokens))
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from .batch import pad
from .checkpoint import load_run
from .config import Config, DecodeConfig, search_width
from .decoder import Decoder
from .device import autocast, resolve_precision
from .ensemble import Ensemble
from .errors import CheckpointError
from .export import is_export, load_export
from .model import Seq2Seq
from .runtime import ONNX_DIR, fast_model, search_threads
from .search import Hypothesis, beam_search, greedy
from .tokenizer import EOS, Tokenizer

logger = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str  # detokenised output
    tokens: list[str]  # output pieces, one per attention row
    src_tokens: list[str]  # source pieces, one per attention column
    score: float  # log-probability / length penalty (plain log-probability for greedy)
    attention: Tensor | None  # (len(tokens), len(src_tokens)); None for attention 'none'
    ids: list[int] = field(default_factory=list)  # output token ids, without </s>
    src_ids: list[int] = field(default_factory=list)  # source token ids, as the model read them


class Translator:
    def __init__(
        self,
        model: Seq2Seq | Ensemble,
        src_tok: Tokenizer,
        tgt_tok: Tokenizer,
        decode: DecodeConfig,
        config: Config | None = None,
        max_src_len: int = 250,
        device: str | torch.device = "cpu",
        precision: str | None = None,
    ):
        self.config = config  # the run's resolved config (data.src_eos: sources end with </s>)
        self.model = model.to(device).eval()
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.decode = decode
        self.max_src_len = max_src_len  # longer inputs are cut, so one sentence cannot exhaust memory
        self.device = torch.device(device)
        self.precision = resolve_precision(self.device, precision or decode.precision, "precision")

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

    def translate(
        self, sentences: list[str], beam: int | None = None, length_penalty: float | None = None
    ) -> list[Translation]:
        """The best translation of each sentence (greedy when beam is 1)."""
        return [n[0] for n in self.translate_nbest(sentences, beam, 1, length_penalty)]

    def translate_nbest(
        self,
        sentences: list[str],
        beam: int | None = None,
        nbest: int | None = None,
        length_penalty: float | None = None,
    ) -> list[list[Translation]]:
        """Up to `nbest` translations of each sentence, best first (a beam under nbest grows to it)."""
        nbest = nbest or self.decode.nbest
        beam = search_width(beam or self.decode.beam, nbest)
        length_penalty = self.decode.length_penalty if length_penalty is None else length_penalty
        decoders = [m for m in self.model.modules() if isinstance(m, Decoder)]
        if self.decode.hard_attention and not decoders:
            raise ValueError("hard attention is not in the ONNX graphs: translate with --backend torch")
        for module in decoders:  # decode.hard_attention, as set now
            module.hard_attention = self.decode.hard_attention
        ids = self.source_ids(sentences)
        empty = Translation("", [], [], 0.0, None)
        results: list[list[Translation]] = [[empty] for _ in sentences]  # kept for empty input
        order = sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: -len(ids[i]))
        with evaluating(self.model):
            self._search(ids, order, results, beam, nbest, length_penalty)
        empty_out = sum(not r[0].ids for r, x in zip(results, ids, strict=True) if x)
        self._warn(empty_out, len(ids), "empty output")
        return results

    def _search(
        self,
        ids: list[list[int]],
        order: list[int],
        results: list[list[Translation]],
        beam: int,
        nbest: int,
        length_penalty: float,
    ) -> None:
        """Fill results[i] for each sentence i of `order`, in batches of similar lengths."""
        for start in range(0, len(order), self.decode.batch_size):
            chunk = order[start : start + self.decode.batch_size]  # similar lengths together
            src, src_len = pad([ids[i] for i in chunk])
            src, src_len, ratio = src.to(self.device), src_len.to(self.device), self.decode.max_ratio
            with autocast(self.device, self.precision), search_threads(self.model):
                if beam == 1 and nbest == 1:
                    hyps = [[h] for h in greedy(self.model, src, src_len, ratio)]
                else:  # never less than greedy (docs/search.md)
                    hyps = beam_search(
                        self.model,
                        src,
                        src_len,
                        beam,
                        nbest,
                        length_penalty,
                        ratio,
                        self.decode.coverage_penalty,
                        at_least_greedy=True,
                    )
            for i, hs in zip(chunk, hyps, strict=True):
                results[i] = [self._translation(ids[i], h) for h in hs]

    def source_ids(self, sentences: list[str]) -> list[list[int]]:
        """Each sentence as the model reads it: its pieces' ids, cut to max_src_len, with </s>
        when the model was trained so; one warning line for the cut and the empty ones."""
        ids = [self.src_tok.encode(s) for s in sentences]
        eos = [EOS] if self.config and self.config.data.src_eos else []  # as the model was trained
        room = self.max_src_len - len(eos)  # the source, </s> included, stays within max_src_len
        cut = sum(len(x) > room for x in ids)
        self._warn(cut, len(ids), f"over {self.max_src_len} tokens{' with </s>' if eos else ''}: cut")
        ids = [x[:room] + eos if x else x for x in ids]
        self._warn(sum(not x for x in ids), len(ids), "no source tokens: translated as empty")
        return ids

    @staticmethod
    def _warn(n: int, total: int, what: str) -> None:
        """One line when `n` of the `total` sentences had something to say."""
        if n:
            logger.warning("%d of %d sentence(s) with %s", n, total, what)

    def _translation(self, src_ids: list[int], hyp: Hypothesis) -> Translation:
        return Translation(
            text=self.tgt_tok.decode(hyp.tokens),
            tokens=self.tgt_tok.pieces(hyp.tokens),
            src_tokens=self.src_tok.pieces(src_ids),
            score=hyp.score,
            attention=hyp.alpha,
            ids=hyp.tokens,
            src_ids=src_ids,
        )


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) while it translates, then as it was: the trainer's
    translator shares the model being trained, and a validation between two updates must
    neither search with dropout on nor leave it off."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _vocab(tok: Tokenizer) -> list[str]:
    return tok.pieces(range(tok.vocab_size))
