"""One lookback measurement in a fresh process, so that its peak memory is its own.

    python -m bench.lookback_run train|translate SPEC.json RESULT.json

`train` resumes a copy of the step-0 seed run through lookback's `Trainer`,
gives the trainer's `UpdatePlan` the shared batches (bench/common.py) in
place of its own, and drives `Trainer.train_step` over them for the
training budget, validating (greedy BLEU on the validation set, its time
left out of the budget) every `validate_every_s` seconds of training, then
saves last.pt. `Trainer.train` is not used: it batches by tokens with
length bucketing, which Joey NMT cannot reproduce, and it validates on its
own schedule; the benchmark wants the same batches and the same
validations on both sides. `translate` loads that run with
`Translator.load` and translates the test set, greedy and beam 5.
The result file is written even when the measurement fails (with "error").

The same script measures the "recipe" system (`python -m bench headline --recipe`)
when the spec names it: there the trainer keeps its own batches (max_tokens,
length bucketing) and its learning-rate schedule (warm-up, then the
schedule, with plateau stepped at the bench's validations), as `lookback
train` with that config file would, on the bench's clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import settings
from .common import (
    epoch_batches,
    matmul_flops_per_token,
    read_json,
    read_lines,
    run_measurement,
    timed_training,
    timed_translation,
)


def _device(spec: dict[str, Any]):
    import torch

    device = torch.device(spec["device"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    return device


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(spec: dict[str, Any]) -> dict[str, Any]:
    from lookback.config import from_dict
    from lookback.model.seq2seq import count_parameters
    from lookback.training.schedule import set_lr
    from lookback.training.train import Trainer

    recipe = spec.get("recipe")  # the recipe system: its own batches and schedule
    run_dir = Path(spec["out_dir"]) / spec.get("system", "lookback")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.copytree(spec["lookback_seed"], run_dir)
    raw = settings.lookback_config(
        spec["config"], str(run_dir), spec["data_dir"], spec["lookback_overrides"], recipe
    )
    # the step-0 weights of the seed, which learnt its tokenizer on all of train: data.train differs
    trainer = Trainer(from_dict(raw, source="bench"), resume=True, accept_changes=True)
    device = _device(spec)
    trainer.model.to(device)  # the optimiser holds the same tensors
    n = len(trainer.plan.pairs)
    if recipe:
        plan = trainer.plan
    else:
        plan = dataclasses.replace(
            trainer.plan,
            epoch_batches=lambda epoch: epoch_batches(n, spec["batch_sentences"], spec["seed"], epoch),
        )
    t, progress = trainer.cfg.train, trainer.progress

    def step(batches) -> int:
        start = time.perf_counter()
        if recipe:  # warm-up and the schedule's shape, on the clock of updates alone
            set_lr(trainer.optimizer, t, progress.step + 1, progress.seconds)
        trainer.train_step(*batches)  # returns the loss as a float: the update is done
        progress.step += 1
        progress.seconds += time.perf_counter() - start
        return sum(b.n_tokens for b in batches)

    data = Path(spec["data_dir"])
    src = read_lines(data / f"{spec['valid']}.{settings.SRC_LANG}")
    refs = read_lines(data / f"{spec['valid']}.{settings.TGT_LANG}")

    def validate() -> float:  # greedy BLEU on the validation set, as Joey's side
        import sacrebleu

        out = trainer.translator.translate(src, beam=1, length_penalty=spec["length_penalty"])
        bleu = sacrebleu.corpus_bleu([x.text for x in out], [refs]).score
        if recipe and t.schedule == "plateau" and progress.step > t.warmup:
            trainer.scheduler.step(bleu)  # as Trainer.validate does
        return bleu

    figures = timed_training(
        iter(plan),
        step,
        lambda batches: sum(b.src.size(0) for b in batches),
        spec["budget_s"],
        spec["warmup_steps"],
        spec["max_steps"],
        validate,
        spec["validate_every_s"],
    )
    figures["epochs"] = plan.epoch + plan.batch / len(plan.epoch_batches(plan.epoch))
    figures["train_pairs"] = n
    figures["parameters"] = count_parameters(trainer.model)
    figures["peak_cuda_allocated_bytes"] = _cuda_peak(device)
    trainer.save("last")
    figures["flops_per_target_token"] = matmul_flops_per_token(step, itertools.islice(iter(plan), 5))
    return figures


def _cuda_peak(device) -> int | None:
    import torch

    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def translate(spec: dict[str, Any]) -> dict[str, Any]:
    """The test set, greedy and beam 5. bench.decoding's specs add `model_dir` (an export),
    `backend`, `quantize`, `tag` (in the hypothesis files' names), `hyp_dir` and, for ONNX
    Runtime, `top_in_graph` (False: the n best tokens picked in PyTorch, not in the graph), and
    `precision` (fp32: the reference, also on a CPU where auto would pick bf16)."""
    from lookback.translator import Translator

    device = _device(spec)
    system = spec.get("system", "lookback")
    model_dir = spec.get("model_dir") or Path(spec["out_dir"]) / system
    translator = Translator.load(
        model_dir,
        "best" if spec.get("model_dir") else "last",
        device=device,
        backend=spec.get("backend", "torch"),
        quantize=spec.get("quantize"),
        threads=spec["threads"],
        precision=spec.get("precision"),  # None: decode.precision (auto: bf16 where the CPU runs it natively)
    )
    translator.decode.batch_size = spec["decode_batch_size"]
    if spec.get("top_in_graph") is False:  # bench.decoding's ablation: the n best tokens picked in PyTorch
        translator.model.decoder.top_in_graph = False
    data = Path(spec["data_dir"])
    src = read_lines(data / f"{spec['test']}.{settings.SRC_LANG}")
    refs = read_lines(data / f"{spec['test']}.{settings.TGT_LANG}")
    warm = read_lines(data / f"warmup.{settings.SRC_LANG}")
    translator.translate(warm, beam=1)  # first calls allocate and pick kernels: not timed
    figures: dict[str, Any] = {"sentences": len(src)}
    hyp_dir = Path(spec.get("hyp_dir") or spec["out_dir"])
    for beam in spec["beams"]:

        def run(beam=beam):
            out = [
                t.text for t in translator.translate(src, beam=beam, length_penalty=spec["length_penalty"])
            ]
            _sync(device)
            return out

        out = hyp_dir / f"{system}{spec.get('tag', '')}.beam{beam}.txt"
        figures[f"beam{beam}"] = timed_translation(run, refs, out)
    figures["peak_cuda_allocated_bytes"] = _cuda_peak(device)
    return figures


TASKS = {"train": train, "translate": translate}


def main(argv: list[str]) -> int:
    return run_measurement(read_json(argv[1]).get("system", "lookback"), TASKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
