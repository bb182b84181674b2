"""Training: teacher forcing, cross-entropy, Adam, and a run directory that holds everything.

The loop: build (data, tokenizers, model, optimiser), resume if asked, then per update: loss,
backward, clip, step, log, maybe validate and checkpoint, stop when a rule says so. Each
concern has a unit of its own, which the loop calls in one line:

    UpdatePlan (batch.py)     which batches each update takes; the data position
    RunDir (checkpoint.py)    best/last/prev checkpoints, metrics.jsonl, disk checks
    Ranks (distributed.py)    torchrun's processes: who writes, how they agree
    progress.py               Progress; the stopping rules; SIGINT/SIGTERM between updates

`resume=True` continues from last.pt exactly: weights, optimiser, scheduler,
RNG and the position in the data, so a resumed run ends where an
uninterrupted one would (docs/distributed.md: also under torchrun).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from ..config import Config, save_config
from ..data.batch import Batch, UpdatePlan, curriculum_batches, encode_corpus
from ..data.read import iter_parallel, read_parallel, sample_pairs
from ..data.store import prepare_store
from ..data.tokenizer import load_tokenizers, train_tokenizers
from ..decoding.evaluate import score, validation_loss
from ..decoding.translate import TextTranslator
from ..device import (
    autocast,
    describe,
    free_memory,
    keep_freed_memory,
    resolve_compile,
    resolve_device,
    resolve_precision,
    set_threads,
)
from ..errors import CheckpointError, NonFiniteLoss
from ..explain.diagnostics import probe
from ..model import bptt
from ..model.encoder import EACH_WAY_FILL
from ..model.seq2seq import LossTerms, Seq2Seq, build_model, count_parameters
from . import distributed, progress
from .checkpoint import RunDir, moving_average, require_tensorboard
from .fit import check_batch, check_model
from .progress import Progress, Window, progress_line, stop_reason, stop_signals, valid_due
from .schedule import LearningRate, parameter_groups

logger = logging.getLogger(__name__)


class Trainer:
    def __init__(self, cfg: Config, resume: bool = False, accept_changes: bool = False):
        self.cfg = cfg
        self.run = RunDir(cfg.train.run_dir)
        self.run.prepare(resume)  # writable, and a run to resume or none to overwrite
        set_threads(cfg.train.threads)
        device = resolve_device(cfg.train.device)
        if device.type == "cpu":
            keep_freed_memory()  # each update's large blocks reused, not mapped afresh (device.py)
        self.precision = resolve_precision(device, cfg.train.precision)  # auto: bf16 where native
        self.ranks, self.device = distributed.Ranks.join(device)  # torchrun: cuda:LOCAL_RANK
        self.run.writes = self.ranks.main
        if cfg.train.tensorboard:
            require_tensorboard()  # fails now, in one line, without the package
            self.run.tensorboard = True
        saved = self.run.resumable(cfg, self.ranks.world, accept_changes) if resume else None
        self._build_data(resume)
        self._build_model()
        copies = 3 + (self.ema is not None)  # weights, Adam's moments, the average
        self.run.check_space(copies * 4 * count_parameters(self.model) + 2**20)
        self.progress = Progress()
        self.on_validation: Callable[[dict[str, float]], None] | None = None  # a search's report (tune.py)
        if saved:
            self._restore(*saved)
        if self.ranks.main:
            save_config(cfg, self.run.path / "config.yaml")

    def _build_data(self, resume: bool) -> None:
        """The tokenizers (trained on the training split, kept in the run directory), the training
        pairs and the plan of every update's batches, and the validation set."""
        cfg, d = self.cfg, self.cfg.data
        # data.store: the corpus is streamed, never held; else read whole, as small corpora are
        train_text = None if d.store else read_parallel(d.train, d.src_lang, d.tgt_lang, d.multi30k_dir)
        valid = read_parallel(d.valid, d.src_lang, d.tgt_lang, d.multi30k_dir)  # a bad path fails now
        if not resume and self.ranks.main:
            pairs = (
                zip(*train_text, strict=True)
                if train_text
                else iter_parallel(d.train, d.src_lang, d.tgt_lang, d.multi30k_dir)
            )
            src, tgt = sample_pairs(pairs, cfg.tokenizer.sample, cfg.train.seed)
            train_tokenizers(cfg.tokenizer, src, tgt, d.src_lang, d.tgt_lang, self.run.path)
        self.ranks.barrier()  # the other ranks wait for the files: train.run_dir must be shared
        self.src_tok, self.tgt_tok = load_tokenizers(self.run.path)
        if d.store:  # tokenised once into the cache (rank 0), then read pair by pair
            store = prepare_store(
                d, self.src_tok, self.tgt_tok, self.run.path, self.ranks.main, self.ranks.barrier
            )
            self.train_pairs, lengths = store, store.lengths
        else:
            corpus = encode_corpus(*train_text, self.src_tok, self.tgt_tok, d.max_len, d.src_eos)
            self.train_pairs, lengths = corpus.pairs, [(len(x), len(y)) for x, y in corpus.pairs]
            del train_text, corpus  # the raw text of the training corpus is not needed again
        self.valid_data = encode_corpus(*valid, self.src_tok, self.tgt_tok, src_eos=d.src_eos)
        t, (rank, world) = cfg.train, (self.ranks.rank, self.ranks.world)
        # a batch whose step would not fit is refused now, in one line, not by the kernel later
        check_batch(cfg.model, self.tgt_tok.vocab_size, lengths, t.max_tokens, free_memory(self.device))
        # epoch -> its batches, short pairs only in the first epochs under train.curriculum
        epoch_batches = partial(curriculum_batches, lengths, t.max_tokens, t.seed, t.curriculum)
        self.plan = UpdatePlan(self.train_pairs, epoch_batches, world * t.accumulate, rank, world)

    def _build_model(self) -> None:
        """The model, its loss (in DDP under torchrun), Adam and the learning rate's owner, the
        fp16 scaler, and the translator that validations decode with."""
        cfg, t = self.cfg, self.cfg.train
        # a model whose weights, gradients and Adam's moments would not fit is refused now, in one line
        copies = 4 + (t.ema > 0)  # weights, gradients, Adam's two moments, the average
        vocabs = self.src_tok.vocab_size, self.tgt_tok.vocab_size
        check_model(cfg.model, *vocabs, copies, free_memory(self.device))
        torch.manual_seed(cfg.train.seed)
        self.model: Seq2Seq = build_model(cfg.model, *vocabs)
        self.model.to(self.device)
        if self.ranks.rank:  # the same initial weights everywhere, but each rank its own dropout
            torch.manual_seed(cfg.train.seed + self.ranks.rank)
        self.loss_module = distributed.wrap(self.model, self.device)  # in DDP under torchrun
        # train.ema: the weights' moving average, which validations decode and checkpoints keep as the model
        self.ema = moving_average(self.model, t.ema)  # None when off
        self.compiled = resolve_compile(self.device, t.compile)
        if self.compiled:  # shapes vary from batch to batch: compiled once for dynamic shapes
            decoder = self.model.decoder
            if hasattr(decoder, "compile_steps") and (t.stepwise or not decoder.parallel):
                decoder.compile_steps()  # a decoder that steps: its one step, run T times
            else:  # the whole loss, in one graph
                self.loss_module = torch.compile(self.loss_module, dynamic=True)
        self.rank_rng: list[dict[str, torch.Tensor]] = []  # torchrun: every rank's RNG, for an exact resume
        # fused: one kernel updates every parameter, not a few operators each (None: torch's choice)
        fused = True if t.fused_adam else None
        self.optimizer = torch.optim.Adam(parameter_groups(self.model, t), lr=cfg.train.lr, fused=fused)
        self.lr = LearningRate(self.optimizer, t)  # the rate's one owner
        # fp16 gradients can underflow: scale the loss up, and the gradients back (a no-op otherwise)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.translator = TextTranslator(  # validations decode in the precision training runs in
            self.weights,
            self.src_tok,
            self.tgt_tok,
            cfg.decode,
            cfg,
            device=self.device,
            precision=self.precision,
        )

    # -- the loop ----------------------------------------------------------------

    def train(self) -> Progress:
        """Train until a stopping rule fires; returns the final progress."""
        cfg, p = self.cfg.train, self.progress
        clock, window = time.perf_counter() - p.seconds, Window()  # training time goes on across resumes
        self._line_at = p.seconds + progress.LINE_EVERY  # the next progress line, where no bar shows
        with stop_signals() as signals, self._bar() as bar, closing(self.run):
            updates = iter(self.plan)
            reason = stop_reason(cfg, p)  # a resumed run may already be at its limits
            if cfg.probe_every and p.step == 0:
                self._probe()  # attention at initialisation
            compiling = self.compiled  # the first update of a compiled loss compiles it, on the clock
            while not reason:
                start = time.perf_counter()
                batches = next(updates)
                self.lr.before_update(p.step + 1, p.seconds)  # warm-up and the schedule's shape
                loss = self.train_step(*batches)
                window.add(loss, batches, time.perf_counter() - start)
                if compiling:
                    self._compiled_in(time.perf_counter() - start)
                    compiling = False
                self._advance(clock, bar)
                if p.step % cfg.log_every == 0:
                    window = self._log_train(window, bar)
                if cfg.probe_every and p.step % cfg.probe_every == 0:
                    self._probe()
                if (reason := stop_reason(cfg, p)) or valid_due(cfg, p):
                    self.validate()
                    reason = stop_reason(cfg, p)  # early stopping counts this validation
                if not reason and self.ranks.any(signals):
                    self._stop_for(signals)
            p.done = True
            logger.info("stopped at step %d: %s", p.step, reason)
        self.ranks.barrier()  # no rank returns before rank 0 has written the last checkpoint
        return p

    def _compiled_in(self, seconds: float) -> None:
        """Log the first update's seconds under train.compile (torch.compile builds its kernels
        then, inside the training clock), once per process."""
        if self.ranks.main:
            logger.info("train.compile: the first update took %.1f s (compiling, on the clock)", seconds)
        self._metrics(kind="compile", first_update_seconds=round(seconds, 2))

    def _advance(self, clock: float, bar: tqdm) -> None:
        """One update done: the step, the data position and rank 0's clock (the same on every rank)."""
        p = self.progress
        p.step, p.epoch, p.batch = p.step + 1, self.plan.epoch, self.plan.batch
        (p.seconds,) = self.ranks.from_main(lambda: [time.perf_counter() - clock], 1)
        bar.update()

    def _stop_for(self, signals: list[str]) -> None:
        """SIGINT / SIGTERM: stop between updates, with a checkpoint; --resume continues."""
        if self.ranks.main:
            step, where = self.progress.step, self.run.last
            name = signals[0] if signals else "a signal"  # another rank's
            logger.warning("%s at step %d: saving %s and stopping; --resume continues", name, step, where)
        self.save("last")
        raise KeyboardInterrupt

    def train_step(self, *batches: Batch) -> float:
        """One update from this rank's batches: loss, backward, clip, step. Returns their summed loss.

        The gradient is that of the mean loss per target token over the global
        batch (every rank's batches): each rank divides its summed loss by the
        global token count over N, and DDP averages the N ranks' gradients.
        """
        self.loss_module.train()
        t = self.cfg.train
        terms = LossTerms.at(t, self.progress.step)  # guided alignment, coverage, scheduled sampling now
        self.optimizer.zero_grad(set_to_none=True)
        (tokens,) = self.ranks.sum([sum(b.n_tokens for b in batches)])
        per_rank = tokens / self.ranks.world  # mean over tokens: steps do not depend on batch shape
        total = 0.0
        for i, batch in enumerate(batches):
            batch = batch.to(self.device)
            # DDP averages the gradients once, in the backward of the last batch
            with distributed.no_sync(self.loss_module, i == len(batches) - 1):
                with autocast(self.device, self.precision):
                    loss = self.loss_module(batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, terms)
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
        finite = bool(torch.isfinite(norm)) and (self.ranks.world > 1 or math.isfinite(total))
        if not finite and self.precision != "fp16":
            self.optimizer.zero_grad(set_to_none=True)
            self._nonfinite(total, float(norm))
            return math.nan
        self.scaler.step(self.optimizer)  # skips the step if fp16 gradients overflowed
        self.scaler.update()
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        return total

    @property
    def weights(self) -> Seq2Seq:
        """The model that validations decode and checkpoints keep: the trained one, or with
        train.ema its moving average."""
        return self.model if self.ema is None else self.ema.module

    def _nonfinite(self, loss: float, norm: float) -> None:
        """train.nonfinite: skip the update and count it, or stop with the last good checkpoint intact."""
        p, what = self.progress, f"loss {loss:g}, gradient norm {norm:g}"
        if self.cfg.train.nonfinite == "stop":
            raise NonFiniteLoss(
                f"update {p.step + 1} is not finite ({what}); stopped, as train.nonfinite is 'stop'; "
                f"{self.run.last} holds the last good checkpoint"
            )
        p.skipped += 1
        if self.ranks.main:
            warning = "update %d is not finite (%s): skipped, %d so far (train.nonfinite: skip)"
            logger.warning(warning, p.step + 1, what, p.skipped)

    # -- logging -----------------------------------------------------------------

    def _bar(self) -> tqdm:
        """The progress bar (rank 0's), after a word on what trains where."""
        cfg, n = self.cfg.train, count_parameters(self.model)
        logger.info("model: %.2fM parameters; %d training pairs", n / 1e6, len(self.train_pairs))
        logger.info(describe(self.device, self.precision))
        written = LossTerms.at(cfg, self.progress.step).written and self.precision == "fp32"
        rnn = getattr(self.model.encoder, "rnn", None)
        parts = [
            part
            for part, covered in (
                ("the decoder's steps", bptt.covers(self.model.decoder)),
                (f"the encoder's {type(rnn).__name__}", bptt.reads(rnn)),  # GRU or LSTM
            )
            if covered
        ]
        if written and parts:
            logger.info(
                "backward written out for %s (model/bptt.py; train.bptt: autograd for autograd)",
                " and ".join(parts),
            )
        if written and isinstance(rnn, nn.LSTM) and bptt.reads(rnn):
            logger.info(
                "the encoder's LSTM each way on the padded batch where %d%% of it is real tokens "
                "(model/encoder.py: torch's fused LSTM)",
                round(EACH_WAY_FILL * 100),
            )
        if self.ema is not None:
            logger.info(
                "validations and checkpoints use the weights' moving average (train.ema %g: about the "
                "last %d updates)",
                cfg.ema,
                round(1 / (1 - cfg.ema)),
            )
        if self.ranks.world > 1 or cfg.accumulate > 1:
            logger.info("%d process(es) x %d batch(es) per update", self.ranks.world, cfg.accumulate)
        steps, disable = cfg.max_steps or None, None if self.ranks.main else True
        return tqdm(total=steps, initial=self.progress.step, unit="step", dynamic_ncols=True, disable=disable)

    def _log_train(self, window: Window, bar: tqdm) -> Window:
        """Loss per token and tokens per second of updates since the last line, over all ranks;
        returns an empty window for the next line."""
        loss_sum, tokens = self.ranks.sum([window.loss, window.tokens])
        loss, tok_s = loss_sum / max(tokens, 1), tokens / max(window.seconds, 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tok_s:,.0f}", epoch=self.progress.epoch)
        t, lr = self.cfg.train, self.lr.now
        extra = {}
        if t.teacher_forcing < 1:  # scheduled sampling's eps_i (a decay needs a floor below 1)
            extra["teacher_forcing"] = LossTerms.at(t, self.progress.step).teacher_forcing
        ppl = math.exp(min(loss, 50))
        self._metrics(kind="train", loss=loss, ppl=ppl, tokens_per_s=tok_s, lr=lr, **extra)
        if bar.disable and self.ranks.main and self.progress.seconds >= self._line_at:  # no bar: a line
            logger.info(progress_line(self.cfg.train, self.progress, loss, tok_s))
            self._line_at = self.progress.seconds + progress.LINE_EVERY
        return Window()

    def _probe(self) -> None:
        """A `probe` record between validations: how the model attends now (diagnostics.probe).
        Rank 0 alone, on its own copy of the weights: no other rank waits on it."""
        if not self.ranks.main:
            return
        if stats := probe(self.model, self.valid_data.pairs[: self.cfg.train.probe], self.device):
            self._metrics(kind="probe", **stats)

    def _metrics(self, **record: Any) -> None:
        p = self.progress
        self.run.log({"step": p.step, "epoch": p.epoch, "seconds": round(p.seconds, 2), **record})

    # -- validation and checkpoints ---------------------------------------------

    def validate(self) -> None:
        """Validation loss and greedy BLEU (rank 0's, on every rank); the learning-rate schedule,
        the best BLEU and early stopping; metrics and checkpoints."""
        self.rank_rng = self.ranks.gather_rng(self.device)
        self.progress.validated_at = self.progress.seconds  # train.valid_minutes counts from here
        loss, bleu, chrf, seconds = self.ranks.from_main(self._evaluate, 4)
        improved = self._track(bleu)
        ppl = math.exp(min(loss, 50))
        alpha = probe(self.weights, self.valid_data.pairs[: self.cfg.train.probe], self.device)  # diagnostics
        if alpha:
            shown = alpha["alpha_entropy"], alpha["alpha_diagonal"], alpha["score_spread"]
            logger.info(
                "attention: entropy %.3f of uniform, %.3f on the diagonal; scores' spread %.2f", *shown
            )
        self._metrics(
            kind="valid", loss=loss, ppl=ppl, bleu=bleu, chrf=chrf, seconds_taken=round(seconds, 2), **alpha
        )
        if improved:
            self.save("best")
        self.save("last")
        if self.cfg.train.keep_checkpoints:  # weights only, for averaging
            weights = {"model": self.weights.state_dict(), "config": self.cfg.to_dict()}
            self.run.keep(self.progress.step, weights, self.cfg.train.keep_checkpoints)
        if self.on_validation is not None and self.ranks.main:  # after last.pt: a trial stopped here resumes
            p = self.progress
            self.on_validation({"step": p.step, "minutes": p.seconds / 60, "bleu": bleu, "loss": loss})

    def _evaluate(self) -> list[float]:
        """Loss, BLEU, chrF and the seconds they took on the validation set, logged with samples."""
        start, data = time.perf_counter(), self.valid_data
        loss = validation_loss(self.weights, data.pairs, self.cfg.train.max_tokens, self.device)
        hyps = [t.text for t in self.translator.translate(data.src, beam=1)]
        s = score(hyps, data.tgt, self.cfg.data.tgt_lang)
        best = "  (best)" if s.bleu > self.progress.best_bleu else ""
        lines = [
            f"validation at step {self.progress.step}: loss {loss:.3f}  ppl {math.exp(min(loss, 50)):.2f}  "
            f"BLEU {s.bleu:.2f}  chrF {s.chrf:.2f}{best}"
        ]
        for i in range(min(self.cfg.train.valid_sample, len(hyps))):
            lines += [f"  src: {data.src[i]}", f"  ref: {data.tgt[i]}", f"  hyp: {hyps[i]}"]
        logger.info("\n".join(lines))
        return [loss, s.bleu, s.chrf, time.perf_counter() - start]

    def _track(self, bleu: float) -> bool:
        """The learning-rate schedule, best BLEU and early stopping; True if `bleu` is the best yet."""
        p = self.progress
        self.lr.after_validation(p.step, bleu)
        if bleu > p.best_bleu:
            p.best_bleu, p.bad_validations = bleu, 0
            return True
        p.bad_validations += 1
        return False

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint holds: plain containers and tensors only. With train.ema,
        "model" is the average (what translation loads) and "trained" the weights training goes on from."""
        average = (
            {}
            if self.ema is None
            else {"trained": self.model.state_dict(), "ema_updates": self.ema.n_averaged.item()}
        )
        return {
            "model": self.weights.state_dict(),
            **average,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.lr.state_dict(),
            "progress": asdict(self.progress),
            **self.ranks.rng_state(self.device, self.rank_rng),
            "scaler": self.scaler.state_dict(),
            "config": self.cfg.to_dict(),
        }

    def save(self, name: str) -> None:
        """best.pt or last.pt (rank 0 writes); the last.pt before is kept as prev.pt."""
        self.run.save(name, self.state())

    def _restore(self, state: dict[str, Any], saved: Config) -> None:
        cfg = self.cfg.train
        self.model.load_state_dict(state.get("trained", state["model"]))
        if self.ema is not None and "trained" in state:  # else the average starts from these weights
            self.ema.module.load_state_dict(state["model"])
            self.ema.n_averaged.fill_(state["ema_updates"])
        groups = len(state["optimizer"]["param_groups"])
        if groups != len(self.optimizer.param_groups):  # a run from before the attention had its own rate
            raise CheckpointError(
                f"{self.run.last}: its optimiser has {groups} parameter group(s), this model "
                f"{len(self.optimizer.param_groups)}: the score's own parameters now learn at their own "
                f"rate; resume with --set train.attention_lr=1 to train it as it was"
            )
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr.load_state_dict(state["scheduler"], saved.train.lr)
        self.progress = Progress(**{**state["progress"], "done": False})  # a larger budget goes on
        self.plan.epoch, self.plan.batch = self.progress.epoch, self.progress.batch
        self.ranks.restore_rng(state, self.device, cfg.seed)
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        p = self.progress
        logger.info("resumed from step %d (epoch %d, batch %d)", p.step, p.epoch, p.batch)


def train(cfg: Config, resume: bool = False, accept_changes: bool = False) -> Path:
    """Train a model as `cfg` says (on every rank, under torchrun); returns the run directory."""
    try:
        Trainer(cfg, resume, accept_changes).train()
    finally:
        distributed.cleanup()
    return Path(cfg.train.run_dir)
