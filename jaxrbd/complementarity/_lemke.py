"""Lemke's complementary pivoting method (003 §4), in JAX."""

import jax
import jax.numpy as jnp
from jax import lax

from ._status import Status

SUCCESS, MAX_STEPS, RAY, NONFINITE = (int(s) for s in (Status.SUCCESS, Status.MAX_STEPS, Status.RAY, Status.NONFINITE))

PIVOT_TOL = 1e-12
TIE_TOL = 1e-11


def _lex_min_row(T, col, cand, n):
    """Index of the lexicographic minimum ratio row among `cand`.

    Compares rows of [rhs, B^{-1}] / col one column at a time, keeping the rows that
    tie, until one is left. With B^{-1} of full rank the minimum is unique, so
    degenerate (tied) pivots never cycle.
    """
    safe = jnp.where(cand, col, 1.0)
    order = jnp.concatenate([jnp.array([T.shape[1] - 1]), jnp.arange(n)])

    def cond(state):
        k, cand = state
        return (k < n + 1) & (jnp.sum(cand) > 1)

    def body(state):
        k, cand = state
        vals = T[:, order[k]] / safe
        m = jnp.min(jnp.where(cand, vals, jnp.inf))
        cand = cand & (vals <= m + TIE_TOL * (1.0 + jnp.abs(m)))
        return k + 1, cand

    _, cand = lax.while_loop(cond, body, (jnp.array(0), cand))
    return jnp.argmax(cand)


def _pivot(T, r, e):
    row = T[r] / T[r, e]
    T = T - T[:, e][:, None] * row[None, :]
    return T.at[r].set(row)


def lemke(A, b, max_pivots):
    """Solve 0 <= z ⊥ A z + b >= 0 by Lemke's method with covering vector 1.

    Tableau form w - A z - 1 z0 = b, variables numbered w: 0..n-1, z: n..2n-1,
    z0: 2n. The artificial z0 leaves as soon as it ties in the ratio test.
    For copositive-plus A and the b of a friction step this terminates with a
    solution (004 §3.2); otherwise it ends on a secondary ray, reported as RAY.

    Returns:
        (z, status, pivots).
    """
    n = b.shape[-1]
    dtype = b.dtype
    T = jnp.concatenate([jnp.eye(n, dtype=dtype), -A, -jnp.ones((n, 1), dtype), b[:, None]], axis=1)
    basis = jnp.arange(n)
    finite = jnp.all(jnp.isfinite(T))
    trivial = jnp.all(b >= 0)
    r0 = jnp.argmin(b)
    T = jnp.where(trivial | ~finite, T, _pivot(T, r0, 2 * n))
    basis = jnp.where(trivial | ~finite, basis, basis.at[r0].set(2 * n))
    entering = n + r0
    status0 = jnp.where(~finite, NONFINITE, jnp.where(trivial, SUCCESS, MAX_STEPS))

    def cond(state):
        _, _, _, status, k = state
        return (status == MAX_STEPS) & (k < max_pivots)

    def body(state):
        T, basis, e, status, k = state
        col = T[:, e]
        cand = col > PIVOT_TOL * (1.0 + jnp.max(jnp.abs(col)))
        ray = ~jnp.any(cand)
        ratio = jnp.where(cand, T[:, -1] / jnp.where(cand, col, 1.0), jnp.inf)
        rmin = jnp.min(ratio)
        z0_row = jnp.argmax(basis == 2 * n)
        z0_ties = cand[z0_row] & (ratio[z0_row] <= rmin + TIE_TOL * (1.0 + jnp.abs(rmin)))
        r = jnp.where(z0_ties, z0_row, _lex_min_row(T, col, cand, n))
        leaving = basis[r]
        T_new = _pivot(T, r, e)
        ok = ~ray & jnp.all(jnp.isfinite(T_new))
        T = jnp.where(ok, T_new, T)
        basis = jnp.where(ok, basis.at[r].set(e), basis)
        status = jnp.where(ray, RAY, jnp.where(~ok, NONFINITE, jnp.where(leaving == 2 * n, SUCCESS, MAX_STEPS)))
        e = jnp.where(leaving < n, leaving + n, leaving - n)
        return T, basis, e, status, k + 1

    T, basis, _, status, pivots = lax.while_loop(cond, body, (T, basis, entering, status0, jnp.array(0)))
    is_z = (basis >= n) & (basis < 2 * n)
    idx = jnp.where(is_z, basis - n, n)  # n: a dump slot
    z = jnp.zeros((n + 1,), dtype).at[idx].set(jnp.where(is_z, T[:, -1], 0.0))[:n]
    return jnp.maximum(z, 0.0), status, pivots


def lemke_mixed(A, b, n_free, max_pivots):
    """Lemke for the mixed LCP: eliminate the leading equality rows by a Schur complement.

    Requires the equality block A[:n_free, :n_free] to be nonsingular (a full-rank
    joint Jacobian). Returns (z, status, pivots) for the full z.
    """
    if n_free == 0:
        return lemke(A, b, max_pivots)
    f = n_free
    Aff, Afc, Acf, Acc = A[:f, :f], A[:f, f:], A[f:, :f], A[f:, f:]
    lu = jax.scipy.linalg.lu_factor(Aff)
    X = jax.scipy.linalg.lu_solve(lu, jnp.concatenate([Afc, b[:f, None]], axis=1))
    zc, status, pivots = lemke(Acc - Acf @ X[:, :-1], b[f:] - Acf @ X[:, -1], max_pivots)
    x = -(X[:, :-1] @ zc + X[:, -1])
    return jnp.concatenate([x, zc]), status, pivots
