"""Notebook collection: the costliest notebooks (the paper reproductions at full scale, and the MJCF models
stepped beside MuJoCo with a fit) run with the slow set (`pytest -m slow`, which CI runs too)."""

import pytest

SLOW_NOTEBOOKS = ("02_paper_reproductions.ipynb", "07_models.ipynb")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
