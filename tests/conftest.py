"""Shared test set-up: float64 everywhere, the random-problem batches built once, and compiled code freed per module."""

import gc

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import pytest

import jaxrbd as rbd


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


def random_batch(n, seed=0, dtype=jnp.float64):
    """n random friction LCPs (the acceptance distribution of issue 2), stacked."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return jax.vmap(lambda k: rbd.random_friction_lcp(k, dtype=dtype))(keys)


@jax.jit
def solve_batch_ssn(A, b, z0):
    return jax.vmap(lambda A, b, z0: rbd.solve_lcp(A, b, z0=z0))(A, b, z0)


@jax.jit
def solve_batch_lemke(A, b):
    return jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=rbd.Lemke()))(A, b)


@pytest.fixture(scope="session")
def batch100():
    """100 random friction LCPs with their default-solver and Lemke solutions."""
    probs = random_batch(100, seed=1)
    A, b = probs.lcp.A, probs.lcp.b
    return probs, solve_batch_ssn(A, b, jnp.zeros_like(b)), solve_batch_lemke(A, b)
