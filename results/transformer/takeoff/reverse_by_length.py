"""Reverse by source length: a small attention-only model and a small RNN, same data, same updates.

    python results/transformer/takeoff/reverse_by_length.py '{"arch": "tf", "lengths": [3, 40]}'

prints one JSON line: the settings, greedy sequence accuracy on the 200 validation pairs, and the
validation curve [update, BLEU, perplexity]. d = 64, 2 + 2 layers and 4 heads (tf) or a
bidirectional GRU of 32 per direction with additive attention (rnn); 6,000 training pairs over
300 words, batches of 2,000 target tokens, Adam 3e-3 with 100 warm-up updates and a cosine to
800 updates, fp32, seed 1. reverse_by_length.json beside it holds the eight runs and the CPU.

`"src_positions": "from_end"` (tf only) is a diagnosis, not a model we ship: the encoder's
sinusoidal positions count from the source's last word (n - 1 - j) instead of its first (j), the
one change, to test whether reversal is hard for attention only because its positions index from
the start while the target's t-th word sits t words from the end."""

import contextlib
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

from lookback.config import from_dict
from lookback.data.synth import sequence_accuracy, synth_corpus
from lookback.data.tokenizer import PAD
from lookback.model import transformer
from lookback.model.encoder import drop_words
from lookback.training.train import Trainer


def forward_from_end(self, src, src_len, x=None):
    """TransformerEncoder.forward with each sequence's positions counted from its last word."""
    S, d = src.size(1), self.out_size
    src_mask = src != PAD
    x = (self.embed(src) if x is None else x) * math.sqrt(d)  # (B, S, d)
    x = drop_words(x, self.word_dropout, self.training)
    back = (src_len.to(src.device).unsqueeze(1) - 1 - torch.arange(S, device=src.device)).clamp(min=0)
    h = self.dropout(x + transformer.positions(0, S, d, src.device)[back])  # (B, S, d)
    weights = []
    for layer in self.layers:
        h, alpha = layer(h, src_mask)
        weights.append(alpha)
    h = self.norm(h)
    c = (h * src_mask.unsqueeze(-1)).sum(1) / src_len.to(h.dtype).unsqueeze(-1)
    return transformer.EncoderOutput(h, src_mask, c, self_alpha=torch.stack(weights, 1))


@contextlib.contextmanager
def source_positions(kind):
    if kind == "from_end":
        saved = transformer.TransformerEncoder.forward
        transformer.TransformerEncoder.forward = forward_from_end
        try:
            yield
        finally:
            transformer.TransformerEncoder.forward = saved
    else:
        yield


def run(
    tmp,
    arch,
    lengths,
    vocab=300,
    d=64,
    layers=2,
    lr=3e-3,
    steps=800,
    tokens=2000,
    ntrain=6000,
    seed=1,
    src_positions="from_start",
):
    tmp = Path(tmp)
    data = synth_corpus(
        "reverse", tmp / "data", lengths, seed=1, sizes={"train": ntrain, "val": 200}, vocab=vocab
    )
    if arch == "tf":
        model = {
            "encoder": "transformer",
            "decoder": "transformer",
            "attention": "scaled_dot",
            "emb_size": d,
            "hidden_size": d,
            "dec_hidden_size": d,
            "attention_size": d,
            "ff_size": 2 * d,
            "heads": 4,
            "enc_layers": layers,
            "dec_layers": layers,
            "dropout": 0.0,
        }
    else:
        model = {
            "attention": "additive",
            "emb_size": d,
            "hidden_size": d // 2,
            "dec_hidden_size": d,
            "attention_size": d,
            "dropout": 0.0,
        }
    raw = {
        "data": {
            "src_lang": "src",
            "tgt_lang": "tgt",
            "train": str(data["train"]),
            "valid": str(data["val"]),
            "max_len": 200,
        },
        "tokenizer": {"kind": "word", "vocab_size": 1000, "joint": False},
        "model": model,
        "train": {
            "run_dir": str(tmp / "run"),
            "max_tokens": tokens,
            "lr": lr,
            "warmup": 100,
            "schedule": "cosine",
            "max_steps": steps,
            "max_epochs": 1000,
            "threads": 2,
            "valid_every": steps // 4,
            "early_stopping": 0,
            "log_every": 100,
            "precision": "fp32",
            "seed": seed,
        },
        "decode": {"beam": 1},
    }
    t0 = time.time()
    with source_positions(src_positions):
        trainer = Trainer(from_dict(raw))
        trainer.train()
        src = Path(str(data["val"]) + ".src").read_text().splitlines()
        ref = Path(str(data["val"]) + ".tgt").read_text().splitlines()
        hyps = [t.text for t in trainer.translator.translate(src, beam=1)]
    curve = [json.loads(l) for l in (tmp / "run" / "metrics.jsonl").read_text().splitlines()]
    curve = [(r["step"], round(r["bleu"], 1), round(r["ppl"], 1)) for r in curve if r.get("kind") == "valid"]
    return sequence_accuracy(hyps, ref), time.time() - t0, curve


if __name__ == "__main__":
    kw = json.loads(sys.argv[1])
    kw["lengths"] = tuple(kw["lengths"])
    with tempfile.TemporaryDirectory() as tmp:
        acc, sec, curve = run(tmp, **kw)
    print(json.dumps({**kw, "seq_acc": round(acc, 1), "seconds": round(sec, 1), "valid": curve}), flush=True)
