"""Checkpoints: one explicit dict per file, written atomically, loaded without unpickling code.

A checkpoint holds the model and optimiser state, the training progress and
RNG state (so a run resumes exactly), and the resolved config (so a model
rebuilds from the file alone). Writing goes to a temporary file that is
fsynced and renamed over the old one: a run killed mid-write leaves the
previous checkpoint intact. Loading uses `torch.load(weights_only=True)`,
which accepts tensors and plain containers only.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(ValueError):
    """A checkpoint that is missing, truncated, corrupt or not ours; one line."""


def save_checkpoint(state: dict[str, Any], path: Path) -> None:
    """Write `state` to `path` atomically: temporary file, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; never runs code from the file."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable lookback checkpoint ({first[:200]})") from None
    if not isinstance(state, dict) or "model" not in state or "config" not in state:
        raise CheckpointError(f"{path}: not a lookback checkpoint (no model or config inside)")
    return state
