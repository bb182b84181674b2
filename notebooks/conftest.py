"""The notebooks run under pytest through nbmake (pyproject's addopts), a few minutes each: marked
slow, they run with `pytest -m slow`, as CI does (.ci/run)."""

import pytest


@pytest.hookimpl(tryfirst=True)  # before -m picks the tests by their marks
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
