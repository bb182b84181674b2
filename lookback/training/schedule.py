"""The learning rate over training: an optional linear warm-up, then a shape.

train.schedule:
  plateau       train.lr until validation BLEU stops rising, then times train.lr_factor
                (ReduceLROnPlateau, stepped at each validation; the default)
  constant      train.lr throughout
  inverse_sqrt  train.lr x sqrt(warmup / t) after the warm-up (Vaswani et al. 2017, 5.3)
  cosine        from train.lr down to train.min_lr at train.max_steps (Loshchilov & Hutter 2017);
                without max_steps, at train.time_limit on the training clock, so that the rate
                reaches its floor when the time limit stops the run, on a fast CPU or a slow one
train.warmup: the first N updates rise linearly from train.lr / N to train.lr.
A parameter group with an `lr_scale` (the attention's own parameters, train.py) runs at the
rate times that scale throughout.

Except for plateau after its warm-up, the rate is a function of the update
number (and, for cosine by time, of the training time, which a checkpoint
keeps): a resumed run picks it up where it stopped, and a changed train.lr
applies at once.
"""

from __future__ import annotations

import math

import torch

from ..config import TrainConfig


def lr_at(cfg: TrainConfig, step: int, seconds: float) -> float | None:
    """The learning rate of update `step` (1-based) after `seconds` of training, or None where
    ReduceLROnPlateau decides."""
    warm = min(1.0, step / cfg.warmup) if cfg.warmup else 1.0
    if cfg.schedule == "plateau":
        return cfg.lr * warm if step <= cfg.warmup else None
    if cfg.schedule == "inverse_sqrt":
        return cfg.lr * min(warm, math.sqrt(max(cfg.warmup, 1) / step))
    if cfg.schedule == "cosine":
        if cfg.max_steps:  # by updates, from the end of the warm-up
            done = max(0, step - cfg.warmup) / max(cfg.max_steps - cfg.warmup, 1)
        else:  # by the clock, from the start: the warm-up's seconds are a flat top of the cosine
            done = seconds / (cfg.time_limit * 60)
        done = min(1.0, done)
        return warm * (cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1 + math.cos(math.pi * done)))
    return cfg.lr * warm  # constant


def set_lr(optimizer: torch.optim.Optimizer, cfg: TrainConfig, step: int, seconds: float) -> None:
    """Set the rate of update `step`, after `seconds` of training, on every parameter group,
    unless ReduceLROnPlateau owns it."""
    lr = lr_at(cfg, step, seconds)
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)
