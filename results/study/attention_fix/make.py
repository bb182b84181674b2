"""The tables and figures of docs/study.md's "Why dot and general did not learn" (issue 36),
from the training logs in metrics/ (each run's metrics.jsonl, copied here as NAME.jsonl; kept
packed: `python results/pack.py --unpack results/study/attention_fix/metrics.tar.xz` first).

Each run is `lookback train CONFIG --set ...` as RUNS below says, on top of SHORT (plain
Multi30k, the first 600 updates at the shipped rate) or LONG_PAIRS (concat:1-4, the study's
sizes, 1,000 updates) or SAME_UPDATES (the shipped configs, 1,200 updates with their cosine).
Every run logged the probe (diagnostics.py) every 25, 50 or 100 updates from update 0.

    python results/study/attention_fix/make.py    # writes results.json, takeoff_*.png; prints the tables
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository, for lookback and bench

from bench.common import cpu_flags, cpu_model  # noqa: E402
from lookback.explain.curves import history, read_metrics  # noqa: E402
from lookback.explain.diagnostics import plot_takeoff  # noqa: E402

SHORT = (
    "--set train.schedule=constant --set train.max_steps=600 --set train.valid_every=300 "
    "--set train.probe_every=25 --set train.time_limit=0 --set train.precision=fp32"
)
LONG_PAIRS = (
    SHORT.replace("max_steps=600", "max_steps=1000").replace("valid_every=300", "valid_every=500")
    + " --set data.train=concat:1-4:multi30k:train --set data.valid=concat:1-4:multi30k:val"
    " --set data.max_len=250 --set model.emb_size=128 --set model.hidden_size=128"
    " --set model.dec_hidden_size=256"
)
SAME_UPDATES = (
    "--set train.max_steps=1200 --set train.valid_every=400 --set train.probe_every=50 "
    "--set train.precision=fp32"
)
SAMPLING = (
    "--set train.teacher_forcing=0.75 --set train.sampling_decay=inverse_sigmoid --set train.sampling_k=500"
)
C = "configs/multi30k_en_fr_{}.yaml"
RUNS = {  # name: (config, the settings beyond its group's, group)
    "general_before": (C.format("general"), "--set train.attention_lr=1 --set model.norm_gain=1", SHORT),
    "general_lr_only": (C.format("general"), "--set model.norm_gain=1", SHORT),
    "general_lr0.001_only": (
        C.format("general"),
        "--set train.attention_lr=0.001 --set model.norm_gain=1",
        SHORT,
    ),
    "general": (
        C.format("general"),
        "--set model.norm_gain=0.0442",
        SHORT,
    ),  # the default: 512^-0.5 = 0.04419
    "dot_before": (C.format("dot"), "--set model.norm_gain=1", SHORT),
    "dot": (C.format("dot"), "--set model.norm_gain=0.044", SHORT),  # the default: 512^-0.5 = 0.04419
    "additive": (C.format("additive"), "", SHORT),
    "previous_general_before": (
        C.format("general"),
        "--set model.attend_from=previous --set model.norm_gain=1",
        SHORT,
    ),
    "previous_general": (
        C.format("general"),
        "--set model.attend_from=previous --set model.norm_gain=0.0442",
        SHORT,
    ),
    "previous_dot": (C.format("dot"), "--set model.attend_from=previous", SHORT),
    "local_p": (C.format("additive"), "--set model.window=local_p --set model.window_size=10", SHORT),
    "coverage_loss_from_start": (
        C.format("additive"),
        "--set model.coverage=true --set train.coverage_loss=1",
        SHORT,
    ),
    "coverage_loss_from_start_wc0": (
        C.format("additive"),
        "--set model.coverage=true --set train.coverage_loss=1",
        SHORT,
    ),
    "coverage_loss_from_300": (
        C.format("additive"),
        "--set model.coverage=true --set train.coverage_loss=1 --set train.coverage_start=300",
        SHORT,
    ),
    "local_m": (C.format("additive"), "--set model.window=local_m --set model.window_size=10", SHORT),
    "coverage_score": (C.format("additive"), "--set model.coverage=true", SHORT),
    "coverage_score_wc0": (C.format("additive"), "--set model.coverage=true", SHORT),
    "sampling": (C.format("additive"), SAMPLING, SHORT),
    "sampling_stepwise": (
        C.format("additive"),
        SAMPLING + " --set train.stepwise=true --set train.max_steps=300",
        SHORT,
    ),
    "long_none": (C.format("none"), "", LONG_PAIRS),
    "long_dot_before": (C.format("dot"), "--set model.norm_gain=1", LONG_PAIRS),
    "long_dot": (C.format("dot"), "", LONG_PAIRS),
    "long_general": (C.format("general"), "", LONG_PAIRS),
    "long_additive": (C.format("additive"), "", LONG_PAIRS),
    "shipped_general": (C.format("general"), "", SAME_UPDATES),
    "shipped_dot": (C.format("dot"), "", SAME_UPDATES),
    "shipped_additive": (C.format("additive"), "", SAME_UPDATES),
}


NOTES = {  # runs that changed a weight after build_model, which no config key does
    "general_zero_init": "general's W set to 0 after build_model; W at a hundredth of the rate",
    "coverage_loss_from_start_wc0": "coverage's w_c set to 0 after build_model",
    "coverage_score_wc0": "coverage's w_c set to 0 after build_model",
    "coverage_score": "coverage's w_c drawn from U(-1, 1), PyTorch's default, after build_model",
    "sampling": "two passes as of commit 2e92953, which drew a token at every step before the coins: "
    "the same mixture as now, other random numbers",
}


def summary(name: str) -> dict:
    """Validation BLEU at each validation, the probe at its first updates and at the end, tokens/s."""
    records = read_metrics(HERE / "metrics" / f"{name}.jsonl")
    valid = history(records, "valid")
    probes = [r for r in history(records, "probe")]
    at = {r["step"]: r for r in probes}
    speeds = sorted(r["tokens_per_s"] for r in history(records, "train"))
    pick = lambda r, key: None if r is None or key not in r else round(r[key], 3)  # noqa: E731
    return {
        "validation_bleu": {r["step"]: round(r["bleu"], 2) for r in valid},
        "probe": {
            step: {k: pick(at.get(step), k) for k in ("alpha_entropy", "score_spread", "score_grad")}
            for step in (0, 50, 100, 300, probes[-1]["step"] if probes else 0)
            if step in at
        },
        "median_tokens_per_s": round(speeds[len(speeds) // 2]) if speeds else None,
    }


def main() -> None:
    found = {n: r for n, r in RUNS.items() if (HERE / "metrics" / f"{n}.jsonl").exists()}
    results = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "torch_threads": 2,
        "runs": {
            n: {
                "command": f"lookback train {cfg} {group} {extra}".strip(),
                "note": NOTES.get(n),
                **summary(n),
            }
            for n, (cfg, extra, group) in found.items()
        },
    }
    (HERE / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    figures = {
        "takeoff_scores.png": [
            "general_before",
            "general_lr_only",
            "general",
            "dot_before",
            "dot",
            "additive",
        ],
        "takeoff_variants.png": [
            "additive",
            "previous_general",
            "previous_dot",
            "local_p",
            "coverage",
            "sampling",
        ],
        "takeoff_long.png": ["long_dot_before", "long_dot", "long_general", "long_additive"],
        "takeoff_shipped.png": ["shipped_general", "shipped_dot", "shipped_additive"],
    }
    for png, names in figures.items():
        runs = {n: str(HERE / "metrics" / f"{n}.jsonl") for n in names if n in found}
        if runs:
            plot_takeoff(runs, str(HERE / png), f"Issue 36: {png[8:-4]} ({results['cpu']}, fp32)")
    for n, r in results["runs"].items():
        bleu = ", ".join(f"{s}: {b}" for s, b in r["validation_bleu"].items())
        probe = "; ".join(
            f"{s}: H {p['alpha_entropy']}, spread {p['score_spread']}, dJ/de {p['score_grad']}"
            for s, p in r["probe"].items()
        )
        print(f"{n}: BLEU {bleu} | {probe} | {r['median_tokens_per_s']} tok/s")


if __name__ == "__main__":
    main()
