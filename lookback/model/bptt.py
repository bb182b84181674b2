"""Backpropagation through time, written out: an input-feeding decoder's T steps, an encoder's GRU or LSTM.

Autograd differentiates the decoder's steps (decoder.py) operator by operator: at
each step some thirty operators forward and more backward, each recorded and
visited by the engine, and every weight's gradient made once per step and
summed. On a CPU, with steps of 80 sentences, that bookkeeping cost as much as
the arithmetic (docs/performance.md). Here the same step runs forward as a plain
loop that keeps what the backward needs, and the backward is written out: one
loop back over the steps for what flows from step to step, then each weight's
gradient as one matrix product over all T steps. As packing does for an RNN, step t runs
only the b_t sentences whose target is longer than t (sorted by length): with random
batches most of the T x B positions can be padding.

One step, as decoder.py computes it (Luong et al. 2015 with input feeding;
additive score, Bahdanau et al. 2015; PyTorch's GRU, gates r, z, n):

    x_t   = [y_{t-1}; ~s_{t-1}]                          embedding and previous attentional vector
    r, z  = sigmoid(W_i{r,z} x_t + b_i{r,z} + W_h{r,z} s_{t-1} + b_h{r,z})
    n     = tanh(W_in x_t + b_in + r * (W_hn s_{t-1} + b_hn))
    s_t   = (1 - z) * n + z * s_{t-1}
    e_t,i = v . tanh(W s_t + U h_i)                      U h_i: the keys, computed once
    alpha_t = softmax(e_t) over the real source tokens
    c_t   = sum_i alpha_t,i h_i
    ~s_t  = tanh(W_c [s_t; c_t])

and its derivatives, for g = dJ/d~s_t (from the loss and from step t + 1's x):

    du     = g * (1 - ~s_t^2)                            u = W_c [s_t; c_t]
    ds, dc = du W_c                                      split as [s_t; c_t]
    dalpha = h dc;   de = alpha * (dalpha - alpha . dalpha)
    da     = de v;   dpre = da * (1 - a^2)               a = tanh(pre), pre = W s_t + U h
    dU h  += dpre;   ds += (sum_i dpre_i) W              (plus dJ/ds_t from step t + 1)
    dn_pre = ds * (1 - z) * (1 - n^2);   dz_pre = ds * (s_{t-1} - n) * z (1 - z)
    dr_pre = dn_pre * (W_hn s_{t-1} + b_hn) * r (1 - r)
    dJ/ds_{t-1} = ds * z + [dr_pre; dz_pre; dn_pre * r] W_hh
    dJ/d~s_{t-1} = [dr_pre; dz_pre; dn_pre] W_if          W_if: W_ih's columns that read ~s_{t-1}

tanh(x) is taken as 2 sigmoid(2x) - 1 in the score, as AdditiveScore does on a CPU, whose
sigmoid is several times faster than its tanh: e = 2v . sigmoid(2 pre) - sum(v).

`covers` says which decoders this serves: a one-layer GRU, additive attention from s_t with
softmax, input feeding, Luong's readout without a layer norm, float32 or float64. Anything else
(and any loss that reads alpha) goes through autograd; so does `train.bptt: autograd`. The
tests hold this to autograd's loss and gradients in float64.

The encoder's one-layer GRU or LSTM gets the same treatment (`recurrence`, `GRUSteps`,
`LSTMSteps`, where `reads` says: fp32 or fp64 on a CPU): both directions step together over the
packed rows, the backward one reading each sentence from its end, one batched product a step for
the two.

Legend: T target steps, B batch, N real target positions (the sum of b_t), S source length,
E embedding size, D decoder state size, He encoder state size, A attention size.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn
from torch.autograd import Function
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .attention import AdditiveScore

sigmoid_backward = torch.ops.aten.sigmoid_backward  # dy * y (1 - y), one pass
tanh_backward = torch.ops.aten.tanh_backward  # dy * (1 - y^2), one pass


def covers(decoder: nn.Module) -> bool:
    """Whether `steps` can run this decoder's training steps: see the module's docstring."""
    rnn = getattr(decoder, "rnn", None)
    return (
        getattr(decoder, "input_feeding", False)
        and decoder.attend_from == "current"
        and isinstance(rnn, nn.GRU)
        and rnn.num_layers == 1
        and isinstance(decoder.score, AdditiveScore)
        and decoder.score.w_c is None  # no coverage in the score
        and isinstance(decoder.score.v, nn.Linear)  # not quantised
        and decoder.window is None
        and decoder.normalizer == "softmax"
        and decoder.readout == "luong"
        and isinstance(decoder.norm, nn.Identity)
        and rnn.weight_hh_l0.dtype in (torch.float32, torch.float64)
    )


def runs(decoder: nn.Module) -> bool:
    """Whether `steps` serves this decoder now: one it covers, with gradients on, outside autocast
    (whose bf16 and fp16 go through autograd)."""
    if not covers(decoder):
        return False
    device = decoder.rnn.weight_hh_l0.device.type
    return torch.is_grad_enabled() and not torch.is_autocast_enabled(device)


def steps(
    decoder: nn.Module,
    x: Tensor,
    h: Tensor,
    keys: Tensor,
    src_mask: Tensor,
    s0: Tensor,
    lengths: Tensor | None = None,
) -> Tensor:
    """~s_t of every step in teacher forcing, (B, T, D), for the embedded previous tokens x
    (B, T, E), encoder states h (B, S, He), keys U h (B, S, A), src_mask (B, S), the first
    state s_0 (B, D) and the target lengths (B,) (None: all T); the first ~s_{t-1} is zeros, as
    Decoder.init_state has it, and ~s_t is zero past a sentence's length.

    As packing does for an RNN, the sentences are sorted by length and step t runs only the b_t
    still going: in a batch of 80 random sentences about half of the T x B positions are
    padding. Their rows are stored step after step, the N real positions of the batch."""
    B, T, _ = x.shape
    if lengths is None:
        lengths = torch.full((B,), T, dtype=torch.long)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)  # (N, E)
    order, sizes = packed.sorted_indices, packed.batch_sizes.tolist()  # b_t of each step
    rnn, score = decoder.rnn, decoder.score
    s_tilde = InputFeedingSteps.apply(
        packed.data,
        sizes,
        s0.index_select(0, order),
        h.index_select(0, order),
        keys.index_select(0, order),
        src_mask.index_select(0, order),
        rnn.weight_ih_l0,
        rnn.bias_ih_l0,
        rnn.weight_hh_l0,
        rnn.bias_hh_l0,
        score.W.weight,
        score.v.weight.view(-1),
        decoder.combine.weight,
    )  # (N, D), step after step
    s_tilde, _ = pad_packed_sequence(packed._replace(data=s_tilde), batch_first=True, total_length=T)
    return s_tilde  # (B, T, D), zeros past each length


def starts(sizes: list[int]) -> list[int]:
    """Where each step's rows begin among the N packed rows: 0, b_0, b_0 + b_1, ..."""
    return [0, *itertools.accumulate(sizes)][:-1]


class InputFeedingSteps(Function):
    """The T steps forward, keeping what the backward reads; the backward of all of them.

    Rows are packed: step t's b_t rows (the b_t longest sentences, sorted) are rows o_t .. o_t +
    b_t of every per-step tensor, N rows in all. States live in buffers of B + N rows whose
    first B are the step-0 inputs (s_0, and ~s_0 = 0): the previous state of step t's rows is a
    prefix of step t - 1's (or of the first B), `before(t)` below."""

    @staticmethod
    def forward(ctx, x, sizes, s0, h, keys, src_mask, W_ih, b_ih, W_hh, b_hh, W, v, W_c):
        N, E = x.shape
        B, D, (S, He), A = s0.size(0), s0.size(1), h.shape[1:], keys.size(2)
        o = starts(sizes)
        W_ix, W_if = W_ih[:, :E], W_ih[:, E:]  # the columns that read y_{t-1} and ~s_{t-1}
        gx = torch.addmm(b_ih, x, W_ix.t())  # (N, 3D): W_ix y + b_i, all steps at once
        keys2, W2, v2 = 2 * keys, 2 * W, 2 * v  # tanh(x) = 2 sigmoid(2x) - 1, the 2s on the small tensors
        padding = ~src_mask
        s = x.new_empty(B + N, D)  # s_0, then s_t of each step's rows
        s[:B] = s0
        s_tilde = x.new_empty(B + N, D)  # ~s_0 = 0, then ~s_t
        s_tilde[:B] = 0
        gh = x.new_empty(N, 3 * D)  # W_hh s_{t-1} + b_h
        rz = x.new_empty(N, 2 * D)  # r and z side by side
        n = x.new_empty(N, D)
        a = x.new_empty(N, S, A)  # sigmoid(2 (W s_t + U h)) = (1 + tanh) / 2
        alpha = x.new_empty(N, S)
        sc = x.new_empty(N, D + He)  # [s_t; c_t]
        for t, b in enumerate(sizes):
            now, out, prev = slice(o[t], o[t] + b), slice(B + o[t], B + o[t] + b), before(t, b, o, B)
            gi = torch.addmm(gx[now], s_tilde[prev], W_if.t())  # (b, 3D)
            torch.addmm(b_hh, s[prev], W_hh.t(), out=gh[now])
            torch.add(gi[:, : 2 * D], gh[now, : 2 * D], out=rz[now]).sigmoid_()
            r, z = rz[now, :D], rz[now, D:]
            torch.addcmul(gi[:, 2 * D :], r, gh[now, 2 * D :], out=n[now]).tanh_()
            torch.lerp(n[now], s[prev], z, out=s[out])  # (1 - z) n + z s_{t-1}
            q2 = s[out] @ W2.t()  # (b, A)
            torch.add(keys2[:b], q2.unsqueeze(1), out=a[now]).sigmoid_()  # (b, S, A)
            e = (a[now].view(b * S, A) @ v2).view(b, S).sub_(v.sum())  # v . tanh(W s + U h)
            alpha[now] = torch.softmax(e.masked_fill_(padding[:b], float("-inf")), -1)
            sc[now, :D] = s[out]
            sc[now, D:] = torch.bmm(alpha[now].unsqueeze(1), h[:b]).squeeze(1)  # c_t (b, He)
            torch.mm(sc[now], W_c.t(), out=s_tilde[out]).tanh_()
        ctx.save_for_backward(x, h, W_ih, W_hh, W2, v2, W_c, s, s_tilde, gh, rz, n, a, alpha, sc)
        ctx.sizes = sizes
        return s_tilde[B:]

    @staticmethod
    def backward(ctx, d_s_tilde):
        x, h, W_ih, W_hh, W2, v2, W_c, s, s_tilde, gh, rz, n, a, alpha, sc = ctx.saved_tensors
        sizes = ctx.sizes
        (N, E), B, T = x.shape, h.size(0), len(sizes)
        D, (S, He), A = s.size(1), h.shape[1:], a.size(2)
        o = starts(sizes)
        W_ix, W_if = W_ih[:, :E], W_ih[:, E:]
        d_gi = x.new_empty(N, 3 * D)  # dJ/d(W_ih x_t + b_ih)
        d_gh = x.new_empty(N, 3 * D)  # dJ/d(W_hh s_{t-1} + b_hh)
        d_u = x.new_empty(N, D)  # dJ/d(W_c [s_t; c_t])
        d_q2 = x.new_empty(N, A)  # dJ/d(2 W s_t)
        d_e = x.new_empty(N, S)
        d_c = x.new_empty(N, He)
        d_keys2 = x.new_zeros(B, S, A)
        d_s = x.new_zeros(B, D)  # dJ/ds_t from step t + 1; zero for rows whose sentence has ended
        d_feed = x.new_zeros(B, D)  # dJ/d~s_t from step t + 1
        for t in reversed(range(T)):
            b = sizes[t]
            now, out, prev = slice(o[t], o[t] + b), slice(B + o[t], B + o[t] + b), before(t, b, o, B)
            tanh_backward(d_s_tilde[now] + d_feed[:b], s_tilde[out], grad_input=d_u[now])
            d_sc = d_u[now] @ W_c  # (b, D + He)
            ds = d_s[:b] + d_sc[:, :D]
            d_c[now] = d_sc[:, D:]
            d_alpha = torch.bmm(d_c[now].unsqueeze(1), h[:b].transpose(1, 2)).squeeze(1)  # (b, S); as a row:
            # (b, 1, He) x (b, He, S), where h (b, S, He) x (b, He, 1) ran 9x slower (MKL, 2 cores)
            torch.mul(alpha[now], d_alpha - (alpha[now] * d_alpha).sum(-1, keepdim=True), out=d_e[now])
            d_pre2 = sigmoid_backward(d_e[now].unsqueeze(2) * v2, a[now])  # (b, S, A)
            d_keys2[:b] += d_pre2
            torch.sum(d_pre2, 1, out=d_q2[now])
            ds.addmm_(d_q2[now], W2)
            cell_backward(ds, s[prev], rz[now], n[now], gh[now, 2 * D :], d_gi[now], d_gh[now])
            torch.addmm(ds * rz[now, D:], d_gh[now], W_hh, out=d_s[:b])  # dJ/ds_{t-1}
            torch.mm(d_gi[now], W_if, out=d_feed[:b])  # dJ/d~s_{t-1}
        previous = rows_before(sizes, o, B).to(x.device)  # (N,)
        s_prev, s_tilde_prev = s.index_select(0, previous), s_tilde.index_select(0, previous)  # (N, D)
        d_x = d_gi @ W_ix
        d_W_ih = torch.cat([d_gi.t() @ x, d_gi.t() @ s_tilde_prev], 1)
        d_W_hh = d_gh.t() @ s_prev
        d_W = 2 * (d_q2.t() @ s[B:])
        d_v = 2 * (a.view(N * S, A).t() @ d_e.view(-1))
        d_W_c = d_u.t() @ sc
        # dJ/dh = sum_t alpha_t dc_t per sentence, as one product over the padded steps: (B, S, He)
        where = torch.cat([torch.arange(b) * T + t for t, b in enumerate(sizes)])  # packed row -> b T + t
        where = where.to(x.device)
        alpha_bt = x.new_zeros(B * T, S).index_copy_(0, where, alpha).view(B, T, S)
        d_c_bt = x.new_zeros(B * T, He).index_copy_(0, where, d_c).view(B, T, He)
        d_h = torch.bmm(alpha_bt.transpose(1, 2), d_c_bt)
        d_b_ih, d_b_hh = d_gi.sum(0), d_gh.sum(0)
        return d_x, None, d_s, d_h, 2 * d_keys2, None, d_W_ih, d_b_ih, d_W_hh, d_b_hh, d_W, d_v, d_W_c


def cell_backward(g: Tensor, h_prev: Tensor, rz: Tensor, n: Tensor, ghn: Tensor, d_gi: Tensor, d_gh: Tensor):
    """The GRU cell's backward, for g = dJ/dh_t (..., D): writes dJ/d(W_i x_t + b_i) into d_gi and
    dJ/d(W_h h_{t-1} + b_h) into d_gh (..., 3D), from the cell's r and z (rz), n and W_hn h_{t-1} + b_hn
    (ghn). dJ/dh_{t-1} is then g z + d_gh W_h, which the caller makes."""
    D = n.size(-1)
    r, z = rz[..., :D], rz[..., D:]
    d_n = tanh_backward(g * (1 - z), n)  # dJ/d(W_in x + b_in + r * (W_hn h + b_hn))
    d_rz = torch.cat([d_n * ghn, g * (h_prev - n)], -1)  # dJ/dr, dJ/dz
    sigmoid_backward(d_rz, rz, grad_input=d_gi[..., : 2 * D])
    d_gi[..., 2 * D :] = d_n
    d_gh[..., : 2 * D] = d_gi[..., : 2 * D]
    torch.mul(d_n, r, out=d_gh[..., 2 * D :])


def rows_before(sizes: list[int], o: list[int], B: int) -> Tensor:
    """`before(t)`'s rows of every step, one after the other: (N,) indices into the B + N rows."""
    slices = (before(t, b, o, B) for t, b in enumerate(sizes))
    return torch.cat([torch.arange(p.start, p.stop) for p in slices])


def before(t: int, b: int, o: list[int], B: int) -> slice:
    """The rows of s and ~s (B + N rows: the step-0 inputs, then each step's) that step t's b rows
    read as s_{t-1} and ~s_{t-1}: the first b of the step-0 inputs, or of step t - 1's rows."""
    return slice(0, b) if t == 0 else slice(B + o[t - 1], B + o[t - 1] + b)


def reads(rnn: nn.Module) -> bool:
    """Whether `recurrence` can run this encoder RNN now: a one-layer GRU or LSTM with biases (no
    projection), in float32 or float64 on a CPU, with gradients on, outside autocast. Elsewhere
    nn.GRU and nn.LSTM run (cuDNN's kernels on a GPU)."""
    w = getattr(rnn, "weight_hh_l0", None)
    return (
        (isinstance(rnn, nn.GRU) or (isinstance(rnn, nn.LSTM) and rnn.proj_size == 0))
        and rnn.num_layers == 1
        and rnn.bias
        and w.dtype in (torch.float32, torch.float64)
        and w.device.type == "cpu"
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
    )


def recurrence(rnn: nn.Module, packed: PackedSequence) -> tuple[PackedSequence, Tensor | tuple[Tensor, ...]]:
    """nn.GRU's (output, h_n), or nn.LSTM's (output, (h_n, c_n)), for packed input and a zero
    first state, one or both directions, with the recurrence's backward written out (`GRUSteps`,
    `LSTMSteps`).

    nn.GRU and nn.LSTM on a CPU step each direction apart, and autograd records every operator
    of every step and makes the recurrent weights' gradient once per step. Here every input
    product W_i x of both directions is one matrix product; the backward direction reads each
    sentence from its end (its rows taken in reverse within each length, `flip`), so that both
    directions step over the same b_t rows and run as one batched product per step."""
    lstm = isinstance(rnn, nn.LSTM)
    x, sizes = packed.data, packed.batch_sizes.tolist()  # (N, I); b_t
    K, D = 1 + rnn.bidirectional, rnn.hidden_size
    G = (4 if lstm else 3) * D  # gates: i, f, g, o (LSTM) or r, z, n (GRU)
    names = [f"l0{'_reverse' * k}" for k in range(K)]
    W_ih = torch.cat([getattr(rnn, f"weight_ih_{k}") for k in names])  # (K G, I)
    b_ih = torch.cat([getattr(rnn, f"bias_ih_{k}") for k in names])
    W_hh = torch.stack([getattr(rnn, f"weight_hh_{k}") for k in names])  # (K, G, D)
    b_hh = torch.stack([getattr(rnn, f"bias_hh_{k}") for k in names]).unsqueeze(1)  # (K, 1, G)
    if lstm:  # the LSTM's gates add both biases as they are: one bias in the input product
        b_ih = b_ih + b_hh.view(-1)
    gi = torch.addmm(b_ih, x, W_ih.t()).view(-1, K, G)  # (N, K, G): W_i x + b_i, every step at once
    o, B = torch.tensor(starts(sizes)), sizes[0]
    lengths = (packed.batch_sizes.unsqueeze(0) > torch.arange(B).unsqueeze(1)).sum(1)  # (B,), sorted
    flip = rows_flipped(sizes, lengths, o) if K == 2 else None
    gi = torch.stack([gi[:, 0], gi[:, 1].index_select(0, flip)]) if K == 2 else gi.transpose(0, 1)
    states = LSTMSteps.apply(gi, sizes, W_hh) if lstm else (GRUSteps.apply(gi, sizes, W_hh, b_hh),)
    hs = states[0]  # (K, N, D); an LSTM's memory cells c follow
    out = torch.cat([hs[0], hs[1].index_select(0, flip)], 1) if K == 2 else hs[0]  # (N, K D)
    ends = o[lengths - 1] + torch.arange(B)  # each sentence's last step, sorted
    last = [state[:, ends].index_select(1, packed.unsorted_indices) for state in states]  # (K, B, D)
    return packed._replace(data=out), tuple(last) if lstm else last[0]


def rows_flipped(sizes: list[int], lengths: Tensor, o: Tensor) -> Tensor:
    """For each packed row (step t of sentence i) the row of step L_i - 1 - t of the same sentence:
    the sentence read from its end. Its own inverse."""
    step = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))  # (N,)
    i = torch.arange(len(step)) - o[step]
    return o[lengths[i] - 1 - step] + i


class GRUSteps(Function):
    """h_t of K directions over packed rows: gi (K, N, 3D) the input products, W_hh (K, 3D, D),
    b_hh (K, 1, 3D), h_0 = 0 -> (K, N, D). PyTorch's GRU cell (gates r, z, n):

        r, z = sigmoid(W_i{r,z} x_t + b_i{r,z} + W_h{r,z} h_{t-1} + b_h{r,z})
        n    = tanh(W_in x_t + b_in + r * (W_hn h_{t-1} + b_hn))
        h_t  = (1 - z) * n + z * h_{t-1}

    Backward: one loop back over the steps for dJ/dh_{t-1}, then W_hh's gradient as one product
    over all N rows of each direction."""

    @staticmethod
    def forward(ctx, gi, sizes, W_hh, b_hh):
        K, N, G = gi.shape
        D, B, o = G // 3, sizes[0], starts(sizes)
        h = gi.new_empty(K, B + N, D)  # h_0 = 0 for the first B rows, then each step's
        h[:, :B] = 0
        rz = gi.new_empty(K, N, 2 * D)
        n = gi.new_empty(K, N, D)
        ghn = gi.new_empty(K, N, D)  # W_hn h_{t-1} + b_hn
        W_t = W_hh.transpose(1, 2)
        for t, b in enumerate(sizes):
            now, out, prev = slice(o[t], o[t] + b), slice(B + o[t], B + o[t] + b), before(t, b, o, B)
            gh = torch.baddbmm(b_hh, h[:, prev], W_t)  # (K, b, 3D): both directions in one call
            torch.add(gi[:, now, : 2 * D], gh[..., : 2 * D], out=rz[:, now]).sigmoid_()
            ghn[:, now] = gh[..., 2 * D :]
            torch.addcmul(gi[:, now, 2 * D :], rz[:, now, :D], ghn[:, now], out=n[:, now]).tanh_()
            torch.lerp(n[:, now], h[:, prev], rz[:, now, D:], out=h[:, out])  # (1 - z) n + z h_{t-1}
        ctx.save_for_backward(W_hh, h, rz, n, ghn)
        ctx.sizes = sizes
        return h[:, B:]

    @staticmethod
    def backward(ctx, d_hs):
        W_hh, h, rz, n, ghn = ctx.saved_tensors
        sizes = ctx.sizes
        (K, N, D), B, o = n.shape, sizes[0], starts(sizes)
        d_gi = n.new_empty(K, N, 3 * D)  # dJ/d(W_i x_t + b_i)
        d_gh = n.new_empty(K, N, 3 * D)  # dJ/d(W_h h_{t-1} + b_h)
        d_h = n.new_zeros(K, B, D)  # dJ/dh_t from step t + 1; zero for sentences that have ended
        for t in reversed(range(len(sizes))):
            b = sizes[t]
            now, prev = slice(o[t], o[t] + b), before(t, b, o, B)
            g = d_hs[:, now] + d_h[:, :b]
            cell_backward(g, h[:, prev], rz[:, now], n[:, now], ghn[:, now], d_gi[:, now], d_gh[:, now])
            torch.baddbmm(g * rz[:, now, D:], d_gh[:, now], W_hh, out=d_h[:, :b])  # dJ/dh_{t-1}
        previous = rows_before(sizes, o, B).to(h.device)
        d_W_hh = torch.bmm(d_gh.transpose(1, 2), h.index_select(1, previous))  # (K, 3D, D)
        return d_gi, None, d_W_hh, d_gh.sum(1, keepdim=True)


class LSTMSteps(Function):
    """h_t and c_t of K directions over packed rows: gi (K, N, 4D) the input products with both
    biases, W_hh (K, 4D, D), h_0 = c_0 = 0 -> h, c (K, N, D). PyTorch's LSTM cell (gates i, f, g, o):

        i, f, o = sigmoid(W_i{i,f,o} x_t + b_i{i,f,o} + W_h{i,f,o} h_{t-1} + b_h{i,f,o})
        g       = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
        c_t     = f * c_{t-1} + i * g
        h_t     = o * tanh(c_t)

    and its derivatives, for dh = dJ/dh_t and dc = dJ/dc_t from above and from step t + 1:

        dc    += dh * o * (1 - tanh(c_t)^2)
        di = dc * g,  df = dc * c_{t-1},  dg = dc * i,  do = dh * tanh(c_t)   (then through the
        sigmoid or tanh of each gate);  dJ/dc_{t-1} = dc * f;  dJ/dh_{t-1} = d_gates W_hh

    Backward: one loop back over the steps, then W_hh's gradient as one product over all N rows
    of each direction."""

    @staticmethod
    def forward(ctx, gi, sizes, W_hh):
        K, N, G = gi.shape
        D, B, o = G // 4, sizes[0], starts(sizes)
        h = gi.new_zeros(K, B + N, D)  # h_0 = 0 for the first B rows, then each step's
        c = gi.new_zeros(K, B + N, D)  # c_0 = 0, then c_t
        act = gi.new_empty(K, N, G)  # i, f, g, o after their sigmoid and tanh
        tc = gi.new_empty(K, N, D)  # tanh(c_t)
        W_t = W_hh.transpose(1, 2)
        for t, b in enumerate(sizes):
            now, out, prev = slice(o[t], o[t] + b), slice(B + o[t], B + o[t] + b), before(t, b, o, B)
            a = torch.baddbmm(gi[:, now], h[:, prev], W_t, out=act[:, now])  # (K, b, 4D)
            a[..., : 2 * D].sigmoid_()
            a[..., 2 * D : 3 * D].tanh_()
            a[..., 3 * D :].sigmoid_()
            i, f, g, og = a[..., :D], a[..., D : 2 * D], a[..., 2 * D : 3 * D], a[..., 3 * D :]
            torch.mul(f, c[:, prev], out=c[:, out]).addcmul_(i, g)  # c_t = f c_{t-1} + i g
            torch.tanh(c[:, out], out=tc[:, now])
            torch.mul(og, tc[:, now], out=h[:, out])  # h_t = o tanh(c_t)
        ctx.save_for_backward(W_hh, h, c, act, tc)
        ctx.sizes = sizes
        return h[:, B:], c[:, B:]

    @staticmethod
    def backward(ctx, d_hs, d_cs):
        W_hh, h, c, act, tc = ctx.saved_tensors
        sizes = ctx.sizes
        (K, N, D), B, o = tc.shape, sizes[0], starts(sizes)
        d_gates = tc.new_empty(K, N, 4 * D)  # dJ/d(W_i x_t + b_i + W_h h_{t-1} + b_h)
        d_h = tc.new_zeros(K, B, D)  # dJ/dh_t from step t + 1; zero for sentences that have ended
        d_c = tc.new_zeros(K, B, D)  # dJ/dc_t from step t + 1
        for t in reversed(range(len(sizes))):
            b = sizes[t]
            now, prev = slice(o[t], o[t] + b), before(t, b, o, B)
            a = act[:, now]
            i, f, g, og = a[..., :D], a[..., D : 2 * D], a[..., 2 * D : 3 * D], a[..., 3 * D :]
            dh = d_hs[:, now] + d_h[:, :b]
            dc = tanh_backward(dh * og, tc[:, now]).add_(d_cs[:, now]).add_(d_c[:, :b])
            d_act = torch.cat([dc * g, dc * c[:, prev], dc * i, dh * tc[:, now]], -1)  # dJ/d(i, f, g, o)
            sigmoid_backward(d_act, a, grad_input=d_gates[:, now])  # right for i, f, o
            tanh_backward(d_act[..., 2 * D : 3 * D], g, grad_input=d_gates[:, now, 2 * D : 3 * D])
            torch.mul(dc, f, out=d_c[:, :b])  # dJ/dc_{t-1}
            torch.bmm(d_gates[:, now], W_hh, out=d_h[:, :b])  # dJ/dh_{t-1}
        previous = rows_before(sizes, o, B).to(h.device)
        d_W_hh = torch.bmm(d_gates.transpose(1, 2), h.index_select(1, previous))  # (K, 4D, D)
        return d_gates, None, d_W_hh
