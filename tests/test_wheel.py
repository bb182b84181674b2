"""The wheel holds the whole package: every module and data file of lookback/, the shipped configs
among them. A hand-written package list once left lookback.cli out of the wheel, so that only an
editable install worked; .ci/run also installs the wheel into a fresh venv and runs it."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import lookback

ROOT = Path(lookback.__file__).parent.parent


def source_files() -> set[str]:
    """Every file of the package's source tree, as a path inside the wheel (lookback/...)."""
    package = ROOT / "lookback"
    return {
        p.relative_to(ROOT).as_posix()
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def test_the_wheel_holds_every_module_and_data_file(tmp_path):
    # built from a copy: a build/ folder left in the checkout would hand on files the config lost
    tree = tmp_path / "tree"
    for name in ("pyproject.toml", "README.md"):
        (tree / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "lookback", tree / "lookback", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(tree)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("lookback-*.whl")
    inside = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("lookback/")}
    source = source_files()
    assert "lookback/cli/__init__.py" in source and "lookback/configs/quickstart.yaml" in source
    assert source - inside == set(), "in the source tree but not in the wheel"
    assert inside - source == set(), "in the wheel but not in the source tree"
