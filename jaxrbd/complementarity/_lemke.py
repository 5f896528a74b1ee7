"""Lemke's complementary pivoting method (003 §4), in JAX."""

import jax
import jax.numpy as jnp
from jax import lax

from ._status import Status

SUCCESS, MAX_STEPS, RAY, NONFINITE = (int(s) for s in (Status.SUCCESS, Status.MAX_STEPS, Status.RAY, Status.NONFINITE))

PIVOT_EXPONENT = 3 / 4
# Pivots between two refactorizations of the tableau. Each pivot's update adds its
# round-off to every entry; on the ill-conditioned friction LCP of a light box under
# a stack 3e4 times heavier (220 rows) the accumulated error sent the ratio test onto
# a secondary ray after about 180 pivots, and recomputing B^{-1} M0 from the basis
# every 64 (or 32, or 128) pivots solved it. With the box's ground slots in corner
# order (not depth order) the same landing step needed 32: at 64 it ended on a ray.
# One (n, n) LU with 2n + 2 right-hand sides costs about as much as n / 2 pivots;
# problems that need fewer pivots than this pay one LU, at the end, which also
# refines the solution read off.
REFACTOR_EVERY = 32
TIE_EXPONENT = 2 / 3


def tolerances(dtype):
    """(pivot, tie) tolerances of a tableau in `dtype`: eps^(3/4) and eps^(2/3).

    That is 1.8e-12 and 3.7e-11 in float64 (about the fixed 1e-12 and 1e-11 used
    before) and 6.4e-6 and 2.4e-5 in float32. A fixed multiple of eps with the same
    float64 values would give 5e-4 and 5e-3 in float32, loose enough to choose wrong
    pivots; the fixed float64 values in float32 take round-off for pivots and send
    Lemke onto secondary rays.
    """
    eps = float(jnp.finfo(dtype).eps)
    return eps**PIVOT_EXPONENT, eps**TIE_EXPONENT


def _lex_min_row(T, col, cand, floor, tie):
    """Index of the lexicographic minimum row of B^{-1} / col among the tied rows `cand`.

    Compares one column of B^{-1} (the first n columns of T) at a time, keeping the
    rows that tie, until one is left. With B^{-1} of full rank the minimum is unique,
    so degenerate (tied) pivots never cycle. An entry at or below `floor` (of its row)
    is round-off of a zero and counts as zero; ties are relative.
    """
    n = floor.shape[0]
    safe = jnp.where(cand, col, 1.0)

    def cond(state):
        k, cand = state
        return (k < n) & (jnp.sum(cand) > 1)

    def body(state):
        k, cand = state
        vals = jnp.where(jnp.abs(T[:, k]) <= floor, 0.0, T[:, k]) / safe
        m = jnp.min(jnp.where(cand, vals, jnp.inf))
        cand = cand & (vals <= m + tie * jnp.abs(m))
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

    Round-off. Column j of the tableau is B^{-1} M0_j (M0 the initial tableau, B
    the basis columns of M0), so its entries carry errors of about
    eps |B^{-1}| |M0_j|. With `tie` (`tolerances`) times that as the noise level of
    the right-hand side, of the entering column and (M0_j = 1) of a row of B^{-1}:
    an entering entry within its noise is no pivot; a right-hand side within its
    noise is a degenerate zero; two ratios tie when their intervals ratio +- error
    overlap, so the ratio test never prefers one row to another on accumulated
    round-off alone; and the lexicographic rule reads an entry of B^{-1} within its
    row's noise as zero. The basic solution read off at the end gets one step of
    iterative refinement with the tableau's own B^{-1}. In float32 this solves the
    friction LCPs of the four-ball scene on the pivot path float64 takes. The
    estimate costs one (n, n) x (n, 3) product per pivot.

    Returns:
        (z, status, pivots).
    """
    n = b.shape[-1]
    dtype = b.dtype
    if n == 0:  # nothing complementary: a mixed LCP of equality rows alone (joints, no contacts)
        return jnp.zeros((0,), dtype), jnp.asarray(SUCCESS), jnp.array(0)
    pivot_tol, tie = tolerances(dtype)
    M0 = jnp.concatenate([jnp.eye(n, dtype=dtype), -A, -jnp.ones((n, 1), dtype), b[:, None]], axis=1)
    absM0 = jnp.abs(M0)
    ones = jnp.ones((n,), dtype)
    T = M0
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
        noise = tie * (jnp.abs(T[:, :n]) @ jnp.stack([absM0[:, -1], absM0[:, e], ones], axis=1))
        noise_rhs, noise_col, noise_row = noise[:, 0], noise[:, 1], noise[:, 2]
        cand = col > jnp.maximum(pivot_tol * (1.0 + jnp.max(jnp.abs(col))), noise_col)
        ray = ~jnp.any(cand)
        safe = jnp.where(cand, col, 1.0)
        ratio = jnp.where(T[:, -1] <= noise_rhs, 0.0, T[:, -1]) / safe
        err = (noise_rhs + ratio * noise_col) / safe
        ties = cand & (ratio - err <= jnp.min(jnp.where(cand, ratio + err, jnp.inf)))
        z0_row = jnp.argmax(basis == 2 * n)
        r = jnp.where(ties[z0_row], z0_row, _lex_min_row(T, col, ties, noise_row, tie))
        leaving = basis[r]
        T_new = _pivot(T, r, e)
        ok = ~ray & jnp.all(jnp.isfinite(T_new))
        T = jnp.where(ok, T_new, T)
        basis = jnp.where(ok, basis.at[r].set(e), basis)
        status = jnp.where(ray, RAY, jnp.where(~ok, NONFINITE, jnp.where(leaving == 2 * n, SUCCESS, MAX_STEPS)))
        e = jnp.where(ok, jnp.where(leaving < n, leaving + n, leaving - n), e)
        return T, basis, e, status, k + 1

    def run(state):
        """Pivots up to the next refactorization, then the tableau afresh from its basis (B^{-1} M0, one LU).

        A secondary ray found on an aged tableau is checked once more on the fresh
        one: the pivoting goes on with the same entering variable.
        """
        T, basis, e, status, k, fresh_at = state
        T, basis, e, status, k = lax.while_loop(
            lambda state: cond(state) & (state[-1] < k + REFACTOR_EVERY), body, (T, basis, e, status, k)
        )
        fresh = jnp.linalg.solve(M0[:, basis], M0)
        ok = jnp.all(jnp.isfinite(fresh))
        T = jnp.where(ok, fresh, T)
        recheck = ok & (status == RAY) & (fresh_at != k - 1)
        status = jnp.where(recheck, MAX_STEPS, status)
        k = jnp.where(recheck, k - 1, k)
        return T, basis, e, status, k, jnp.where(ok, k, fresh_at)

    T, basis, _, status, pivots, _ = lax.while_loop(
        lambda state: cond(state[:5]), run, (T, basis, entering, status0, jnp.array(0), jnp.array(-1))
    )
    x = T[:, -1]
    x = x + T[:, :n] @ (b - M0[:, basis] @ x)  # one refinement step: B x = b with the tableau's B^{-1}
    is_z = (basis >= n) & (basis < 2 * n)
    idx = jnp.where(is_z, basis - n, n)  # n: a dump slot
    z = jnp.zeros((n + 1,), dtype).at[idx].set(jnp.where(is_z, x, 0.0))[:n]
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
