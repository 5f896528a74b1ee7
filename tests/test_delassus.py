"""The Delassus structure of the friction LCP and the Newton step that uses it (`_newton.delassus_direction`)."""

import dataclasses
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
from jaxrbd.complementarity import DenseAdjoint, solve
from jaxrbd.complementarity._fb import fischer_burmeister, fischer_burmeister_partials
from jaxrbd.complementarity._implicit import ADJOINT_EPS_POWER, PINV_RTOL_FACTOR, min_norm_lstsq, reverse_partials
from jaxrbd.complementarity._newton import delassus_direction, delassus_transposed_solver, row_scale

IMPULSE_RTOL = 1e-8  # the random-LCP acceptance: N c_n + D beta agrees with Lemke's to 1e-8 relative
RESIDUAL_TOL = 1e-8
COUNTS = (3, 5, 4)  # directions of the contacts of `_problem`


def _problem(seed, *, joints=2, masked=True, counts=COUNTS):
    """A friction LCP with joint rows, contacts of `counts` directions (3, 5 and 4) and (optionally) masked rows."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 8)
    nv, nc, nd = 9, len(counts), sum(counts)
    Q, _ = jnp.linalg.qr(jax.random.normal(keys[0], (nv, nv)))
    M = (Q * jnp.exp(jax.random.uniform(keys[1], (nv,)) * math.log(1e3))) @ Q.T
    M = 0.5 * (M + M.T)
    N = jax.random.normal(keys[2], (nv, nc))
    D = jax.random.normal(keys[3], (nv, nd))
    J = jax.random.normal(keys[4], (nv, joints))
    mu = jax.random.uniform(keys[5], (nc,), minval=0.05, maxval=2.0)
    b = jax.random.normal(keys[6], (nv,))
    row_active = jax.random.uniform(keys[7], (2 * nc + nd,)) > 0.3 if masked else None
    return friction_lcp(M, N, D, mu, counts, b, row_active=row_active, J=J, bj=jnp.ones((joints,)))


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


@pytest.mark.parametrize("counts", [COUNTS, (4, 4, 4)], ids=["mixed", "uniform"])
@pytest.mark.parametrize("masked", [False, True])
def test_the_structure_gives_back_the_matrix(masked, counts):
    """A = C + U M^-1 U^T to round-off, with joint rows and masked rows; its products A z, A^T y and the
    bound |C|^T |y| + |X|^T |X| |y| on A^T y's terms equal the written-out matrix's."""
    for seed in range(3):
        lcp = _problem(seed, masked=masked, counts=counts).lcp
        f = lcp.delassus
        C = _cone_part(lcp)
        A = C + np.asarray(f.U @ jnp.linalg.solve(f.M, f.U.T))
        atol = 1e-12 * float(jnp.max(jnp.abs(lcp.A)))
        np.testing.assert_allclose(A, np.asarray(lcp.A), atol=atol)
        z = np.asarray(jax.random.normal(jax.random.PRNGKey(seed + 10), (lcp.size,)))
        X = np.abs(np.asarray(f.X))
        np.testing.assert_allclose(np.asarray(f.apply(jnp.asarray(z))), A @ z, atol=10 * atol * np.abs(z).sum())
        np.testing.assert_allclose(
            np.asarray(f.apply_transposed(jnp.asarray(z))), A.T @ z, atol=10 * atol * np.abs(z).sum()
        )
        bound = np.abs(C).T @ np.abs(z) + X.T @ (X @ np.abs(z))
        np.testing.assert_allclose(np.asarray(f.magnitude_transposed(jnp.asarray(z))), bound, rtol=1e-12)
    # A batch of problems (built under vmap) forms each one's matrix.
    batch = jax.vmap(lambda seed: _problem(seed, masked=masked, counts=counts).lcp)(jnp.arange(3))
    for seed in range(3):
        np.testing.assert_allclose(
            np.asarray(batch.A[seed]), np.asarray(_problem(seed, masked=masked, counts=counts).lcp.A)
        )


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


@jax.jit
def _both_transposed_solves(lcp, key):
    """The structured (J + eps Db)^-T r at the adjoint's eps, and the same from the dense (n, n) matrix."""
    da, db, s, _ = _partials_at(lcp, key)
    r = jax.random.normal(jax.random.fold_in(key, 2), (lcp.size,))
    eps = float(jnp.finfo(r.dtype).eps) ** ADJOINT_EPS_POWER
    dense = jnp.diag(da + eps * db) + (db * s)[:, None] * lcp.A
    return delassus_transposed_solver(lcp, da, db, s, eps)(r), jnp.linalg.solve(dense.T, r)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), masked=st.booleans())
def test_the_transposed_solver_is_the_dense_transposed_solve(seed, masked):
    """The reverse pass's (nv, nv) solve of the transpose equals the dense one, to eps_machine / eps relative.

    The same cancellation as the forward step's (K^-T has entries of 1/eps), at the
    adjoint's smaller eps = eps_machine^(2/3); its refinements against J remove it.
    """
    lcp = _problem(seed, masked=masked).lcp
    u, dense = _both_transposed_solves(lcp, jax.random.PRNGKey(seed + 2))
    assert bool(jnp.all(jnp.isfinite(u)))
    machine = float(np.finfo(np.float64).eps)
    bound = 100 * machine ** (1.0 - ADJOINT_EPS_POWER) * float(jnp.max(jnp.abs(dense)))
    np.testing.assert_allclose(np.asarray(u), np.asarray(dense), rtol=0, atol=bound)


def test_the_delassus_derivatives_equal_central_differences():
    """A, F(z) and v+ differentiated through the rules with respect to M and U^T (X = L^-1 U^T and L^-1 are
    caches), once and twice, equal central differences along a symmetric dM and any dN, dD, dJ, to 1e-7."""
    p = _problem(3)
    keys = jax.random.split(jax.random.PRNGKey(11), 5)
    dM = jax.random.normal(keys[0], p.M.shape)
    dM = dM + dM.T
    dN, dD, dJ = (jax.random.normal(k, x.shape) for k, x in zip(keys[1:4], (p.N, p.D, p.J), strict=True))
    z = jax.random.uniform(keys[4], (p.lcp.size,))
    row_active = p.lcp.delassus.keep[p.J.shape[1] :] > 0

    def evaluate(t):
        q = friction_lcp(
            p.M + t * dM, p.N + t * dN, p.D + t * dD, p.lcp.delassus.mu, COUNTS, p.b,
            row_active=row_active, J=p.J + t * dJ, bj=jnp.ones((p.J.shape[1],)),
        )  # fmt: skip
        return q.lcp.A, q.lcp.F(z), q.velocity(z)

    derivative = lambda t: jax.jvp(evaluate, (t,), (jnp.ones_like(t),))[1]
    _, second = jax.jvp(derivative, (jnp.float64(0.0),), (jnp.float64(1.0),))
    h = 1e-6
    # First derivatives against differences of the values, second against differences of the first.
    pairs = [(evaluate, derivative(jnp.float64(0.0))), (derivative, second)]
    for f, derivatives in pairs:
        for d, plus, minus in zip(derivatives, f(jnp.float64(h)), f(jnp.float64(-h)), strict=True):
            central = (plus - minus) / (2 * h)
            np.testing.assert_allclose(
                np.asarray(d), np.asarray(central), rtol=0, atol=1e-7 * float(jnp.max(jnp.abs(central)))
            )


def _velocity_gradient(params, structured):
    """d(w . v+)/d(M, N, D, mu, b) of a solved friction LCP: the reverse pass through its structure, or by the pseudo-inverse."""

    def loss(params):
        M, N, D, mu, b = params
        p = friction_lcp(M, N, D, mu, COUNTS, b)
        lcp = p.lcp if structured else dataclasses.replace(p.lcp, dense=p.lcp.A, delassus=None)
        v = p.velocity(solve(lcp).z)
        return jnp.dot(jnp.arange(1.0, v.shape[0] + 1.0), v)

    return jax.grad(loss)(params)


_velocity_gradients = jax.jit(
    jax.vmap(lambda params: (_velocity_gradient(params, True), _velocity_gradient(params, False)))
)


@pytest.mark.slow  # the Delassus derivatives against central differences stay in the default set
def test_gradients_through_the_structure_equal_the_pseudo_inverse():
    """Gradients of the velocity after the step: the structured transposed solve equals the dense pseudo-inverse to 1e-8.

    40 random problems; where contacts stick, J is singular (the non-unique friction
    rows) and the two solves of J^T u = z_bar differ along J^T's null space, which
    perturbations of M, N, D, mu and b do not see.
    """
    params = []
    for seed in range(40):
        p = _problem(seed, joints=0, masked=False)
        mu = p.lcp.delassus.mu
        params.append((p.M, p.N, p.D, mu, p.b))
    params = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *params)
    structured, pinv = _velocity_gradients(params)
    flat = lambda g: g.reshape(g.shape[0], -1)
    # Relative to the problem's largest gradient (the data are all of order one): a
    # gradient that is zero (a separating contact's mu) comes out at round-off, 1e-30..1e-15.
    scale = jnp.max(jnp.abs(jnp.concatenate([flat(g) for g in pinv], axis=1)), axis=1, keepdims=True)
    for g, ref in zip(structured, pinv, strict=True):
        assert bool(jnp.all(jnp.isfinite(g)))
        error = jnp.abs(flat(g) - flat(ref))
        assert bool(jnp.all(error <= 1e-8 * scale)), float(jnp.max(error / scale))


@jax.jit
def _both_adjoints(lcp, z_bar):
    """u of the reverse pass for one cotangent z_bar: through the structure, and by the pseudo-inverse alone.

    Both from the same FB partials (`reverse_partials`: a degenerate row's side is chosen by its contact's
    state, not by the round-off in w, which differs: the structure forms w = C z + X^T (X z) + b, not A z + b).
    """
    raw = solve(lcp)
    z = raw.z
    da, db = reverse_partials(lcp, z)
    rtol = PINV_RTOL_FACTOR * z.shape[0] * float(jnp.finfo(z.dtype).eps)
    pinv = db * min_norm_lstsq((jnp.diag(da) + db[:, None] * lcp.A).T, z_bar, rtol)
    return DenseAdjoint().transposed_solve(lcp, raw, z_bar), pinv


def test_the_reverse_pass_falls_back_to_the_pseudo_inverse_outside_the_range():
    """A random cotangent: where J is singular it has a part outside J^T's range, and only the pseudo-inverse's answer is right.

    The structured solve cannot meet such a z_bar, says so, and the pseudo-inverse
    is computed; where J is regular both give the one solution. Either way the two
    answers agree to 1e-8 of their size, for every one of 20 problems and cotangents
    (measured: J singular in 16 of them, cond(J) = 20-300 in the other 4; the largest
    difference 4e-15 of the answer's size).
    """
    singular = 0
    for seed in range(20):
        lcp = _problem(seed, joints=0, masked=False).lcp
        z_bar = jax.random.normal(jax.random.PRNGKey(100 + seed), (lcp.size,))
        y, ref = _both_adjoints(lcp, z_bar)
        assert bool(jnp.all(jnp.isfinite(y)))
        z = solve(lcp).z
        da, db = reverse_partials(lcp, z)
        J = np.asarray(jnp.diag(da) + db[:, None] * lcp.A)
        singular += np.linalg.matrix_rank(J) < lcp.size
        np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=0, atol=1e-8 * float(jnp.max(jnp.abs(ref))))
    assert 0 < singular < 20  # singular and regular J both occur


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


@pytest.mark.long  # the structure's solves and gradients run in the default set
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
