"""A measurement's own process: what its environment holds."""

import platform
import subprocess
import sys

import pytest

from bench.processes import KEEP_FREED_MEMORY, child_env

from ..test_device import FREE_AND_ASK_AGAIN


@pytest.mark.skipif(platform.system() != "Linux", reason="glibc's malloc: Linux only")
def test_joeys_processes_keep_freed_memory_as_lookbacks_training_does(monkeypatch):
    """Like for like includes the allocator: Joey's child process keeps a freed 64 MB block, as
    lookback's training does by keep_freed_memory (tests/test_device.py), without being asked."""
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    assert "GLIBC_TUNABLES" not in child_env("lookback")
    assert child_env("joey_best")["GLIBC_TUNABLES"] == KEEP_FREED_MEMORY
    run = subprocess.run(
        [sys.executable, "-c", FREE_AND_ASK_AGAIN, "free"],
        env=child_env("joey"),
        capture_output=True,
        text=True,
        check=True,
    )
    kept, returned_mb = run.stdout.split()
    assert kept == "None" and float(returned_mb) < 4
