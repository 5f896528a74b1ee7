"""Notebook collection: the costliest notebooks (the paper reproductions at full scale, the MJCF models
stepped beside MuJoCo with a fit, the friction cones compared on one scene, and the fits to MuJoCo-made
data) run with the slow set (`pytest -m slow`, which CI runs too)."""

import pytest

SLOW_NOTEBOOKS = ("02_paper_reproductions.ipynb", "06_friction_cones.ipynb", "07_models.ipynb", "08_foreign_data.ipynb")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
