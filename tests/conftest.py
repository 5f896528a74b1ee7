"""Shared test set-up: float64 everywhere, and the random-problem batches built once."""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import pytest

import jaxrbd as rbd


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
