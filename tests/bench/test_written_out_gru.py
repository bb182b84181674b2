"""bench/written_out_gru.py: the written-out backward through time against PyTorch's own GRU."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from bench.written_out_gru import GRU, Recurrence, main


def _twins(**kw) -> tuple[nn.GRU, GRU]:
    torch.manual_seed(0)
    ref = nn.GRU(**kw)
    ours = GRU(**kw)
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters()}


def test_recurrence_gradients_match_finite_differences():
    torch.manual_seed(0)
    T, B, D = 4, 3, 5
    gi = torch.randn(T, B, 3 * D, dtype=torch.double, requires_grad=True)
    h0 = torch.randn(B, D, dtype=torch.double, requires_grad=True)
    w = torch.randn(3 * D, D, dtype=torch.double, requires_grad=True)
    b = torch.randn(3 * D, dtype=torch.double, requires_grad=True)
    keep = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 0, 0]], dtype=torch.double).unsqueeze(-1)
    assert torch.autograd.gradcheck(lambda *a: Recurrence.apply(*a, keep), (gi, h0, w, b))


@pytest.mark.parametrize("layers", [1, 2])
def test_packed_bidirectional_matches_pytorch(layers):
    ref, ours = _twins(input_size=6, hidden_size=5, num_layers=layers, bidirectional=True, batch_first=True)
    x = torch.randn(4, 7, 6)
    lengths = torch.tensor([3, 7, 1, 5])  # unsorted, as the encoder's batches are
    outs, lasts = [], []
    for rnn in (ref, ours):
        rnn.zero_grad()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, last = rnn(packed)
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=7)
        (h.pow(2).sum() + last.sin().sum()).backward()
        outs.append(h)
        lasts.append(last)
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    assert (outs[1][2, 1:] == 0).all()  # nothing after a sentence's end
    assert torch.allclose(lasts[0], lasts[1], atol=1e-5)
    for name, g in _grads(ref).items():
        assert torch.allclose(g, _grads(ours)[name], atol=1e-4), name


def test_decoder_shape_with_initial_state_matches_pytorch():
    ref, ours = _twins(input_size=6, hidden_size=5, batch_first=True)
    x = torch.randn(3, 4, 6, requires_grad=True)
    h0 = torch.randn(1, 3, 5, requires_grad=True)
    grads = []
    for rnn in (ref, ours):
        out, last = rnn(x, h0)
        (out * torch.arange(5.0)).sum().add(last.sum()).backward()
        grads.append((out.detach(), x.grad.clone(), h0.grad.clone(), _grads(rnn)))
        x.grad = h0.grad = None
    for a, b in zip(grads[0][:3], grads[1][:3], strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    for name, g in grads[0][3].items():
        assert torch.allclose(g, grads[1][3][name], atol=1e-4), name


def test_only_fp32_training_takes_the_written_out_path():
    rnn = GRU(input_size=3, hidden_size=2, batch_first=True)
    x = torch.randn(2, 3, 3)
    assert rnn._written_out(x)
    with torch.no_grad():
        assert not rnn._written_out(x)
    assert not rnn._written_out(x.double())
    assert not rnn._written_out(x[:, :1])  # one step at a time
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not rnn._written_out(x)
    rnn.eval()
    assert not rnn._written_out(x)


def test_the_benchmark_writes_both_timings(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.written_out_gru.median_call_seconds", lambda run, **kw: run() or 0.002)
    out = tmp_path / "gru.json"
    assert main(["-o", str(out), "--threads", "1"]) == 0
    record = __import__("json").loads(out.read_text())
    assert record["cpu_flags"] is not None and record["results"][0]["ms_per_update"]["nn.GRU"] == [2.0, 2.0]
    encoder = record["results"][0]["encoder"]  # the encoder alone, torch's against lookback's, two batches
    batches = {"by length, 123 x 14-16", "headline, 80 random"}
    assert set(encoder) == batches | {f"LSTM, {b}" for b in batches}
    assert all("nn.LSTM" in e["ms"] for k, e in encoder.items() if k.startswith("LSTM"))
    assert all(e["ms"]["lookback"] == [2.0, 2.0] and e["speedup"] == 1.0 for e in encoder.values())
    lstm = [e for k, e in encoder.items() if k.startswith("LSTM")]  # and its two one-way padded calls
    assert all(e["ms"]["each way"] == [2.0, 2.0] and e["speedup_each_way"] == 1.0 for e in lstm)
    assert (
        encoder["by length, 123 x 14-16"]["real_share"]
        > 0.9
        > 0.6
        > encoder["headline, 80 random"]["real_share"]
    )
