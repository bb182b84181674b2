"""The tables docs/study.md quotes from the attention-only study (issue 59): what recurrence buys.

    python results/study/attention_only_summary/summary.py

From the study's results.json.gz (`lookback study configs/study/attention_only.yaml` writes it,
and keeps every evaluated run in it), per grid cell (multi30k: trained on Multi30k; long: on its
pairs joined 1-4 at a time) and model, over the seeds evaluated so far (mean, and the range):

- training: updates in the 12 minutes, target tokens/s (each run's median), validation BLEU at
  the end, and the minutes to 40 and 50 validation BLEU (time to quality; none: never);
- test BLEU at greedy and beam 5 on each test set (and each seed's), by source length at beam 5,
  and the buckets where beam 5 falls below greedy;
- decoding speed: sentences/s over the whole test set (its buckets' times added up), greedy and
  beam 5, batches as `lookback translate` makes them;
- paired tests (sacreBLEU's bootstrap and randomisation on the first seed's outputs, with the
  seeds' spread): each model against the main job (rnn) at beam 5, over all sentences and by
  length, and the tuned attention-only model and the main job as shipped (rnn_smoothed: with label
  smoothing) against the shipped attention-only config (transformer).
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

STUDY = Path(__file__).resolve().parent.parent / "attention_only"
MODELS = ("rnn", "rnn_smoothed", "transformer", "transformer_tuned", "rnn_enc_tf_dec", "tf_enc_rnn_dec")


def split(run: str) -> tuple[str, str]:
    """'transformer@long#2' -> ('transformer', 'long')."""
    model, _, rest = run.partition("@")
    return model, rest.partition("#")[0]


def spread(values: list[float], digits: int = 2) -> str:
    """Mean and range of the seeds: '55.96 (55.1-56.4, 3)'; one seed: '55.96 (1)'."""
    if not values:
        return "-"
    mean = f"{statistics.mean(values):.{digits}f}"
    if len(values) == 1:
        return f"{mean} (1)"
    return f"{mean} ({min(values):.{digits}f}-{max(values):.{digits}f}, {len(values)})"


def sentences_per_s(buckets: dict) -> float:
    seconds = sum(b["ms_per_sentence"] * b["sentences"] / 1000 for b in buckets.values())
    return sum(b["sentences"] for b in buckets.values()) / seconds


def main(study: Path = STUDY) -> None:
    import lzma

    with gzip.open(study / "results.json.gz", "rt", encoding="utf-8") as f:
        results = json.load(f)
    evaluations = json.loads(lzma.decompress((study / "evaluations.json.xz").read_bytes()))
    cells = sorted({split(run)[1] for run in evaluations}, key=["multi30k", "long"].index)
    learning = defaultdict(lambda: defaultdict(list))  # (cell, model) -> key -> values
    for row in results["learning"]:
        for key in ("updates", "tokens_per_s", "final_bleu", "min_to_40", "min_to_50"):
            learning[split(row["model"])[::-1]][key].append(row[key])
    print("# The attention-only study, so far\n")
    machines = defaultdict(list)
    for run, e in evaluations.items():
        machines[
            e["device"],
            " ".join(f for f in e["cpu_flags"] if f.startswith(("avx512f", "avx512_bf16", "amx"))),
        ].append(run)
    for (device, flags), runs in machines.items():
        print(f"- {device} ({flags or 'no avx512'}): {', '.join(sorted(runs))}")
    print()
    for cell in cells:
        print(f"## Trained on {cell}\n")
        print("| model | parameters | updates | tokens/s | validation BLEU | min to 40 | min to 50 |")
        print("|---|---|---|---|---|---|---|")
        for model in MODELS:
            runs = sorted(r for r in evaluations if split(r) == (model, cell))
            if not runs:
                continue
            got = learning[cell, model]
            to = {k: [x for x in got[k] if x is not None] for k in ("min_to_40", "min_to_50")}
            never = {k: len(got[k]) - len(v) for k, v in to.items()}
            reach = {k: spread(v, 1) + (f", never: {never[k]}" if never[k] else "") for k, v in to.items()}
            print(
                f"| {model} | {evaluations[runs[0]]['parameters'] / 1e6:.2f}M "
                f"| {spread(got['updates'], 0)} | {spread(got['tokens_per_s'], 0)} "
                f"| {spread(got['final_bleu'])} | {reach['min_to_40']} | {reach['min_to_50']} |"
            )
        print()
        for spec in results["tests"]:
            print(f"### {spec}\n")
            buckets = None
            rows, by_seed = [], []
            for model in MODELS:
                runs = sorted(r for r in evaluations if split(r) == (model, cell))
                if not runs:
                    continue
                tests = [evaluations[r]["tests"][spec] for r in runs]
                buckets = list(tests[0]["beam5"]["buckets"])
                bleu = {k: [t[f"beam{k}"]["corpus"]["bleu"] for t in tests] for k in (1, 5)}
                speed = {k: [sentences_per_s(t[f"beam{k}"]["buckets"]) for t in tests] for k in (1, 5)}
                by_length = [spread([t["beam5"]["buckets"][b]["bleu"] for t in tests], 1) for b in buckets]
                seeds = " / ".join(f"{b5:.2f} ({b1:.2f})" for b1, b5 in zip(bleu[1], bleu[5], strict=True))
                by_seed.append(f"{model} {seeds}")
                rows.append(
                    f"| {model} | {spread(bleu[1])} | {spread(bleu[5])} | {spread(speed[1], 1)} "
                    f"| {spread(speed[5], 1)} | " + " | ".join(by_length) + " |"
                )
            print("| model | greedy | beam 5 | sent/s greedy | sent/s beam 5 | " + " | ".join(buckets) + " |")
            print("|---|---|---|---|---|" + "---|" * len(buckets))
            print("\n".join(rows), "\n")
            print("Each seed in turn, beam 5 (greedy):", "; ".join(by_seed), "\n")
            below = [
                f"{r} {b} ({t['beam5']['buckets'][b]['bleu']:.1f} < {t['beam1']['buckets'][b]['bleu']:.1f})"
                for r in sorted(evaluations)
                if split(r)[1] == cell
                for t in [evaluations[r]["tests"][spec]]
                for b in t["beam5"]["buckets"]
                if t["beam5"]["buckets"][b]["bleu"] < t["beam1"]["buckets"][b]["bleu"]
            ]
            print("Beam 5 below greedy:", "; ".join(below) or "in no bucket of any run", "\n")
            against = {"rnn": "the main job (rnn)", "transformer": "the shipped attention-only config"}
            for ref_model, name in against.items():
                pairs = [
                    p
                    for p in results["tests"][spec]["significance"]["pairs"]
                    if p["against"] == f"{ref_model}@{cell}"
                    and split(p["model"])[1] == cell
                    and (ref_model == "rnn" or split(p["model"])[0] in ("transformer_tuned", "rnn_smoothed"))
                ]
                if pairs:
                    print(f"Against {name}, beam 5: difference (p bootstrap, p randomisation) verdict\n")
                    for p in pairs:
                        print(
                            f"- {p['model']} {p['bucket']}: {p['mean_difference']:+.2f} "
                            f"({p['p_bootstrap']:.3f}, {p['p_randomisation']:.3f}) {p['verdict']}"
                        )
                    print()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else STUDY)
