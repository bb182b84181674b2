"""Checkpoints: atomic writes, and loading that refuses damaged files and crafted pickles, in one line."""

from __future__ import annotations

import io
import json
import os
import random
import shlex
import struct
import zipfile
from pathlib import Path

import pytest
import torch

from lookback.cli import main
from lookback.config import Config
from lookback.training.checkpoint import CheckpointError, RunDir, load_checkpoint, save_checkpoint

from ..helpers import tiny_model


def _state() -> dict:
    """A checkpoint shaped like training's: weights, config and progress."""
    return {"model": tiny_model().state_dict(), "config": Config().to_dict(), "progress": {"step": 3}}


class RunsCode:
    """An object whose unpickling calls `fn(*args)`: what a malicious checkpoint would carry."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _crafted(kind: str, marker: Path) -> RunsCode:
    if kind == "os.system":
        return RunsCode(os.system, f"touch {shlex.quote(str(marker))}")
    return RunsCode(exec, f"open({str(marker)!r}, 'w').close()")  # builtins.exec


# Writing.


def test_save_is_atomic_with_fsync_then_rename(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    events = []
    fsync, replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: events.append("fsync") or fsync(fd))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("replace", Path(b).name)) or replace(a, b))
    save_checkpoint(_state(), path)
    assert events == ["fsync", ("replace", "last.pt"), "fsync"]  # the file, the rename, the directory
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_write_that_dies_midway_leaves_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(_state(), path)
    before = path.read_bytes()

    def dies_midway(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # SIGINT, or a full disk, mid-write

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"model": {}, "config": {}}, path)
    assert path.read_bytes() == before and load_checkpoint(path)["progress"] == {"step": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # the temporary file is gone


# Loading what is not a checkpoint: one line, never a traceback, never code.


@pytest.mark.parametrize("kind", ["os.system", "exec"])
@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_crafted_pickle_is_refused_without_running_it(tmp_path, kind, where):
    marker = tmp_path / "marker"
    state = _state()
    if where == "top":
        state["extra"] = _crafted(kind, marker)
    else:
        state["progress"] = {"rng": [1, {"deep": _crafted(kind, marker)}]}
    path = tmp_path / "best.pt"
    torch.save(state, path)

    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    global_name = "posix.system" if kind == "os.system" else "exec"  # as torch names them
    assert str(err.value) == (
        f"{path}: refused to load: it asks for the Python object {global_name}, and a checkpoint "
        f"holds only tensors and plain data (building other objects could run code)"
    )
    assert not marker.exists()

    torch.load(path, weights_only=False)  # the file is live: a plain unpickler runs its code
    assert marker.exists()


def test_translate_on_a_crafted_checkpoint_is_one_line_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "marker"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    torch.save({**_state(), "extra": _crafted("os.system", marker)}, run_dir / "best.pt")
    assert main(["translate", str(run_dir)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"lookback: error: {run_dir / 'best.pt'}: refused to load")
    assert not marker.exists()


def _damaged(data: bytes, how: str) -> bytes:
    rng = random.Random(how)
    if how == "empty":
        return b""
    if how.startswith("cut"):
        return data[: int(len(data) * float(how[3:]))]
    if how == "random bytes":
        return rng.randbytes(len(data))
    flipped = bytearray(data)  # "flip": one byte in the middle of the largest tensor's record
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        tensors = [r for r in archive.infolist() if "/data/" in r.filename]  # not data.pkl, the config
        record = max(tensors, key=lambda r: r.file_size)
    name_len, extra_len = struct.unpack("<HH", data[record.header_offset + 26 : record.header_offset + 30])
    start = record.header_offset + 30 + name_len + extra_len  # after the local file header
    flipped[start + record.file_size // 2] ^= 0x01
    return bytes(flipped)


@pytest.mark.parametrize("how", ["empty", "cut0.001", "cut0.5", "cut0.999", "random bytes", "flip"])
def test_a_damaged_file_is_one_line(tmp_path, how):
    path = tmp_path / "best.pt"
    save_checkpoint(_state(), path)
    path.write_bytes(_damaged(path.read_bytes(), how))
    with pytest.raises(CheckpointError, match=rf"^{path}: not a readable lookback checkpoint \(") as err:
        load_checkpoint(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_a_flipped_bit_in_the_weights_is_caught_by_its_checksum(tmp_path):
    """torch.load itself would return the changed weights; the CRC-32 check refuses them."""
    path = tmp_path / "best.pt"
    save_checkpoint(_state(), path)
    path.write_bytes(_damaged(path.read_bytes(), "flip"))
    with pytest.raises(CheckpointError, match=r"damaged: archive/data/\d+ fails its CRC-32 check\)$"):
        load_checkpoint(path)


def test_random_damage_is_refused_or_harmless(tmp_path):
    """Changed bytes give a CheckpointError, or, where they hit bytes that carry no data (padding,
    timestamps), exactly the weights that were saved: never an exception of another kind, never
    silently different weights."""
    path = tmp_path / "best.pt"
    state = _state()
    save_checkpoint(state, path)
    good = path.read_bytes()
    rng = random.Random(0)
    refused = 0
    for _ in range(80):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= rng.randrange(1, 256)  # always a change
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data) // 2, len(data))]
        path.write_bytes(bytes(data))
        try:
            loaded = load_checkpoint(path)
        except CheckpointError:
            refused += 1
            continue
        assert {**loaded, "model": None} == {**state, "model": None}
        assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
    assert refused > 60  # most damage hits data


@pytest.mark.parametrize(
    "state, reason",
    [
        ([1, 2], "no model or config inside"),
        ({"model": {}}, "no model or config inside"),
        ({"model": {"w": torch.ones(1)}, "config": "additive"}, "no model or config inside"),
        ({"model": {"w": [1.0, 2.0]}, "config": {}}, "its model is not a dict of named tensors"),
    ],
)
def test_a_file_that_is_not_ours_is_one_line(tmp_path, state, reason):
    path = tmp_path / "x.pt"
    save_checkpoint(state, path)
    with pytest.raises(CheckpointError, match=rf"^{path}: not a lookback checkpoint \({reason}\)$"):
        load_checkpoint(path)


def test_translate_on_a_corrupt_checkpoint_is_one_line_with_status_2(tmp_path, capsys):
    run_dir = tmp_path / "run"
    save_checkpoint(_state(), run_dir / "best.pt")
    (run_dir / "best.pt").write_bytes((run_dir / "best.pt").read_bytes()[:1000])
    assert main(["translate", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"lookback: error: {run_dir / 'best.pt'}: not a readable lookback checkpoint "
        f"(truncated, or not a torch.save archive: File is not a zip file)"
    ]
    with pytest.raises(CheckpointError):  # --debug: the traceback instead
        main(["--debug", "translate", str(run_dir)])


def test_the_run_directory_keeps_the_previous_last_and_writes_nothing_off_the_main_rank(tmp_path):
    run = RunDir(tmp_path / "run")
    run.prepare(resume=False)
    for step in (1, 2):
        run.save("last", {"model": {"w": torch.full((2,), float(step))}, "config": {}, "step": step})
    run.log({"step": 2})
    run.close()
    assert load_checkpoint(run.last)["step"] == 2 and load_checkpoint(run.prev)["step"] == 1
    assert json.loads((run.path / "metrics.jsonl").read_text()) == {"step": 2}
    with pytest.raises(FileExistsError, match="pass --resume"):
        run.prepare(resume=False)
    with pytest.raises(FileNotFoundError, match="nothing to resume"):
        RunDir(tmp_path / "empty").prepare(resume=True)
    other = RunDir(tmp_path / "rank1", writes=False)
    other.save("last", {"model": {}, "config": {}})
    other.log({"step": 1})
    assert not (tmp_path / "rank1").exists()
