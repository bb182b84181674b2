"""Score a bench run's test translations as lookback's `evaluate` does: sacreBLEU, chrF and the
Multi30k protocol (lookback/decoding/evaluate.py), for every system and beam, from the hypothesis files.

    python -m bench scores WORK_DIR/runs/STAMP/CONFIG [--json OUT.json]

The bench itself records sacreBLEU with default settings (bench/common.py), the one score both
systems' environments can compute; this adds the scores that compare with the literature.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import settings
from .common import cpu_flags, cpu_model, read_json, read_lines, write_json


def scores(run_dir: Path) -> dict[str, dict]:
    """{"SYSTEM.beamK": Scores as a dict} for every hypothesis file in the run directory."""
    from lookback.decoding.evaluate import score

    spec = read_json(run_dir / "spec.json")
    refs = read_lines(Path(spec["data_dir"]) / f"{spec['test']}.{settings.TGT_LANG}")
    out = {}
    for path in sorted(run_dir.glob("*.beam*.txt")):
        hyps = read_lines(path)
        out[path.stem] = {"file": path.name, **score(hyps, refs, settings.TGT_LANG).to_dict()}
    if not out:
        raise SystemExit(f"bench.scores: no SYSTEM.beamK.txt in {run_dir}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench scores", description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, help="one configuration's folder of a bench run (holds spec.json)")
    ap.add_argument("--json", type=Path, help="also write the scores here")
    args = ap.parse_args(argv)
    result = scores(args.run_dir)
    for name, s in result.items():
        print(
            f"{name:16} BLEU {s['bleu']:6.2f}  chrF {s['chrf']:6.2f}  "
            f"Multi30k protocol {s['multi30k_bleu']:6.2f}"
        )
    if args.json:  # each system's scores, and the machine that scored them
        write_json(args.json, {**result, "machine": {"cpu": cpu_model(), "cpu_flags": cpu_flags()}})
    return 0
