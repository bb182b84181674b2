"""The search that stays on the device (on_device.py): the same outputs as search.py's on every
kind of decoder, and the host transfers it makes, counted: one every `check_every` steps and
a few at the end, where search.py makes several at every step."""

import math

import pytest
import torch
from torch.overrides import TorchFunctionMode

from lookback.data.batch import pad
from lookback.decoding.on_device import beam_search_on_device, greedy_on_device
from lookback.decoding.search import beam_search, greedy, lp

from ..helpers import TINY_TRANSFORMER, tiny_model

VARIANTS = [
    dict(attention="additive"),
    dict(attention="none"),
    dict(attention="dot", input_feeding=True, dec_hidden_size=24),
    dict(attention="general", attend_from="previous", cell="lstm"),
    dict(attention="additive", coverage=True),
    dict(**TINY_TRANSFORMER, emb_size=16, hidden_size=16, dec_hidden_size=16, attention_size=16),
]


def _sources(n: int, seed: int, vocab: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 10, (n,), generator=g)
    return pad([torch.randint(4, vocab, (int(k),), generator=g).tolist() for k in lengths])


def _same(host, device, alpha: bool):
    assert [h.tokens for h in device] == [h.tokens for h in host]
    assert [h.score for h in device] == pytest.approx([h.score for h in host], abs=1e-4)
    assert [h.logprob for h in device] == pytest.approx([h.logprob for h in host], abs=1e-4)
    if alpha:
        for d, h in zip(device, host, strict=True):
            assert d.alpha.shape == h.alpha.shape and torch.allclose(d.alpha, h.alpha, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values())[:40])
def test_greedy_on_the_device_gives_search_pys_outputs(variant):
    model = tiny_model(seed=5, **variant)
    src, src_len = _sources(24, seed=1)
    _same(greedy(model, src, src_len), greedy_on_device(model, src, src_len), variant["attention"] != "none")


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values())[:40])
@pytest.mark.parametrize(
    "settings",
    [
        dict(beam=3, nbest=1),
        dict(beam=4, nbest=4, length_penalty=0.6),
        dict(beam=5, nbest=2, coverage_penalty=0.4, at_least_greedy=True),
        dict(beam=2, max_ratio=0.5),  # most outputs stop at their length limit
    ],
    ids=str,
)
def test_beam_search_on_the_device_gives_search_pys_outputs(variant, settings):
    model = tiny_model(seed=7, **variant)
    src, src_len = _sources(24, seed=2)
    host = beam_search(model, src, src_len, **settings)
    device = beam_search_on_device(model, src, src_len, **settings)
    for h, d in zip(host, device, strict=True):
        _same(h, d, variant["attention"] != "none")


def test_at_least_greedy_on_the_device_is_the_better_of_beam_and_greedy_once():
    model = tiny_model(vocab=12, attention="additive", seed=1)
    src, src_len = _sources(48, seed=1, vocab=12)
    greedy_scores = [h.logprob / lp(len(h.tokens) + 1, 1.0) for h in greedy(model, src, src_len)]
    plain = [hs[0] for hs in beam_search_on_device(model, src, src_len, beam=2)]
    both = beam_search_on_device(model, src, src_len, beam=2, nbest=2, at_least_greedy=True)
    for p, b, g in zip(plain, both, greedy_scores, strict=True):
        assert b[0].score == pytest.approx(max(p.score, g), abs=1e-5)
        assert len({tuple(h.tokens) for h in b}) == len(b)  # greedy's output once, found or added
    assert any(p.score < g - 1e-4 for p, g in zip(plain, greedy_scores, strict=True))  # beam 2 lost some


# what makes the host wait for the device: a value read (bool, item, tolist...), a copy to the
# host, a shape that depends on values (nonzero, a boolean mask), a tensor made of host data
READS = {"__bool__", "item", "tolist", "__int__", "__float__", "__index__", "cpu", "numpy"}
VALUE_SHAPED = {"nonzero", "masked_select", "unique", "argwhere"}


class HostTransfers(TorchFunctionMode):
    """Counts the calls that would make the host wait for a GPU, on any device."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        boolean_index = name in ("__getitem__", "__setitem__") and _has_bool_tensor(args[1])
        host_data = name == "tensor"  # torch.tensor(list, device=...): a copy from the host
        interleave = name == "repeat_interleave" and isinstance(
            args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor
        )
        if name in READS or name in VALUE_SHAPED or boolean_index or host_data or interleave:
            self.count += 1
        return func(*args, **kwargs)


def _has_bool_tensor(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _counted(search, model, *args, **kwargs) -> tuple[int, int]:
    """(host transfers, decoder steps) of one search."""
    steps, forward = [0], model.decoder.forward

    def counting(*a, **k):
        steps[0] += 1
        return forward(*a, **k)

    model.decoder.forward = counting
    with HostTransfers() as seen:
        search(model, *args, **kwargs)
    return seen.count, steps[0]


@pytest.mark.parametrize("variant", VARIANTS[:2] + VARIANTS[-1:], ids=["additive", "none", "transformer"])
def test_the_search_on_the_device_reads_the_device_once_every_check_every_steps(variant):
    """An untrained model's outputs run to their length limit: many steps (about 40 here)."""
    model = tiny_model(seed=3, **variant)
    src, src_len = _sources(8, seed=3)
    for search, kwargs in ((greedy_on_device, {}), (beam_search_on_device, {"beam": 4, "nbest": 2})):
        transfers, steps = _counted(search, model, src, src_len, max_ratio=4.0, check_every=8, **kwargs)
        assert steps >= 24
        # one look every 8 steps; once: the encoder's lengths (an RNN packs its input on the host),
        # src_len and the tensors of the hypotheses
        assert transfers <= math.ceil(steps / 8) + 10, (search.__name__, transfers, steps)
    # the counter sees what search.py does at every step (the decisions it takes on the host)
    transfers, steps = _counted(beam_search, model, src, src_len, max_ratio=4.0, beam=4, nbest=2)
    assert transfers >= 2 * steps


def test_a_trained_model_translates_the_same_on_the_device(trained):
    """The toy lexicon's validation sentences, as the Translator searches them (beam 5, never less
    than greedy), by search.py and by the search that stays on the device."""
    t = trained.translator
    ids = t.source_ids(trained.valid_data.src)
    src, src_len = pad(ids)
    host = beam_search(t.model, src, src_len, beam=5, nbest=2, at_least_greedy=True)
    device = beam_search_on_device(t.model, src, src_len, beam=5, nbest=2, at_least_greedy=True)
    for h, d in zip(host, device, strict=True):
        _same(h, d, alpha=True)
    assert sum(len(hs[0].tokens) for hs in device) > len(ids)  # real outputs, not empty ones
