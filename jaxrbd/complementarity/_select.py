"""One impulse where many solve: the least-norm solution of a time step's friction LCP.

A body resting on a face has more contact rows than the velocities they act on (a cube's
four corners on its three normal directions): the step's LCP then has a whole set of
solutions, which share the generalized impulse U^T z (and so the new velocities) and
differ along the null space of U^T. A Newton solve returns the one nearest its path,
which depends on the warm start. `least_norm` replaces it by the solution of least
norm among those with the same generalized impulse and the same active rows:

    min z_S^T diag(m) z_S  subject to  U_S^T z_S = U^T z*,  (mu c_n - E^T beta)_c fixed on sliding contacts,

where S holds the impulse rows that may carry load (the equality rows, and the normal and
friction rows with w = 0 to the tolerance), the cone rows keep their lam, and m counts the
contacts at each row's point (`_multiplicity`: coincident contacts count as one). The
minimiser is the projection of z*_S onto the range of [U_S, K_S] (K: the cone rows of the
sliding contacts) in the m-weighted norm, computed by the normal equations: the choice of a
vanishing Tikhonov term on the impulses, among the solutions with the solve's velocities. A symmetric rest then carries a symmetric load
(a cube's corners carry a quarter of its weight each), whatever the warm start, and the
velocities, the exact cases (zero creep, the papers' problems) and the residual are
unchanged. Where the projection has a negative impulse (a sticking contact loaded along none
of the cone's directions: its friction split over opposite directions), the least-norm
solution among the non-negative ones is taken instead (`NONNEGATIVE` semismooth Newton steps).
Where the selection still leaves the solution set (a sticking contact pushed outside its cone:
the residual grows above the tolerance), the solve's own solution is kept.

Where several solutions have different velocities (a cube sliding and spinning on a face,
whose friction torque depends on the load split), the rule selects among those with the
velocities the solve found; it does not choose between velocities.
"""

import jax
import jax.numpy as jnp

from .._problems import LCP, _direction_incidence, multiplicity, natural_residual

REFINEMENTS = 2  # of the regularized normal equations, against the unregularized ones
NONNEGATIVE = 6  # semismooth Newton steps towards the non-negative least-norm impulses
ROUND_OFF = 100  # a selection that moves no impulse by more than this many eps of the largest is not taken


def selects(problem):
    """Whether `least_norm` applies: an LCP with its Delassus structure (every friction LCP of a time step)."""
    return isinstance(problem, LCP) and problem.delassus is not None and problem.counts is not None


def least_norm(problem, z, tol):
    """The least-norm solution with z's generalized impulse and active rows, or z where it is not a solution.

    Args:
        problem: a friction LCP with `delassus` and `counts` (`selects`).
        z: (n,) a solution (to the tolerance).
        tol: the natural-residual tolerance (relative above impulses of 1, `within_tolerance`).

    Returns:
        (n,) the selected solution.
    """
    f, ng, counts = problem.delassus, problem.n_free, problem.counts
    nc, nd = len(counts), sum(counts)
    n, dtype = z.shape[0], z.dtype
    rows = jnp.arange(n)
    w = problem.F(z)
    size = tol * jnp.maximum(jnp.max(jnp.abs(z)), 1.0)
    impulse = (rows < ng + nc + nd) & (f.keep > 0)
    S = impulse & ((rows < ng) | (jnp.abs(w) <= size))
    lam = z[ng + nc + nd :]
    sliding = lam > size
    # The cone rows of the sliding contacts, mu_c c_n - sum of c's beta, as columns over z.
    E = jnp.asarray(_direction_incidence(counts), dtype)
    K = jnp.concatenate([jnp.zeros((ng, nc), dtype), jnp.diag(f.mu), -E, jnp.zeros((nc, nc), dtype)])
    # Weighted by each row's multiplicity m, min z^T diag(m) z, so that coincident contacts count as one.
    r = jnp.sqrt(_multiplicity(f, ng, nc, E))
    V = (S / r)[:, None] * jnp.concatenate([f.U, K * sliding[None, :]], axis=1)
    zS = jnp.where(S, r * z, 0.0)
    G = V.T @ V
    floor = 100 * jnp.finfo(dtype).eps * (jnp.trace(G) / G.shape[0]) + jnp.finfo(dtype).tiny
    factor = jax.scipy.linalg.cho_factor(G + floor * jnp.eye(G.shape[0], dtype=dtype))
    rhs = V.T @ zS
    y = jax.scipy.linalg.cho_solve(factor, rhs)
    for _ in range(REFINEMENTS):
        y = y + jax.scipy.linalg.cho_solve(factor, rhs - G @ y)
    # The impulse rows stay non-negative: the least-norm z >= 0 with V^T z = V^T z* is z = max(V y, 0) (the
    # equality rows unsigned) for the y that solves V^T max(V y, 0) = V^T z*, a piecewise-linear equation that
    # semismooth Newton solves from the projection's y. Without it a sticking contact loaded along none of the
    # cone's directions split its friction over opposite directions, one of them negative. A projection that is
    # non-negative to round-off is that minimiser already, and is taken as it is.
    free = rows < ng
    eye = jnp.eye(G.shape[0], dtype=dtype)
    u = V @ y
    signed = S & ~free & (u < -ROUND_OFF * jnp.finfo(dtype).eps * jnp.max(jnp.abs(u)))

    def nonnegative(y):
        for _ in range(NONNEGATIVE):
            u = V @ y
            Va = jnp.where((S & (free | (u > 0)))[:, None], V, 0.0)
            y = y + jax.scipy.linalg.solve(Va.T @ Va + floor * eye, rhs - Va.T @ u, assume_a="pos")
        u = V @ y
        return jnp.where(free, u, jnp.maximum(u, 0.0))

    u = jax.lax.cond(jnp.any(signed), nonnegative, lambda y: u, y)  # unbatched, only the branch taken runs
    selected = jnp.where(S, u / r, z)
    before = natural_residual(z, w, ng)
    after = natural_residual(selected, problem.F(selected), ng)
    # A change at round-off is no choice between solutions: it would only move rows at z = w = 0 onto the
    # corner of the Fischer-Burmeister function, where the reverse pass's transposed solve is ill-conditioned.
    moved = jnp.max(jnp.abs(selected - z)) > ROUND_OFF * jnp.finfo(dtype).eps * jnp.max(jnp.abs(z))
    keep = moved & jnp.isfinite(after) & (after <= jnp.maximum(before, size))
    return jnp.where(keep, selected, z)


def _multiplicity(f, ng, nc, E):
    """(n,) for each row, the number of kept contacts whose normal row equals its contact's (1 off the contacts)."""
    count = multiplicity(f.U[ng : ng + nc], f.keep[ng : ng + nc])
    ones = jnp.ones((ng,), count.dtype)
    return jnp.concatenate([ones, count, E @ count, jnp.ones((f.keep.shape[0] - ng - nc - E.shape[0],), count.dtype)])
