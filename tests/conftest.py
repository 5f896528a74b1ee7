"""Shared test set-up: float64 everywhere, and compiled code freed per module."""

import gc

import jax

jax.config.update("jax_enable_x64", True)

import pytest


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
