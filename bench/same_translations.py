"""Do two versions of lookback translate a trained model identically? For refactorings that
must change shape, not results.

    git worktree add /tmp/before <rev>
    python -m bench same-translations RUN_DIR SOURCES --before /tmp/before [--after .] [--beams 1,5]

Each version, in its own process (its folder first on PYTHONPATH), loads RUN_DIR's best
checkpoint and translates SOURCES (one sentence per line, plain or .gz), greedy and with
each beam (up to 3 hypotheses). The report counts the sentences whose best tokens are the
same, and those whose every hypothesis is the same in tokens, score (to 1e-4) and attention
sum; it exits 1 when any differs. No figures are timed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DUMP = """
import gzip, json, sys
import torch
import lookback
from lookback.translator import Translator
print("translating with", lookback.__file__, file=sys.stderr)
run, src_file, beams, out = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
torch.set_num_threads(2)
opener = gzip.open if src_file.endswith(".gz") else open
src = [line.rstrip("\\n") for line in opener(src_file, "rt", encoding="utf-8")]
t = Translator.load(run)
result = {}
for beam in map(int, beams.split(",")):
    outs = t.translate_nbest(src, beam=beam, nbest=min(beam, 3))
    result[beam] = [
        [[o.ids, round(o.score, 4), None if o.attention is None else round(float(o.attention.sum()), 3)]
         for o in hyps]
        for hyps in outs
    ]
json.dump(result, open(out, "w"))
"""


def dump(code: Path, run_dir: str, sources: str, beams: str, out: Path) -> dict:
    """Translate with the lookback package in `code`: its folder first on the path, and the
    process started elsewhere, since `python -c` puts the working directory before everything."""
    env = {**os.environ, "PYTHONPATH": str(code.resolve())}
    args = [str(Path(run_dir).resolve()), str(Path(sources).resolve()), beams, str(out)]
    subprocess.run([sys.executable, "-c", DUMP, *args], env=env, cwd=out.parent, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench same-translations", description=__doc__.splitlines()[0]
    )
    ap.add_argument("run_dir", help="a trained run directory")
    ap.add_argument("sources", help="source sentences, one per line (plain or .gz)")
    ap.add_argument("--before", required=True, help="folder holding the lookback package to compare against")
    ap.add_argument("--after", default=".", help="folder holding the lookback package under test (default .)")
    ap.add_argument("--beams", default="1,5", help="beam sizes (default 1,5)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = dump(Path(args.before), args.run_dir, args.sources, args.beams, Path(tmp) / "before.json")
        after = dump(Path(args.after), args.run_dir, args.sources, args.beams, Path(tmp) / "after.json")
    opener = gzip.open if args.sources.endswith(".gz") else open
    with opener(args.sources, "rt", encoding="utf-8") as f:
        n = sum(1 for _ in f)
    same = True
    for beam in before:
        a, b = before[beam], after[beam]
        best = sum(x[0][0] == y[0][0] for x, y in zip(a, b, strict=True))
        whole = sum(x == y for x, y in zip(a, b, strict=True))
        print(f"beam {beam}: best tokens identical {best}/{n}; every hypothesis identical {whole}/{n}")
        same &= whole == n
    return 0 if same else 1
