"""The notebooks: each kept as a percent-format .py file (it diffs well) with the .ipynb that
Jupyter, Colab and nbmake open built from it (`jupytext --to ipynb notebooks/[0-9]*.py`), in step
and without outputs. pytest -m slow runs them (notebooks/conftest.py)."""

import json
from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9]_*.py"))


def test_there_are_four_notebooks():
    assert [p.stem.split("_")[0] for p in NOTEBOOKS] == ["1", "2", "3", "4"]


@pytest.mark.parametrize("source", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_ipynb_is_built_from_its_py_file(source):
    built = source.with_suffix(".ipynb")
    assert built.exists(), f"{built.name} is missing: jupytext --to ipynb {source}"
    cells = json.loads(built.read_text(encoding="utf-8"))["cells"]
    want = jupytext.read(source)["cells"]
    assert [(c["cell_type"], "".join(c["source"])) for c in cells] == [
        (c.cell_type, c.source) for c in want
    ], f"{built.name} differs from {source.name}: jupytext --to ipynb {source}"
    assert not any(c.get("outputs") for c in cells), f"{built.name} has outputs: build it again"


@pytest.mark.parametrize("source", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_notebook_starts_with_its_install_cell_and_ends_with_exercises(source):
    cells = jupytext.read(source)["cells"]
    code = [c.source for c in cells if c.cell_type == "code"]
    assert "pip" in code[0] and 'find_spec("lookback") is None' in code[0]  # on Colab only
    assert "from lookback.exercises import" in code[-1]
    assert (source.parent / "solutions" / source.name).exists()
