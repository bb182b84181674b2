"""Backpropagation through time, written out: an input-feeding decoder's T steps as one autograd Function.

Autograd differentiates the decoder's steps (decoder.py) operator by operator: at
each step some thirty operators forward and more backward, each recorded and
visited by the engine, and every weight's gradient made once per step and
summed. On a CPU, with steps of 80 sentences, that bookkeeping cost as much as
the arithmetic (docs/performance.md). Here the same step runs forward as a plain
loop that keeps what the backward needs, and the backward is written out: one
loop back over the steps for what flows from step to step, then each weight's
gradient as one matrix product over all T steps.

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

Legend: T target steps, B batch, S source length, E embedding size, D decoder state size,
He encoder state size, A attention size.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd import Function

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


def steps(decoder: nn.Module, x: Tensor, h: Tensor, keys: Tensor, src_mask: Tensor, s0: Tensor) -> Tensor:
    """~s_t of every step in teacher forcing, (B, T, D), for the embedded previous tokens x
    (B, T, E), encoder states h (B, S, He), keys U h (B, S, A), src_mask (B, S) and the first
    state s_0 (B, D); the first ~s_{t-1} is zeros, as Decoder.init_state has it."""
    rnn, score = decoder.rnn, decoder.score
    s_tilde = InputFeedingSteps.apply(
        x.transpose(0, 1).contiguous(),  # (T, B, E): one step's rows together
        s0,
        h,
        keys,
        src_mask,
        rnn.weight_ih_l0,
        rnn.bias_ih_l0,
        rnn.weight_hh_l0,
        rnn.bias_hh_l0,
        score.W.weight,
        score.v.weight.view(-1),
        decoder.combine.weight,
    )
    return s_tilde.transpose(0, 1)  # (T, B, D) -> (B, T, D)


def rows(y: Tensor) -> Tensor:
    """(T, B, n) -> (T B, n): every step's rows, for one product over all steps."""
    return y.reshape(-1, y.size(-1))


class InputFeedingSteps(Function):
    """The T steps forward, keeping what the backward reads; the backward of all of them."""

    @staticmethod
    def forward(ctx, x, s0, h, keys, src_mask, W_ih, b_ih, W_hh, b_hh, W, v, W_c):
        T, B, E = x.shape
        D, (S, He), A = s0.size(1), h.shape[1:], keys.size(2)
        W_ix, W_if = W_ih[:, :E], W_ih[:, E:]  # the columns that read y_{t-1} and ~s_{t-1}
        gx = torch.addmm(b_ih, x.view(T * B, E), W_ix.t()).view(T, B, 3 * D)  # W_ix y + b_i, all T at once
        keys2, W2, v2 = 2 * keys, 2 * W, 2 * v  # tanh(x) = 2 sigmoid(2x) - 1, the 2s on the small tensors
        padding = ~src_mask
        s = x.new_empty(T + 1, B, D)  # s[t]: s_{t-1}; s[0] = s_0
        s[0] = s0
        s_tilde = x.new_zeros(T + 1, B, D)  # s_tilde[t]: ~s_{t-1}; ~s_0 = 0
        gh = x.new_empty(T, B, 3 * D)  # W_hh s_{t-1} + b_h
        rz = x.new_empty(T, B, 2 * D)  # r and z side by side
        n = x.new_empty(T, B, D)
        a = x.new_empty(T, B, S, A)  # sigmoid(2 (W s_t + U h)) = (1 + tanh) / 2
        alpha = x.new_empty(T, B, S)
        sc = x.new_empty(T, B, D + He)  # [s_t; c_t]
        for t in range(T):
            gi = torch.addmm(gx[t], s_tilde[t], W_if.t())  # (B, 3D)
            torch.addmm(b_hh, s[t], W_hh.t(), out=gh[t])
            torch.add(gi[:, : 2 * D], gh[t, :, : 2 * D], out=rz[t]).sigmoid_()
            r, z = rz[t, :, :D], rz[t, :, D:]
            torch.addcmul(gi[:, 2 * D :], r, gh[t, :, 2 * D :], out=n[t]).tanh_()
            torch.lerp(n[t], s[t], z, out=s[t + 1])  # (1 - z) n + z s_{t-1}
            q2 = s[t + 1] @ W2.t()  # (B, A)
            torch.add(keys2, q2.unsqueeze(1), out=a[t]).sigmoid_()  # (B, S, A)
            e = (a[t].view(B * S, A) @ v2).view(B, S).sub_(v.sum())  # v . tanh(W s + U h)
            alpha[t] = torch.softmax(e.masked_fill_(padding, float("-inf")), -1)
            sc[t, :, :D] = s[t + 1]
            sc[t, :, D:] = torch.bmm(alpha[t].unsqueeze(1), h).squeeze(1)  # c_t (B, He)
            torch.mm(sc[t], W_c.t(), out=s_tilde[t + 1]).tanh_()
        ctx.save_for_backward(x, h, W_ih, W_hh, W2, v2, W_c, s, s_tilde, gh, rz, n, a, alpha, sc)
        return s_tilde[1:]

    @staticmethod
    def backward(ctx, d_s_tilde):
        x, h, W_ih, W_hh, W2, v2, W_c, s, s_tilde, gh, rz, n, a, alpha, sc = ctx.saved_tensors
        T, B, E = x.shape
        D, A = s.size(2), a.size(3)
        W_ix, W_if = W_ih[:, :E], W_ih[:, E:]
        d_gi = x.new_empty(T, B, 3 * D)  # dJ/d(W_ih x_t + b_ih)
        d_gh = x.new_empty(T, B, 3 * D)  # dJ/d(W_hh s_{t-1} + b_hh)
        d_u = x.new_empty(T, B, D)  # dJ/d(W_c [s_t; c_t])
        d_q2 = x.new_empty(T, B, A)  # dJ/d(2 W s_t)
        d_e = x.new_empty(T, B, S := h.size(1))
        d_c = x.new_empty(T, B, h.size(2))
        d_keys2 = x.new_zeros(B, S, A)
        d_s = x.new_zeros(B, D)  # dJ/ds_t from step t + 1
        d_feed = x.new_zeros(B, D)  # dJ/d~s_t from step t + 1
        for t in reversed(range(T)):
            tanh_backward(d_s_tilde[t] + d_feed, s_tilde[t + 1], grad_input=d_u[t])
            d_sc = d_u[t] @ W_c  # (B, D + He)
            d_s = d_s + d_sc[:, :D]
            d_c[t] = d_sc[:, D:]
            d_alpha = torch.bmm(d_c[t].unsqueeze(1), h.transpose(1, 2)).squeeze(1)  # (B, S); as a row:
            # (B, 1, He) x (B, He, S), where h (B, S, He) x (B, He, 1) ran 9x slower (MKL, 2 cores)
            torch.mul(alpha[t], d_alpha - (alpha[t] * d_alpha).sum(-1, keepdim=True), out=d_e[t])
            d_pre2 = sigmoid_backward(d_e[t].unsqueeze(2) * v2, a[t])  # (B, S, A)
            d_keys2 += d_pre2
            torch.sum(d_pre2, 1, out=d_q2[t])
            d_s.addmm_(d_q2[t], W2)
            r, z = rz[t, :, :D], rz[t, :, D:]
            d_n = tanh_backward(d_s * (1 - z), n[t])  # dJ/d(W_in x + b_in + r * (W_hn s + b_hn))
            d_rz = torch.cat([d_n * gh[t, :, 2 * D :], d_s * (s[t] - n[t])], 1)  # dJ/dr, dJ/dz
            sigmoid_backward(d_rz, rz[t], grad_input=d_gi[t, :, : 2 * D])
            d_gi[t, :, 2 * D :] = d_n
            d_gh[t, :, : 2 * D] = d_gi[t, :, : 2 * D]
            torch.mul(d_n, r, out=d_gh[t, :, 2 * D :])
            d_s = torch.addmm(d_s * z, d_gh[t], W_hh)  # dJ/ds_{t-1}
            d_feed = d_gi[t] @ W_if  # dJ/d~s_{t-1}
        d_x = (rows(d_gi) @ W_ix).view(T, B, E)
        d_W_ih = torch.cat([rows(d_gi).t() @ rows(x), rows(d_gi).t() @ rows(s_tilde[:-1])], 1)
        d_W_hh = rows(d_gh).t() @ rows(s[:-1])
        d_W = 2 * (rows(d_q2).t() @ rows(s[1:]))
        d_v = 2 * (rows(a).t() @ d_e.view(-1))
        d_W_c = rows(d_u).t() @ rows(sc)
        d_h = torch.bmm(alpha.permute(1, 2, 0), d_c.transpose(0, 1))  # sum_t alpha_t dc_t: (B, S, He)
        d_b_ih, d_b_hh = rows(d_gi).sum(0), rows(d_gh).sum(0)
        return d_x, d_s, d_h, 2 * d_keys2, None, d_W_ih, d_b_ih, d_W_hh, d_b_hh, d_W, d_v, d_W_c
