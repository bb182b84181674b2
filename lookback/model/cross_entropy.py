"""The training loss J = -sum_t log P(y*_t | y*_<t, x) over the real target tokens.

Notes, Appendix A.4. P = softmax(logits) over the V target words, so the gradient of J
with respect to the logits of one token is the textbook one:

    dJ/dlogits = P - onehot(y*)                      with label smoothing eps:
               = P - ((1 - eps) onehot(y*) + eps / V)

`cross_entropy` computes J as F.cross_entropy does and writes that gradient straight into
the log-probabilities it kept from the forward pass (exp, then a subtraction at the N
target words). Autograd's own backward for log_softmax + nll_loss writes a zero (N, V)
gradient, scatters -1 into it and runs log_softmax's backward over it: three more passes
over the largest tensor of an update (N tokens x 8,000 words; bench/README.md).

Legend: N real target tokens, V target vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class _SoftmaxCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, eps: float) -> Tensor:
        log_p = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), -1)  # (N, V)
        nll = -log_p.gather(1, targets.unsqueeze(1)).sum()  # -sum log P(y*_t)
        J = nll if eps == 0 else (1 - eps) * nll - eps / log_p.size(1) * log_p.sum()
        ctx.save_for_backward(log_p, targets)
        ctx.eps, ctx.dtype = eps, logits.dtype
        return J

    @staticmethod
    @once_differentiable
    def backward(ctx, dJ: Tensor) -> tuple[Tensor, None, None]:
        # a second backward through the graph stops here, with torch's error: log_p became P
        log_p, targets = ctx.saved_tensors
        grad = log_p.exp_()  # P, in place: log_p is not needed again
        grad[torch.arange(len(targets), device=grad.device), targets] -= 1 - ctx.eps  # P - (1 - eps) onehot
        if ctx.eps:
            grad.sub_(ctx.eps / grad.size(1))  # - eps / V
        return grad.mul_(dJ).to(ctx.dtype), None, None  # (N, V), in the logits' dtype


def cross_entropy(logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """J summed over the N tokens: logits (N, V), targets (N,) word ids -> a scalar in fp32 (fp64
    for fp64 logits); the same value as F.cross_entropy(logits.float(), targets,
    label_smoothing=label_smoothing, reduction="sum"), with a backward of one pass."""
    if not 0 <= label_smoothing < 1:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    return _SoftmaxCrossEntropy.apply(logits, targets, float(label_smoothing))
