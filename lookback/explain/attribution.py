"""Attention against gradients: which source tokens does an output token depend on?

alpha_t says where step t looked. A gradient-based attribution says how much
each source token's embedding x_i moved the model's log P(y_t), the
probability of the token it chose. Two, both from captum:

    gradient x input        a_{t,i} = sum_k x_{i,k} d log P(y_t) / d x_{i,k}
    integrated gradients    a_{t,i} = sum_k x_{i,k} int_0^1 d log P(y_t)(a x) / d x_{i,k} da
                            (Sundararajan et al. 2017), from the all-zero embedding (that of
                            <pad>); completeness: sum_i a_{t,i} = log P(y_t)(x) - log P(y_t)(0)

The output runs teacher-forced along the given output, so only the source
embeddings change. Agreement with attention, per output token, over the
real source tokens: Kendall's tau-b between alpha_t and |a_t|, and whether
both put their largest value on the same token.

Legend: S source length, T output length, E embedding size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from captum.attr import InputXGradient, IntegratedGradients
from scipy.stats import kendalltau
from torch import Tensor

from ..data.tokenizer import BOS, EOS
from ..device import gradients_in_eval_mode
from ..model.seq2seq import Seq2Seq

METHODS = ("grad_x_input", "integrated_gradients")
ROWS = 8192  # source tokens per batch of integrated gradients' interpolated inputs


def _log_prob(model: Seq2Seq, src_ids: Tensor, tgt_in: Tensor, tgt_out: Tensor):
    """The function captum differentiates: source embeddings x (N, S, E) of the one sentence
    src_ids (1, S), and the output step t (N,) each row attributes -> log P(y_t) (N,). The
    padding mask and everything else still come from the real source."""

    def forward(x: Tensor, t: Tensor) -> Tensor:
        N = x.size(0)
        src = src_ids.expand(N, -1)
        enc = model.decoder.prepare(model.encoder(src, torch.full((N,), src.size(1)), x))
        out = model.decoder(tgt_in.expand(N, -1), enc, model.decoder.init_state(enc), project=False)
        s_tilde = out.s_tilde[torch.arange(N), t]  # (N, D): each row's own step only
        logp = F.log_softmax(model.decoder.project(s_tilde).float(), -1)  # (N, V)
        return logp[torch.arange(N), tgt_out[t]]  # (N,)

    return forward


def attribute(
    model: Seq2Seq,
    src_ids: list[int],
    out_ids: list[int],
    method: str = "integrated_gradients",
    n_steps: int = 32,
    end: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per output token and source token, the attribution of log P(y_t) to the source embedding:
    (T, S), or with `end` (T + 1, S), the closing </s> too. With integrated gradients also the
    completeness gap of each row: sum_i a_{t,i} - (log P(y_t)(x) - log P(y_t)(0)); None for
    gradient x input."""
    if method not in METHODS:
        raise ValueError(f"unknown attribution method {method!r} (choose from {', '.join(METHODS)})")
    T, S = len(out_ids) + end, len(src_ids)
    if T == 0 or S == 0:
        return torch.zeros(T, S), (torch.zeros(T) if method == "integrated_gradients" else None)
    device = next(model.parameters()).device
    model.eval()
    src = torch.tensor([src_ids], device=device)  # (1, S)
    tgt_in = torch.tensor([[BOS, *out_ids]], device=device)  # (1, T + 1)
    tgt_out = torch.tensor([*out_ids, EOS], device=device)  # (T + 1,)
    forward = _log_prob(model, src, tgt_in, tgt_out)
    with torch.no_grad():
        x = model.encoder.embed(src).float().expand(T, -1, -1).contiguous()  # (T, S, E): a row per step
    x.requires_grad_()
    t = torch.arange(T, device=device)
    with gradients_in_eval_mode():
        if method == "grad_x_input":
            a = InputXGradient(forward).attribute(x, additional_forward_args=(t,))
            return a.sum(-1).detach().cpu(), None  # (T, S, E) -> (T, S)
        a, delta = IntegratedGradients(forward).attribute(
            x,
            baselines=torch.zeros_like(x),  # the embedding of <pad>
            additional_forward_args=(t,),
            n_steps=n_steps,
            internal_batch_size=max(n_steps, ROWS // S),  # a long sentence's T x n_steps rows in parts
            return_convergence_delta=True,
        )
    return a.sum(-1).detach().cpu(), delta.detach().float().cpu()


def agreement(alpha: Tensor, attributions: Tensor) -> dict[str, float | None]:
    """Rank agreement of attention alpha (T, S) with attributions (T, S), per output token over
    the source tokens: mean Kendall tau-b of alpha_t and |a_t| (rows with a constant side have
    none), and the share of tokens whose largest weight and largest |attribution| coincide."""
    if alpha.shape != attributions.shape:
        shapes = f"{tuple(alpha.shape)} and {tuple(attributions.shape)}"
        raise ValueError(f"alpha and the attributions differ in shape: {shapes}")
    taus, same = [], []
    for w, a in zip(alpha.float(), attributions.abs().float(), strict=True):
        tau = kendalltau(w.numpy(), a.numpy()).statistic if w.numel() > 1 else float("nan")
        if tau == tau:  # nan when one side is constant
            taus.append(float(tau))
        same.append(int(w.argmax()) == int(a.argmax()))
    return {
        "kendall_tau": sum(taus) / len(taus) if taus else None,
        "same_top": sum(same) / len(same) if same else None,
        "tokens": len(same),
    }
