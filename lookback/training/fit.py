"""Models and batches that fit: a model too large to train in the free memory, or a training batch
whose step would not fit it, is refused before the first step, in one line naming the sizes or
train.max_tokens, the value and what fits (as check_search refuses a beam in decoding).

The model itself holds, in fp32 whatever the precision (bf16 autocast keeps fp32 weights), its
weights, their gradients and Adam's two moments, and train.ema's average when on: 4 or 5 copies
of 4 bytes a parameter. Its parameters are counted on PyTorch's meta device, where the model is
built without memory.

A batch holds at most train.max_tokens padded positions (sentences x the longest of them,
data/batch.py), so its step's memory grows with max_tokens, until one batch holds the whole
corpus. Per target position, one step holds about (floats, kept for the backward pass):

    3 V          the logits over the target vocabulary, their log-softmax, and its gradient
    3 S A        additive attention's tanh(W s + U h) over the S source states, and its gradient
                 (other scores: 3 S, the scores e and weights alpha)
    12 W         the recurrences' gates and states, embeddings and readout; W = E + He + D

Measured on the main job (Multi30k, V 8,000, fp32, on a 2-core AMD EPYC with avx512f,
avx512_bf16, avx512_vnni): peak RSS 2.02 GB at max_tokens 8,000 and 6.86 GB at 32,000, 202 KB a
position; with V 2,000, 128 KB: 3.1 floats more per vocabulary entry, as above.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..config import ConfigError, ModelConfig
from ..model.seq2seq import Seq2Seq, count_parameters

Lengths = Sequence[tuple[int, int]] | np.ndarray  # (source, target) length of each training pair
FLOAT = 4  # bytes: fp32; bf16 autocast keeps fp32 weights, gradients and many activations


def step_bytes(model: ModelConfig, vocab: int, positions: int, src_len: int) -> int:
    """About how many bytes one training step holds for a batch of `positions` padded target
    positions whose longest source has `src_len` tokens (see the module docstring)."""
    width = model.emb_size + model.enc_out_size * model.enc_layers + model.dec_hidden_size * model.dec_layers
    per_source = model.attention_size if model.attention == "additive" else model.heads
    attention = 0 if model.attention == "none" else 3 * src_len * per_source
    return FLOAT * positions * (3 * vocab + attention + 12 * width)


def largest_batch(lengths: Lengths, max_tokens: int) -> tuple[int, int]:
    """(padded positions, longest source) of the largest batch that `max_tokens` can make of
    these (source, target) lengths: max_tokens, or the whole corpus padded to its longest pair."""
    L = np.asarray(lengths, dtype=np.int64).reshape(-1, 2)  # (n, 2)
    longest = int(np.maximum(L[:, 0], L[:, 1] + 1).max())  # +1: <s> or </s>, as batch.py counts
    return max(min(max_tokens, len(L) * longest), longest), int(L[:, 0].max())


def check_batch(model: ModelConfig, vocab: int, lengths: Lengths, max_tokens: int, free: int) -> None:
    """A one-line ConfigError when the largest batch of train.max_tokens would need more memory
    for one step than is `free`, saying what fits."""
    positions, src_len = largest_batch(lengths, max_tokens)
    need = step_bytes(model, vocab, positions, src_len)
    if need <= free:
        return
    fits = positions * free // need  # the need grows with the positions
    what = f"at most {fits:,} fits" if fits >= 1 else "not even one position fits"
    raise ConfigError(
        f"train.max_tokens {max_tokens:,}: its largest batch ({positions:,} padded positions, sources "
        f"up to {src_len} tokens) needs about {need / 2**30:.1f} GiB for one training step, more than the "
        f"{free / 2**30:.1f} GiB free: {what} (the main job trains with 1,000)"
    )


def model_parameters(model: ModelConfig, src_vocab: int, tgt_vocab: int) -> int | None:
    """The model's parameter count, built on the meta device (no memory); None where a part of
    one's own (a registered score) cannot be built there: the real build then decides."""
    try:
        with torch.device("meta"):
            return count_parameters(Seq2Seq(model, src_vocab, tgt_vocab))
    except Exception:  # a plugin's module on the meta device: not ours to judge
        return None


def check_model(model: ModelConfig, src_vocab: int, tgt_vocab: int, copies: int, free: int) -> None:
    """A one-line ConfigError when `copies` fp32 copies of the model's parameters (weights,
    gradients, Adam's two moments, an average) would need more memory than is `free`."""
    n = model_parameters(model, src_vocab, tgt_vocab)
    need = copies * FLOAT * (n or 0)
    if need <= free:
        return
    layers = f"{model.enc_layers} + {model.dec_layers} layers"
    ff = f", ff_size {model.ff_size:,}" if "transformer" in (model.encoder, model.decoder) else ""
    raise ConfigError(
        f"model: {n:,} parameters (emb_size {model.emb_size:,}, hidden_size {model.hidden_size:,}, "
        f"dec_hidden_size {model.dec_hidden_size:,}, attention_size {model.attention_size:,}{ff}, {layers}; "
        f"vocabularies {src_vocab:,} and {tgt_vocab:,}) need about {need / 2**30:.1f} GiB to train "
        f"({copies} copies of 4 bytes each: weights, gradients, Adam's two moments"
        f"{', the average' if copies > 4 else ''}), more than the {free / 2**30:.1f} GiB free"
    )
