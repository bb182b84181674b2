"""Checkpoints, and the run directory that holds them.

A checkpoint is one explicit dict per file: the model and optimiser state, the training
progress and RNG state (so a run resumes exactly), and the resolved config (so a model rebuilds
from the file alone). Writing goes to a temporary file that is fsynced and renamed over the old
one: a run killed mid-write leaves the previous checkpoint intact. Loading checks every member
of the zip archive against its CRC-32, then uses `torch.load(weights_only=True)`, which builds
tensors and plain containers only and refuses every other object unbuilt.

`RunDir` is everything a training run writes: config.yaml, the tokenizer files, metrics.jsonl,
and best.pt / last.pt / prev.pt (the last.pt before the newest, a fallback for --resume);
with train.keep_checkpoints, the weights of the last validations (step_N.pt) for averaging.
With train.ema a checkpoint's model is the weights' moving average (`moving_average`), and the
weights that training goes on from are kept beside it.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ..config import Config, from_dict
from ..errors import CheckpointError, ConfigError, RunDirError, first_line

logger = logging.getLogger(__name__)


def save_checkpoint(state: dict[str, Any], path: Path, previous: Path | None = None) -> None:
    """Write `state` to `path` atomically: temporary file, fsync, rename.

    With `previous`, the checkpoint that `path` held is kept there (renamed,
    once the new one is safely on disk): a fallback should the new file ever
    turn out unreadable. At every moment one of the two is a whole checkpoint.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        if previous is not None and path.exists():
            os.replace(path, previous)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def _check_archive(path: Path) -> None:
    """Raise CheckpointError unless `path` is a whole zip archive whose every member matches its CRC-32.

    torch.save writes a zip with a CRC-32 per member, but torch.load does not check them: a
    flipped bit inside the weights would load as a silently different model.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # reads every member, checking its CRC-32
    except Exception as exc:  # zipfile fails in many ways on damaged bytes; all mean the same here
        raise CheckpointError(
            f"{path}: not a readable lookback checkpoint (truncated, or not a torch.save archive: "
            f"{first_line(exc)})"
        ) from None
    if damaged:
        raise CheckpointError(
            f"{path}: not a readable lookback checkpoint (damaged: {damaged} fails its CRC-32 check)"
        )


def _refusal(exc: pickle.UnpicklingError) -> str:
    """Why the restricted unpickler refused a file, in one line."""
    asked = re.search(r"GLOBAL ([\w.]+)", str(exc))
    if asked:
        return (
            f"it asks for the Python object {asked[1]}, and a checkpoint holds only tensors and plain "
            f"data (building other objects could run code)"
        )
    return f"not a checkpoint pickle ({first_line(exc)})"


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by `save_checkpoint`; never runs code from the file.

    Three checks, in order: the file is a whole zip archive whose members match their CRC-32
    (a truncated or damaged copy fails here); `torch.load(weights_only=True)` builds tensors
    and plain containers only, and refuses any other object before building it (a crafted
    pickle that would run code fails here, without running it); the result is shaped like
    ours (a config mapping and a model dict of named tensors).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint")
    _check_archive(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"{path}: refused to load: {_refusal(exc)}") from None
    except Exception as exc:  # a damaged archive that passed its checksums: all mean the same here
        raise CheckpointError(f"{path}: not a readable lookback checkpoint ({first_line(exc)})") from None
    model = state.get("model") if isinstance(state, dict) else None
    if not isinstance(model, dict) or not isinstance(state.get("config"), dict):
        raise CheckpointError(f"{path}: not a lookback checkpoint (no model or config inside)")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in model.items()):
        raise CheckpointError(f"{path}: not a lookback checkpoint (its model is not a dict of named tensors)")
    if isinstance(state["config"].get("data"), dict):  # saved before data.src_eos: trained without it
        state["config"]["data"].setdefault("src_eos", False)
    return state


def average_checkpoints(paths: list[Path]) -> dict[str, Any]:
    """The mean of the weights of checkpoints of one model, with the config of the last
    (checkpoint averaging: Junczys-Dowmunt et al. 2016; Vaswani et al. 2017, 6.1)."""
    states = [load_checkpoint(p) for p in paths]
    last = states[-1]["model"]
    for path, state in zip(paths, states, strict=True):
        if {k: v.shape for k, v in state["model"].items()} != {k: v.shape for k, v in last.items()}:
            raise CheckpointError(
                f"{path}: not the same model as {paths[-1]}; only one model's checkpoints average"
            )
    model = {
        k: torch.stack([s["model"][k].float() for s in states]).mean(0).to(v.dtype)
        if v.is_floating_point()
        else v
        for k, v in last.items()
    }
    return {"model": model, "config": states[-1]["config"], "averaged": [p.name for p in paths]}


def moving_average(model: nn.Module, decay: float) -> AveragedModel | None:
    """train.ema: a copy of `model` whose weights follow the trained ones after every update,
    ema <- decay ema + (1 - decay) w (Polyak and Juditsky 1992; Marian's exponential smoothing),
    an average over about the last 1 / (1 - decay) updates; None for decay 0. Its first update
    copies the weights. torch's AveragedModel does the work, in one fused lerp over them all."""
    if not decay:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)


# Keys that a resumed run cannot change and still continue the saved one exactly.
EXACT_KEYS = ("data.src_lang", "data.tgt_lang", "data.train", "data.valid", "data.max_len", "tokenizer.")
EXACT_KEYS += ("model.", "train.seed", "train.max_tokens")


def _flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}"""
    out = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def load_run(run_dir: str | Path, checkpoint: str = "best") -> tuple[Any, Config, Any, Any, dict, Path]:
    """A run directory's model as its checkpoint's config builds it: (model, config, source and
    target tokenizers, the checkpoint's state, its path). `checkpoint` "best" falls back to
    last.pt; weights that do not fit the config are a one-line CheckpointError naming them."""
    from ..data.tokenizer import load_tokenizers
    from ..model.seq2seq import build_model  # here: the model imports nothing of this module's users

    run_dir = Path(run_dir)
    path = run_dir / f"{checkpoint}.pt"
    if checkpoint == "best" and not path.exists():
        path = run_dir / "last.pt"
    state = load_checkpoint(path)
    cfg = from_dict(state["config"], source=str(path))
    src_tok, tgt_tok = load_tokenizers(run_dir)
    model = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size)
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:  # torch's first line names only the class; the next, what differs
        details = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
        reason = details[0][:200] if details else first_line(exc)
        raise CheckpointError(f"{path}: weights do not fit the model of its config ({reason})") from None
    return model, cfg, src_tok, tgt_tok, state, path


def require_tensorboard() -> None:
    """train.tensorboard needs the tensorboard package: say so in one line, before any work."""
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError(
            "train.tensorboard: true needs the tensorboard package: pip install 'lookback[tensorboard]'"
        ) from None


class RunDir:
    """A training run's directory. Only the main process writes: with `writes=False`
    (the other ranks under torchrun) saving and logging do nothing."""

    def __init__(self, path: str | Path, writes: bool = True):
        self.path, self.writes = Path(path), writes
        self.last, self.prev = self.path / "last.pt", self.path / "prev.pt"
        self._metrics = None  # metrics.jsonl, opened on the first record
        self.tensorboard = False  # also log to TensorBoard (train.tensorboard; see require_tensorboard)
        self._board = None  # its SummaryWriter, opened on the first record

    def prepare(self, resume: bool) -> None:
        """Create the directory and write, fsync and delete a file in it, failing before any work;
        a new run needs a directory without a run, a resumed one a checkpoint."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"train.run_dir {self.path} is a file, not a directory; choose another")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.path, prefix=".write-test.") as f:
                f.write(b"lookback")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise RunDirError(f"train.run_dir {self.path} is not writable ({exc.strerror or exc})") from None
        if resume and not (self.last.exists() or self.prev.exists()):
            raise FileNotFoundError(f"{self.last}: nothing to resume")
        if not resume and self.last.exists():
            raise FileExistsError(
                f"{self.path} already holds a run; pass --resume to continue it, or choose another "
                "train.run_dir"
            )

    def check_space(self, checkpoint_bytes: int) -> None:
        """Room for best.pt, last.pt, prev.pt and one temporary file, less the ones already there."""
        files = [self.path / f"{n}.pt" for n in ("best", "last", "prev")]
        needed = checkpoint_bytes * (4 - sum(f.exists() for f in files))
        free = shutil.disk_usage(self.path).free
        if free < needed:
            raise RunDirError(
                f"train.run_dir {self.path}: {free / 1e6:,.0f} MB free, but its checkpoints need about "
                f"{needed / 1e6:,.0f} MB (each ~{checkpoint_bytes / 1e6:,.0f} MB); free some space or "
                f"choose another train.run_dir"
            )

    def resumable(
        self, cfg: Config, world: int, accept_changes: bool = False
    ) -> tuple[dict[str, Any], Config]:
        """The newest checkpoint that loads (last.pt, else prev.pt) and its config, to go on with
        `cfg` in `world` processes. Refuses a `cfg` that changes what an exact resume needs
        (EXACT_KEYS), unless `accept_changes`; a new global batch size is only a warning."""
        try:
            state, path = load_checkpoint(self.last), self.last
        except CheckpointError as exc:  # a fallback, with a word on why it is needed
            try:
                state, path = load_checkpoint(self.prev), self.prev
            except CheckpointError as also:
                raise CheckpointError(f"{exc}; {also}") from None
            logger.warning("%s; resuming from %s instead", exc, path.name)
        saved = from_dict(state["config"], source=str(path))
        old, new = _flat(saved.to_dict()), _flat(cfg.to_dict())
        changes = [
            f"{k}: {old[k]!r} -> {new[k]!r}" for k in new if k.startswith(EXACT_KEYS) and old[k] != new[k]
        ]
        if changes and not accept_changes:
            why = "the run cannot continue exactly; set it back, or pass --accept-changes to go on with it"
            raise ConfigError("\n".join(f"{path}: --resume with a changed {c}: {why}" for c in changes))
        for change in changes:
            logger.warning("resuming with a changed %s (--accept-changes)", change)
        was, now = (state.get("world_size", 1), saved.train.accumulate), (world, cfg.train.accumulate)
        if was != now:
            logger.warning(
                "the run was trained with %d process(es) x accumulate %d, and goes on with %d x %d: "
                "the same data from here, in global batches of a new size", *was, *now,
            )  # fmt: skip
        return state, saved

    def save(self, name: str, state: dict[str, Any]) -> None:
        """best.pt or last.pt; the last.pt before is kept as prev.pt."""
        if not self.writes:
            return
        path = self.path / f"{name}.pt"
        try:
            save_checkpoint(state, path, self.prev if name == "last" else None)
        except OSError as exc:
            raise RunDirError(
                f"{path}: cannot write the checkpoint ({exc.strerror or exc}); the checkpoints "
                f"already in {self.path} are untouched"
            ) from None

    def keep(self, step: int, state: dict[str, Any], n: int) -> None:
        """step_N.pt, the weights at a validation; only the n newest stay (train.keep_checkpoints)."""
        if self.writes:
            self.save(f"step_{step:08d}", state)
            for old in self.kept()[:-n]:
                old.unlink()

    def kept(self) -> list[Path]:
        """The step_N.pt files, oldest first."""
        return sorted(self.path.glob("step_*.pt"))

    def log(self, record: dict[str, Any]) -> None:
        """One line of metrics.jsonl, flushed at once."""
        if not self.writes:
            return
        if self._metrics is None:
            self._metrics = (self.path / "metrics.jsonl").open("a", encoding="utf-8")
        self._metrics.write(json.dumps(record) + "\n")
        self._metrics.flush()
        if self.tensorboard:  # train/loss, valid/bleu, ... against the update, in tensorboard/
            from torch.utils.tensorboard import SummaryWriter

            if self._board is None:
                self._board = SummaryWriter(str(self.path / "tensorboard"))
            kind = record.get("kind", "run")
            for key, value in record.items():
                if key not in ("step", "kind") and isinstance(value, (int, float)):
                    self._board.add_scalar(f"{kind}/{key}", value, record["step"])
            self._board.flush()

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        if self._board is not None:
            self._board.close()
            self._board = None


def parse_run_dirs(run_dirs: list[str]) -> dict[str, Path]:
    """Map model names to run directories: `NAME=DIR`, or the directory's own name."""
    if not run_dirs:
        raise ValueError("at least one run directory is needed")
    named: dict[str, Path] = {}
    for arg in run_dirs:
        name, sep, folder = arg.partition("=")
        if not sep or not name or "/" in name:  # a plain directory, maybe with '=' inside
            name, folder = Path(arg).resolve().name, arg
        if name in named:
            raise ValueError(
                f"two models are named {name!r} ({named[name]} and {folder}); name them with NAME=DIR"
            )
        named[name] = Path(folder)
    return named
