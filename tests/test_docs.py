"""The documentation runs: every guide page's Python examples, the README's example, and an API-reference entry for
every public name of `jaxrbd`.

A page's ```python blocks run in order, in one namespace, in a fresh interpreter whose working folder is a scratch
folder (what an example writes stays there), with matplotlib drawing off screen. Each page is one test; the guides
and the README's example compile several rollouts each, so they run with the slow set.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GUIDES = sorted((DOCS / "guides").glob("*.md"))
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path):
    """The ```python blocks of a Markdown page, in order."""
    return BLOCK.findall(path.read_text())


def _run_page(path, tmp_path):
    code = "\n".join(python_blocks(path))
    assert code.strip(), f"{path.name} has no Python example"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, f"{path.name}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def test_every_guide_page_has_an_example():
    assert GUIDES, "docs/guides holds no page"
    assert [p.name for p in GUIDES if not python_blocks(p)] == []


# The heaviest pages (two to five minutes of one core each) run with the long set.
LONG_GUIDES = ("bodies", "cli", "identification", "impacts", "joints", "lcp", "mjcf", "robots")


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, marks=pytest.mark.long if p.stem in LONG_GUIDES else pytest.mark.slow) for p in GUIDES],
    ids=lambda p: p.stem,
)
def test_guide_examples_run(page, tmp_path):
    _run_page(page, tmp_path)


@pytest.mark.slow
def test_the_readme_example_runs(tmp_path):
    out = _run_page(ROOT / "README.md", tmp_path)
    assert (tmp_path / "cube.png").exists(), out


def _api_names():
    text = "\n".join(p.read_text() for p in (DOCS / "api").glob("*.md"))
    return set(re.findall(r"^::: (jaxrbd(?:\.\w+)+)", text, re.M))


def test_every_public_name_has_an_api_reference_entry():
    import jaxrbd

    # the command line is a public subpackage too, which `import jaxrbd` does not load
    public = {f"jaxrbd.{n}" for n in dir(jaxrbd) if not n.startswith("_")} | {"jaxrbd.cli"}
    documented = _api_names()
    # A submodule is documented by its own entry or by entries of its members.
    missing = sorted(
        name for name in public if name not in documented and not any(d.startswith(name + ".") for d in documented)
    )
    assert missing == []
