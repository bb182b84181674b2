"""python -m bench decoding RUN: fast CPU decoding against Joey NMT, on one bench run's weights.

    python -m bench decoding ~/.cache/lookback/bench/runs/STAMP/feed [--threads 1 2]
    python -m bench decoding JOEY_RUN/feed --lookback-run LOOKBACK_RUN/feed
    python -m bench decoding RUN/feed --system recipe --joey-system joey_best   # each tool's recipe

RUN is a configuration folder of a full `python -m bench headline` run: it holds
both systems' weights after the same training budget. With --lookback-run,
lookback's weights come from another run's folder: when Joey NMT needs a
longer budget (`python -m bench headline --only joey`) before its outputs have a
sane length. Translating needs no training, so this measures decoding
alone, again, in one run: for each
thread count, Joey NMT, then lookback on each backend (PyTorch, ONNX
Runtime) in fp32 and int8, each in a fresh process (its peak RSS its own),
on test_2016_flickr, greedy and beam 5. lookback reads an export of its
weights (`lookback export --onnx`, made once into RUN/lookback.export),
as a deployment would. Two more rows per thread count run ONNX Runtime with
the n best tokens picked in PyTorch from the graph's logits, as before the
decoder graph picked them itself: what that choice gives.

It prints a table and writes results/bench/<stamp>_<device>_decoding.json:
per combination, sentences/s, BLEU, peak RSS, the ratio of beam-5
sentences/s to Joey's at the same thread count, words per output (a search
does more steps for longer outputs, so sentences/s compare only where the
lengths are alike), and how many outputs differ from lookback's PyTorch
fp32 outputs at that thread count.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import machine, read_json, read_lines, versions, write_json
from .processes import JOEY_VENV, RESULTS, run_child

# (backend, quantize, the n best tokens picked in the ONNX graph); the last two rows are the
# ablation of that choice: the same graphs, the tokens picked from their logits in PyTorch
COMBOS = [
    ("torch", None, None),
    ("torch", "int8", None),
    ("onnxruntime", None, True),
    ("onnxruntime", "int8", True),
    ("onnxruntime", None, False),
    ("onnxruntime", "int8", False),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench decoding", description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a configuration folder of a full bench run (spec.json, weights)")
    ap.add_argument(
        "--markdown", action="store_true", help="RUN is a result JSON: print its table as Markdown"
    )
    ap.add_argument("--system", default="lookback", help="which lookback system's weights (lookback, recipe)")
    ap.add_argument(
        "--lookback-run",
        type=Path,
        help="take lookback's weights from this configuration folder of another bench run (default: RUN), "
        "e.g. when Joey NMT trained longer in a run of its own (--only joey)",
    )
    ap.add_argument(
        "--joey-system",
        choices=["joey", "joey_best"],
        default="joey",
        help="which Joey weights: joey (like for like, the default) or joey_best (Joey's own recipe)",
    )
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default 1 2)")
    ap.add_argument("--joey-venv", type=Path, default=JOEY_VENV)
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    return ap.parse_args(argv)


def export_weights(run: Path, system: str) -> Path:
    """RUN/SYSTEM's last.pt as an export with ONNX graphs (made once)."""
    out = run / f"{system}.export"
    if not (out / "onnx" / "decoder.int8-vnni.onnx").is_file():  # (exports before it: made again)
        cmd = [sys.executable, "-m", "lookback", "export", str(run / system), "-o", str(out)]
        subprocess.run([*cmd, "--checkpoint", "last", "--onnx"], check=True)
    return out


def words_per_line(path: Path) -> float | None:
    """The mean number of words of a hypothesis file's lines (None when it is missing)."""
    if not path.is_file():
        return None
    lines = read_lines(path)
    return sum(len(line.split()) for line in lines) / max(len(lines), 1)


def differing(a: Path, b: Path) -> int | None:
    """How many lines of two hypothesis files differ (None when one is missing)."""
    if not (a.is_file() and b.is_file()):
        return None
    return sum(x != y for x, y in zip(read_lines(a), read_lines(b), strict=True))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.markdown:
        print(markdown(read_json(args.run)))
        return 0
    record, out = measure(args)
    print_table(record)
    print(f"written: {out}")
    return 0 if not record["errors"] else 1


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], Path]:
    """Every combination at every thread count, each in a fresh process; the record and its path."""
    spec = read_json(args.run / "spec.json")
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    hyp_dir = args.run / f"decoding_{stamp}"
    hyp_dir.mkdir()
    model_dir = export_weights(args.lookback_run or args.run, args.system)
    load_start = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        jobs = [(args.joey_system, "", {"system": args.joey_system})]
        for backend, quantize, top_in_graph in COMBOS:
            where = "_topk_torch" if top_in_graph is False else ""
            slug = f".{backend}{'_int8' if quantize else ''}{where}"
            extra = {
                "system": args.system,
                "model_dir": str(model_dir),
                "backend": backend,
                "quantize": quantize,
                "top_in_graph": top_in_graph,
                "precision": "fp32",  # not auto, which is bf16 on a CPU with avx512_bf16: the reference
            }
            name = f"lookback {backend}{' int8' if quantize else ''}"
            jobs.append((name + (", top-k in PyTorch" if top_in_graph is False else ""), slug, extra))
        for name, slug, extra in jobs:
            system, tag = extra["system"], f"{slug}.t{threads}"
            child = {**spec, **extra, "threads": threads, "hyp_dir": str(hyp_dir), "tag": tag}
            path = hyp_dir / f"spec.{system}{tag}.json"
            write_json(path, child)
            print(f"bench.decoding: {name}, {threads} thread(s) ...", flush=True)
            result = run_child(system, "translate", path, hyp_dir, 3600, args.joey_venv)
            for kind in ("json", "log"):  # run_child names them by system and task: one per job here
                done = hyp_dir / f"{system}.translate.{kind}"
                if done.exists():
                    done.rename(hyp_dir / f"{system}{tag}.translate.{kind}")
            rows.append({"name": name, "threads": threads, "tag": tag, "system": system, "result": result})
    record = summarise(rows, hyp_dir, args.joey_system)
    record.update(
        created=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        machine={**machine(spec["device"]), "loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        versions=versions(),
        run=str(args.run),
        lookback_run=str(args.lookback_run or args.run),
        model=str(model_dir),
        test=spec["test"],
        decode_batch_size=spec["decode_batch_size"],
        systems={"lookback": args.system, "joey": args.joey_system},
    )
    out = args.results_dir / f"{stamp}_{spec['device']}_decoding.json"
    write_json(out, record)
    return record, out


def summarise(rows: list[dict[str, Any]], hyp_dir: Path, joey_system: str = "joey") -> dict[str, Any]:
    """One entry per combination, with ratios against Joey and output differences from fp32."""
    table, errors = [], []
    joey = {r["threads"]: r for r in rows if r["system"] == joey_system}
    fp32 = {r["threads"]: r for r in rows if r["name"] == "lookback torch"}
    for r in rows:
        res, figs = r["result"], r["result"].get("figures") or {}
        if res.get("error"):
            errors.append(f"{r['name']}, {r['threads']} thread(s): {res['error']}")
        entry: dict[str, Any] = {"name": r["name"], "threads": r["threads"], "peak_rss_gb": None}
        if res.get("peak_rss_bytes"):
            entry["peak_rss_gb"] = res["peak_rss_bytes"] / 1e9
        for beam in (1, 5):
            b = figs.get(f"beam{beam}") or {}
            entry[f"beam{beam}_sentences_per_s"] = b.get("sentences_per_s")
            entry[f"beam{beam}_bleu"] = b.get("bleu")
            # the search's work grows with the output: sentences/s compare only at equal lengths
            entry[f"beam{beam}_words_per_output"] = words_per_line(
                hyp_dir / f"{r['system']}{r['tag']}.beam{beam}.txt"
            )
            j = ((joey.get(r["threads"]) or {}).get("result", {}).get("figures") or {}).get(
                f"beam{beam}"
            ) or {}
            mine, theirs = b.get("sentences_per_s"), j.get("sentences_per_s")
            entry[f"beam{beam}_vs_joey"] = mine / theirs if mine and theirs else None
            if r["system"] != joey_system and r["threads"] in fp32:
                base = hyp_dir / f"{r['system']}{fp32[r['threads']]['tag']}.beam{beam}.txt"
                entry[f"beam{beam}_differ_from_fp32"] = differing(
                    hyp_dir / f"{r['system']}{r['tag']}.beam{beam}.txt", base
                )
        table.append(entry)
    return {"schema": 1, "rows": table, "errors": errors, "raw": rows}


def print_table(record: dict[str, Any]) -> None:
    m = record["machine"]
    where = f"{m['device']} ({m['cpu_model']})"
    print(f"\ndecoding on {where}, {record['test']}, batch {record['decode_batch_size']}")
    head = ["system", "thr", "greedy s/s", "beam5 s/s", "x Joey", "BLEU g", "BLEU b5", "words b5"]
    head += ["differ b5", "RSS GB"]
    print("".join(f"{h:>12}" if i else f"{h:24}" for i, h in enumerate(head)))
    for e in record["rows"]:
        cells = [
            e["threads"],
            e["beam1_sentences_per_s"],
            e["beam5_sentences_per_s"],
            e["beam5_vs_joey"],
            e["beam1_bleu"],
            e["beam5_bleu"],
            e.get("beam5_words_per_output"),
            e.get("beam5_differ_from_fp32"),
            e["peak_rss_gb"],
        ]
        text = [f"{c:.2f}" if isinstance(c, float) else "-" if c is None else str(c) for c in cells]
        print(f"{e['name']:24}" + "".join(f"{t:>12}" for t in text))
    for error in record["errors"]:
        print(f"  MISS {error}")


def markdown(record: dict[str, Any]) -> str:
    """The table of a result, as docs/performance.md shows it."""
    lines = [
        "| system | threads | greedy sent/s | beam 5 sent/s | beam 5 x Joey | BLEU greedy | BLEU beam 5 "
        "| words per beam-5 output | beam-5 outputs unlike fp32 | peak RSS (GB) |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for e in record["rows"]:
        cells = [
            e["name"],
            e["threads"],
            f"{e['beam1_sentences_per_s']:.1f}",
            f"{e['beam5_sentences_per_s']:.1f}",
            f"{e['beam5_vs_joey']:.2f}",
            f"{e['beam1_bleu']:.2f}",
            f"{e['beam5_bleu']:.2f}",
            "-" if e.get("beam5_words_per_output") is None else f"{e['beam5_words_per_output']:.1f}",
            "-" if e.get("beam5_differ_from_fp32") is None else e["beam5_differ_from_fp32"],
            f"{e['peak_rss_gb']:.2f}",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
