"""The notebooks: each kept as a percent-format .py file (it diffs well) with the .ipynb that
Jupyter, Colab and nbmake open built from it (`jupytext --to ipynb notebooks/[0-9]*.py`), in step
and without outputs. pytest -m slow runs them (notebooks/conftest.py)."""

import ast
import json
from pathlib import Path

import jupytext
import pytest

from lookback.config import from_dict, load_config

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9]_*.py"))


def test_there_are_five_notebooks():
    assert [p.stem.split("_")[0] for p in NOTEBOOKS] == ["1", "2", "3", "4", "5"]


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


def _recipe_dict(source: Path) -> dict:
    """The `MULTI30K = {...}` recipe a notebook trains, read without running the notebook."""
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MULTI30K"]:
            # run_dir and time_limit are expressions (RUNS / ..., MINUTES): the rest are literals
            sections = dict(zip((k.value for k in node.value.keys), node.value.values, strict=True))
            train = sections["train"]
            for i in reversed(range(len(train.keys))):
                if train.keys[i].value in ("run_dir", "time_limit"):
                    del train.keys[i], train.values[i]
            return ast.literal_eval(node.value)
    raise AssertionError(f"{source.name} has no MULTI30K recipe")


@pytest.mark.parametrize("source", NOTEBOOKS[:2], ids=lambda p: p.stem)
def test_notebooks_1_and_2_train_the_main_jobs_recipe(source):
    """A change to configs/quickstart.yaml (its readout, dropout, learning rate) reaches the notebooks:
    both resolve to the same config, but for where the notebook trains, how long and how often it
    validates."""
    main_job = load_config(source.parent.parent / "configs" / "quickstart.yaml").to_dict()
    raw = _recipe_dict(source)
    raw["train"]["time_limit"] = 12  # the notebook's MINUTES, an expression
    recipe = from_dict(raw, source=source.name).to_dict()
    for cfg in (main_job, recipe):
        for key in ("run_dir", "time_limit", "valid_every"):  # the notebook's own folder and clock
            cfg["train"].pop(key)
    assert recipe == main_job
