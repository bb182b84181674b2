"""Where training stands (`Progress`, saved in every checkpoint) and when it stops: the
stopping rules, SIGINT and SIGTERM as a request to stop between updates, and the `Window`
of what the updates since the last log line did."""

from __future__ import annotations

import math
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..config import TrainConfig
from ..data.batch import Batch


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # updates done
    epoch: int = 0  # the pass over the data that the next update comes from
    batch: int = 0  # planned batches of this epoch already done, by all ranks together
    best_bleu: float = -1.0  # best validation BLEU so far
    bad_validations: int = 0  # validations since the best, for early stopping
    seconds: float = 0.0  # training time so far, across resumes
    validated_at: float = 0.0  # training time at the last validation (train.valid_minutes counts from it)
    done: bool = False  # a stopping rule has fired
    skipped: int = 0  # updates skipped for a NaN or infinite loss (train.nonfinite: skip)


def stop_reason(cfg: TrainConfig, p: Progress) -> str | None:
    """Why training stops now, or None: the one home of the stopping rules.
    A resumed run given a larger budget goes on."""
    if cfg.max_steps and p.step >= cfg.max_steps:
        return f"train.max_steps {cfg.max_steps} reached"
    if p.epoch >= cfg.max_epochs:
        return f"train.max_epochs {cfg.max_epochs} done"
    if cfg.early_stopping and p.bad_validations >= cfg.early_stopping:
        return f"early stopping: no better validation BLEU in {p.bad_validations} validations"
    if cfg.time_limit and p.seconds >= cfg.time_limit * 60:
        return f"time limit of {cfg.time_limit:g} minutes reached"
    return None


def valid_due(cfg: TrainConfig, p: Progress) -> bool:
    """Whether to validate after this update: every train.valid_every updates, and, with
    train.valid_minutes T, at the first update past each multiple of T minutes of training (so a
    search that stops trials at minutes 3, 9, ... sees each trial there, whatever its batch)."""
    if p.step % cfg.valid_every == 0:
        return True
    period = cfg.valid_minutes * 60
    return bool(period) and p.seconds // period > p.validated_at // period


LINE_EVERY = 60.0  # seconds between progress lines where no bar shows


def progress_line(cfg: TrainConfig, p: Progress, loss: float, tokens_per_s: float) -> str:
    """The line that training logs about once a minute where no progress bar shows (a log file,
    CI): update, epoch, loss, speed, elapsed time and, under a time or update limit, time left."""
    left = [cfg.time_limit * 60 - p.seconds] if cfg.time_limit else []
    if cfg.max_steps and p.step:
        left.append((cfg.max_steps - p.step) * p.seconds / p.step)  # at the mean pace so far
    steps = f"{p.step}/{cfg.max_steps}" if cfg.max_steps else str(p.step)
    rest = f", about {_clock(min(left))} left" if left else ""
    speed = f"{tokens_per_s:,.0f} tokens/s"
    return f"step {steps}  epoch {p.epoch}  loss {loss:.3f}  {speed}  {_clock(p.seconds)} elapsed{rest}"


def _clock(seconds: float) -> str:
    """h:mm:ss, or m:ss under an hour."""
    m, s = divmod(max(int(seconds), 0), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


@contextmanager
def stop_signals() -> Iterator[list[str]]:
    """Within `with`: SIGINT (Ctrl-C) or SIGTERM asks training to stop after the current update,
    with a checkpoint; a second one stops at once, without (last.pt is then the one before).
    Yields the names of the signals caught."""
    caught: list[str] = []

    def catch(signum: int, frame: Any) -> None:
        if caught:
            raise KeyboardInterrupt
        caught.append(signal.Signals(signum).name)

    main = threading.current_thread() is threading.main_thread()  # only it receives signals
    old = {s: signal.signal(s, catch) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield caught
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


@dataclass
class Window:
    """What the updates since the last log line did."""

    loss: float = 0.0  # summed loss of the finite updates
    tokens: int = 0  # their target tokens
    seconds: float = 0.0  # time spent in updates: validation pauses do not count

    def add(self, loss: float, batches: list[Batch], seconds: float) -> None:
        self.seconds += seconds
        if math.isfinite(loss):  # a skipped update (train.nonfinite) is not logged
            self.loss += loss
            self.tokens += sum(b.n_tokens for b in batches)
