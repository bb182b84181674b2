"""The tables of docs/attention_as_explanation.md, printed as Markdown from results.json
(written by make.py beside this file):

    python results/explanation/tables.py [results.json]
"""

import json
import sys
from pathlib import Path

path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results.json"
results = json.loads(path.read_text(encoding="utf-8"))
models = results["models"]
attending = {name: row for name, row in models.items() if row["diagnostics"]}
KINDS = ("uniform", "permute", "drop_max", "other")


def pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:.0f}%"


def table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()


def buckets(row: dict) -> list[str]:
    return [b for b in row if b != "all"]


print(f"device: {results['device']}; test: {results['test']}\n")

print("Diagnostics, all sentences (greedy outputs)\n")
table(
    [
        "model",
        "BLEU",
        "entropy",
        "near-uniform steps",
        "never argmax",
        "over 1.5",
        "parking (uniform)",
        "backward",
    ],
    [
        [
            name,
            f"{models[name]['faithfulness']['all']['greedy']['bleu']:.1f}",
            f"{d['entropy']:.2f}",
            pct(d["near_uniform"]),
            pct(d["unattended"]),
            pct(d["over_attended"]),
            f"{pct(d['parking'])} ({pct(d['parking_share'])})",
            pct(d["backward"]),
        ]
        for name, row in attending.items()
        for d in [row["diagnostics"]["all"]]
    ],
)

print("Entropy / near-uniform steps by source length (words)\n")
first = next(iter(attending.values()))["diagnostics"]
table(
    ["model", *buckets(first)],
    [
        [name]
        + [
            f"{row['diagnostics'][b]['entropy']:.2f} / {pct(row['diagnostics'][b]['near_uniform'])}"
            for b in buckets(first)
        ]
        for name, row in attending.items()
    ],
)

print("Counterfactuals, all sentences: JS divergence (bits) / argmax flips / BLEU change\n")
table(
    ["model", "greedy BLEU", *KINDS],
    [
        [name, f"{f['greedy']['bleu']:.1f}"]
        + [
            f"{f[k]['js_divergence']:.2f} / {pct(f[k]['flipped_steps'])} / {f[k]['bleu_change']:+.1f}"
            if k in f
            else "n/a"
            for k in KINDS
        ]
        for name, row in models.items()
        for f in [row["faithfulness"]["all"]]
    ],
)

print("BLEU with permuted attention, by source length (greedy BLEU -> permuted)\n")
table(
    ["model", *buckets(first)],
    [
        [name]
        + [
            f"{f[b]['greedy']['bleu']:.1f} -> {f[b]['permute']['bleu']:.1f}"
            if "permute" in f.get(b, {})
            else f"{f[b]['greedy']['bleu']:.1f}"
            for b in buckets(first)
            if b in f
        ]
        for name, row in models.items()
        for f in [row["faithfulness"]]
    ],
)

print("Attention against gradients (Kendall tau-b / same top token)\n")
table(
    [
        "model",
        "sentences (tokens)",
        "gradient x input",
        "integrated gradients",
        "IG completeness gap (median)",
    ],
    [
        [
            name,
            f"{row['integrated_gradients']['sentences']} ({row['integrated_gradients']['tokens']})",
            f"{row['grad_x_input']['kendall_tau']:.2f} / {pct(row['grad_x_input']['same_top'])}",
            f"{ig['kendall_tau']:.2f} / {pct(ig['same_top'])}",
            f"{ig['median_gap']:.3f}",
        ]
        for name, row in attending.items()
        for ig in [row["integrated_gradients"]]
    ],
)

if any("eflomal_agreement" in row for row in attending.values()):
    print(
        f"Agreement with eflomal (learned in {results['eflomal_seconds']:.0f} s): "
        "1 - AER / precision / recall\n"
    )
    table(
        ["model", "agreement (1 - AER)", "precision", "recall"],
        [
            [name, pct(1 - e["aer"]), pct(e["precision"]), pct(e["recall"])]
            for name, row in attending.items()
            if (e := row.get("eflomal_agreement"))
        ],
    )

spread = path.parent / "uniform_steps.json"
if spread.exists():
    print("Steps by the entropy of their weights (uniform_steps.py): JS, flips with uniform weights\n")
    rows = []
    for name, groups in json.loads(spread.read_text(encoding="utf-8"))["models"].items():
        for label, g in groups.items():
            if not g["steps"]:
                continue
            share = f"{100 * g['share']:.1f}%" if g["steps"] >= 100 else f"{g['steps']} steps"
            top = ", ".join(p.lstrip("\u2581") for p, _ in g["top_pieces"][:6])
            u = g["uniform"]
            rows.append(
                [
                    name,
                    label,
                    share,
                    f"{u['js_divergence']:.2f}, {pct(u['flipped'])}",
                    pct(g["punctuation_or_end"]),
                    top,
                ]
            )
    table(
        [
            "model",
            "group",
            "share of steps",
            "JS, flips with uniform weights",
            "punct. or </s>",
            "most frequent outputs",
        ],
        rows,
    )
