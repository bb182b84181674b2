"""The summary figures docs/study.md quotes from the attention-variants study's CSVs.

    python results/study/attention_variants_summary/summary.py

- hard attention at inference: the change in greedy BLEU when each step keeps only its k largest
  weights, averaged over a model's seeds and the buckets of 1-60 source words (61+ holds 4
  sentences);
- the cost on the clock: ms per sentence at beam 5 on 41-60-word inputs, averaged over seeds.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "attention_variants"
TEST = "concat_1-4_multi30k_test_2016_flickr"


def rows(name: str) -> list[dict[str, str]]:
    with open(HERE / f"{name}_{TEST}.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def family(model: str) -> str:
    return model.split("#")[0]  # dot#2 is dot's second seed


def main() -> None:
    hard: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows("hard_attention"):
        if r["bucket"] != "61+":
            change = float(r["hard_bleu"]) - float(r["soft_bleu"])
            hard[family(r["model"]), r["k"]][r["bucket"]].append(change)
    print("hard attention at inference, greedy: mean change in BLEU (1-60 words, all seeds; by bucket)")
    for (model, k), buckets in sorted(hard.items()):
        every = [c for changes in buckets.values() for c in changes]
        each = "  ".join(f"{b}: {statistics.mean(c):+.2f}" for b, c in buckets.items())
        print(f"  {model:18} k={k}: {statistics.mean(every):+.2f}   {each}")
    cost: dict[str, list[float]] = defaultdict(list)
    for r in rows("cost"):
        if r["beam"] == "5" and r["bucket"] == "41-60":
            cost[family(r["model"])].append(float(r["ms_per_sentence"]))
    print("beam 5, 41-60-word inputs: ms per sentence (mean over seeds)")
    for model, ms in sorted(cost.items()):
        print(f"  {model:18} {statistics.mean(ms):6.1f}  ({len(ms)} run{'s' if len(ms) > 1 else ''})")


if __name__ == "__main__":
    main()
