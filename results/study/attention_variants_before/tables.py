"""The tables of docs/study.md's attention-variants section, from this folder's study outputs.

lookback study configs/study/attention_variants.yaml --evaluate-only   # writes studies/attention_variants/
cp studies/attention_variants/{results.json,*.csv,*.png,report.md} results/study/attention_variants_before/
python results/study/attention_variants_before/tables.py
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent
SLUG = "concat_1-4_multi30k_test_2016_flickr"
SPEC = "concat:1-4:multi30k:test_2016_flickr"
ORDER = [
    "none64", "none128", "none", "none512", "dot", "general", "additive", "scaled_dot", "multihead",
    "sparsemax", "local_p", "coverage", "coverage_score", "sampling", "previous", "bahdanau",
]  # fmt: skip
WORKING = ["additive", "scaled_dot", "multihead", "sparsemax", "previous", "bahdanau"]


def rows(name: str) -> list[dict]:
    with (HERE / f"{name}_{SLUG}.csv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def table(head: list[str], body: list[list]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def by_bucket(results: dict, beam: str, key: str, models: list[str], digits: int = 1) -> str:
    buckets = list(results[beam][models[0]])
    sizes = [results[beam][models[0]][b]["sentences"] for b in buckets]
    head = ["model", *(f"{b} ({n})" for b, n in zip(buckets, sizes, strict=True))]
    body = [[m, *(f"{results[beam][m][b][key]:.{digits}f}" for b in buckets)] for m in models]
    return table(head, body)


def main() -> None:
    result = json.loads(gzip.decompress((HERE / "results.json.gz").read_bytes()))
    tests = result["tests"][SPEC]
    print(f"device: {result['device']}; evaluation {result['wall_seconds'] / 60:.1f} min\n")
    print("BLEU by source length (words; sentences in brackets), beam 5\n")
    print(by_bucket(tests, "beam5", "bleu", ORDER), "\n")
    print("chrF by source length, beam 5\n")
    print(by_bucket(tests, "beam5", "chrf", ORDER), "\n")

    gains = [r for r in rows("gain_over_none") if r["beam"] == "5"]
    buckets = list(dict.fromkeys(r["bucket"] for r in gains))
    models = [m for m in ORDER if any(r["model"] == m for r in gains)]
    cell = {(r["model"], r["bucket"]): f"{float(r['gain']):+.1f}" for r in gains}
    print(f"Gain over `{gains[0]['baseline']}` (BLEU points), beam 5\n")
    print(table(["model", *buckets], [[m, *(cell.get((m, b), "") for b in buckets)] for m in models]), "\n")

    comp = [r for r in rows("compression") if r["beam"] == "5"]
    kept = {r["model"]: r["numbers_kept"] for r in comp}
    grid = [m for m in ORDER if m in kept]
    numbers = {r["bucket"]: r["numbers_in"] for r in comp if r["model"] == grid[0]}
    head = ["source words", "numbers in", *(f"{m} ({kept[m]} kept)" for m in grid), "additive (attends)"]
    body = [
        [b, numbers[b], *(tests["beam5"][m][b]["bleu"] for m in grid), tests["beam5"]["additive"][b]["bleu"]]
        for b in numbers
    ]
    body = [[c if isinstance(c, str) else f"{c:.1f}" for c in row] for row in body]
    print("The fixed context against attention: BLEU at beam 5\n")
    print(table(head, body), "\n")

    hard = rows("hard_attention")
    print("Hard against soft attention (greedy), BLEU change per bucket, k = 1 / k = 2\n")
    buckets = list(dict.fromkeys(r["bucket"] for r in hard))
    change = {(r["model"], r["k"], r["bucket"]): float(r["change"]) for r in hard}
    soft = {(r["model"], r["bucket"]): float(r["soft_bleu"]) for r in hard}
    body = [
        [m, *(f"{soft[m, b]:.1f}: {change[m, '1', b]:+.1f} / {change[m, '2', b]:+.1f}" for b in buckets)]
        for m in ORDER
        if (m, "1", buckets[0]) in change
    ]
    print(table(["model (soft BLEU: k=1 / k=2)", *buckets], body), "\n")

    print("Hard against soft (greedy), averaged over the buckets up to 60 words: soft BLEU, change\n")
    body = []
    for m in WORKING:
        mine = [r for r in hard if r["model"] == m and r["bucket"] != "61+"]
        ones = [float(r["change"]) for r in mine if r["k"] == "1"]
        twos = [float(r["change"]) for r in mine if r["k"] == "2"]
        soft_bleu = [float(r["soft_bleu"]) for r in mine if r["k"] == "1"]
        k1 = f"{sum(ones) / len(ones):+.1f} (from {max(ones):+.1f} to {min(ones):+.1f})"
        body.append([m, f"{sum(soft_bleu) / len(soft_bleu):.1f}", k1, f"{sum(twos) / len(twos):+.1f}"])
    print(table(["model", "soft BLEU", "k = 1", "k = 2"], body), "\n")

    cov = [r for r in rows("coverage") if r["beam"] == "5"]
    print("Under-covered / over-covered source tokens / repeated output bigrams (%), beam 5\n")
    buckets = list(dict.fromkeys(r["bucket"] for r in cov))
    cell = {}
    for r in cov:
        parts = [r["under_covered"], r["over_covered"], r["repeated_bigrams"]]
        cell[r["model"], r["bucket"]] = " / ".join("-" if p == "" else f"{100 * float(p):.0f}" for p in parts)
    body = [[m, *(cell[m, b] for b in buckets)] for m in ORDER if (m, buckets[0]) in cell]
    print(table(["model", *buckets], body), "\n")

    print("Milliseconds per sentence, beam 5 (batch of a bucket's sentences, 2 threads)\n")
    print(by_bucket(tests, "beam5", "ms_per_sentence", ORDER), "\n")


if __name__ == "__main__":
    main()
