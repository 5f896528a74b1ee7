"""Time-stepping schemes and the differentiable rollout `simulate`.

Each step solves the friction LCP of 004 §3.2 built from the system at the
current configuration:

    M (v+ - v) = N c_n + D beta + h F(t, q, v),     q+ = q + h G(q) v+,

with the normal rows of the scheme (003 eq. (13)-(20), 000 eq. (7), (14)) and the
polyhedral friction rows. c_n and beta are impulses (h times the paper's forces).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._problems import friction_lcp
from .complementarity import SemismoothNewton, solve_lcp
from .model import State, check_system


class StewartTrinkle(eqx.Module):
    """Stewart-Trinkle: the position-level constraint f(q) + h n^T v+ >= 0 (003 eq. (13)-(20)).

    Attributes:
        fixed_point_iterations: 0 gives the linearized scheme of 003 §3.1-3.2, with
            n, D, M and F at q. k > 0 gives the nonlinear version of 003 §3.4: the
            step is re-solved k times with the geometry re-evaluated at the last
            estimate q^ of q+, using the constraint f(q^) + grad f(q^)^T (q+ - q^) >= 0.
        delta: contacts whose gap f(q + h G v) exceeds delta are left out of the
            LCP (masked rows); None keeps every contact.
    """

    fixed_point_iterations: int = eqx.field(static=True, default=0)
    delta: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if self.fixed_point_iterations < 0:
            raise ValueError(f"fixed_point_iterations must be >= 0, got {self.fixed_point_iterations}")
        if self.delta is not None and not self.delta >= 0:
            raise ValueError(f"delta must be >= 0 or None, got {self.delta}")


class AnitescuPotra(eqx.Module):
    """Anitescu-Potra: the velocity-level constraint n^T v+ >= 0 on the active set (000 eq. (14), 003 §3.3).

    The LCP is solvable for every configuration. A contact is active when its
    predicted gap f(q + h G v) is below delta.

    Attributes:
        delta: the activation distance, >= 0.
        project: project the drift back to the admissible set after each step, by
            the smallest M-norm correction of the linearized gaps (a frictionless
            LCP; 000 §2.5). Velocities are unchanged.
    """

    delta: float = eqx.field(static=True, default=1e-3)
    project: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if not self.delta >= 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")


class ContactImpulses(eqx.Module):
    """Per-step contact impulses (h times the average forces over the step).

    Attributes:
        normal: (..., nc) normal impulses c_n.
        friction: (..., nc, m) friction impulses in each contact's tangent coordinates.
    """

    normal: jax.Array
    friction: jax.Array


class StepStats(eqx.Module):
    """Per-step solver statistics: residual, converged, fallback (Lemke ran), active contacts."""

    residual: jax.Array
    converged: jax.Array
    fallback: jax.Array
    active: jax.Array


class Trajectory(eqx.Module):
    """A rollout: t (steps+1,), q (steps+1, nq), v (steps+1, nv), per-step impulses and stats."""

    t: jax.Array
    q: jax.Array
    v: jax.Array
    impulses: ContactImpulses
    stats: StepStats


def _row_mask(active, k):
    """Mask of the LCP rows [c_n, beta, lam] for per-contact activity."""
    return jnp.concatenate([active, jnp.repeat(active, k), active])


def _solve_step(system, q, v, F, qhat, h, active, position_level, z0, solver, grad_smoothing):
    """Build and solve the step's friction LCP with the geometry at qhat."""
    M = system.M(qhat)
    Gq = system.G(q)
    f = system.gap(qhat)
    Jf = system.gap_jacobian(qhat)
    N = (Jf @ Gq).T
    D, U = system.friction_directions(qhat)
    k = U.shape[0]
    b = v + h * jnp.linalg.solve(M, F)
    nc = f.shape[0]
    bn = (f + Jf @ (q - qhat)) / h if position_level else None
    prob = friction_lcp(M, N, D, system.mu, (k,) * nc, b, bn=bn, row_active=_row_mask(active, k))
    sol = solve_lcp(prob.lcp.A, prob.lcp.b, solver=solver, z0=z0, grad_smoothing=grad_smoothing)
    v_next = prob.velocity(sol.z)
    return prob, sol, v_next, system.project_q(q + h * Gq @ v_next), U


def _project(system, q, active, solver):
    """Smallest M-norm correction q + G M^{-1} N c with 0 <= c ⊥ f + N^T M^{-1} N c >= 0 (linearized)."""
    M = system.M(q)
    N = (system.gap_jacobian(q) @ system.G(q)).T
    MinvN = jnp.linalg.solve(M, N)
    keep = active.astype(q.dtype)
    A = (N.T @ MinvN) * keep[:, None] * keep[None, :] + jnp.diag(1.0 - keep)
    b = jnp.minimum(system.gap(q), 0.0) * keep + (1.0 - keep)
    sol = solve_lcp(A, b, solver=solver)
    return system.project_q(q + system.G(q) @ (MinvN @ sol.z)), sol


def step(system, state, z0, *, dt, scheme, solver, grad_smoothing=0.0):
    """One time step: returns (next state, LCP solution z, impulses, stats).

    The stats cover every complementarity solve of the step (the drift projection's too).
    """
    t, q, v = state.t, state.q, state.v
    projection = None
    F = system.generalized_force(t, q, v)
    predicted = system.gap(q + dt * system.G(q) @ v)
    geometric = system.active(q)
    if isinstance(scheme, AnitescuPotra):
        active = (predicted < scheme.delta) & geometric
        prob, sol, v_next, q_next, U = _solve_step(system, q, v, F, q, dt, active, False, z0, solver, grad_smoothing)
        if scheme.project:
            q_next, projection = _project(system, q_next, active, solver)
    elif isinstance(scheme, StewartTrinkle):
        active = geometric if scheme.delta is None else (predicted < scheme.delta) & geometric
        prob, sol, v_next, q_next, U = _solve_step(system, q, v, F, q, dt, active, True, z0, solver, grad_smoothing)
        for _ in range(scheme.fixed_point_iterations):
            qhat = q_next
            F_hat = system.generalized_force(t, qhat, v)
            prob, sol, v_next, q_next, U = _solve_step(
                system, q, v, F_hat, qhat, dt, active, True, sol.z, solver, grad_smoothing
            )
    else:
        raise TypeError(f"scheme must be StewartTrinkle or AnitescuPotra, got {type(scheme).__name__}")
    c_n, beta, _ = prob.split(sol.z)
    friction = beta.reshape(c_n.shape[0], U.shape[0]) @ U
    impulses = ContactImpulses(normal=c_n, friction=friction)
    residual, converged = sol.residual, sol.converged
    if projection is not None:
        residual = jnp.maximum(residual, projection.residual)
        converged = converged & projection.converged
    stats = StepStats(residual=residual, converged=converged, fallback=sol.fallback, active=active)
    return State(t + dt, q_next, v_next), sol.z, impulses, stats


def _check_options(dt, steps):
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not isinstance(dt, jax.core.Tracer):
        dt_value = np.asarray(dt)
        if dt_value.shape != () or not np.isfinite(dt_value) or not dt_value > 0:
            raise ValueError(f"dt must be a finite scalar > 0, got {dt!r}")


def simulate(system, state, *, dt, steps, scheme=None, solver=None, grad_smoothing=0.0):
    """Roll the system forward `steps` steps of size `dt` in a `lax.scan`.

    The LCP solution of each step warm-starts the next. The rollout is `jit`-,
    `vmap`- and `grad`-compatible; gradients flow through every step's implicit
    differentiation rule.

    Args:
        system: a `System`.
        state: the initial `State`.
        dt: step size h > 0.
        steps: number of steps (static int >= 1).
        scheme: `StewartTrinkle()` (default) or `AnitescuPotra(...)`.
        solver: complementarity solver; default `SemismoothNewton()`.
        grad_smoothing: passed to `solve_lcp` for the backward pass.

    Returns:
        A `Trajectory`; check `traj.stats.converged` (every step reports its residual).
    """
    _check_options(dt, steps)
    check_system(system, state)
    scheme = StewartTrinkle() if scheme is None else scheme
    solver = SemismoothNewton() if solver is None else solver
    dtype = jnp.result_type(state.q, state.v, float)
    state = State(jnp.asarray(state.t, dtype), jnp.asarray(state.q, dtype), jnp.asarray(state.v, dtype))
    _, U = system.friction_directions(state.q)
    z0 = jnp.zeros(system.mu.shape[-1] * (U.shape[0] + 2), dtype)

    def body(carry, _):
        state, z = carry
        state, z, impulses, stats = step(
            system, state, z, dt=dt, scheme=scheme, solver=solver, grad_smoothing=grad_smoothing
        )
        return (state, z), (state, impulses, stats)

    _, (states, impulses, stats) = jax.lax.scan(body, (state, z0), None, length=steps)
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs])
    return Trajectory(cat(state.t, states.t), cat(state.q, states.q), cat(state.v, states.v), impulses, stats)
