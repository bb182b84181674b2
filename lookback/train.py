"""Training: teacher forcing, cross-entropy, Adam, and a run directory that holds everything.

The loop, as pseudo-code: build (data, tokenizers, model, optimiser), resume
if asked, then per batch: loss, backward, clip, step, log, and every
`valid_every` updates validate, checkpoint and maybe stop.

A run directory holds config.yaml (the resolved config), the tokenizer
files, metrics.jsonl, and best.pt / last.pt. `resume=True` continues from
last.pt exactly: weights, optimiser, scheduler, RNG and the position in the
data, so a resumed run ends where an uninterrupted one would.

Under torchrun (docs/distributed.md) every rank plans the same batches and
an update takes the next N x accumulate of them, rank r its r-th, (r+N)-th,
...; only rank 0 validates and writes the run directory, and every decision
to stop is rank 0's, so that all ranks stop at the same update.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from . import distributed
from .batch import Batch, collate, token_batches
from .checkpoint import load_latest, save_checkpoint
from .config import Config, save_config
from .data import read_parallel
from .device import autocast, check_precision, describe, resolve_device
from .evaluate import score
from .model import Seq2Seq, build_model
from .tokenizer import Tokenizer, load_tokenizers, train_tokenizers
from .translator import Translator

logger = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint."""

    step: int = 0  # updates done
    epoch: int = 0  # current pass over the data
    batch: int = 0  # planned batches of this epoch already done, by all ranks together
    best_bleu: float = -1.0  # best validation BLEU so far
    bad_validations: int = 0  # validations since the best, for early stopping
    seconds: float = 0.0  # training time so far, across resumes
    done: bool = False  # a stopping rule has fired
    skipped: int = 0  # updates skipped for a NaN or infinite loss (train.nonfinite: skip)


@dataclass
class Corpus:
    pairs: list[tuple[list[int], list[int]]]  # token ids, no <s> / </s>
    src: list[str]  # raw text, for validation BLEU and samples
    tgt: list[str]


def encode_corpus(
    src: list[str], tgt: list[str], src_tok: Tokenizer, tgt_tok: Tokenizer, max_len: int | None = None
) -> Corpus:
    """Tokenise a corpus; pairs longer than max_len tokens on either side are skipped."""
    pairs, keep = [], []
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        ids = (src_tok.encode(s), tgt_tok.encode(t))
        if ids[0] and ids[1] and (max_len is None or max(map(len, ids)) <= max_len):
            pairs.append(ids)
            keep.append(i)
    if len(keep) < len(src):
        logger.info(
            "skipped %d of %d pairs (empty after tokenisation, or over %s tokens)",
            len(src) - len(keep),
            len(src),
            max_len,
        )
    return Corpus(pairs, [src[i] for i in keep], [tgt[i] for i in keep])


def set_threads(n: int) -> None:
    """train.threads, per process; 0 under torchrun shares this machine's cores among its processes."""
    n = n or distributed.threads_per_process()
    if n:
        torch.set_num_threads(n)


class RunDirError(ValueError):
    """The run directory cannot be written, or lacks the room for its checkpoints; one line."""


class NonFiniteLoss(ValueError):
    """A NaN or infinite loss with train.nonfinite: stop; one line."""


def check_writable(run_dir: Path) -> None:
    """Create run_dir and write, fsync and delete a file in it: fail before any work, not after."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".write-test.") as f:
            f.write(b"lookback")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise RunDirError(f"train.run_dir {run_dir} is not writable ({exc.strerror or exc})") from None


def check_space(run_dir: Path, checkpoint_bytes: int) -> None:
    """Room for best.pt, last.pt, prev.pt and one temporary file, less the ones already there."""
    files = [run_dir / f"{n}.pt" for n in ("best", "last", "prev")]
    needed = checkpoint_bytes * (4 - sum(f.exists() for f in files))
    free = shutil.disk_usage(run_dir).free
    if free < needed:
        raise RunDirError(
            f"train.run_dir {run_dir}: {free / 1e6:,.0f} MB free, but its checkpoints need about "
            f"{needed / 1e6:,.0f} MB (each ~{checkpoint_bytes / 1e6:,.0f} MB); free some space or "
            f"choose another train.run_dir"
        )


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(cfg.train.run_dir)
        check_writable(self.run_dir)
        set_threads(cfg.train.threads)
        self.device = resolve_device(cfg.train.device)
        check_precision(self.device, cfg.train.precision)
        self.device = distributed.init(self.device)  # under torchrun: join the others; cuda:LOCAL_RANK
        self.rank, self.world, self.main = distributed.rank(), distributed.world_size(), distributed.is_main()
        self.progress = Progress()
        last, prev = self.run_dir / "last.pt", self.run_dir / "prev.pt"
        if resume and not (last.exists() or prev.exists()):
            raise FileNotFoundError(f"{last}: nothing to resume")
        if not resume and last.exists():
            raise FileExistsError(
                f"{self.run_dir} already holds a run; pass --resume to continue it, "
                f"or choose another train.run_dir"
            )
        # 1) data and tokenizers (trained on the training split, kept in the run directory)
        d = cfg.data
        src, tgt = read_parallel(d.train, d.src_lang, d.tgt_lang, d.multi30k_dir)
        valid = read_parallel(d.valid, d.src_lang, d.tgt_lang, d.multi30k_dir)  # a bad path fails now
        self.src_tok, self.tgt_tok = self._tokenizers(src, tgt, resume)
        self.train_data = encode_corpus(src, tgt, self.src_tok, self.tgt_tok, d.max_len)
        self.valid_data = encode_corpus(*valid, self.src_tok, self.tgt_tok)
        # 2) model, optimiser, scheduler
        torch.manual_seed(cfg.train.seed)
        self.model: Seq2Seq = build_model(cfg.model, self.src_tok.vocab_size, self.tgt_tok.vocab_size)
        self.model.to(self.device)
        if self.rank:  # the same initial weights everywhere, but each rank its own dropout
            torch.manual_seed(cfg.train.seed + self.rank)
        self.loss_module = distributed.wrap(self.model, self.device)  # in DDP under torchrun
        self.rank_rng: list[dict[str, torch.Tensor]] = []  # torchrun: every rank's RNG, for an exact resume
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.train.lr)
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            self.optimizer,
            mode="max",
            factor=cfg.train.lr_factor,
            patience=cfg.train.lr_patience,
            min_lr=cfg.train.min_lr,
        )
        # fp16 gradients can underflow: scale the loss up, and the gradients back (a no-op otherwise)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.train.precision == "fp16")
        self.translator = Translator(self.model, self.src_tok, self.tgt_tok, cfg.decode, device=self.device)
        n_params = sum(x.numel() for x in self.model.parameters())
        check_space(self.run_dir, 3 * 4 * n_params + 2**20)  # weights and Adam's two moments, in fp32
        self._stop_signal: str | None = None  # SIGINT / SIGTERM seen: stop after this update
        if resume:
            state, path, problems = load_latest([last, prev])
            for problem in problems:
                logger.warning("%s; resuming from %s instead", problem, path.name)
            self._restore(state)
        elif self.main:
            save_config(cfg, self.run_dir / "config.yaml")
        self.metrics = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8") if self.main else None

    def _tokenizers(self, src: list[str], tgt: list[str], resume: bool) -> tuple[Tokenizer, Tokenizer]:
        """Trained by rank 0 on a new run; read from the run directory by the others, and on resume."""
        d = self.cfg.data
        if not resume and self.main:
            toks = train_tokenizers(self.cfg.tokenizer, src, tgt, d.src_lang, d.tgt_lang, self.run_dir)
        distributed.barrier()  # the other ranks wait for the files
        if resume or not self.main:
            if not self.main and not (self.run_dir / "tokenizer.json").exists():
                raise FileNotFoundError(
                    f"{self.run_dir}: rank {self.rank} cannot see the tokenizers that rank 0 wrote; "
                    f"train.run_dir must be on a filesystem that every node shares"
                )
            toks = load_tokenizers(self.run_dir)
        return toks

    # -- the loop ----------------------------------------------------------------

    def train(self) -> Progress:
        """Train until a stopping rule fires; returns the final progress."""
        cfg, p = self.cfg.train, self.progress
        lengths = [(len(s), len(t)) for s, t in self.train_data.pairs]
        n_params = sum(x.numel() for x in self.model.parameters())
        logger.info("model: %.2fM parameters; %d training pairs", n_params / 1e6, len(lengths))
        logger.info(describe(self.device, self.cfg.train.precision))
        if self.world > 1 or cfg.accumulate > 1:
            logger.info("%d process(es) x %d batch(es) per update", self.world, cfg.accumulate)
        bar = tqdm(
            total=cfg.max_steps or None,
            initial=p.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if self.main else True,
        )
        window = {"loss": 0.0, "tokens": 0, "start": time.perf_counter()}
        start = time.perf_counter() - p.seconds
        per_step = self.world * cfg.accumulate  # planned batches in one update
        self._check_limits()  # a resumed run may already be at its limits
        handlers = self._catch_signals()
        try:
            while not p.done:
                batches = self._plan(lengths, p.epoch)
                # rank r takes the r-th, (r+N)-th, ... of each update's batches; the epoch's last
                # len % per_step batches are left out, so that every rank makes the same updates
                for first in range(p.batch, len(batches) - per_step + 1, per_step):
                    mine = [
                        collate([self.train_data.pairs[i] for i in idx])
                        for idx in batches[first + self.rank : first + per_step : self.world]
                    ]
                    loss = self.train_step(*mine)
                    p.step, p.batch = p.step + 1, first + per_step
                    # rank 0's clock, so that the time limit stops every rank at the same update
                    (p.seconds,) = distributed.broadcast([time.perf_counter() - start])
                    if math.isfinite(loss):  # a skipped update (train.nonfinite) is not logged
                        window["loss"] += loss
                        window["tokens"] += sum(b.n_tokens for b in mine)
                    bar.update()
                    if p.step % cfg.log_every == 0:
                        self._log_train(window, bar)
                    self._check_limits()
                    if p.step % cfg.valid_every == 0 or p.done:
                        self.validate()
                    if p.done:
                        break
                    if self._stopping():  # SIGINT / SIGTERM: between updates, with a checkpoint
                        if self.main:
                            logger.warning(
                                "%s at step %d: saving %s and stopping; --resume continues",
                                self._stop_signal or "a signal",
                                p.step,
                                self.run_dir / "last.pt",
                            )
                            self.save("last")
                        raise KeyboardInterrupt
                else:
                    p.epoch, p.batch = p.epoch + 1, 0
                    if p.epoch >= cfg.max_epochs:
                        p.done = True
                        self.validate()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            bar.close()
            if self.metrics:
                self.metrics.close()
        distributed.barrier()  # no rank returns before rank 0 has written the last checkpoint
        return p

    def _catch_signals(self) -> dict:
        """SIGINT (Ctrl-C) and SIGTERM stop training after the current update, with a checkpoint;
        a second one stops at once, without (last.pt is then the one before). Returns the old handlers.
        """
        if threading.current_thread() is not threading.main_thread():
            return {}  # only the main thread receives signals

        def stop(signum: int, frame: Any) -> None:
            if self._stop_signal:
                raise KeyboardInterrupt
            self._stop_signal = signal.Signals(signum).name

        return {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}

    def _stopping(self) -> bool:
        """Whether any rank has been asked to stop (all of them then stop at the same update)."""
        flag = 1.0 if self._stop_signal else 0.0
        if self.world > 1:
            (flag,) = distributed.all_reduce_sum([flag])
        return flag > 0

    def _plan(self, lengths: list[tuple[int, int]], epoch: int) -> list[list[int]]:
        """The epoch's batches: the same on every rank, and enough of them for one update."""
        cfg = self.cfg.train
        batches = token_batches(lengths, cfg.max_tokens, cfg.seed, epoch)
        if len(batches) < self.world * cfg.accumulate:
            raise ValueError(
                f"train.max_tokens {cfg.max_tokens} makes {len(batches)} batches per epoch, fewer than the "
                f"{self.world * cfg.accumulate} of one update ({self.world} processes x train.accumulate "
                f"{cfg.accumulate}); lower train.max_tokens"
            )
        return batches

    def train_step(self, *batches: Batch) -> float:
        """One update from this rank's batches: loss, backward, clip, step. Returns their summed loss.

        The gradient is that of the mean loss per target token over the global
        batch (every rank's batches): each rank divides its summed loss by the
        global token count over N, and DDP averages the N ranks' gradients.
        """
        self.loss_module.train()
        self.optimizer.zero_grad(set_to_none=True)
        (tokens,) = distributed.all_reduce_sum([sum(b.n_tokens for b in batches)])
        per_rank = tokens / self.world  # mean over tokens: steps do not depend on batch shape
        total = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            # DDP averages the gradients once, in the backward of the last batch
            with distributed.no_sync(self.loss_module, i == len(batches) - 1):
                with autocast(self.device, self.cfg.train.precision):
                    loss = self.loss_module(
                        batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, self.cfg.train.label_smoothing
                    )
                self.scaler.scale(loss / per_rank).backward()
            total += float(loss.detach())
        self.scaler.unscale_(self.optimizer)  # the true gradients (a no-op unless fp16)
        params = [x for x in self.model.parameters() if x.grad is not None]
        if self.cfg.train.clip:
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.train.clip)
        else:
            norm = torch.nn.utils.get_total_norm([x.grad for x in params])
        # fp16's scaler skips overflowing steps itself; otherwise a NaN/inf is a fault. The gradient
        # norm is the same on every rank (DDP averaged the gradients), so all ranks decide alike
        finite = bool(torch.isfinite(norm)) and (self.world > 1 or math.isfinite(total))
        if not finite and self.cfg.train.precision != "fp16":
            self.optimizer.zero_grad(set_to_none=True)
            self._nonfinite(total, float(norm))
            return math.nan
        self.scaler.step(self.optimizer)  # skips the step if fp16 gradients overflowed
        self.scaler.update()
        return total

    def _nonfinite(self, loss: float, norm: float) -> None:
        """train.nonfinite: skip the update and count it, or stop with the last good checkpoint intact."""
        p, what = self.progress, f"loss {loss:g}, gradient norm {norm:g}"
        if self.cfg.train.nonfinite == "stop":
            raise NonFiniteLoss(
                f"update {p.step + 1} is not finite ({what}); stopped, as train.nonfinite is 'stop'; "
                f"{self.run_dir / 'last.pt'} holds the last good checkpoint"
            )
        p.skipped += 1
        if self.main:
            logger.warning(
                "update %d is not finite (%s): skipped, %d so far (train.nonfinite: skip)",
                p.step + 1,
                what,
                p.skipped,
            )

    def _check_limits(self) -> None:
        """The stopping rules; a resumed run given a larger budget goes on."""
        cfg, p = self.cfg.train, self.progress
        if cfg.max_steps and p.step >= cfg.max_steps:
            p.done = True
        if p.epoch >= cfg.max_epochs:
            p.done = True
        if cfg.early_stopping and p.bad_validations >= cfg.early_stopping:
            p.done = True
        if cfg.time_limit and p.seconds >= cfg.time_limit * 60:
            logger.info("time limit of %g minutes reached at step %d", cfg.time_limit, p.step)
            p.done = True

    def _log_train(self, window: dict, bar: tqdm) -> None:
        """Loss per token and tokens/s since the last line, over all ranks (rank 0 writes)."""
        now = time.perf_counter()
        seconds = now - window["start"]
        loss_sum, tokens = distributed.all_reduce_sum([window["loss"], window["tokens"]])
        window.update(loss=0.0, tokens=0, start=now)
        if not self.main:
            return
        loss = loss_sum / max(tokens, 1)
        tok_s = tokens / max(seconds, 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_s:,.0f}", epoch=self.progress.epoch)
        self._write_metrics(
            kind="train",
            loss=loss,
            ppl=math.exp(min(loss, 50)),
            tokens_per_s=tok_s,
            lr=self.optimizer.param_groups[0]["lr"],
        )

    def _write_metrics(self, **record: Any) -> None:
        p = self.progress
        record = {"step": p.step, "epoch": p.epoch, "seconds": round(p.seconds, 2), **record}
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()

    # -- validation and checkpoints ---------------------------------------------

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Mean cross-entropy per target token on the validation set."""
        self.model.eval()
        pairs = self.valid_data.pairs
        total, tokens = 0.0, 0
        for idx in token_batches([(len(s), len(t)) for s, t in pairs], self.cfg.train.max_tokens):
            batch = collate([pairs[i] for i in idx]).to(self.device)
            total += float(self.model.loss(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out))
            tokens += batch.n_tokens
        return total / tokens

    def validate(self) -> None:
        """Loss, perplexity and greedy BLEU on the validation set; checkpoint; early stopping.

        Under torchrun rank 0 alone translates and writes; the others wait for
        its BLEU and take the same scheduler and early-stopping steps, so that
        learning rate and stopping stay the same on every rank.
        """
        cfg, p = self.cfg, self.progress
        if self.world > 1:
            self.rank_rng = distributed.all_gather_object(self._rng_state())
        if not self.main:
            (bleu,) = distributed.broadcast([0.0])
            self._track(bleu)
            return
        t0 = time.perf_counter()
        loss = self.validation_loss()
        hyps = [t.text for t in self.translator.translate(self.valid_data.src, beam=1)]
        scores = score(hyps, self.valid_data.tgt, cfg.data.tgt_lang)
        distributed.broadcast([scores.bleu])
        improved = self._track(scores.bleu)
        self._write_metrics(
            kind="valid",
            loss=loss,
            ppl=math.exp(min(loss, 50)),
            bleu=scores.bleu,
            chrf=scores.chrf,
            seconds_taken=round(time.perf_counter() - t0, 2),
        )
        lines = [
            f"validation at step {p.step}: loss {loss:.3f}  ppl {math.exp(min(loss, 50)):.2f}  "
            f"BLEU {scores.bleu:.2f}  chrF {scores.chrf:.2f}{'  (best)' if improved else ''}"
        ]
        for i in range(min(cfg.train.valid_sample, len(hyps))):
            lines += [
                f"  src: {self.valid_data.src[i]}",
                f"  ref: {self.valid_data.tgt[i]}",
                f"  hyp: {hyps[i]}",
            ]
        logger.info("\n".join(lines))
        if improved:
            self.save("best")
        self.save("last")

    def _track(self, bleu: float) -> bool:
        """The learning-rate schedule, best BLEU and early stopping; True if `bleu` is the best yet."""
        cfg, p = self.cfg.train, self.progress
        self.scheduler.step(bleu)
        if bleu > p.best_bleu:
            p.best_bleu, p.bad_validations = bleu, 0
            return True
        p.bad_validations += 1
        if cfg.early_stopping and p.bad_validations >= cfg.early_stopping:
            logger.info("early stopping: no better validation BLEU in %d validations", p.bad_validations)
            p.done = True
        return False

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint holds: plain containers and tensors only."""
        one_process = self.world == 1  # else rank_rng holds each rank's GPU generator
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "progress": asdict(self.progress),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" and one_process else [],
            "rank_rng": self.rank_rng,  # torchrun: every rank's generators, from the last validation
            "world_size": self.world,  # processes that trained together (torchrun); 1 otherwise
            "scaler": self.scaler.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def save(self, name: str) -> None:
        """best.pt or last.pt; the last.pt before is kept as prev.pt, a fallback for --resume."""
        path = self.run_dir / f"{name}.pt"
        previous = self.run_dir / "prev.pt" if name == "last" else None
        try:
            save_checkpoint(self.state(), path, previous)
        except OSError as exc:
            raise RunDirError(
                f"{path}: cannot write the checkpoint ({exc.strerror or exc}); the checkpoints "
                f"already in {self.run_dir} are untouched"
            ) from None

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.progress = Progress(**state["progress"])
        self.progress.done = False  # a resumed run may have been given a larger budget
        self._restore_rng(state)
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        logger.info(
            "resumed from step %d (epoch %d, batch %d)",
            self.progress.step,
            self.progress.epoch,
            self.progress.batch,
        )
        world, accumulate = state.get("world_size", 1), state["config"]["train"].get("accumulate", 1)
        if (world, accumulate) != (self.world, self.cfg.train.accumulate):
            logger.warning(
                "the run was trained with %d process(es) x accumulate %d, and goes on with %d x %d: "
                "the same data from here, in global batches of a new size",
                world,
                accumulate,
                self.world,
                self.cfg.train.accumulate,
            )

    def _rng_state(self) -> dict[str, torch.Tensor]:
        """This process's random generators: dropout on CPU, or on its GPU."""
        cuda = torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else torch.empty(0)
        return {"cpu": torch.get_rng_state(), "cuda": cuda}

    def _restore_rng(self, state: dict[str, Any]) -> None:
        """Each rank's generators as saved; a rank the saved run did not have starts afresh."""
        saved = state.get("rank_rng") or []
        if self.world > 1 and self.rank < len(saved):
            torch.set_rng_state(saved[self.rank]["cpu"])
            if self.device.type == "cuda" and saved[self.rank]["cuda"].numel():
                torch.cuda.set_rng_state(saved[self.rank]["cuda"], self.device)
        elif self.rank:
            torch.manual_seed(self.cfg.train.seed + self.rank)
        else:
            torch.set_rng_state(state["rng"])
            if self.device.type == "cuda" and state.get("cuda_rng") and self.world == 1:
                torch.cuda.set_rng_state_all(state["cuda_rng"])


def train(cfg: Config, resume: bool = False) -> Path:
    """Train a model as `cfg` says (on every rank, under torchrun); returns the run directory."""
    try:
        Trainer(cfg, resume).train()
    finally:
        distributed.cleanup()
    return Path(cfg.train.run_dir)
