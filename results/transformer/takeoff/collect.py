"""Gather the take-off runs into runs.json: each run's command, validation curve and test scores.

    python results/transformer/takeoff/collect.py RUNS_DIR EVALS_DIR NAME[=COMMAND] ...

RUNS_DIR/NAME is a run directory of `lookback train`; EVALS_DIR/NAME_b1.json and _b5.json, where
present, are `lookback evaluate RUNS_DIR/NAME --beam 1|5 --json`. Each validation keeps its update,
minutes, BLEU (greedy), perplexity and the attention probes of lookback's diagnostics: the weights'
entropy as a share of uniform, the scores' spread and the attention's gradient.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lookback.device import machine

HERE = Path(__file__).parent
FIELDS = ("step", "seconds", "bleu", "ppl", "alpha_entropy", "score_spread", "attention_grad")


def cpu_model() -> str:
    """The CPU's family and model numbers (/proc/cpuinfo), which tell its generation apart."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in info.splitlines()[:30])}
    return f"family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}"


def run_record(run: Path, evals: Path, command: str) -> dict:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [[round(r.get(k, 0.0), 3) for k in FIELDS] for r in records if r.get("kind") == "valid"]
    out = {"command": command, "valid_fields": list(FIELDS), "valid": valid}
    for beam in (1, 5):
        path = evals / f"{run.name}_b{beam}.json"
        if path.exists():
            e = json.loads(path.read_text())
            out[f"test_beam{beam}"] = {"bleu": round(e["bleu"], 2), "ratio": round(e["length_ratio"], 3)}
    return out


def main() -> None:
    runs, evals, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    path = HERE / "runs.json"
    data = json.loads(path.read_text()) if path.exists() else {"machine": machine(), "runs": {}}
    data["machine"]["cpu_model"] = cpu_model()
    for item in names:
        name, _, command = item.partition("=")
        command = command or data["runs"].get(name, {}).get("command", "")
        data["runs"][name] = run_record(runs / name, evals, command)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{path}: {len(data['runs'])} runs")


if __name__ == "__main__":
    main()
