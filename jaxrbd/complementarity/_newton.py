"""Levenberg-Marquardt semismooth Newton iterations on the Fischer-Burmeister equation.

Shared by `SemismoothNewton` (its main loop) and `Lemke` (its polishing pass).
"""

import jax
import jax.numpy as jnp
from jax import lax

from ._fb import fischer_burmeister, fischer_burmeister_partials

ARMIJO_SIGMA = 1e-4
REG_FLOOR = 1e-10  # float64; float32 uses 100 eps (see `_reg_floor`)


def _reg_floor(dtype):
    return max(REG_FLOOR, 100 * float(jnp.finfo(dtype).eps))


def row_scale(J):
    """Per-row scaling s_i = 1 / max_j |J_ij| (1 for an all-zero row).

    phi(z, s w) has the same zeros as phi(z, w); with rows of unit size the
    Fischer-Burmeister function weighs z and w alike, which keeps the Newton
    matrix well scaled when masses or lever arms span decades.
    """
    m = jnp.max(jnp.abs(J), axis=-1)
    return jnp.where(m > 0, 1.0 / jnp.where(m > 0, m, 1.0), 1.0)


def fb_residual(problem, z, s, free):
    """phi(z) = [s w]_free ; FB(z, s w)_rest, and w."""
    w = problem.F(z)
    sw = s * w
    return jnp.where(free, sw, fischer_burmeister(z, sw)), w


def newton_chain(problem, z0, s, iterations, line_search_steps, regularization):
    """Run a fixed number of damped Levenberg-Marquardt steps on phi(z) = 0.

    Each step solves (J^T J + m I) d = -J^T phi with m = regularization *
    min(|phi|^2, 1), the Yamashita-Fukushima choice: it keeps the step bounded
    along the non-unique lam and beta directions of the friction LCP (singular J)
    and still converges fast where a local error bound holds, which needs no
    nonsingularity.
    A backtracking Armijo search on 0.5 |phi|^2 with a fixed number of halvings is
    evaluated for all step lengths at once; if none passes, the best decreasing
    trial is taken, and if none decreases, z stays (a stall, detected by the caller).

    Args:
        problem: an `LCP` or `NCP`.
        z0: (n,) starting point.
        s: (n,) row scaling.
        iterations, line_search_steps: static counts.
        regularization: the factor of m.

    Returns:
        z after the iterations.
    """
    n = z0.shape[-1]
    free = jnp.arange(n) < problem.n_free
    eye = jnp.eye(n, dtype=z0.dtype)
    ts = 0.5 ** jnp.arange(line_search_steps, dtype=z0.dtype)

    def merit(z):
        phi, _ = fb_residual(problem, z, s, free)
        return 0.5 * jnp.sum(phi * phi)

    def step(z, _):
        phi, w = fb_residual(problem, z, s, free)
        psi = 0.5 * jnp.sum(phi * phi)
        da, db = fischer_burmeister_partials(z, s * w)
        da = jnp.where(free, 0.0, da)
        db = jnp.where(free, 1.0, db)
        J = da[:, None] * eye + (db * s)[:, None] * problem.jac(z)
        g = J.T @ phi
        m = regularization * jnp.minimum(2.0 * psi, 1.0)
        # The floor bounds the condition number of the normal equations by
        # 1 / FLOOR, so the Cholesky solve stays accurate on the singular
        # friction Jacobian; steps stay tangent to the solution set.
        H = J.T @ J + (m + _reg_floor(z.dtype) * jnp.max(jnp.abs(J)) ** 2) * eye
        d = -jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(H), g)
        trial = z[None, :] + ts[:, None] * d[None, :]
        psi_t = jax.vmap(merit)(trial)
        psi_t = jnp.where(jnp.isfinite(psi_t), psi_t, jnp.inf)
        armijo = psi_t <= psi + ARMIJO_SIGMA * ts * jnp.dot(g, d)
        pick = jnp.where(jnp.any(armijo), jnp.argmax(armijo), jnp.argmin(psi_t))
        better = psi_t[pick] < psi
        return jnp.where(better, trial[pick], z), None

    z, _ = lax.scan(step, z0, None, length=iterations)
    return z
