"""The Delassus structure of the friction LCP and the Newton step that uses it (`_newton.delassus_direction`)."""

import decimal
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrbd as rbd
from jaxrbd._problems import friction_lcp
from jaxrbd.complementarity import solve
from jaxrbd.complementarity._fb import fischer_burmeister, fischer_burmeister_partials
from jaxrbd.complementarity._newton import delassus_direction, row_scale

IMPULSE_RTOL = 1e-8  # the random-LCP acceptance: N c_n + D beta agrees with Lemke's to 1e-8 relative
RESIDUAL_TOL = 1e-8
COUNTS = (3, 5, 4)  # directions of the contacts of `_problem`


def _problem(seed, *, joints=2, masked=True):
    """A friction LCP with joint rows, contacts of 3, 5 and 4 directions and (optionally) masked rows."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 8)
    nv, nc, nd = 9, len(COUNTS), sum(COUNTS)
    Q, _ = jnp.linalg.qr(jax.random.normal(keys[0], (nv, nv)))
    M = (Q * jnp.exp(jax.random.uniform(keys[1], (nv,)) * math.log(1e3))) @ Q.T
    M = 0.5 * (M + M.T)
    N = jax.random.normal(keys[2], (nv, nc))
    D = jax.random.normal(keys[3], (nv, nd))
    J = jax.random.normal(keys[4], (nv, joints))
    mu = jax.random.uniform(keys[5], (nc,), minval=0.05, maxval=2.0)
    b = jax.random.normal(keys[6], (nv,))
    row_active = jax.random.uniform(keys[7], (2 * nc + nd,)) > 0.3 if masked else None
    return friction_lcp(M, N, D, mu, COUNTS, b, row_active=row_active, J=J, bj=jnp.ones((joints,)))


def _cone_part(lcp):
    """C of A = C + U M^-1 U^T, written out from the layout of 004 §3.2 (the lam column and the cone rows)."""
    f, ng, counts = lcp.delassus, lcp.n_free, lcp.counts
    nc, nd = len(counts), sum(counts)
    n = lcp.size
    C = np.zeros((n, n))
    k = np.asarray(f.keep)
    owner = np.repeat(np.arange(nc), counts)
    for j in range(nd):
        row, lam = ng + nc + j, ng + nc + nd + owner[j]
        C[row, lam] = k[row] * k[lam]
        C[lam, row] = -k[row] * k[lam]
    for c in range(nc):
        row, normal = ng + nc + nd + c, ng + c
        C[row, normal] = float(f.mu[c]) * k[row] * k[normal]
    return C + np.diag(1.0 - k)


@pytest.mark.parametrize("masked", [False, True])
def test_the_structure_gives_back_the_matrix(masked):
    """A = C + U M^-1 U^T to round-off, with joint rows and masked rows."""
    for seed in range(3):
        lcp = _problem(seed, masked=masked).lcp
        f = lcp.delassus
        A = _cone_part(lcp) + np.asarray(f.U @ jnp.linalg.solve(f.M, f.U.T))
        np.testing.assert_allclose(A, np.asarray(lcp.A), atol=1e-12 * float(jnp.max(jnp.abs(lcp.A))))


def _partials_at(lcp, key):
    """A random point z, its row scaling, residual and FB partials (equality rows: 0 and 1), as the solver forms them."""
    n = lcp.size
    z = jnp.where(jax.random.uniform(key, (n,)) < 0.5, 0.0, jax.random.uniform(jax.random.fold_in(key, 1), (n,)))
    s = row_scale(lcp.A)
    w = lcp.F(z)
    free = jnp.arange(n) < lcp.n_free
    phi = jnp.where(free, s * w, fischer_burmeister(z, s * w))
    da, db = fischer_burmeister_partials(z, s * w)
    return jnp.where(free, 0.0, da), jnp.where(free, 1.0, db), s, phi


@jax.jit
def _both_steps(lcp, key):
    """The Delassus step and the same step from the dense (n, n) matrix J + eps Db."""
    da, db, s, phi = _partials_at(lcp, key)
    eps = math.sqrt(float(jnp.finfo(phi.dtype).eps))
    dense = jnp.diag(da + eps * db) + (db * s)[:, None] * lcp.A
    return delassus_direction(lcp, da, db, s, phi), -jnp.linalg.solve(dense, phi)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), masked=st.booleans())
def test_the_delassus_step_is_the_dense_proximal_newton_step(seed, masked):
    """At random points of random problems, the (nv, nv) Woodbury solve equals the dense (n, n) one.

    To about eps_machine / eps = sqrt(eps_machine) relative: K^-1 has entries of 1/eps
    on the rows where Da = 0, and Woodbury's two terms cancel there (measured: 1.5e-8
    where the dense matrix has condition number 38). A Newton step needs no more.
    """
    lcp = _problem(seed, masked=masked).lcp
    d, dense = _both_steps(lcp, jax.random.PRNGKey(seed + 1))
    assert bool(jnp.all(jnp.isfinite(d)))
    bound = 100 * math.sqrt(np.finfo(np.float64).eps) * float(jnp.max(jnp.abs(dense)))
    np.testing.assert_allclose(np.asarray(d), np.asarray(dense), rtol=0, atol=bound)


# Magnitudes whose squares do not underflow (r = sqrt(a^2 + b^2) is formed from them), and zero.
_VALUES = st.one_of(st.just(0.0), st.floats(1e-150, 1e6), st.floats(-1e6, -1e-150))


@settings(deadline=None)
@given(a=_VALUES, b=_VALUES, eps=st.sampled_from([0.0, 1e-3]))
def test_fischer_burmeister_without_cancellation(a, b, eps):
    """The rewritten FB equals a + b - r in exact arithmetic (700 decimal digits: any float ratio), to a few ulps."""
    phi = float(fischer_burmeister(jnp.float64(a), jnp.float64(b), eps))
    with decimal.localcontext() as context:
        context.prec = 700
        da, db, de = decimal.Decimal(a), decimal.Decimal(b), decimal.Decimal(eps)
        exact = float(da + db - (da * da + db * db + 2 * de * de).sqrt())
    assert abs(phi - exact) <= 8 * np.finfo(np.float64).eps * abs(exact)


def test_fischer_burmeister_keeps_a_round_off_multiplier():
    """A multiplier of 1e-15 against w = 400 gives phi = 1e-15, not 0: the Newton step can take it back to 0."""
    assert float(fischer_burmeister(jnp.float64(-1e-15), jnp.float64(400.0))) == pytest.approx(-1e-15, rel=1e-12)
    assert float(fischer_burmeister(jnp.float64(1e-15), jnp.float64(400.0))) == pytest.approx(1e-15, rel=1e-12)


@jax.jit
def _solve_structured(probs):
    return jax.vmap(lambda p: solve(p.lcp))(probs), jax.vmap(lambda p: solve(p.lcp, solver=rbd.Lemke()))(probs)


def test_random_friction_lcps_solved_through_the_structure():
    """100 random friction LCPs (the issue-2 distribution), solved from their `FrictionLCP`: residual <= 1e-8, impulse = Lemke's.

    These problems carry their Delassus structure, so the default solver takes the
    (nv, nv) Newton steps (the vmapped batch rule, `run_lanes`).
    """
    keys = jax.random.split(jax.random.PRNGKey(7), 100)
    probs = jax.vmap(lambda k: rbd.random_friction_lcp(k))(keys)
    assert probs.lcp.delassus is not None
    sol, ref = _solve_structured(probs)
    assert bool(jnp.all(sol.converged))
    assert float(sol.residual.max()) <= RESIDUAL_TOL
    impulse = lambda z: jax.vmap(lambda p, z: p.impulse(z))(probs, z)
    x, y = impulse(sol.z), impulse(ref.z)
    momentum = jnp.linalg.norm(jnp.einsum("...ij,...j->...i", probs.M, probs.b), axis=-1)
    rel = jnp.linalg.norm(x - y, axis=-1) / jnp.maximum(jnp.linalg.norm(y, axis=-1), momentum)
    # Or the problem provably has two solutions (as in test_random_friction_lcps.py): both
    # residuals <= 1e-10 and impulses 1e-4 apart, four orders above the agreement asked.
    exact = (np.asarray(sol.residual) <= 1e-10) & (np.asarray(ref.residual) <= 1e-10)
    rel = np.asarray(rel)
    assert np.all((rel <= IMPULSE_RTOL) | (exact & (rel > 1e-4))), rel
