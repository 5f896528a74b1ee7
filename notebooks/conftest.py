"""Notebook collection: the ones that reproduce papers at full scale run with the slow set (`pytest -m slow`)."""

import pytest

SLOW_NOTEBOOKS = ("02_paper_reproductions.ipynb",)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
