"""Training: teacher forcing, cross-entropy, Adam, and a run directory that holds everything.

The loop, as pseudo-code: build (data, tokenizers, model, optimiser), resume
if asked, then per batch: loss, backward, clip, step, log, and every
`valid_every` updates validate, checkpoint and maybe stop.

A run directory holds config.yaml (the resolved config), the tokenizer
files, metrics.jsonl, and best.pt / last.pt. `resume=True` continues from
last.pt exactly: weights, optimiser, scheduler, RNG and the position in the
data, so a resumed run ends where an uninterrupted one would.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from .batch import collate, token_batches
from .checkpoint import load_checkpoint, save_checkpoint
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
    batch: int = 0  # batches of this epoch already done
    best_bleu: float = -1.0  # best validation BLEU so far
    bad_validations: int = 0  # validations since the best, for early stopping
    seconds: float = 0.0  # training time so far, across resumes
    done: bool = False  # a stopping rule has fired


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
    if n:
        torch.set_num_threads(n)


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(cfg.train.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        set_threads(cfg.train.threads)
        self.device = resolve_device(cfg.train.device)
        check_precision(self.device, cfg.train.precision)
        self.progress = Progress()
        last = self.run_dir / "last.pt"
        if resume and not last.exists():
            raise FileNotFoundError(f"{last}: nothing to resume")
        if not resume and last.exists():
            raise FileExistsError(
                f"{self.run_dir} already holds a run; pass --resume to continue it, "
                f"or choose another train.run_dir"
            )
        # 1) data and tokenizers (trained on the training split, kept in the run directory)
        d = cfg.data
        src, tgt = read_parallel(d.train, d.src_lang, d.tgt_lang, d.multi30k_dir)
        if resume:
            self.src_tok, self.tgt_tok = load_tokenizers(self.run_dir)
        else:
            self.src_tok, self.tgt_tok = train_tokenizers(
                cfg.tokenizer, src, tgt, d.src_lang, d.tgt_lang, self.run_dir
            )
        self.train_data = encode_corpus(src, tgt, self.src_tok, self.tgt_tok, d.max_len)
        valid = read_parallel(d.valid, d.src_lang, d.tgt_lang, d.multi30k_dir)
        self.valid_data = encode_corpus(*valid, self.src_tok, self.tgt_tok)
        # 2) model, optimiser, scheduler
        torch.manual_seed(cfg.train.seed)
        self.model: Seq2Seq = build_model(cfg.model, self.src_tok.vocab_size, self.tgt_tok.vocab_size)
        self.model.to(self.device)
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
        if resume:
            self._restore(load_checkpoint(last))
        else:
            save_config(cfg, self.run_dir / "config.yaml")
        self.metrics = (self.run_dir / "metrics.jsonl").open("a", encoding="utf-8")

    # -- the loop ----------------------------------------------------------------

    def train(self) -> Progress:
        """Train until a stopping rule fires; returns the final progress."""
        cfg, p = self.cfg.train, self.progress
        lengths = [(len(s), len(t)) for s, t in self.train_data.pairs]
        n_params = sum(x.numel() for x in self.model.parameters())
        logger.info("model: %.2fM parameters; %d training pairs", n_params / 1e6, len(lengths))
        logger.info(describe(self.device, self.cfg.train.precision))
        bar = tqdm(total=cfg.max_steps or None, initial=p.step, unit="step", dynamic_ncols=True, disable=None)
        window = {"loss": 0.0, "tokens": 0, "start": time.perf_counter()}
        start = time.perf_counter() - p.seconds
        self._check_limits()  # a resumed run may already be at its limits
        try:
            while not p.done:
                batches = token_batches(lengths, cfg.max_tokens, cfg.seed, p.epoch)
                for idx in batches[p.batch :]:
                    batch = collate([self.train_data.pairs[i] for i in idx])
                    loss = self.train_step(batch)
                    p.step, p.batch = p.step + 1, p.batch + 1
                    p.seconds = time.perf_counter() - start
                    window["loss"] += loss
                    window["tokens"] += batch.n_tokens
                    bar.update()
                    if p.step % cfg.log_every == 0:
                        self._log_train(window, bar)
                    self._check_limits()
                    if p.step % cfg.valid_every == 0 or p.done:
                        self.validate()
                    if p.done:
                        break
                else:
                    p.epoch, p.batch = p.epoch + 1, 0
                    if p.epoch >= cfg.max_epochs:
                        p.done = True
                        self.validate()
        except KeyboardInterrupt:
            logger.warning("interrupted at step %d; saving %s", p.step, self.run_dir / "last.pt")
            self.save("last")
            raise
        finally:
            bar.close()
            self.metrics.close()
        return p

    def train_step(self, batch) -> float:
        """One update: loss, backward, clip, step. Returns the summed loss."""
        self.model.train()
        batch = batch.to(self.device)
        with autocast(self.device, self.cfg.train.precision):
            loss = self.model.loss(
                batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, self.cfg.train.label_smoothing
            )
        self.optimizer.zero_grad(set_to_none=True)
        # mean over tokens: steps do not depend on batch shape
        self.scaler.scale(loss / batch.n_tokens).backward()
        if self.cfg.train.clip:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.clip)
        self.scaler.step(self.optimizer)  # skips the step if fp16 gradients overflowed
        self.scaler.update()
        return float(loss.detach())

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
        now = time.perf_counter()
        loss = window["loss"] / max(window["tokens"], 1)
        tok_s = window["tokens"] / max(now - window["start"], 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_s:,.0f}", epoch=self.progress.epoch)
        self._write_metrics(
            kind="train",
            loss=loss,
            ppl=math.exp(min(loss, 50)),
            tokens_per_s=tok_s,
            lr=self.optimizer.param_groups[0]["lr"],
        )
        window.update(loss=0.0, tokens=0, start=now)

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
        """Loss, perplexity and greedy BLEU on the validation set; checkpoint; early stopping."""
        cfg, p = self.cfg, self.progress
        t0 = time.perf_counter()
        loss = self.validation_loss()
        hyps = [t.text for t in self.translator.translate(self.valid_data.src, beam=1)]
        scores = score(hyps, self.valid_data.tgt, cfg.data.tgt_lang)
        self.scheduler.step(scores.bleu)
        improved = scores.bleu > p.best_bleu
        if improved:
            p.best_bleu, p.bad_validations = scores.bleu, 0
        else:
            p.bad_validations += 1
            if cfg.train.early_stopping and p.bad_validations >= cfg.train.early_stopping:
                logger.info("early stopping: no better validation BLEU in %d validations", p.bad_validations)
                p.done = True
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

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint holds: plain containers and tensors only."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "progress": asdict(self.progress),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if self.device.type == "cuda" else [],
            "scaler": self.scaler.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def save(self, name: str) -> None:
        save_checkpoint(self.state(), self.run_dir / f"{name}.pt")

    def _restore(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.progress = Progress(**state["progress"])
        self.progress.done = False  # a resumed run may have been given a larger budget
        torch.set_rng_state(state["rng"])
        if self.device.type == "cuda" and state.get("cuda_rng"):
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        logger.info(
            "resumed from step %d (epoch %d, batch %d)",
            self.progress.step,
            self.progress.epoch,
            self.progress.batch,
        )


def train(cfg: Config, resume: bool = False) -> Path:
    """Train a model as `cfg` says; returns the run directory."""
    Trainer(cfg, resume).train()
    return Path(cfg.train.run_dir)
