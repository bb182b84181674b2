"""The notebooks run under pytest through nbmake (pyproject's addopts), a few minutes each: marked
slow, they run with `pytest -m slow`, as CI does (.ci/run). They run on half the training clocks
a reader gets (each notebook's MINUTES and SYNTH_MINUTES): the same code, every cell, in less time."""

import os

import pytest

# read by the notebooks' kernels, which nbmake starts with this process's environment
os.environ.setdefault("LOOKBACK_MINUTES", "1")
os.environ.setdefault("LOOKBACK_SYNTH_MINUTES", "0.5")


@pytest.hookimpl(tryfirst=True)  # before -m picks the tests by their marks
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
