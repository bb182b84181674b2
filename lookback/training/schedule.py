"""The learning rate over training, and its one owner: `LearningRate`.

An optional linear warm-up, then a shape:

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

import logging
import math
from typing import Any

import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau

from ..config import TrainConfig
from ..model.seq2seq import Seq2Seq

logger = logging.getLogger(__name__)


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


def parameter_groups(model: Seq2Seq, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Adam's parameter groups: the attention's own parameters (the score's and a local window's)
    at the rate times their `lr_scale` (train.attention_lr, else the score's own), the rest at
    the rate."""
    d = model.decoder
    score = getattr(d, "score", None)  # a transformer decoder has one per layer, each at lr_scale 1
    scale = cfg.attention_lr if cfg.attention_lr is not None else getattr(score, "lr_scale", 1.0)
    own = d.attention_parameters()
    if scale == 1.0 or not own:
        return [{"params": list(model.parameters())}]
    ids = {id(p) for p in own}
    rest = [p for p in model.parameters() if id(p) not in ids]
    return [{"params": rest}, {"params": own, "lr_scale": scale, "lr": cfg.lr * scale}]


class LearningRate:
    """The one owner of the learning rate: it sets each parameter group's rate before every update
    (warm-up and the schedule's shape, times the group's scale), lowers it on a plateau of
    validation BLEU (train.schedule plateau, ReduceLROnPlateau), and carries that across a resume,
    where this config's schedule and a changed train.lr apply from then on."""

    def __init__(self, optimizer: torch.optim.Optimizer, cfg: TrainConfig):
        self.optimizer, self.cfg = optimizer, cfg
        self.plateau = ReduceLROnPlateau(
            optimizer, "max", cfg.lr_factor, cfg.lr_patience, min_lr=self.floors()
        )

    def floors(self) -> list[float]:
        """train.min_lr for each parameter group, times the group's scale."""
        return [self.cfg.min_lr * g.get("lr_scale", 1.0) for g in self.optimizer.param_groups]

    def before_update(self, step: int, seconds: float) -> None:
        """The rate of update `step` (1-based), after `seconds` of training."""
        set_lr(self.optimizer, self.cfg, step, seconds)

    def after_validation(self, step: int, bleu: float) -> None:
        """Validation BLEU at update `step`: plateau, past its warm-up, may lower the rate."""
        if self.cfg.schedule == "plateau" and step > self.cfg.warmup:
            self.plateau.step(bleu)

    @property
    def now(self) -> float:
        """The rate of the last update (of the first parameter group)."""
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self) -> dict[str, Any]:
        return self.plateau.state_dict()

    def load_state_dict(self, state: dict[str, Any], saved_lr: float) -> None:
        """Continue a run whose plateau state is `state` and whose train.lr was `saved_lr`; the
        optimiser's own state is loaded first."""
        cfg = self.cfg
        self.plateau.load_state_dict(state)
        # the schedule of this config, not the saved one; a changed learning rate applies from now
        self.plateau.factor, self.plateau.patience = cfg.lr_factor, cfg.lr_patience
        self.plateau.min_lrs = self.floors()
        if cfg.lr != saved_lr:
            logger.info("learning rate %g -> %g (train.lr changed)", saved_lr, cfg.lr)
            for group in self.optimizer.param_groups:
                group["lr"] = cfg.lr * group.get("lr_scale", 1.0)
