"""The learning rate over training: an optional linear warm-up, then a shape.

train.schedule:
  plateau       train.lr until validation BLEU stops rising, then times train.lr_factor
                (ReduceLROnPlateau, stepped at each validation; the default)
  constant      train.lr throughout
  inverse_sqrt  train.lr x sqrt(warmup / t) after the warm-up (Vaswani et al. 2017, 5.3)
  cosine        from train.lr down to train.min_lr at train.max_steps (Loshchilov & Hutter 2017)
train.warmup: the first N updates rise linearly from train.lr / N to train.lr.

Except for plateau after its warm-up, the rate is a function of the update
number alone: a resumed run picks it up exactly, and a changed train.lr
applies at once.
"""

from __future__ import annotations

import math

import torch

from .config import TrainConfig


def lr_at(cfg: TrainConfig, step: int) -> float | None:
    """The learning rate of update `step` (1-based), or None where ReduceLROnPlateau decides."""
    warm = min(1.0, step / cfg.warmup) if cfg.warmup else 1.0
    if cfg.schedule == "plateau":
        return cfg.lr * warm if step <= cfg.warmup else None
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * min(warm, math.sqrt(max(cfg.warmup, 1) / step))
    if cfg.schedule == "cosine":
        done = min(1.0, max(0, step - cfg.warmup) / max(cfg.max_steps - cfg.warmup, 1))
        return warm * (cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1 + math.cos(math.pi * done)))
    return cfg.lr * warm  # constant


def set_lr(optimizer: torch.optim.Optimizer, cfg: TrainConfig, step: int) -> None:
    """Set the rate of update `step` on every parameter group, unless ReduceLROnPlateau owns it."""
    lr = lr_at(cfg, step)
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
