"""What attention costs: floating-point operations of one decoder step, measured, by source length.

The notes ask for the time complexity of attention. Per output step, global
attention scores all S source states and sums them: O(S) work per step and
O(S x T) per sentence, against the RNN step and the output layer, whose cost
does not depend on S. Local attention (local.py) touches 2D + 1 states per
step whatever S is. `step_flops` measures this on a real model with PyTorch's
own counter (torch.utils.flop_counter.FlopCounterMode, which counts matrix
products: the elementwise add, tanh and exp are left out; for additive
attention they are about as much again as its S-dependent products).

    keys        once per sentence: what the score precomputes from h (U h, W h, W^K h; a
                transformer decoder: every layer's keys and values of h)
    attention   per step: (1) score, (2) normalise, (3) combine (Decoder.context; a transformer
                decoder: every layer's attention over the source, its self-attention aside)
    step        per step: the whole decoder step, the output layer over V included

Legend: S source length, T output length, V target vocabulary.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from ..data.tokenizer import BOS
from ..model.seq2seq import Seq2Seq

FIRST_ID = 4  # a real token id past <pad>, <unk>, <s> and </s>: any id costs the same


def _flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@torch.no_grad()
def step_flops(model: Seq2Seq, S: int) -> dict:
    """FLOPs of one greedy step of `model` on a source of S tokens (batch 1, the first step)."""
    model.eval()
    device = next(model.parameters()).device
    src, src_len = torch.full((1, S), FIRST_ID, device=device), torch.tensor([S], device=device)
    dec = model.decoder
    enc = model.encode(src, src_len)
    state = dec.init_state(enc)
    y = torch.full((1, 1), BOS, device=device)
    step = _flops(lambda: dec(y, enc, state))
    if not dec.attends:
        keys = attention = 0
    elif hasattr(dec, "layers"):  # attention only: every layer's attention over the source
        keys = _flops(lambda: dec.prepare(enc))
        q = enc.h.new_zeros(1, 1, dec.state_size)  # any query costs the same
        attention = sum(
            _flops(lambda i=i, layer=layer: layer.src_attn(q, enc.keys[:, :, i], enc.src_mask))
            for i, layer in enumerate(dec.layers)
        )
    else:
        keys = _flops(lambda: dec.score.keys(enc.h))
        query = state.top().unsqueeze(1)  # (1, 1, D): any query costs the same
        attention = _flops(lambda: dec.context(query, enc, 0, state.coverage))
    return {
        "source_tokens": S,
        "keys_flops": keys,
        "attention_flops_per_step": attention,
        "step_flops": step,
        "attention_share": attention / step if step else 0.0,
        # a sentence of T = S outputs: the keys once, attention at every step
        "attention_flops_per_sentence": keys + S * attention,
    }
