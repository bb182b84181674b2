"""Solutions to the exercises of notebooks/2_a_real_translator (tests/test_exercises.py checks them)."""

import torch

from lookback.data.tokenizer import BOS, EOS
from lookback.decoding.search import max_lengths


def bucket(n):
    """The notes' length buckets: tens up to 40 words, then 41-60, then 61 and more."""
    if n > 60:
        return "61+"
    if n > 40:
        return "41-60"
    lo = (n - 1) // 10 * 10 + 1
    return f"{lo}-{lo + 9}"


@torch.no_grad()
def decode(translator, sentence):
    """Greedy search, one step at a time: the most probable piece until </s>."""
    model = translator.model.eval()
    ids = translator.source_ids([sentence])[0]
    src, src_len = torch.tensor([ids]), torch.tensor([len(ids)])
    enc = model.encode(src, src_len)  # once per sentence
    state = model.decoder.init_state(enc)  # s_0 from the fixed context
    limit = int(max_lengths(src_len, translator.decode.max_ratio))  # steps, </s> included
    out, y = [], BOS
    for _ in range(limit - 1):  # at the last step only </s> may come
        step = model.decoder(torch.tensor([[y]]), enc, state)
        state = step.state
        y = int(step.logits[0, -1].argmax())
        if y == EOS:
            break
        out.append(y)
    return out
