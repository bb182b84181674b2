"""The peer: one Joey NMT 2.3.0 measurement in a fresh process, inside Joey's own venv.

    bench/.venv-joey/bin/python bench/peers/joey.py train|translate SPEC.json RESULT.json

The harness (python -m bench headline) calls this with the same SPEC it gives
lookback's side (bench/lookback_run.py), and it measures the same figures
with Joey's own code: `prepare` (data, vocabulary, `build_model`),
`TrainManager._train_step` plus the clip / step / zero_grad that
`TrainManager.train_and_validate` runs after it, and `predict` for
translation. Only the loop around them is the harness's, so that both
systems stop at the same training budget and validate at the same moments
(greedy BLEU on the validation set with `predict`, its time left out of
the budget).

The equivalent Joey config (written to OUT_DIR/joey/config.yaml):

- data: the same plain-text files; SentencePiece with lookback's model
  (joint unigram, 8,000 pieces) on both sides, and a vocabulary file that
  lists its pieces in id order, so both systems see the same pieces;
- model: embeddings 256 (unscaled), bidirectional GRU encoder 256, GRU
  decoder 256, `attention: bahdanau` (additive, from the new state s_t, as
  lookback's `attend_from: current`), `init_hidden: bridge`,
  `input_feeding` from the named configuration, dropout 0.3 on embeddings
  and before the attentional layer, Joey's default initialisers;
- training: Adam, `clip_grad_norm: 1.0`, `normalization: tokens`
  (loss averaged over target tokens, as lookback does; Joey's default
  `batch` would change what the clip acts on; a Joey recipe may choose
  it, and the dropout before the attentional layer); learning rate, batch size
  and schedule from Joey's recipe (bench/settings.py JOEY_RECIPES, `--joey-best`):
  like for like ("same"), Adam 1e-3 held constant on both sides; "peer" and
  "iwslt", Joey's own plateau scheduler (`joeynmt.builders`), stepped after
  each of the harness's validations on its BLEU;
- batching: `batch_type: sentence`, `batch_size: 80`. Joey's
  SentenceBatchSampler is kept, so its pipeline costs what it costs in
  Joey (each pair is tokenised when sampled and again when collated), but
  its random sampler is replaced by the harness's permutation
  (bench/common.py), so both systems get exactly the same batches;
  every batch is checked against the plan. Why sentences and not tokens:
  Joey's token batches count max(src+1, trg+1) x size and close a batch
  only once it reaches the limit, without bucketing; lookback's count
  max(src, trg+1) x size, stay under the limit, and sort pools of
  ~100 batches by length. Neither system can make the other's.
- testing: `batch_size: 64` sentences, `beam_alpha: 1.0` (the GNMT length
  penalty ((5+len)/6)^alpha, as lookback), `max_output_length: -1`
  (Joey's default: 1.5 x the longest source of the batch; lookback allows
  2 x each source + 5).

BLEU is sacreBLEU's default (13a, cased) on Joey's detokenised output
against the raw references, as on lookback's side.
"""

from __future__ import annotations

import itertools
import logging
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench.common, without lookback

from bench.common import (  # noqa: E402
    epochs_after,
    matmul_flops_per_token,
    read_lines,
    run_measurement,
    timed_training,
    timed_translation,
)


def joey_recipe(spec: dict[str, Any]) -> dict[str, Any]:
    """Joey's training recipe (bench/settings.py JOEY_RECIPES); a spec without one: like for like."""
    same = {"lr": spec["lr"], "batch_sentences": spec["batch_sentences"], "schedule": "constant"}
    return spec.get("joey") or same


def joey_config(spec: dict[str, Any], task: str) -> dict[str, Any]:
    """The Joey NMT config equivalent to lookback's benchmark configuration, with Joey's recipe."""
    m, data = spec["model"], Path(spec["data_dir"])
    recipe = joey_recipe(spec)
    if recipe["schedule"] == "plateau":  # Joey's own ReduceLROnPlateau, stepped at each validation
        schedule = {
            "scheduling": "plateau",
            "decrease_factor": recipe["decrease_factor"],
            "patience": recipe["patience"],
        }
    elif recipe["schedule"] == "warmupinversesquareroot":  # stepped after every update, as Joey
        schedule = {
            "scheduling": "warmupinversesquareroot",
            "learning_rate_warmup": recipe["warmup"],
            "learning_rate_min": 1e-8,  # Joey's IWSLT Transformer recipe
        }
    else:
        # Never stepped: the rate stays constant, as lookback's in the like-for-like case. Joey
        # 2.3.0 wants some scheduler; `decaying` (StepLR, stepped per epoch by Joey's own loop,
        # which the harness does not run) builds without one.
        schedule = {"scheduling": "decaying"}

    def side(lang: str) -> dict[str, Any]:
        return {
            "lang": lang,
            "level": "bpe",
            "tokenizer_type": "sentencepiece",
            "tokenizer_cfg": {"model_file": spec["spm_model"]},
            "voc_file": spec["joey_vocab"],
            "lowercase": False,
            "normalize": False,
            "max_length": spec["max_len"],
        }

    def embeddings() -> dict[str, Any]:
        return {"embedding_dim": m["emb_size"], "scale": False}

    transformer = recipe.get("arch") == "transformer"
    model_dir = Path(spec["out_dir"]) / spec.get("system", "joey")  # joey or joey_best
    cfg: dict[str, Any] = {
        "name": f"bench_{spec['config']}",
        "joeynmt_version": "2.3.0",
        "model_dir": str(model_dir),
        "use_cuda": spec["device"] == "cuda",
        "fp16": False,
        "random_seed": spec["seed"],
        "data": {
            "train": str(data / "train_kept"),
            # translate: `dev` is the untimed warm-up set
            "dev": str(data / ("warmup" if task == "translate" else "val")),
            "test": str(data / spec["test"]),
            "dataset_type": "plain",
            "src": side(spec["src_lang"]),
            "trg": side(spec["tgt_lang"]),
        },
        "training": {
            "optimizer": "adamw" if transformer else "adam",  # weight decay 0: the same update
            "adam_betas": [0.9, 0.999],
            "learning_rate": recipe["lr"],
            "clip_grad_norm": spec["clip"],
            **schedule,
            "normalization": recipe.get("normalization", "tokens"),
            "loss": "crossentropy",
            "label_smoothing": recipe.get("label_smoothing", 0.0),
            "batch_size": recipe["batch_sentences"],
            "batch_type": "sentence",
            "batch_multiplier": 1,
            "shuffle": True,
            "epochs": 1000,
            "model_dir": str(model_dir),
            "overwrite": True,
            "logging_freq": 100,
            "validation_freq": 1000,
            "early_stopping_metric": "bleu",
        },
        "testing": {
            "load_model": str(model_dir / "budget.ckpt"),
            "batch_size": spec["decode_batch_size"],
            "batch_type": "sentence",
            "beam_size": 1,
            "beam_alpha": spec["length_penalty"],
            "max_output_length": -1,
            "eval_metrics": [],
        },
        "model": transformer_model(recipe)
        if transformer
        else {
            "tied_embeddings": False,
            "tied_softmax": False,
            "encoder": {
                "type": "recurrent",
                "rnn_type": m["cell"],
                "embeddings": embeddings(),
                "hidden_size": m["hidden_size"],
                "bidirectional": m["bidirectional"],
                "num_layers": m["enc_layers"],
                "dropout": m["dropout"],
            },
            "decoder": {
                "type": "recurrent",
                "rnn_type": m["cell"],
                "embeddings": embeddings(),
                "hidden_size": m["dec_hidden_size"],
                "num_layers": m["dec_layers"],
                "dropout": m["dropout"],
                "hidden_dropout": recipe.get("hidden_dropout", m["dropout"]),
                "attention": "bahdanau",
                "init_hidden": "bridge",
                "input_feeding": m["input_feeding"],
            },
        },
    }
    return cfg


def transformer_model(recipe: dict[str, Any]) -> dict[str, Any]:
    """Joey's Transformer as its small-data recipe builds it (bench/settings.py, "transformer"):
    pre-norm, ReLU, scaled embeddings, Xavier-uniform weights and zero biases, one embedding
    matrix for source, target and output (the harness's one joint vocabulary)."""

    def side() -> dict[str, Any]:
        return {
            "type": "transformer",
            "num_layers": recipe["layers"],
            "num_heads": recipe["heads"],
            "embeddings": {"embedding_dim": recipe["d_model"], "scale": True, "dropout": 0.0},
            "hidden_size": recipe["d_model"],
            "ff_size": recipe["ff_size"],
            "dropout": recipe["dropout"],
            "layer_norm": "pre",
            "activation": "relu",
        }

    return {
        "initializer": "xavier_uniform",
        "init_gain": 1.0,
        "bias_initializer": "zeros",
        "embed_initializer": "xavier_uniform",
        "embed_init_gain": 1.0,
        "tied_embeddings": True,
        "tied_softmax": True,
        "encoder": side(),
        "decoder": side(),
    }


def _check_equivalent(spec: dict[str, Any]) -> None:
    """Refuse settings that Joey's recurrent decoder cannot express (a Transformer recipe brings
    its own model)."""
    if joey_recipe(spec).get("arch") == "transformer":
        return
    m = spec["model"]
    problems = []
    if m["attention"] != "additive" or m["attend_from"] != "current":
        problems.append("Joey's bahdanau attention scores from the new state s_t (attend_from: current)")
    if m["attention_size"] != m["dec_hidden_size"]:
        problems.append("Joey's bahdanau attention size is the decoder size")
    if problems:
        raise ValueError("; ".join(problems))


def plateau(optimizer, verbose: bool = False, **kwargs):
    """torch's ReduceLROnPlateau as Joey 2.3.0 builds it, less the `verbose` argument that torch
    2.7 removed (Joey passes verbose=False, so the scheduler behaves the same without it): the
    one change the peer file made to Joey, made here without editing the installed package."""
    from torch.optim.lr_scheduler import ReduceLROnPlateau

    return ReduceLROnPlateau(optimizer, **kwargs)


def _load(spec: dict[str, Any], task: str, fresh: bool = True):
    """Joey's own set-up: config, data, vocabulary, model (and, to translate, the trained weights).
    `fresh`: a training that starts from step 0 empties its model folder first (Joey's own
    make_model_dir); one that goes on from a checkpoint keeps it."""
    import torch
    import yaml
    from joeynmt import builders
    from joeynmt.config import load_config, parse_global_args
    from joeynmt.helpers import make_model_dir, set_seed
    from joeynmt.prediction import prepare

    builders.ReduceLROnPlateau = plateau  # Joey's own plateau scheduler, under torch 2.13

    _check_equivalent(spec)
    if spec["device"] == "cuda" and not torch.cuda.is_available():
        # Joey would quietly fall back to the CPU; a CPU-only torch in its venv is the usual cause
        raise RuntimeError("the harness measures on cuda, but torch in Joey's venv sees no GPU")
    cfg = joey_config(spec, task)
    model_dir = Path(cfg["model_dir"])
    if task == "train" and fresh:
        make_model_dir(model_dir, overwrite=True)
    path = model_dir / f"{task}_config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    set_seed(spec["seed"])  # prepare() seeds only after building the model: repeatable initial weights
    args = parse_global_args(load_config(path), rank=0, mode="train" if task == "train" else "test")
    model, train_data, dev_data, test_data = prepare(
        args, rank=0, mode="train" if task == "train" else "test"
    )
    return args, model, train_data, dev_data, test_data


class PlanSampler:
    """The harness's permutation of one epoch, where Joey's RandomSubsetSampler would be."""

    def __init__(self, data_source, order: list[int]):
        self.data_source = data_source  # SentenceBatchSampler reads it
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def _check_pieces(train_data, spec: dict[str, Any], n: int = 1000) -> None:
    """Joey's tokenisation of the first n pairs must be lookback's: the SentencePiece model's own."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spec["spm_model"])
    for i in range(min(n, len(train_data))):
        _, src, trg = train_data[i]
        for lang, pieces in ((spec["src_lang"], src), (spec["tgt_lang"], trg)):
            line = train_data.data[lang][i]
            if pieces != sp.encode(line, out_type=str):
                raise ValueError(f"Joey splits training pair {i} ({lang}) differently: {line!r}")


def _resume_path(spec: dict[str, Any]) -> Path:
    """Where a Joey training keeps its checkpoint at each validation (bench --resume)."""
    return Path(spec["out_dir"]) / spec.get("system", "joey") / "resume.pt"


def _save_checkpoint(path: Path, model, trainer, rates: list[float], progress: dict[str, Any]) -> None:
    """Everything a killed training needs to go on as if it had not been killed: weights, Adam's
    moments, the plateau scheduler, the random generators (dropout), the harness's progress.
    Written beside, then moved into place: a kill while saving keeps the previous one."""
    import random

    import numpy as np
    import torch

    state = {
        "model": model.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict() if trainer.scheduler is not None else None,
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "rates": rates,
        "progress": progress,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def _load_checkpoint(path: Path, model, trainer) -> tuple[list[float], dict[str, Any]]:
    """Restore what _save_checkpoint saved; (the learning rates so far, the harness's progress)."""
    import random

    import numpy as np
    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        trainer.optimizer.load_state_dict(state["optimizer"])
    except Exception as exc:  # a truncated or foreign file: say which, lose nothing
        raise RuntimeError(f"{path}: not a checkpoint this Joey run can go on from ({exc})") from None
    if state["scheduler"] is not None and trainer.scheduler is not None:
        trainer.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    np.random.set_state(state["numpy_rng"])
    return state["rates"], state["progress"]


def train(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from joeynmt.config import set_validation_args
    from joeynmt.datasets import SentenceBatchSampler
    from joeynmt.training import TrainManager
    from torch.utils.data import DataLoader

    checkpoint_path = _resume_path(spec)
    resuming = bool(spec.get("resume")) and checkpoint_path.is_file()
    args, model, train_data, dev_data, _ = _load(spec, "train", fresh=not resuming)
    trainer = TrainManager(
        model=model,
        model_dir=args.model_dir,
        device=args.device,
        n_gpu=args.n_gpu,
        rank=0,
        num_workers=0,
        autocast=args.autocast,
        seed=args.seed,
        train_args=args.train,
        dev_args=set_validation_args(args.test),
    )
    if args.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(args.device)
    n, size = len(train_data), joey_recipe(spec)["batch_sentences"]
    if n != spec["train_pairs"]:
        raise ValueError(f"Joey reads {n} training pairs, lookback {spec['train_pairs']}")
    _check_pieces(train_data, spec)
    collate = partial(
        train_data.collate_fn, eos_index=model.eos_index, pad_index=model.pad_index, device=args.device
    )

    rates: list[float] = []  # the learning rate after each validation
    progress = None
    if resuming:
        rates, progress = _load_checkpoint(checkpoint_path, model, trainer)
        print(f"going on from {checkpoint_path}: update {progress['steps']}", flush=True)

    def batches(done: int):
        """The plan's batches after the first `done` updates."""
        for plan in epochs_after(n, size, spec["seed"], done):
            order = [i for batch in plan for i in batch]
            sampler = SentenceBatchSampler(
                PlanSampler(train_data, order), size, drop_last=False, seed=spec["seed"]
            )
            loader = DataLoader(train_data, batch_sampler=sampler, collate_fn=collate, num_workers=0)
            for expected, batch in zip(plan, loader, strict=True):
                if sorted(batch.indices.tolist()) != sorted(expected):
                    raise RuntimeError("Joey's batch differs from the plan")
                yield batch

    updates = progress["steps"] if progress else 0  # Joey's stats.steps

    def step(batch) -> int:
        nonlocal updates
        # TrainManager.train_and_validate's body with batch_multiplier 1 (a plateau schedule
        # steps in validate(), after each validation, where Joey steps it; a warm-up schedule
        # after every update, from Joey's step count before it)
        trainer._train_step(batch)  # forward, loss / tokens, backward; reads the loss (.item())
        if trainer.clip_grad_fun is not None:
            trainer.clip_grad_fun(parameters=model.parameters())
        trainer.optimizer.step()
        if trainer.scheduler_step_at == "step":
            trainer.scheduler.step(updates)
        model.zero_grad()
        updates += 1
        return int(batch.ntokens)

    refs = read_lines(Path(spec["data_dir"]) / f"{spec['valid']}.{spec['tgt_lang']}")

    def validate() -> float:  # greedy BLEU on the validation set, as lookback's side
        import sacrebleu

        hyps = _predict(args, model, dev_data, 1, spec["length_penalty"])
        bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
        if trainer.scheduler_step_at == "validation":  # Joey's plateau: on its metric, BLEU here
            trainer.scheduler.step(metrics=bleu)
        rates.append(trainer.optimizer.param_groups[0]["lr"])
        return bleu

    figures = timed_training(
        batches(progress["steps"] if progress else 0),
        step,
        lambda b: int(b.nseqs),
        spec["budget_s"],
        spec["warmup_steps"],
        spec["max_steps"],
        validate,
        spec["validate_every_s"],
        checkpoint=partial(_save_checkpoint, checkpoint_path, model, trainer, rates),
        resume=progress,
    )
    figures["learning_rates"] = rates  # one per validation of the curve
    figures["joey_recipe"] = joey_recipe(spec)
    figures["epochs"] = figures["steps"] * size / n
    figures["train_pairs"] = n
    figures["parameters"] = sum(p.numel() for p in model.parameters())
    figures["vocab_size"] = [len(model.src_vocab), len(model.trg_vocab)]
    figures["peak_cuda_allocated_bytes"] = (
        torch.cuda.max_memory_allocated(args.device) if args.device.type == "cuda" else None
    )
    torch.save({"model_state": model.state_dict()}, Path(args.model_dir) / "budget.ckpt")
    figures["flops_per_target_token"] = matmul_flops_per_token(step, itertools.islice(batches(0), 5))
    trainer.tb_writer.close()
    return figures


def _predict(args, model, data, beam: int, length_penalty: float) -> list[str]:
    """Joey's `predict` on `data`: its detokenised hypotheses, in input order."""
    import torch
    from joeynmt.prediction import predict

    test_args = args.test._replace(beam_size=beam, beam_alpha=length_penalty if beam > 1 else -1)
    out = predict(
        model=model,
        data=data,
        device=args.device,
        n_gpu=args.n_gpu,
        compute_loss=False,
        normalization=args.train.normalization,
        num_workers=0,
        args=test_args,
        autocast=args.autocast,
    )
    if args.device.type == "cuda":
        torch.cuda.synchronize(args.device)
    return out[2]


def translate(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    args, model, _, warm_data, test_data = _load(spec, "translate")
    if args.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(args.device)

    def run(data, beam: int) -> list[str]:
        return _predict(args, model, data, beam, spec["length_penalty"])

    run(warm_data, 1)  # first calls allocate and pick kernels: not timed
    data = Path(spec["data_dir"])
    refs = read_lines(data / f"{spec['test']}.{spec['tgt_lang']}")
    figures: dict[str, Any] = {"sentences": len(test_data)}
    for beam in spec["beams"]:
        name = f"{spec.get('system', 'joey')}{spec.get('tag', '')}.beam{beam}.txt"  # joey or joey_best
        out = Path(spec.get("hyp_dir") or spec["out_dir"]) / name
        figures[f"beam{beam}"] = timed_translation(partial(run, test_data, beam), refs, out)
    figures["peak_cuda_allocated_bytes"] = (
        torch.cuda.max_memory_allocated(args.device) if args.device.type == "cuda" else None
    )
    return figures


TASKS = {"train": train, "translate": translate}


def versions() -> dict[str, str]:
    import importlib.metadata as md
    import platform

    out = {"python": platform.python_version()}
    for name in ("joeynmt", "torch", "sacrebleu", "sentencepiece", "numpy"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    return run_measurement("joey", TASKS, argv, versions=versions())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
