"""One implicit-differentiation rule for every complementarity solve.

At a solution z* of phi(z, theta) = FB(z, F(z, theta)) = 0 the implicit function
theorem gives dz = -(d phi/dz)^{-1} (d phi/d theta) d theta. The reverse pass
solves (d phi/dz)^T u = z_bar and returns theta_bar = -(d phi/d theta)^T u.

When the multipliers are not unique (more contact rows than degrees of freedom,
the lam rows of a sticking contact) d phi/dz is singular. The transpose solve is
then the least-squares solve of the Moore-Penrose pseudo-inverse, with singular
values below a relative cutoff dropped. That is the transpose of the minimum-norm
forward derivative; for a consistent perturbation it differs from every other
solution of the linearised problem only along the null space, which the unique
part of the solution (the generalized impulse N c_n + D beta) does not see.
"""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp

from ._fb import fischer_burmeister_partials

PINV_RTOL_FACTOR = 100.0  # cutoff = factor * n * eps * sigma_max


def _newton_matrix_transposed_solve(problem, z, z_bar, eps):
    n = z.shape[-1]
    free = jnp.arange(n) < problem.n_free
    w = problem.F(z)
    da, db = fischer_burmeister_partials(z, w, eps)
    da = jnp.where(free, 0.0, da)
    db = jnp.where(free, 1.0, db)
    J = jnp.diag(da) + db[:, None] * problem.jac(z)
    rtol = PINV_RTOL_FACTOR * n * jnp.finfo(z.dtype).eps
    u = jnp.linalg.pinv(J.T, rtol=rtol) @ z_bar
    return db * u


@partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _solve(run, static, eps, dynamic, z0):
    return run(eqx.combine(dynamic, static), z0)


def _solve_fwd(run, static, eps, dynamic, z0):
    raw = run(eqx.combine(dynamic, static), z0)
    return raw, (dynamic, raw.z)


def _solve_bwd(run, static, eps, saved, cotangent):
    dynamic, z = saved
    z_bar = jnp.where(jnp.isfinite(cotangent.z), cotangent.z, 0.0)
    problem = eqx.combine(dynamic, static)
    v = _newton_matrix_transposed_solve(problem, z, z_bar, eps)
    _, pullback = jax.vjp(lambda dyn: eqx.combine(dyn, static).F(z), dynamic)
    (dynamic_bar,) = pullback(-v)
    return dynamic_bar, jnp.zeros_like(z)


_solve.defvjp(_solve_fwd, _solve_bwd)


def implicit_solve(run, problem, z0, grad_smoothing=0.0):
    """Call `run(problem, z0)` with gradients from the implicit rule at its solution.

    Args:
        run: a callable (problem, z0) -> RawSolution; never differentiated.
        problem: an `LCP` or `NCP`; its array leaves receive gradients.
        z0: (n,) starting point (no gradient).
        grad_smoothing: eps >= 0. With eps > 0 the reverse pass uses the Jacobian
            of the smoothed FB(a, b) = a + b - sqrt(a^2 + b^2 + 2 eps^2) at the
            solution: rows near a switch get a blend of both sides instead of a
            zero or a jump.
    """
    dynamic, static = eqx.partition(problem, eqx.is_inexact_array)
    return _solve(run, static, float(grad_smoothing), dynamic, z0)
