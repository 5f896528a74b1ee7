"""Shared test set-up: float64 everywhere, compiled code freed per module, no persistent compilation cache."""

import gc
import os

# `import jaxrbd` turns JAX's persistent compilation cache on; the tests leave it off (their notebook kernels
# inherit this), so that no run depends on what an earlier one left on disk. test_compilation_cache.py checks it.
os.environ["JAXRBD_CACHE"] = "0"

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_code():
    """Drop every compiled executable after each test module.

    Each XLA:CPU executable keeps a few memory mappings alive; the whole suite
    compiles thousands of programs, and one process that keeps them all crosses
    Linux's default vm.max_map_count (65530), after which the next compile
    aborts or segfaults inside XLA. Tests share compiled functions within a
    module (module-scoped fixtures, cached jitted closures), so freeing them at
    module boundaries costs little recompilation.
    """
    yield
    jax.clear_caches()
    gc.collect()
