"""One measurement in a fresh process: lookback's (bench/lookback_run.py) or Joey NMT's
(bench/peers/joey.py, in its own venv), so that each one's peak memory is its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .common import REPO, read_json

JOEY_VENV = REPO / "bench" / ".venv-joey"
RESULTS = REPO / "results" / "bench"

# Joey's processes keep the memory they free, as lookback's training does for itself
# (keep_freed_memory in lookback/device.py): glibc otherwise maps each block over 32 MB afresh
# and faults in its pages again at every update, for Joey's logits as for lookback's. Like for
# like includes the allocator: on a 2-core Zen 3 Joey trained 1,376 target tokens/s without this
# and 1,690 with it (docs/lab/performance.md, session 55).
KEEP_FREED_MEMORY = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"


def child_env(system: str) -> dict[str, str]:
    """The environment of `system`'s process: this one's, and Joey's with KEEP_FREED_MEMORY
    (unless GLIBC_TUNABLES is set already, which then holds for both)."""
    env = dict(os.environ)
    if system.startswith("joey"):
        env.setdefault("GLIBC_TUNABLES", KEEP_FREED_MEMORY)
    return env


def ensure_joey(venv: Path) -> str | None:
    """Install Joey NMT unless its venv already works (setup_joey.sh checks); an error or None."""
    proc = subprocess.run(["bash", str(REPO / "bench/peers/setup_joey.sh"), "--venv", str(venv)])
    return None if proc.returncode == 0 else f"bench/peers/setup_joey.sh failed (exit {proc.returncode})"


def run_child(system: str, task: str, spec_path: Path, out_dir: Path, timeout: float, venv: Path) -> dict:
    """One measurement in a fresh process; its result, or a record of how it failed."""
    result_path = out_dir / f"{system}.{task}.json"
    log_path = out_dir / f"{system}.{task}.log"
    if not system.startswith("joey"):
        cmd = [sys.executable, "-m", "bench.lookback_run", task, str(spec_path), str(result_path)]
    else:
        cmd = [
            str(venv / "bin" / "python"),
            str(REPO / "bench/peers/joey.py"),
            task,
            str(spec_path),
            str(result_path),
        ]
    result_path.unlink(missing_ok=True)
    keep_earlier_log(log_path)
    start = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(
                cmd, cwd=REPO, env=child_env(system), stdout=log, stderr=subprocess.STDOUT, timeout=timeout
            )
            code: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    wall = time.perf_counter() - start
    if result_path.exists():
        result = read_json(result_path)
    else:
        result = {"system": system, "task": task, "error": f"no result (exit {code})"}
    if code == "timeout":
        result["error"] = f"timed out after {timeout:.0f} s"
    result["process_seconds"] = wall
    if result.get("error"):
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        result["log_tail"] = lines[-20:]
        result["log"] = str(log_path)
    return result


def keep_earlier_log(log_path: Path) -> None:
    """An earlier process's log of the same measurement (killed, then --resume) moves aside to
    LOG.1, LOG.2, ...: a training over several sittings keeps every sitting's log."""
    if log_path.exists():
        n = 1
        while log_path.with_name(f"{log_path.name}.{n}").exists():
            n += 1
        log_path.rename(log_path.with_name(f"{log_path.name}.{n}"))
