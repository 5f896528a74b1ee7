"""Notebook collection: every notebook but the quick start (the paper reproductions at full scale, the friction
and restitution fits, the parameter sweep, the friction cones compared on one scene, the MJCF models stepped
beside MuJoCo with a fit, the fits to MuJoCo-made data, and the robots identified and controlled) runs with the
slow set (`pytest -m slow`, which CI runs too)."""

import pytest

SLOW_NOTEBOOKS = (
    "02_paper_reproductions.ipynb",
    "03_friction_identification.ipynb",
    "04_restitution_identification.ipynb",
    "05_parameter_sweep.ipynb",
    "06_friction_cones.ipynb",
    "07_models.ipynb",
    "08_foreign_data.ipynb",
    "09_robots.ipynb",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.name in SLOW_NOTEBOOKS:
            item.add_marker(pytest.mark.slow)
