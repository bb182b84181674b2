"""Where a trained attention-only model looks, against the synthetic task's true alignment.

    python results/transformer/takeoff/alignment.py RUN [--task articles] [--pairs 64]

Teacher-forced on the first validation pairs of RUN's data, it prints the scale of the
embeddings against the positions they are added to, and for each decoder layer and head of the
attention over the source: the weights' entropy and how often their argmax falls on the source
word the target word translates (an article on its noun's), on the word after it or before it.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from lookback.data.batch import collate
from lookback.data.synth import language
from lookback.data.tokenizer import EOS
from lookback.training.checkpoint import load_run


def aligned(src: list[str], task: str, vocab: int) -> list[int]:
    """For each target word of a source `src`, the index of the source word it comes from."""
    if task == "reverse":
        return list(range(len(src) - 1, -1, -1))
    lang, articles = language(vocab), task == "articles"
    out, i = [], 0
    while i < len(src):
        if i + 1 < len(src) and src[i] in lang.adjectives and src[i + 1] not in lang.adjectives:
            out += [i + 1] * (1 + articles) + [i]  # (article) noun adjective
            i += 2
        else:
            out += [i] * (1 + (articles and src[i] not in lang.adjectives))
            i += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--task", default="articles", choices=("articles", "translate", "reverse"))
    p.add_argument("--vocab", type=int, default=300, help="the task's source words")
    p.add_argument("--pairs", type=int, default=64)
    p.add_argument("--checkpoint", default="best")
    args = p.parse_args()
    model, cfg, src_tok, tgt_tok, *_ = load_run(args.run, args.checkpoint)
    model.eval()
    srcs = Path(cfg.data.valid + ".src").read_text().splitlines()[: args.pairs]
    tgts = Path(cfg.data.valid + ".tgt").read_text().splitlines()[: args.pairs]
    eos = [EOS] if cfg.data.src_eos else []
    batch = collate([(src_tok.encode(s) + eos, tgt_tok.encode(t)) for s, t in zip(srcs, tgts, strict=True)])
    d = cfg.model.emb_size
    with torch.no_grad():
        for side, module in (("encoder", model.encoder), ("decoder", model.decoder)):
            x = module.embed.weight[4:] * math.sqrt(d)  # the words' rows, without PAD, UNK, BOS, EOS
            print(f"{side}: sqrt(d) E has entries of rms {x.pow(2).mean().sqrt():.2f} (the positions': 0.71)")
        enc = model.encode(batch.src, batch.src_len)
        out = model.decoder(batch.tgt_in, enc, model.decoder.init_state(enc))
        heads = out.heads  # (B, T, L, H, S)
        gold = torch.full(batch.tgt_out.shape, -1)
        for i, (s, t) in enumerate(zip(srcs, tgts, strict=True)):
            a = aligned(s.split(), args.task, args.vocab)
            assert len(a) == len(t.split()), f"pair {i}: not a {args.task} pair of {args.vocab} words"
            gold[i, : len(a)] = torch.tensor(a)
        real = gold >= 0
        for layer in range(heads.size(2)):
            for h in range(heads.size(3)):
                alpha = heads[:, :, layer, h]  # (B, T, S)
                entropy = -(alpha.clamp_min(1e-9).log() * alpha).sum(-1)[real].mean()
                top = alpha.argmax(-1)
                on, after, before = ((top == gold + k)[real].float().mean() * 100 for k in (0, 1, -1))
                print(
                    f"layer {layer} head {h}: entropy {entropy:.2f} nats; argmax on the aligned word "
                    f"{on:.1f}%, the word after {after:.1f}%, before {before:.1f}%"
                )
        logp = out.logits.float().log_softmax(-1)
        nll = -logp.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)[batch.tgt_out != 0].mean()
        right = (out.logits.argmax(-1) == batch.tgt_out)[batch.tgt_out != 0].float().mean() * 100
        print(f"teacher forced: {nll:.3f} nats per target token, {right:.1f}% of them right")


if __name__ == "__main__":
    main()
