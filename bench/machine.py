"""python -m bench machine: how much of the CPU lookback's training and decoding use, and where the rest goes.

    python -m bench machine -o results/bench/machine.json [--config configs/quickstart.yaml]
        [--run runs/quickstart] [--updates 30] [--sentences 200] [--threads 2]
    python -m bench machine -o OUT.json --like-for-like WORK   # the headline's like-for-like model

1. **The machine's limit.** torch's fp32 matrix product (`torch.mm`) on square matrices of 512,
   1,024 and 2,048: the best GFLOP/s is the machine's fp32 peak as PyTorch reaches it. Where
   the CPU has VNNI (avx512_vnni, avx_vnni), int8 too: `torch._int_mm` (int32 sums) and a
   dynamically quantised `nn.Linear` (what `--quantize int8` decodes with).
2. **Training.** The config's model and batches, trained by `lookback train`'s own update
   (`Trainer.train_step`: loss, backward, clipping, Adam) in fp32: target tokens/s over
   `--updates` updates after 3 untimed ones; the FLOPs of the matrix products of the same
   updates, counted by `torch.utils.flop_counter` (2 per multiply-add; elementwise work is
   not counted); achieved GFLOP/s = FLOPs per target token x tokens/s, as a fraction of the
   fp32 peak; per update, its seconds and what its matrix products alone would take at the
   peak. `--like-for-like WORK` trains the headline's like-for-like model instead (Joey NMT's
   architecture with input feeding, `python -m bench headline --configs feed`, its data
   prepared in WORK from $LOOKBACK_MULTI30K): a decoder that steps one target position at a
   time, where the main job's runs all positions at once. `--headline-batches` gives it the
   headline's batches too (80 random pairs each, unsorted, half of their target positions
   padding), where by default it batches as lookback does (by length, little padding).
3. **Decoding.** The run's best weights (`--run`, the main job's run by default; left out when
   it does not exist) translate the first `--sentences` validation sentences, greedy and beam
   5, batch 64, in fp32: sentences/s, FLOPs counted on the same call, the fraction of peak.
4. **Where the rest goes.** `torch.profiler` over a few more updates and one decoding call:
   each operator's own time (self time) in categories; matrix products also by size (FLOPs
   a call), with the GFLOP/s each size reaches; "Python and the rest" is the wall clock minus
   every operator's self time (the interpreter, the autograd engine's bookkeeping, the profiler's own cost).
   Then each profiled matrix product again, alone, at its own shapes (`products_alone`): the
   seconds those updates would take if they were nothing but their products, the ceiling for
   this model's GEMMs at these sizes, and the share of it the unprofiled updates reach.

Run it on an otherwise idle machine, one process at a time. Every result records the CPU's
model and flags, torch's version and the environment variables that cap the kernels
(`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2` keeps an AVX-512 CPU to AVX2's kernels).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from .common import (
    counted_flops,
    cpu_flags,
    cpu_kernels,
    cpu_model,
    matmul_flops_per_token,
    median_call_seconds,
    shown,
    write_json,
)

CONFIG = "configs/quickstart.yaml"
RUN = "runs/quickstart"
SIZES = (512, 1024, 2048)
CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
VNNI = ("avx512_vnni", "avx_vnni", "amx_int8")

# -- 1. the machine's limit -------------------------------------------------------------------


def rate(run: Callable[[], Any], ops: float, repeats: int = 10, rounds: int = 3) -> float:
    """G(FL)OP/s of `run`, which does `ops` operations: the median of `rounds` timings of
    `repeats` calls, after 2 untimed calls."""
    return ops / median_call_seconds(run, repeats, rounds, warmup=2) / 1e9


def gemm_peak(sizes: Iterable[int] = SIZES, int8: bool = False) -> dict[str, Any]:
    """The fp32 product's GFLOP/s on n x n matrices for each n, their best as `peak`; with
    `int8`, also int8 x int8 -> int32 (`torch._int_mm`) and a dynamically quantised Linear."""
    from lookback.runtime.fast import quantize_torch

    fp32 = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        fp32[n] = rate(lambda a=a, b=b: torch.mm(a, b), 2 * n**3)
    out: dict[str, Any] = {
        "fp32_gflops": {str(n): round(g, 1) for n, g in fp32.items()},
        "fp32_peak_gflops": round(max(fp32.values()), 1),
    }
    if int8:
        int_mm, linear = {}, {}
        for n in sizes:
            a = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            b = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            int_mm[n] = rate(lambda a=a, b=b: torch._int_mm(a, b), 2 * n**3)
            layer = quantize_torch(torch.nn.Sequential(torch.nn.Linear(n, n, bias=False)))
            x = torch.randn(n, n)
            linear[n] = rate(lambda layer=layer, x=x: layer(x), 2 * n**3)
        out["int8_int_mm_gops"] = {str(n): round(g, 1) for n, g in int_mm.items()}
        out["int8_dynamic_linear_gops"] = {str(n): round(g, 1) for n, g in linear.items()}
        out["int8_peak_gops"] = round(max(*int_mm.values(), *linear.values()), 1)
    return out


# -- 2, 3. achieved FLOP/s ---------------------------------------------------------------------


def trainer_for(config: str, run_dir: Path, threads: int, sets: list[str]):
    """lookback's Trainer for `config` in fp32, writing into `run_dir` (a temporary folder)."""
    from lookback.config import load_config
    from lookback.training.train import Trainer

    fixed = [f"train.run_dir={run_dir}", "train.precision=fp32", f"train.threads={threads}"]
    return Trainer(load_config(config, [*sets, *fixed]))


def training(trainer, updates: int) -> dict[str, Any]:
    """Target tokens/s over `updates` updates after 3 untimed ones, and the FLOPs of the same
    batches (counted on a second pass over them: the counter slows what it counts)."""
    plan = iter(trainer.plan)
    for _ in range(3):
        trainer.train_step(*next(plan))
    batches = [next(plan) for _ in range(updates)]
    tokens = sum(b.n_tokens for bs in batches for b in bs)
    start = time.perf_counter()
    for bs in batches:
        trainer.train_step(*bs)
    seconds = time.perf_counter() - start

    def step(bs) -> int:
        trainer.train_step(*bs)
        return sum(b.n_tokens for b in bs)

    per_token = matmul_flops_per_token(step, batches)
    positions = sum(b.tgt_out.shape[1] for bs in batches for b in bs)  # decoder steps, padded
    return {
        "updates": updates,
        "target_tokens": tokens,
        "seconds": round(seconds, 3),
        "seconds_per_update": round(seconds / updates, 4),
        "decoder_steps_per_update": round(positions / updates, 1),
        "target_tokens_per_s": round(tokens / seconds, 1),
        "flops_per_target_token": round(per_token),
        "achieved_gflops": round(per_token * tokens / seconds / 1e9, 4),
    }


def decoding(translator, sentences: list[str], beam: int) -> dict[str, Any]:
    """Sentences/s of one call that translates `sentences` (after an untimed warm-up on 16 of
    them), and the FLOPs of the same call."""
    translator.translate(sentences[:16], beam=beam)
    start = time.perf_counter()
    out = translator.translate(sentences, beam=beam)
    seconds = time.perf_counter() - start
    again, flops = counted_flops(lambda: translator.translate(sentences, beam=beam))
    assert [t.text for t in again] == [t.text for t in out], "decoding is not deterministic"
    words = sum(len(t.tokens) for t in out)
    return {
        "beam": beam,
        "sentences": len(sentences),
        "output_tokens": words,
        "seconds": round(seconds, 3),
        "sentences_per_s": round(len(sentences) / seconds, 2),
        "flops_per_sentence": round(flops / len(sentences)),
        "achieved_gflops": round(flops / seconds / 1e9, 4),
    }


# -- 4. where the rest goes --------------------------------------------------------------------

REPLAY = {  # each matrix product the profile names, and the call that makes it again (products_alone)
    "aten::mm": torch.mm,
    "aten::addmm": torch.addmm,
    "aten::bmm": torch.bmm,
    "aten::baddbmm": torch.baddbmm,
    "aten::addmv": torch.addmv,
    "aten::addmv_": torch.addmv,
    "aten::mv": torch.mv,
}
PRODUCTS = set(REPLAY)
COPIES = ("copy", "cat", "stack", "index", "gather", "scatter", "embedding", "clone", "contiguous", "select")
VIEWS = ("slice", "view", "reshape", "transpose", "permute", "expand", "narrow", "split", "unbind", "squeeze")
ALLOCATION = {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::resize_"}


def category(name: str) -> str:
    """The category of an operator other than a matrix product, by its name."""
    low = name.lower()
    if any(k in low for k in ("gru", "lstm", "rnn_")):
        return "recurrence (the RNN cells' own work)"
    if any(k in name for k in ("softmax", "nll_loss", "cross_entropy")):
        return "softmax and the loss"
    if "layer_norm" in name:
        return "layer norm"
    if "_foreach_" in name or "norm" in name:
        return "gradient norms (clipping) and foreach ops"
    if name in ALLOCATION:
        return "allocation"
    if "Backward" in name or name.startswith("autograd::") or "accumulate" in low:
        return "autograd bookkeeping"
    if any(k in name for k in COPIES + VIEWS):
        return "copies, views and indexing"
    return "elementwise" if name.startswith("aten::") else "other operators"


HEAVIEST = 20  # operators the profile lists one by one, heaviest first
BINS = (1e6, 1e7, 1e8, 1e9)  # FLOPs a call: under 1 MFLOP, 1-10, 10-100, 100-1,000, 1 GFLOP and more


def product_flops(name: str, shapes: list[list[int]]) -> int:
    """2 x the multiply-adds of one call of a matrix product, from its inputs' shapes."""
    mats = [s for s in shapes if len(s) in (2, 3)]
    if name in ("aten::addmm", "aten::baddbmm"):
        mats = mats[-2:]  # the bias or accumulator comes first
    if name in ("aten::mv", "aten::addmv", "aten::addmv_"):
        (m, k) = [s for s in shapes if len(s) == 2][-1]
        return 2 * m * k
    if len(mats) < 2:
        return 0
    a, b = mats[-2], mats[-1]
    batch = a[0] if len(a) == 3 else 1
    return 2 * batch * a[-2] * a[-1] * b[-1]


def size_bin(flops: float) -> str:
    names = ["under 1 MFLOP", "1-10 MFLOP", "10-100 MFLOP", "100 MFLOP-1 GFLOP", "1 GFLOP and more"]
    return names[sum(flops >= edge for edge in BINS)]


def categorise(
    events: Iterable[tuple[str, float, int, list[list[int]]]], wall_us: float, optimizer_us: float = 0.0
) -> dict[str, Any]:
    """Self time by category from (operator, self microseconds, calls, input shapes) rows, as
    shares of the wall clock; matrix products also by size, each with the GFLOP/s it reached.
    `optimizer_us`: the optimiser's step with all its operators (on a CPU, Adam runs one
    elementwise operator after another per parameter: they are in "elementwise" too)."""
    seconds: dict[str, float] = {}
    products: dict[str, dict[str, Any]] = {}
    operators: dict[str, dict[str, Any]] = {}  # by name: self seconds, calls, its heaviest shapes
    for name, self_us, calls, shapes in events:
        sec, shown = self_us / 1e6, [s for s in shapes if s]
        op = operators.setdefault(name, {"seconds": 0.0, "calls": 0, "top": (-1.0, shown)})
        op["seconds"], op["calls"] = op["seconds"] + sec, op["calls"] + calls
        op["top"] = max(op["top"], (sec, shown), key=lambda x: x[0])
        if name in PRODUCTS:
            key = "matrix products"
            each = product_flops(name, shapes)
            b = products.setdefault(size_bin(each), {"calls": 0, "seconds": 0.0, "flops": 0.0, "rows": []})
            b["calls"] += calls
            b["seconds"] += sec
            b["flops"] += each * calls
            b["rows"].append((sec, name, shown, calls, each))
        else:
            key = category(name)
        seconds[key] = seconds.get(key, 0.0) + sec
    wall = wall_us / 1e6
    seconds["Python and the rest"] = max(0.0, wall - sum(seconds.values()))
    order = sorted(seconds, key=seconds.get, reverse=True)
    gflops = lambda flops, sec: round(flops / sec / 1e9, 1) if sec else None  # noqa: E731
    by_size = {
        name: {
            "calls": int(b["calls"]),
            "share": round(b["seconds"] / wall, 4),
            "gflops": gflops(b["flops"], b["seconds"]),
            "heaviest": [  # which products these are: the shapes that took the most time
                {
                    "operator": op,
                    "input_shapes": shown,
                    "calls": calls,
                    "share": round(sec / wall, 4),
                    "gflops": gflops(each * calls, sec),
                }
                for sec, op, shown, calls, each in sorted(b["rows"], key=lambda r: r[0], reverse=True)[:3]
            ],
        }
        for name, b in sorted(products.items(), key=lambda kv: kv[1]["flops"] / max(kv[1]["calls"], 1))
    }
    heaviest = [  # the operators that took the most self time, all their shapes together
        {
            "operator": name,
            "calls": op["calls"],
            "share": round(op["seconds"] / wall, 4),
            "heaviest_shapes": op["top"][1],
        }
        for name, op in sorted(operators.items(), key=lambda kv: kv[1]["seconds"], reverse=True)[:HEAVIEST]
    ]
    return {
        "wall_seconds": round(wall, 3),
        "operator_calls": int(sum(op["calls"] for op in operators.values())),
        "shares": {k: round(seconds[k] / wall, 4) for k in order},
        "optimizer_step_share": round(optimizer_us / 1e6 / wall, 4),  # inclusive; overlaps the shares
        "matrix_products_by_size": by_size,
        "heaviest": heaviest,
    }


def product_call(name: str, shapes: list[list[int]]) -> Callable[[], Any] | None:
    """One call of the matrix product `name` on random fp32 operands of the profiled `shapes`
    (contiguous: the profile records no strides); None where the shapes do not say enough."""
    op = REPLAY.get(name)
    wanted = 3 if name.startswith(("aten::add", "aten::badd")) else 2  # the bias or accumulator first
    if op is None or len([s for s in shapes if s]) != wanted:
        return None
    mats = [torch.randn(*s) for s in shapes if s]
    return lambda: op(*mats)


def products_alone(rows: Iterable[tuple[str, float, int, list[list[int]]]]) -> float:
    """Seconds the profiled matrix products take on their own, one shape after another in a
    tight loop (operands in cache, no other work between them): each distinct (product, shapes)
    timed, times its calls. The ceiling an update made of these products allows at these sizes."""
    total = 0.0
    for name, _self_us, calls, shapes in rows:
        call = product_call(name, shapes)
        if call is not None:
            total += calls * median_call_seconds(call, 3, 3, warmup=1)
    return total


def profiled(run: Callable[[], Any], replay: bool = False) -> dict[str, Any]:
    """`run()` under torch.profiler, its operators' self times in categories; with `replay`,
    also the seconds its matrix products take alone (`products_alone`)."""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    wall_us = (time.perf_counter() - start) * 1e6
    averages = prof.key_averages(group_by_input_shape=True)
    rows = [(e.key, e.self_cpu_time_total, e.count, list(e.input_shapes or [])) for e in averages]
    # torch.optim labels each step "Optimizer.step#Adam.step": its whole time, operators included
    optimizer_us = sum(e.cpu_time_total for e in averages if e.key.startswith("Optimizer.step#"))
    out = categorise(rows, wall_us, optimizer_us)
    if replay:
        out["products_alone_seconds"] = round(products_alone(rows), 4)
    return out


# -- the command ---------------------------------------------------------------------------------


def fraction(achieved: float, peak: float) -> float:
    return round(achieved / peak, 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench machine", description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", type=Path, required=True, help="results JSON")
    ap.add_argument("--config", default=CONFIG, help=f"the training config (default {CONFIG})")
    ap.add_argument(
        "--like-for-like",
        type=Path,
        metavar="WORK",
        help="train the headline's like-for-like model (Joey's, input feeding) on data prepared in WORK",
    )
    ap.add_argument(
        "--headline-batches",
        action="store_true",
        help="with --like-for-like: the headline's batches too (80 random pairs), not lookback's by length",
    )
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key (repeatable)")  # fmt: skip
    ap.add_argument("--run", default=RUN, help=f"a trained run to decode with (default {RUN})")
    ap.add_argument("--updates", type=int, default=30, help="timed training updates (default 30)")
    ap.add_argument("--sentences", type=int, default=200, help="validation sentences to decode (default 200)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="square GEMM sizes")
    args = ap.parse_args(argv)
    if args.headline_batches and not args.like_for_like:
        ap.error("--headline-batches goes with --like-for-like WORK")
    for name, value in (("--updates", args.updates), ("--sentences", args.sentences)):
        if value < 1:
            ap.error(f"{name} must be at least 1, not {value}")
    if args.threads:
        torch.set_num_threads(args.threads)
    flags = cpu_flags()
    say = lambda text: print(text, file=sys.stderr)  # noqa: E731
    threads = f"{torch.get_num_threads()} threads, {cpu_kernels()} kernels"
    say(f"cpu: {cpu_model()}, {threads}; flags: {', '.join(flags)}")
    peak = gemm_peak(args.sizes, int8=any(f in flags for f in VNNI))
    say(f"fp32 GEMM: {peak['fp32_gflops']} GFLOP/s; peak {peak['fp32_peak_gflops']}")
    if "int8_peak_gops" in peak:
        say(f"int8 GEMM peak: {peak['int8_peak_gops']} GOP/s")
    result: dict[str, Any] = {
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "cpu_kernels": cpu_kernels(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "environment": {k: os.environ[k] for k in CAPS if k in os.environ},
        "config": shown(args.config),
        "sets": args.sets,
        "peak": peak,
    }
    with tempfile.TemporaryDirectory() as tmp:
        if args.like_for_like:
            args.config = str(like_for_like(args.like_for_like, Path(tmp)))
            result["config"] = "like for like (python -m bench headline --configs feed)"
        trainer = trainer_for(args.config, Path(tmp) / "run", torch.get_num_threads(), args.sets)
        if args.headline_batches:
            trainer.plan = headline_batches(trainer.plan)
            result["config"] += ", the headline's batches"
        train = training(trainer, args.updates)
        train["fraction_of_fp32_peak"] = fraction(train["achieved_gflops"], peak["fp32_peak_gflops"])
        # the same update's matrix products at the measured peak: the floor these kernels allow
        products = train["flops_per_target_token"] * train["target_tokens"] / train["updates"]
        train["products_seconds_per_update_at_peak"] = round(products / peak["fp32_peak_gflops"] / 1e9, 4)
        plan = iter(trainer.plan)
        more = [next(plan) for _ in range(5)]
        start = time.perf_counter()  # the same updates unprofiled: what the profiler adds
        for bs in more:
            trainer.train_step(*bs)
        unprofiled = time.perf_counter() - start
        train["profile"] = profiled(lambda: [trainer.train_step(*bs) for bs in more], replay=True)
        train["profile"]["unprofiled_wall_seconds"] = round(unprofiled, 3)
        # the ceiling at this model's sizes: the same updates if they were their products alone
        alone = train["profile"]["products_alone_seconds"]
        more_tokens = sum(b.n_tokens for bs in more for b in bs)
        train["ceiling_target_tokens_per_s"] = round(more_tokens / alone, 1) if alone else None
        train["unprofiled_target_tokens_per_s"] = round(more_tokens / unprofiled, 1)
        train["fraction_of_ceiling"] = round(alone / unprofiled, 3) if alone else None  # of its tokens/s
        result["training"] = train
        say(
            f"training: {train['target_tokens_per_s']:,.0f} target tokens/s x "
            f"{train['flops_per_target_token'] / 1e6:.1f} MFLOP = {train['achieved_gflops']} GFLOP/s, "
            f"{train['fraction_of_fp32_peak']:.0%} of the fp32 peak"
        )
        if train["ceiling_target_tokens_per_s"]:
            say(
                f"its matrix products alone, at their own sizes: {train['ceiling_target_tokens_per_s']:,.0f} "
                f"target tokens/s; the update reaches {train['fraction_of_ceiling']:.0%} of that ceiling"
            )
    result["decoding"] = decode(args, peak, say)
    write_json(args.output, result)
    say(f"wrote {args.output}")
    return 0


def like_for_like(work: Path, tmp: Path) -> Path:
    """The headline's like-for-like lookback config ("feed"), written as a YAML file into tmp, on
    Multi30k as the headline prepares it in `work` (plain text of $LOOKBACK_MULTI30K)."""
    import yaml

    from . import prepare, settings

    data = prepare.prepare_data(work, 0)
    raw = settings.lookback_config("feed", str(tmp / "run"), str(data))
    raw["data"]["train"] = str(data / "train")  # lookback keeps the same pairs by max_len itself
    path = tmp / "like_for_like.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def headline_batches(plan):
    """`plan` with the headline's batches (bench/common.py, as bench/lookback_run.py gives them):
    each epoch a seeded permutation of the pairs cut into batch_sentences pairs, unsorted, where
    lookback's own plan gathers sentences of one length. Joey NMT trains on these."""
    import dataclasses

    from . import settings
    from .common import epoch_batches

    n, size, seed = len(plan.pairs), settings.TRAIN["batch_sentences"], settings.TRAIN["seed"]
    return dataclasses.replace(plan, epoch_batches=lambda epoch: epoch_batches(n, size, seed, epoch))


def decode(args, peak: dict[str, Any], say) -> dict[str, Any]:
    """Greedy and beam 5 with the run's weights, or why they were left out."""
    from lookback import Translator
    from lookback.config import load_config
    from lookback.data.read import read_parallel

    if not (Path(args.run) / "config.yaml").exists():
        say(f"decoding left out: no trained run in {args.run} (train one, or name it with --run)")
        return {"left_out": f"no trained run in {shown(args.run)}"}
    cfg = load_config(Path(args.run) / "config.yaml")
    d = cfg.data
    sources = read_parallel(d.valid, d.src_lang, d.tgt_lang, d.multi30k_dir)[0][: args.sentences]
    translator = Translator.load(args.run, precision="fp32")
    out: dict[str, Any] = {"run": shown(args.run)}
    for beam in (1, 5):
        r = decoding(translator, sources, beam)
        r["fraction_of_fp32_peak"] = fraction(r["achieved_gflops"], peak["fp32_peak_gflops"])
        r["profile"] = profiled(lambda beam=beam: translator.translate(sources[:64], beam=beam))
        out["greedy" if beam == 1 else "beam5"] = r
        say(
            f"decoding, beam {beam}: {r['sentences_per_s']} sentences/s, {r['achieved_gflops']} GFLOP/s, "
            f"{r['fraction_of_fp32_peak']:.1%} of the fp32 peak"
        )
    return out
