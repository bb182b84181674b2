"""A trained model as a directory to hand to someone: no pickle, nothing but the model.

    lookback export RUN_DIR -o DIR [--checkpoint best] [--test SPEC]

A run directory holds checkpoints, which are pickles (torch.save): loading one
from a stranger can run code, and they carry the optimiser and RNG state that
only training needs. An export holds:

    model.safetensors   the weights (safetensors: tensors and a JSON header, no code)
    config.yaml         the resolved config: the model to build, the decoding defaults
    tokenizer.json      the tokenizers' manifest, and the files it names
    model.json          where the weights come from: steps, minutes, validation and test scores
    README.md           the model card: data, size, scores with their signatures, how to use it
    onnx/               with --onnx: encoder and decoder step as ONNX graphs, fp32 and int8

`Translator.load` (and so translate, evaluate, serve, explain, attention)
takes an export wherever it takes a run directory, and reads it with no
pickle at all.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from ..config import Config, load_config, save_config
from ..data.tokenizer import Tokenizer, load_tokenizers
from ..errors import CheckpointError
from ..model.seq2seq import Seq2Seq, build_model, count_parameters
from ..training.checkpoint import load_run
from .fast import ONNX_DIR, export_onnx

WEIGHTS = "model.safetensors"
FILES = (WEIGHTS, "config.yaml", "tokenizer.json", "model.json", "README.md")


def is_export(folder: str | Path) -> bool:
    """Whether `folder` is an exported model rather than a run directory."""
    return (Path(folder) / WEIGHTS).is_file()


def load_export(folder: str | Path) -> tuple[Seq2Seq, Config, Tokenizer, Tokenizer]:
    """The model, config and tokenizers of an export, read without unpickling anything."""
    folder = Path(folder)
    cfg = load_config(folder / "config.yaml")
    src_tok, tgt_tok = load_tokenizers(folder)
    model = build_model(cfg.model, src_tok.vocab_size, tgt_tok.vocab_size)
    path = folder / WEIGHTS
    try:
        missing, unexpected = load_model(model, str(path), strict=False)
    except (SafetensorError, OSError, RuntimeError) as exc:
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not readable safetensors weights ({reason})") from None
    if missing or unexpected:
        what = f"missing {', '.join(missing)}" if missing else f"unexpected {', '.join(unexpected)}"
        raise CheckpointError(f"{path}: weights do not fit the model of config.yaml ({what[:200]})")
    return model.eval(), cfg, src_tok, tgt_tok


def export(
    run_dir: str | Path,
    out: str | Path,
    checkpoint: str = "best",
    test: dict | None = None,
    onnx: bool = False,
) -> dict:
    """Write the export of `run_dir`'s `checkpoint` to `out`; `test` (from `evaluate.score`, with
    its spec and beam) goes into the card; with `onnx`, the ONNX graphs go into out/onnx/
    (runtime.py). Returns what model.json holds."""
    run_dir, out = Path(run_dir), Path(out)
    if out.resolve() == run_dir.resolve():
        raise ValueError(f"{out}: the export must go to a directory of its own, not the run directory")
    if out.exists() and any(out.iterdir()) and not is_export(out):
        raise ValueError(f"{out}: exists and is not an export; choose a new or empty directory")
    model, cfg, _, _, state, path = load_run(run_dir, checkpoint)  # our own run's checked pickle
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a parent that cannot hold a folder: read-only, /proc, a file
        raise ValueError(f"{out}: cannot make the export's directory ({exc.strerror})") from exc
    save_model(model, str(out / WEIGHTS), metadata={"format": "pt", "source": path.name})
    if (out / ONNX_DIR).is_dir():
        shutil.rmtree(out / ONNX_DIR)  # an earlier export's graphs are of other weights
    if onnx:
        export_onnx(model, out / ONNX_DIR)
    save_config(cfg, out / "config.yaml")
    manifest = json.loads((run_dir / "tokenizer.json").read_text(encoding="utf-8"))
    for name in {"tokenizer.json", manifest["src"], manifest["tgt"]}:
        shutil.copyfile(run_dir / name, out / name)
    progress = state.get("progress", {})
    info = {
        "checkpoint": path.name,
        "steps": progress.get("step"),
        "training_minutes": round(progress.get("seconds", 0.0) / 60, 1),
        "best_validation_bleu": progress.get("best_bleu"),
        "parameters": count_parameters(model),
        "languages": [cfg.data.src_lang, cfg.data.tgt_lang],
        "test": test,
        "onnx": sorted(p.name for p in (out / ONNX_DIR).glob("*.onnx")) if onnx else [],
    }
    (out / "model.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(model_card(cfg, info, manifest), encoding="utf-8")
    return info


def model_card(cfg: Config, info: dict, manifest: dict) -> str:
    """The README of an export: what the model is, what it was trained on, how well it does."""
    m, d, t = cfg.model, cfg.data, cfg.train
    src, tgt = info["languages"]
    encoder = f"{'bidirectional ' if m.bidirectional else ''}{m.cell.upper()}, {m.hidden_size} per direction"
    attention = "none (a fixed context vector)" if m.attention == "none" else m.attention
    joint = ", joint" if cfg.tokenizer.joint else ""
    tokenizer_files = sorted({manifest["src"], manifest["tgt"]})
    lines = [
        f"# lookback model: {src} -> {tgt}",
        "",
        "An RNN encoder-decoder with attention, trained with lookback.",
        "",
        "| | |",
        "|---|---|",
        f"| encoder | {encoder}, {m.enc_layers} layer(s) |",
        f"| decoder | {m.cell.upper()}, {m.dec_hidden_size}, {m.dec_layers} layer(s) |",
        f"| attention | {attention} (normaliser {m.normalizer}, window {m.window}) |",
        f"| embeddings | {m.emb_size} |",
        f"| parameters | {info['parameters']:,} |",
        f"| tokenizer | {manifest['kind']}, {cfg.tokenizer.vocab_size} pieces{joint} |",
        f"| training data | `{d.train}` (validation `{d.valid}`) |",
        f"| training | {info['steps']} updates, {info['training_minutes']} minutes ({info['checkpoint']}) |",
        f"| best validation BLEU (greedy) | {info['best_validation_bleu']:.2f} |",
    ]
    test = info.get("test")
    if test:
        lines += [
            f"| test BLEU, `{test['spec']}`, beam {test['beam']} | {test['bleu']:.2f} |",
            f"| test chrF | {test['chrf']:.2f} |",
            "",
            "Signatures:",
            "",
            f"- BLEU: `{test['bleu_signature']}`",
            f"- chrF: `{test['chrf_signature']}`",
        ]
    lines += [
        "",
        "## Use",
        "",
        "With lookback installed (`pip install -e .` in a clone of its repository):",
        "",
        "```bash",
        f'echo "A sentence in {src}." | lookback translate THIS_DIRECTORY --beam {cfg.decode.beam}',
        "lookback serve THIS_DIRECTORY   # the attention explorer",
        *(
            ["lookback translate THIS_DIRECTORY --backend onnxruntime --quantize int8   # onnx/"]
            if info["onnx"]
            else []
        ),
        "```",
        "",
        "```python",
        "from lookback import Translator",
        "",
        'out = Translator.load("THIS_DIRECTORY").translate(["A sentence."])[0]',
        "out.text, out.attention  # the translation and its alignment matrix",
        "```",
        "",
        "## Reproduce",
        "",
        "`config.yaml` is the resolved config the model was trained with:",
        "",
        "```bash",
        "lookback train config.yaml --set train.run_dir=runs/again",
        "```",
        "",
        f"It trains until {_budget(t)}; batches of {t.max_tokens} tokens, Adam at {t.lr:g}, seed {t.seed}.",
        "",
        f"Files: {', '.join(FILES)} and the tokenizer files {', '.join(tokenizer_files)}. "
        "The weights are safetensors: loading this directory runs no pickle.",
        "",
    ]
    return "\n".join(lines)


def _budget(t) -> str:
    rules = []
    if t.time_limit:
        rules.append(f"{t.time_limit:g} minutes")
    if t.max_steps:
        rules.append(f"{t.max_steps} updates")
    rules.append(f"{t.max_epochs} epochs")
    if t.early_stopping:
        rules.append(f"{t.early_stopping} validations without a better BLEU")
    return " or ".join(rules)
