"""python -m bench written-out-gru: a GRU whose backward through time is written out, timed
against PyTorch's own at the main job's shapes, on this CPU (issue 39: the recurrence's small
products batched). It lost, so lookback trains with nn.GRU; the experiment stays to be re-run.
Then the encoder's bidirectional GRU alone, nn.GRU against lookback's own (lookback/model/
bptt.py), which steps both directions in one batched product over the packed rows, and the same
for an LSTM encoder (nn.LSTM against bptt.py's, and against its two one-way calls on the padded
batch, lookback/model/encoder.py's `each_way`).
On a 2-core Zen 5 EPYC it took 1.09-1.13 times nn.GRU's time (results/bench/
2026-11-28_written_out_gru_zen5*.json): the per-step products of about 70 rows are the time
there, not autograd's bookkeeping, and batching the weights' gradient saves too little.

    python -m bench written-out-gru -o results/bench/written_out_gru.json [--threads 2 1]

PyTorch's GRU on a CPU runs one cell per step, and autograd records every
operator of every cell: its backward then makes one small weight-gradient
product per step and pays the engine's bookkeeping per operator. Here the
recurrence is one autograd node. Its forward keeps r, z, n and W_hn h + b_hn of
every step; its backward walks back through the steps with only the product
that carries the gradient to h_{t-1}, then makes the recurrent weights'
gradient in one large product over all steps (as cuDNN does on a GPU).

The cell, as PyTorch writes it (gates in the order r, z, n):

    r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
    z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
    n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
    h_t = (1 - z_t) * n_t + z_t * h_{t-1}

The input products W_i* x_t of all steps are one matrix product, made before
the recurrence, whose gradient autograd takes as usual.

`GRU` is `nn.GRU` with the same parameters: it takes this path only when
training in fp32 on a CPU over more than one step, and PyTorch's own
otherwise. Sentences of different lengths are handled as packing does: a
state stops changing after its sentence's end (the backward direction
starts at the end), outputs there are zero.

Legend: B batch, T steps, I input size, D hidden size, L layers.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .common import machine_record, median_call_seconds, write_json


class Recurrence(torch.autograd.Function):
    """h_1 .. h_T from gi (T, B, 3D) = the input products, h_0 (B, D) and W_hh, b_hh; `keep`
    (T, B, 1) is 1 where step t is inside sentence b, 0 where h_t stays h_{t-1}."""

    @staticmethod
    def forward(ctx, gi: Tensor, h0: Tensor, w_hh: Tensor, b_hh: Tensor, keep: Tensor) -> Tensor:
        T, B, G = gi.shape
        D = G // 3
        hs = gi.new_empty(T, B, D)  # h_1 .. h_T
        gates = gi.new_empty(T, B, G)  # r, z, n of every step
        ghn = gi.new_empty(T, B, D)  # W_hn h_{t-1} + b_hn
        h, w = h0, w_hh.t()
        for t in range(T):
            gh = torch.addmm(b_hh, h, w)  # (B, 3D)
            rz = torch.sigmoid(gi[t, :, : 2 * D] + gh[:, : 2 * D], out=gates[t, :, : 2 * D])  # (B, 2D)
            r, z = rz[:, :D], rz[:, D:]
            ghn[t] = gh[:, 2 * D :]
            n = torch.tanh(torch.addcmul(gi[t, :, 2 * D :], r, ghn[t]), out=gates[t, :, 2 * D :])  # (B, D)
            h_new = torch.addcmul(n, z, h - n)  # (1 - z) n + z h
            h = torch.lerp(h, h_new, keep[t], out=hs[t])  # h_new inside the sentence, h after it
        ctx.save_for_backward(h0, w_hh, hs, gates, ghn, keep)
        return hs

    @staticmethod
    def backward(ctx, d_hs: Tensor):
        h0, w_hh, hs, gates, ghn, keep = ctx.saved_tensors
        T, B, D = hs.shape
        d_pre = torch.empty_like(gates)  # gradient of the pre-activations of r, z, n: that of gi
        d_gh = torch.empty_like(gates)  # gradient of W_h* h_{t-1} + b_h*
        dh = torch.zeros_like(h0)  # from the steps after t
        for t in reversed(range(T)):
            g = d_hs[t] + dh  # (B, D) dJ/dh_t
            gk = g * keep[t]  # the part that reaches this step's gates
            r, z, n = gates[t, :, :D], gates[t, :, D : 2 * D], gates[t, :, 2 * D :]
            h_prev = hs[t - 1] if t else h0
            dn = gk * (1 - z) * (1 - n * n)  # through tanh
            d_pre[t, :, 2 * D :] = dn
            d_pre[t, :, :D] = dn * ghn[t] * r * (1 - r)  # through r's sigmoid
            d_pre[t, :, D : 2 * D] = gk * (h_prev - n) * z * (1 - z)  # through z's sigmoid
            d_gh[t, :, : 2 * D] = d_pre[t, :, : 2 * D]
            d_gh[t, :, 2 * D :] = dn * r
            dh = torch.addmm(torch.addcmul(g - gk, gk, z), d_gh[t], w_hh)  # dJ/dh_{t-1}
        h_prevs = torch.cat([h0.unsqueeze(0), hs[:-1]])  # (T, B, D)
        d_w_hh = d_gh.view(T * B, -1).t() @ h_prevs.view(T * B, D)  # (3D, D), one product for all steps
        return d_pre, dh, d_w_hh, d_gh.sum((0, 1)), None


def _run(x: Tensor, h0: Tensor, w: list[Tensor], keep: Tensor) -> Tensor:
    """One direction of one layer on x (T, B, I), w = W_ih, W_hh, b_ih, b_hh: h_1 .. h_T (T, B, D)."""
    w_ih, w_hh, b_ih, b_hh = w
    gi = F.linear(x, w_ih, b_ih)  # (T, B, 3D), all steps at once
    return Recurrence.apply(gi, h0, w_hh, b_hh, keep)


class GRU(nn.GRU):
    """nn.GRU, trained on a CPU in fp32 through `Recurrence`; `bias=True` (lookback's RNNs have biases)."""

    def forward(self, input, hx=None):  # noqa: A002 - nn.GRU's names
        if not self._written_out(input):
            return super().forward(input, hx)
        packed = isinstance(input, PackedSequence)
        if packed:  # padded again, in the caller's order, as are hx and h_n
            x, lengths = pad_packed_sequence(input, batch_first=self.batch_first)
        else:
            x, lengths = input, None
        x = x.transpose(0, 1) if self.batch_first else x  # (T, B, I)
        T, B = x.shape[:2]
        steps = torch.arange(T).unsqueeze(1)  # (T, 1)
        inside = steps < lengths.unsqueeze(0) if packed else torch.ones(T, B, dtype=torch.bool)
        keep = inside.unsqueeze(-1).to(x.dtype)  # (T, B, 1)
        if hx is None:
            hx = x.new_zeros(self.num_layers * self.dirs, B, self.hidden_size)
        last = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                w = [getattr(self, f"{n}{sfx}") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
                h0 = hx[layer * self.dirs + d]
                if d == 0:
                    hs = _run(x, h0, w, keep)  # (T, B, D)
                    last.append(hs[-1])
                else:  # the batch flipped in time: each sentence's padding comes first, h_0 waits through it
                    hs = _run(x.flip(0), h0, w, keep.flip(0))
                    last.append(hs[-1])
                    hs = hs.flip(0)
                outs.append(hs * keep)  # zero after each sentence's end, as packing gives
            x = torch.cat(outs, -1) if self.dirs == 2 else outs[0]  # (T, B, dirs * D)
            if self.dropout and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, self.training)
        h_n = torch.stack(last)  # (L * dirs, B, D)
        out = x.transpose(0, 1) if self.batch_first else x
        if packed:
            out = pack_padded_sequence(out, lengths, batch_first=self.batch_first, enforce_sorted=False)
        return out, h_n

    @property
    def dirs(self) -> int:
        return 2 if self.bidirectional else 1

    def _written_out(self, input) -> bool:
        """Whether this call takes `Recurrence`: training, fp32, on a CPU, no autocast, more than
        one step (one step at a time, as an input-feeding decoder runs, has nothing to batch)."""
        x = input.data if isinstance(input, PackedSequence) else input
        one_step = not isinstance(input, PackedSequence) and x.size(1 if self.batch_first else 0) == 1
        return (
            not one_step
            and self.training
            and torch.is_grad_enabled()
            and x.device.type == "cpu"
            and x.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu")
            and self.bias
        )


def measure(
    cls: type[nn.GRU], B: int = 70, S: int = 13, T: int = 14, E: int = 256, H: int = 256, repeats: int = 7
) -> float:
    """Milliseconds for the main job's two recurrences, forward and backward, on one batch of
    about 1,000 target tokens: the bidirectional encoder on packed sentences of S or fewer
    tokens, and the decoder over T steps from a given h_0 (the median of `repeats` timings of 10 calls)."""
    torch.manual_seed(0)
    enc, dec = cls(E, H, bidirectional=True, batch_first=True), cls(E, H, batch_first=True)
    x, y = torch.randn(B, S, E, requires_grad=True), torch.randn(B, T, E, requires_grad=True)
    h0 = torch.randn(1, B, H, requires_grad=True)
    lengths = torch.randint(S - 3, S + 1, (B,))
    lengths[0] = S

    def update():
        out, last = enc(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
        h, _ = pad_packed_sequence(out, batch_first=True, total_length=S)
        s, _ = dec(y, h0)
        (h.sum() + s.sum() + last.sum()).backward()

    return round(median_call_seconds(update, calls=10, repeats=repeats, warmup=5) * 1000, 3)


def measure_encoder(
    way: str,
    lengths: Tensor,
    cell: type[nn.Module] = nn.GRU,
    E: int = 256,
    H: int = 256,
    repeats: int = 7,
) -> float:
    """Milliseconds for the encoder's bidirectional GRU (or LSTM) alone, forward and backward, on
    sentences of these lengths, the `way` lookback can run it: "torch" nn.GRU (nn.LSTM) on the
    packed sentences, "written" lookback/model/bptt.py's (both directions in one batched product
    per step, over the packed rows), "each way" an LSTM's two one-way calls on the padded batch
    (lookback/model/encoder.py, oneDNN's fused LSTM)."""
    from lookback.model import bptt
    from lookback.model.encoder import each_way

    torch.manual_seed(0)
    rnn = cell(E, H, bidirectional=True, batch_first=True)
    x = torch.randn(len(lengths), int(lengths.max()), E, requires_grad=True)

    def update():
        if way == "each way":
            h, last = each_way(rnn, x, lengths)
            (h.sum() + last.sum()).backward()
            return
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, last = bptt.recurrence(rnn, packed) if way == "written" else rnn(packed)
        last = last if isinstance(last, tuple) else (last,)  # an LSTM's (h_n, c_n)
        (out.data.sum() + sum(state.sum() for state in last)).backward()

    return round(median_call_seconds(update, calls=10, repeats=repeats, warmup=5) * 1000, 3)


# Source lengths of two batches: lookback's own (sentences of one length, here 123 of 14-16
# pieces) and the headline's like-for-like batches (80 random pairs: 15.5 pieces on average,
# the longest 32 in a typical batch; uniform 5-26 with one of 32 stands in for them).
BATCHES = {
    "by length, 123 x 14-16": lambda g: torch.randint(14, 17, (123,), generator=g),
    "headline, 80 random": lambda g: torch.cat(
        [torch.tensor([32]), torch.randint(5, 27, (79,), generator=g)]
    ),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench written-out-gru", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--out", type=Path, default=Path("results/bench/written_out_gru.json"))
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--repeats", type=int, default=7, help="timings of 10 calls; their median is reported")
    args = ap.parse_args(argv)
    results = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        ms = {"nn.GRU": [], "written out": []}
        for _ in range(2):  # alternating, twice
            ms["nn.GRU"].append(measure(nn.GRU, repeats=args.repeats))
            ms["written out"].append(measure(GRU, repeats=args.repeats))
        speedup = round(min(ms["nn.GRU"]) / min(ms["written out"]), 3)
        encoder = {}
        for cell, (name, draw) in itertools.product((nn.GRU, nn.LSTM), BATCHES.items()):
            lengths, torch_name = draw(torch.Generator().manual_seed(0)), f"nn.{cell.__name__}"
            ways = {torch_name: "torch", "lookback": "written"}  # lookback: packed, written out
            if cell is nn.LSTM:
                ways["each way"] = "each way"
            e = {key: [] for key in ways}
            for _ in range(2):  # alternating, twice
                for key, way in ways.items():
                    e[key].append(measure_encoder(way, lengths, cell, repeats=args.repeats))
            key = name if cell is nn.GRU else f"LSTM, {name}"  # the GRU's keys as before
            fill = round(lengths.sum().item() / (len(lengths) * lengths.max().item()), 3)  # real / B x S
            encoder[key] = {
                "ms": e,
                "real_share": fill,
                "speedup": round(min(e[torch_name]) / min(e["lookback"]), 3),
            }
            if cell is nn.LSTM:
                encoder[key]["speedup_each_way"] = round(min(e[torch_name]) / min(e["each way"]), 3)
            print(
                f"threads {threads}, encoder, {key} (real {fill:.0%}): "
                + ", ".join(f"{k} {v}" for k, v in e.items())
            )
        results.append({"threads": threads, "ms_per_update": ms, "speedup": speedup, "encoder": encoder})
        print(f"threads {threads}: nn.GRU {ms['nn.GRU']} ms, written out {ms['written out']} ms: {speedup}x")
    record = machine_record("bench.written_out_gru", argv, results=results)
    write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0
