"""Levenberg-Marquardt semismooth Newton iterations on the Fischer-Burmeister equation.

Shared by `SemismoothNewton` (its warm start and its cold restart) and `Lemke` (its
polishing pass).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._problems import LCP, Delassus, gather_sum, inverse_row_sizes, natural_residual, split_rows, spread
from ._fb import fischer_burmeister, fischer_burmeister_partials

ARMIJO_SIGMA = 1e-4
REG_FLOOR = 1e-10  # float64; float32 uses 100 eps (see `_reg_floor`)
# Iterative refinement of each Levenberg-Marquardt solve against the floor term: with
# the float32 floor (1e-5 of |J|^2) the plain solve converges linearly and 10 of 200
# four-ball steps stalled above tolerance after 30 iterations; with 3 refinements one.
REFINEMENTS = 3
QUIET = 1e-6  # residuals below QUIET * tol (not below 4 eps) are not polished
# A Delassus step (`delassus_direction`) that stalls, or (after the first half of the solve's
# iteration budget) leaves more than DELASSUS_RATE of a residual above tol, hands the solve over
# to Levenberg-Marquardt steps, which keep the other half. A Levenberg-Marquardt step forms and
# factors the (n, n) normal equations, where a Delassus step solves an (nv, nv) system: with many
# contacts on few velocities it costs 10-20 Delassus steps. A patience of 3 steps handed over
# 21 of Gymnasium's ant's first 100 steps (139 Levenberg-Marquardt steps, 60% of its time) that
# the Delassus steps go on to solve in as many iterations; with half the budget (float64, 1 s
# from the start pose) the ant ran 2.7x, the humanoid 3.9x, the hopper 1.5x, `box_stack(5)` 7.7x
# and `cube_toss` 1.8x the steps/s, every step converged. Under `vmap` the first pass's budget
# is `lane_iterations`, so it hands over after 3 steps there.
DELASSUS_RATE = 0.5
# The proximal term of a Delassus step grows with the residual: eps = max(sqrt(machine eps),
# DELASSUS_GROWTH min(|phi|, 1)), as Levenberg-Marquardt's m grows with |phi|^2 on the normal
# equations. Far from a solution the larger term keeps the step short along the near-null
# directions of many contacts on few velocities (a robot's feet and range stops), where the
# sqrt(eps) step stalled and handed over to dense Levenberg-Marquardt steps; near one it
# vanishes, so the convergence stays fast. Gymnasium's ant, 100 steps from its start pose:
# 10.5 iterations a step (51 at most) with eps = sqrt(eps) alone, 7.5 (15) with it, and 2.6x
# the steps/s; the hopper's one Lemke fallback is gone (0.01: 7.7 (15); 0.1: 7.9 (22)).
DELASSUS_GROWTH = 0.03


def proximal_eps(dtype):
    """The eps of the forward Delassus steps, (J + eps Db) d = -phi: sqrt of the machine epsilon."""
    return float(np.sqrt(jnp.finfo(dtype).eps))


def _reg_floor(dtype):
    return max(REG_FLOOR, 100 * float(jnp.finfo(dtype).eps))


def row_scale(J):
    """Per-row scaling s_i = 1 / max_j |J_ij| (`inverse_row_sizes`: 1 for an all-zero row, bounded on round-off rows).

    phi(z, s w) has the same zeros as phi(z, w); with rows of unit size the
    Fischer-Burmeister function weighs z and w alike, which keeps the Newton
    matrix well scaled when masses or lever arms span decades.
    """
    return inverse_row_sizes(jnp.max(jnp.abs(J), axis=-1))


def problem_scale(problem, z):
    """The row scaling of a problem's Newton steps: `row_scale` of its Jacobian at 0 (z: any point, for the
    shape and dtype), or from its Delassus structure (`Delassus.scale`), which does not form the matrix."""
    if isinstance(problem, LCP) and problem.delassus is not None:
        return problem.delassus.scale
    return row_scale(problem.jac(jnp.zeros_like(z)))


class _DelassusBlocks(eqx.Module):
    """K = Da + eps Db + Db S C and the factors of J + eps Db = K + Db S U M^{-1} U^T (`delassus_direction`).

    K's only off-diagonal entries couple each contact's friction rows with its cone
    row, so K X = R and K^T X = R are solved in closed form, contact by contact.
    """

    f: Delassus
    beta: jax.Array  # (n,) db * s: the row factor of C and of U M^{-1} U^T
    dg: jax.Array  # (ng,) K's diagonal on the equality rows
    dn: jax.Array  # (nc,) ... on the normal rows
    db: jax.Array  # (nd,) ... on the friction rows
    dl: jax.Array  # (nc,) ... on the cone rows
    a: jax.Array  # (nd,) K[j, cone row of j's contact]
    m: jax.Array  # (nc,) K[cone row c, normal row c]
    c: jax.Array  # (nd,) -K[cone row of j's contact, j]
    pivot: jax.Array  # (nc,) each cone row's diagonal once its contact's friction rows are eliminated
    ng: int = eqx.field(static=True)
    counts: tuple[int, ...] = eqx.field(static=True)

    def rows(self, x):
        return split_rows(x, self.ng, len(self.counts), sum(self.counts))

    def solve(self, R):
        """K X = R for R (n, r)."""
        counts, a, c, db = self.counts, self.a, self.c, self.db
        Rg, Rn, Rb, Rl = self.rows(R)
        xn = Rn / self.dn[:, None]
        xl = (Rl - self.m[:, None] * xn + gather_sum(counts, c[:, None] * Rb / db[:, None])) / self.pivot[:, None]
        xb = (Rb - a[:, None] * spread(counts, xl)) / db[:, None]
        return jnp.concatenate([Rg / self.dg[:, None], xn, xb, xl])

    def solve_transposed(self, R):
        """K^T X = R for R (n, r)."""
        counts, a, c, db = self.counts, self.a, self.c, self.db
        Rg, Rn, Rb, Rl = self.rows(R)
        xl = (Rl - gather_sum(counts, a[:, None] * Rb / db[:, None])) / self.pivot[:, None]
        xb = (Rb + c[:, None] * spread(counts, xl)) / db[:, None]
        xn = (Rn - self.m[:, None] * xl) / self.dn[:, None]
        return jnp.concatenate([Rg / self.dg[:, None], xn, xb, xl])


def _delassus_blocks(problem, da, db, s, eps):
    """K's blocks for the Newton matrix Da + Db S A of a friction LCP (`LCP.delassus`) and the regularization eps."""
    f = problem.delassus
    ng, counts = problem.n_free, problem.counts
    nc, nd = len(counts), sum(counts)
    beta = db * s
    k = f.keep
    diag = da + eps * db + beta * (1.0 - k)  # masked rows: C has a unit diagonal
    rows = lambda x: split_rows(x, ng, nc, nd)
    (_, kn, kb, kl), (dg, dn, db_, dl), (_, bn, bb, bl) = rows(k), rows(diag), rows(beta)
    if f.compliance is not None:  # C's normal diagonal (zero on the masked rows)
        dn = dn + bn * f.compliance
    a = bb * kb * spread(counts, kl)
    c = spread(counts, bl * kl) * kb
    return _DelassusBlocks(
        f=f,
        beta=beta,
        dg=dg,
        dn=dn,
        db=db_,
        dl=dl,
        a=a,
        m=bl * f.mu * kl * kn,
        c=c,
        pivot=dl + gather_sum(counts, c * a / db_),
        ng=ng,
        counts=counts,
    )


def delassus_direction(problem, da, db, s, phi, eps=None):
    """The proximal Newton step d = -(J + eps Db)^{-1} phi on a friction LCP, by its Delassus structure.

    J = Da + Db S A is the Newton matrix of phi(z) = FB(z, S w) and A = C + U M^{-1} U^T
    (`Delassus`). Adding eps Db (by default eps = sqrt of the machine epsilon, relative: the rows
    of S A have largest entry 1; `newton_solve` grows it with the residual) makes
    K = Da + eps Db + Db S C invertible: its only off-diagonal entries couple each contact's
    friction rows with its cone row, so it is solved in closed form, contact by contact.
    Woodbury's identity then leaves one (nv, nv) system, M + U^T K^{-1} Db S U, instead of
    the (n, n) Newton matrix. On a
    singular J (the non-unique friction rows of a sticking contact) the eps term keeps
    the step finite; near a solution it converges linearly at a rate of about eps.

    Args:
        problem: an `LCP` with `delassus` (and `counts`).
        da, db: (n,) the partial derivatives of the rows (equality rows: 0 and 1).
        s: (n,) the row scaling.
        phi: (n,) the residual.
        eps: the proximal weight (>= sqrt of the machine epsilon), or None for that floor.

    Returns:
        (n,) the step d.
    """
    K = _delassus_blocks(problem, da, db, s, proximal_eps(phi.dtype) if eps is None else eps)
    Ut = K.f.Ut
    Y = K.solve(jnp.concatenate([phi[:, None], (Ut * K.beta).T], axis=1))
    y, YU = Y[:, 0], Y[:, 1:]
    t = jnp.linalg.solve(K.f.M + Ut @ YU, Ut @ y)
    return YU @ t - y


def delassus_transposed_solver(problem, da, db, s, eps):
    """r -> (J + eps Db)^{-T} r for the J of `delassus_direction` and a given eps, one factorization for every r.

    Woodbury on the transpose, K^T + U M^{-1} U^T Db S, leaves the transpose of the
    forward step's (nv, nv) matrix, M + U^T Db S K^{-T} U; it is LU-factored once.
    """
    K = _delassus_blocks(problem, da, db, s, eps)
    Ut = K.f.Ut
    W = K.solve_transposed(Ut.T)  # K^{-T} U
    factor = jax.scipy.linalg.lu_factor(K.f.M + Ut @ (K.beta[:, None] * W))

    def solve(r):
        v = K.solve_transposed(r[:, None])[:, 0]
        return v - W @ jax.scipy.linalg.lu_solve(factor, Ut @ (K.beta * v))

    return solve


class NewtonResult(eqx.Module):
    """Where a Newton run stopped: z, its natural residual, the iterations it took, and
    whether it stopped only at the iteration bound (`capped`: it would have gone on)."""

    z: jax.Array
    residual: jax.Array
    iterations: jax.Array
    capped: jax.Array


def newton_solve(problem, z0, s, *, tol, iterations, line_search_steps, regularization, run=True, hand_over=True):
    """Damped Newton steps on phi(z) = 0 from z0, until the natural residual is <= tol.

    phi(z) = [s w]_free ; FB(z, s w)_rest with w = F(z). On an LCP that carries its
    Delassus structure (`LCP.delassus`, every friction LCP of a time step), the steps are first
    the proximal Newton steps of `delassus_direction`, an (nv, nv) solve each, with a proximal
    weight that grows with the residual (`DELASSUS_GROWTH`); where one stalls, or (after the first half of
    `iterations`) leaves more than `DELASSUS_RATE` of a residual above tol, the solve goes on with
    Levenberg-Marquardt steps from there.
    A Levenberg-Marquardt step solves
    (J^T J + m I) d = -J^T phi with m = regularization * min(|phi|^2, 1), the
    Yamashita-Fukushima choice: it keeps the step bounded along the non-unique lam
    and beta directions of the friction LCP (singular J) and still converges fast
    where a local error bound holds, which needs no nonsingularity.

    The loop is a `lax.while_loop`. It makes no step at all when `run` is False or
    z0's residual is round-off (below `QUIET` tol, and not below 4 eps; in float32
    that is tol itself). Otherwise it stops one step after the residual first meets
    the tolerance (that polishing step, kept only if it lowers the residual, takes
    the quadratic convergence down to round-off, so a resting contact does not creep
    by the tolerance every step), after `iterations` steps, or on a stall (no step
    length decreases the merit 0.5 |phi|^2). Under
    `vmap` a batch costs what its slowest running lane needs. The line search halves
    the step until the Armijo test passes (one merit evaluation in the common case),
    at most `line_search_steps` times; when none passes, the best decreasing trial is
    taken.

    Args:
        problem: an `LCP` or `NCP`.
        z0: (n,) starting point.
        s: (n,) row scaling.
        tol: the natural-residual tolerance.
        iterations, line_search_steps: static bounds.
        regularization: the factor of m.
        run: a boolean (traced or not); False returns z0 untouched.
        hand_over: where the Delassus steps hand over, go on with Levenberg-Marquardt
            steps; False: stop there, unconverged (`SemismoothNewton.run_lanes` gives
            such a lane a pass of its own instead of holding its whole block).

    Returns:
        A `NewtonResult`.
    """
    # Under `vmap` (`SemismoothNewton.run_lanes`) a small bound with `capped` hands
    # the few slow lanes to a second pass instead of holding the whole batch.
    n = z0.shape[-1]
    structured = isinstance(problem, LCP) and problem.delassus is not None
    free = jnp.arange(n) < problem.n_free
    eye = jnp.eye(n, dtype=z0.dtype)
    floor = _reg_floor(z0.dtype)
    patience = iterations // 2  # Delassus steps exempt from the rate test

    def evaluate(z):
        w = problem.F(z)
        sw = s * w
        phi = jnp.where(free, sw, fischer_burmeister(z, sw))
        psi = 0.5 * jnp.sum(phi * phi)
        return phi, w, jnp.where(jnp.isfinite(psi), psi, jnp.inf), natural_residual(z, w, problem.n_free)

    def direction(z, phi, w, psi, structured, A):
        da, db = fischer_burmeister_partials(z, s * w)
        da = jnp.where(free, 0.0, da)
        db = jnp.where(free, 1.0, db)
        if structured:
            eps = jnp.maximum(proximal_eps(phi.dtype), DELASSUS_GROWTH * jnp.minimum(jnp.sqrt(2.0 * psi), 1.0))
            d = delassus_direction(problem, da, db, s, phi, eps)
            # (J + eps Db) d = -phi, so the slope phi . J d is -|phi|^2 - eps phi . Db d.
            return d, -jnp.dot(phi, phi) - eps * jnp.dot(phi, db * d)
        J = da[:, None] * eye + (db * s)[:, None] * (problem.jac(z) if A is None else A)
        g = J.T @ phi
        m = regularization * jnp.minimum(2.0 * psi, 1.0)
        # The floor bounds the condition number of the normal equations by
        # 1 / floor, so the Cholesky solve stays accurate on the singular
        # friction Jacobian; steps stay tangent to the solution set. The
        # refinements then remove the floor's bias from the step, reusing the factor.
        lam = floor * jnp.max(jnp.abs(J)) ** 2
        factor = jax.scipy.linalg.cho_factor(J.T @ J + (m + lam) * eye)
        d = -jax.scipy.linalg.cho_solve(factor, g)
        for _ in range(REFINEMENTS):
            d = d - jax.scipy.linalg.cho_solve(factor, g + J.T @ (J @ d) + m * d)
        return d, jnp.dot(g, d)

    def line_search(z, d, gd, at_z):
        """(t, moved, evaluate(z + t d)): the best trial, the accepted one or the best decreasing one; its
        evaluation is carried out of the loop, so the step does not evaluate its new point again."""
        psi = at_z[2]
        slope = ARMIJO_SIGMA * gd

        def cond(c):
            j, _, _, _, accepted = c
            return ~accepted & (j < line_search_steps)

        def body(c):
            j, t, best_t, best, _ = c
            trial = evaluate(z + t * d)
            better = trial[2] < best[2]
            best_t = jnp.where(better, t, best_t)
            best = jax.tree_util.tree_map(lambda new, old: jnp.where(better, new, old), trial, best)
            return j + 1, 0.5 * t, best_t, best, trial[2] <= psi + t * slope

        one, zero = jnp.ones((), z.dtype), jnp.zeros((), z.dtype)
        _, _, t, best, _ = lax.while_loop(cond, body, (jnp.array(0), one, zero, at_z, jnp.array(False)))
        return t, best[2] < psi, best

    # Below `quiet` a residual is round-off; between it and tol, one more step (the
    # polish) takes a converging iterate or a good warm start down to round-off.
    quiet = min(tol, max(QUIET * tol, 4 * float(jnp.finfo(z0.dtype).eps)))

    def going(c):
        _, _, _, _, res, _, moving, polished, _ = c
        return moving & ~(res <= quiet) & ~((res <= tol) & polished)

    def cond(c):
        return going(c) & (c[5] < iterations)

    def body(c, structured, A=None):
        z, phi, w, psi, res, k, _, _, _ = c
        polishing = res <= tol
        d, gd = direction(z, phi, w, psi, structured, A)
        t, moved, (phi_new, w_new, psi_new, res_new) = line_search(z, d, gd, (phi, w, psi, res))
        z_new = jnp.where(moved, z + t * d, z)
        keep = polishing & ~(res_new < res)  # the polishing step only ever improves
        pick = lambda old, new: jnp.where(keep, old, new)
        # The Delassus steps hand over to Levenberg-Marquardt where they stall, or
        # converge slowly above tol (a degenerate contact, such as one that starts to stick).
        slow = ~polishing & ~(moved & ((res_new <= tol) | (res_new <= DELASSUS_RATE * res) | (k < patience)))
        return (
            pick(z, z_new),
            pick(phi, phi_new),
            pick(w, w_new),
            pick(psi, psi_new),
            pick(res, res_new),
            k + 1,
            moved | (structured & slow),
            polishing,
            structured & slow,
        )

    phi, w, psi, res = evaluate(z0)
    c = (z0, phi, w, psi, res, jnp.array(0), jnp.asarray(run), jnp.array(False), jnp.array(False))
    if structured:
        c = lax.while_loop(lambda c: cond(c) & ~c[8], lambda c: body(c, True), c)
    final = c
    if not structured:
        final = lax.while_loop(cond, lambda c: body(c, False), c)
    elif hand_over:
        # The steps read A's entries: it is formed once (`Delassus.matrix`) before their
        # loop (XLA leaves it inside a loop body), in a cond: XLA would otherwise hoist it
        # into every solve, whether a step is taken or not.
        def levenberg_marquardt(c):
            A = problem.A
            return lax.while_loop(cond, lambda c: body(c, False, A), c)

        final = lax.cond(cond(c), levenberg_marquardt, lambda c: c, c)
    z, _, _, _, res, k, _, _, _ = final
    return NewtonResult(z, res, k, going(final))
