"""Sentences in, translations out: a model in memory, its tokenizers and the decoding settings.

The one path from text to `Translation`s that the API (`lookback.Translator`, which also loads a
run, an export or an ensemble), training's validations and every command go through: encode the
sources, batch them by length, search (search.py), and turn each hypothesis back into text, pieces
and its attention matrix.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .. import display
from ..config import Config, DecodeConfig, search_width
from ..data.batch import pad
from ..data.tokenizer import EOS, Tokenizer
from ..device import autocast, free_memory, resolve_precision
from ..model.decoder import Look
from ..model.seq2seq import Seq2Seq
from .ensemble import Ensemble
from .on_device import beam_search_on_device, greedy_on_device
from .search import Hypothesis, beam_search, check_search, greedy, max_lengths

logger = logging.getLogger(__name__)
ON_DEVICE = (greedy_on_device, beam_search_on_device)  # the search off the CPU: no per-step sync


@dataclass
class Translation:
    text: str  # detokenised output
    tokens: list[str]  # output pieces, one per attention row
    src_tokens: list[str]  # source pieces, one per attention column
    score: float  # log-probability / length penalty (plain log-probability for greedy)
    attention: Tensor | None  # (len(tokens), len(src_tokens)); None for attention 'none'
    ids: list[int] = field(default_factory=list)  # output token ids, without </s>
    src_ids: list[int] = field(default_factory=list)  # source token ids, as the model read them

    def _repr_html_(self) -> str:
        """In a notebook: the text and the attention heatmap (display.py)."""
        return display.translation(self)


class NBest(list):
    """The translations of one sentence, best first: a list that a notebook shows with a
    heatmap for each candidate."""

    def _repr_html_(self) -> str:
        return display.nbest(self)


class TextTranslator:
    """Translates sentences with a model in memory (a `Seq2Seq`, an `Ensemble`, or a model on
    another backend that looks like one)."""

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
    ) -> list[NBest]:
        """Up to `nbest` translations of each sentence, best first (a beam under nbest grows to it)."""
        nbest = nbest or self.decode.nbest
        beam = search_width(beam or self.decode.beam, nbest)
        length_penalty = self.decode.length_penalty if length_penalty is None else length_penalty
        ids = self.source_ids(sentences)
        empty = Translation("", [], [], 0.0, None)
        results: list[NBest] = [NBest([empty]) for _ in sentences]  # kept for empty input
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
        results: list[NBest],
        beam: int,
        nbest: int,
        length_penalty: float,
    ) -> None:
        """Fill results[i] for each sentence i of `order`, in batches of similar lengths."""
        free = free_memory(self.device)
        for start in range(0, len(order), self.decode.batch_size):
            chunk = order[start : start + self.decode.batch_size]  # similar lengths together
            self._check(len(chunk), len(ids[chunk[0]]), beam, nbest, free)
            src, src_len = pad([ids[i] for i in chunk])
            src, src_len, ratio = src.to(self.device), src_len.to(self.device), self.decode.max_ratio
            # on a GPU the search keeps every decision on the device (on_device.py)
            greedy_, beam_search_ = (greedy, beam_search) if self.device.type == "cpu" else ON_DEVICE
            with autocast(self.device, self.precision), _search_threads(self.model):
                if beam == 1 and nbest == 1:
                    hyps = [[h] for h in greedy_(self.model, src, src_len, ratio, self.look)]
                else:  # never less than greedy (docs/search.md)
                    hyps = beam_search_(
                        self.model,
                        src,
                        src_len,
                        beam,
                        nbest,
                        length_penalty,
                        ratio,
                        self.decode.coverage_penalty,
                        at_least_greedy=True,
                        look=self.look,
                    )
            for i, hs in zip(chunk, hyps, strict=True):
                results[i] = NBest(self._translation(ids[i], h) for h in hs)

    def _check(self, sentences: int, src_len: int, beam: int, nbest: int, free: int) -> None:
        """A one-line error, before any work, when a batch cannot be searched: see check_search."""
        decoder = self.model.decoder
        vocab = decoder.out.out_features
        out_len = int(max_lengths(torch.tensor([src_len]), self.decode.max_ratio))
        state = getattr(decoder, "state_size", vocab // 8)  # D (ensembles and ONNX graphs: a bound)
        check_search(beam, nbest, vocab, sentences, src_len, out_len, state, free)

    @property
    def look(self) -> Look:
        """How attention looks while this translator searches: `decode.hard_attention`."""
        return Look(top_k=self.decode.hard_attention)

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


@contextmanager
def _search_threads(model: torch.nn.Module) -> Iterator[None]:
    """A model whose network runs outside PyTorch (runtime/fast.py's OnnxSeq2Seq) says how many
    threads PyTorch keeps while the search runs around it (`torch_threads`), so that the two do not
    contend for the same cores at every step."""
    wanted = [m.torch_threads for m in model.modules() if getattr(m, "torch_threads", None)]
    if not wanted:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(min(wanted))
    try:
        yield
    finally:
        torch.set_num_threads(threads)
