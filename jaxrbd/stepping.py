"""Time-stepping schemes and the differentiable rollout `simulate`.

Each step solves the complementarity problem built from the system at the
current configuration:

    M (v+ - v) = N c_n + T^T c_f + h F(t, q, v),     q+ = q + h G(q) v+,

with the normal rows of the scheme (003 eq. (13)-(20), 000 eq. (7), (14)) and the
rows of the friction cone (`jaxrbd.cones`): the friction LCP of 004 §3.2 for a
polyhedral cone (c_f = D beta), a mixed NCP for the smooth cones. c_n and c_f are
impulses (h times the paper's forces).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _sweeps
from ._sweeps import ContactSweeps
from ._validate import check_value
from .complementarity import SemismoothNewton, solve, solve_lcp
from .cones import PlanarCone, PolyhedralCone, is_cone
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


class Newton(eqx.Module):
    """Newton's impact law inside the step (004 eq. (3.11)).

    A contact j collides in the step when it is closing (n^T v < 0) and its
    predicted gap f(q) + h n^T v_free (v_free: the velocity the step reaches
    without contact forces) is below `distance` (Anitescu-Potra: below its delta,
    when larger). It then takes the normal row 0 <= c_n ⊥ n^T (v+ + e_j v) >= 0
    with e_j = `system.restitution[j]`, instead of the scheme's own row; its
    position-level offset is kept only where the contact already penetrates.
    Other contacts keep the scheme's rows. The impact time is not located: the
    bounce starts in the step in which the contact would close.

    Energy: at a single frictionless contact the normal velocity is reversed and
    scaled by e, and the kinetic energy does not increase. With friction it can
    (004 §1.1), and so can several simultaneous contacts (untested here): when
    the normal impulse reverses the slip of the contact point, as for a spinning
    rod striking the table, see the README.

    Attributes:
        distance: the detection distance (metres).
    """

    distance: float = eqx.field(static=True, default=1e-6)


class Poisson(eqx.Module):
    """Poisson's impact law: compression, then decompression (000 eq. (27)-(28)).

    At the start of a step the contacts that collide in it (see `Newton`) and the
    contacts touching them are resolved by two impulsive problems at q with no
    external force: compression (eq. (27), n^T v^c >= 0) gives v^c and the impulses
    (c_n^c, beta^c); decompression (eq. (28)) adds the restitution impulse
    I_r = e_j n_j c_nj^c + e_T D_j beta_j^c and solves again for v+. The step then
    proceeds from v+. The impact time is not located: the impact happens at the
    start of the step in which the contact would close, so its position is off by
    at most h |n^T v|.

    Energy: with e_T = e_j (the default) and one e for the contacts of an impact,
    the kinetic energy never increases across it (for e <= 1): the decompression
    starts from (1 + e) v^c - e v^-, which never has more kinetic energy than v^-
    (000 §4), and its own impulses only dissipate. With e_T = 0 (I_r = e c_n^c
    alone, the simplest reading of 000 eq. (28)) it can gain energy when the
    normal impulse reverses the slip; see the README.

    Attributes:
        tangential: the tangential restitution e_T in [0, 1] (a scalar leaf); None
            (default) uses each contact's normal coefficient e_j.
        expedient: skip the decompression LCP: v+ = v^c + M^{-1} I_r with the joint
            rows kept, which is (1 + e) v^c - e v^- (000 §4).
        distance: the detection distance, as for `Newton`.
    """

    tangential: float | None = None
    expedient: bool = eqx.field(static=True, default=False)
    distance: float = eqx.field(static=True, default=1e-6)

    def __check_init__(self):
        check_value("Poisson tangential restitution", self.tangential, unit_interval=True)
        if self.expedient and self.tangential is not None:
            raise ValueError("Poisson(expedient=True) uses e_T = e: leave tangential=None")


class ContactImpulses(eqx.Module):
    """Per-step impulses (h times the average forces over the step, impacts included).

    Attributes:
        normal: (..., nc) normal impulses c_n.
        friction: (..., nc, m) friction impulses in each contact's tangent coordinates.
        moment: (..., nc) frictional moment impulses c_r about the normal (zero
            unless the cone has torsion: soft-finger and mixed cones).
        joint: (..., ng) joint constraint impulses (the multipliers of g(q) = 0).
    """

    normal: jax.Array
    friction: jax.Array
    moment: jax.Array
    joint: jax.Array


class StepStats(eqx.Module):
    """Per-step solver statistics.

    Attributes:
        residual: the largest complementarity residual of the step's solves.
        converged: every solve of the step converged.
        fallback: the Lemke fallback ran in the step's main solve.
        active: (nc,) the contacts in the step's LCP.
        joint_violation: max |g(q+)| after the step (0 without joints).
        overflow: shape pairs the broad phase left without a contact slot at the
            start of the step although within its distance (0 without one;
            `jaxrbd.BroadPhase`).
    """

    residual: jax.Array
    converged: jax.Array
    fallback: jax.Array
    active: jax.Array
    joint_violation: jax.Array
    overflow: jax.Array


class Trajectory(eqx.Module):
    """A rollout: t (steps+1,), q (steps+1, nq), v (steps+1, nv), per-step impulses and stats."""

    t: jax.Array
    q: jax.Array
    v: jax.Array
    impulses: ContactImpulses
    stats: StepStats


JOINT_PROJECTION_ITERATIONS = 4


def friction_cone(system, q):
    """The system's friction cone: `system.friction`, or the default for its tangents."""
    if system.friction is not None:
        return system.friction
    m = jax.eval_shape(lambda q: system.tangents(q, system.params), q).shape[1]
    return PlanarCone() if m == 1 else PolyhedralCone(system.directions)


def _problem(system, cone, qhat, b, **kwargs):
    """The step's complementarity problem with the geometry and joints at qhat."""
    M, N = system.M(qhat), system.normals(qhat)
    T = system.contact_rows(qhat, cone.dim)
    mu = system.coefficients(qhat)[0]
    return cone.build(M, N, T, mu, b, J=system.constraint_jacobian(qhat).T, **kwargs)


def _solve(prob, solver, z0=None, grad_smoothing=0.0):
    return solve(prob.problem, solver=solver, z0=z0, grad_smoothing=grad_smoothing)


def _solve_step(system, cone, q, v, F, qhat, h, active, position_level, z0, solver, grad_smoothing, newton):
    """Build and solve the step's problem with the geometry at qhat.

    newton: None, or (colliding mask, e n^T v) for the contacts under Newton's law.
    """
    Gq = system.G(q)
    b = v + h * jnp.linalg.solve(system.M(qhat), F)
    f = system.gap(qhat) + system.gap_jacobian(qhat) @ (q - qhat)
    bn = f / h if position_level else jnp.zeros_like(f)
    if newton is not None:
        colliding, offset = newton
        bn = jnp.where(colliding, offset + jnp.minimum(f, 0.0) / h if position_level else offset, bn)
    prob = _problem(system, cone, qhat, b, bn=bn, active=active)
    sol = _solve(prob, solver, z0, grad_smoothing)
    v_next = prob.velocity(sol.z)
    return prob, sol, v_next, system.project_q(q + h * Gq @ v_next)


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


def project_to_joints(system, q, iterations=JOINT_PROJECTION_ITERATIONS):
    """q moved back to the joint manifold g(q) = 0 by the smallest M-norm correction (000 §2.5).

    Newton's method on the linearized problem min |dv|_M subject to
    g(q) + J dv = 0, that is dv = -M^{-1} J^T (J M^{-1} J^T)^{-1} g, q <- q + G dv,
    for a fixed number of iterations (quadratic convergence from the O(h^2) drift
    of a step). Identity without joints.
    """
    if system.constraints is None:
        return q
    for _ in range(iterations):
        g = system.constraint(q)
        J = system.constraint_jacobian(q)
        MinvJt = jnp.linalg.solve(system.M(q), J.T)
        S = J @ MinvJt
        ridge = 1e-14 * (1.0 + jnp.trace(S)) * jnp.eye(S.shape[0], dtype=S.dtype)  # redundant joints
        q = system.project_q(q - system.G(q) @ (MinvJt @ jnp.linalg.solve(S + ridge, g)))
    return q


def _impact_window(scheme, law):
    if isinstance(scheme, AnitescuPotra):
        return max(scheme.delta, law.distance)
    return law.distance


def colliding_contacts(system, t, q, v, *, dt, scheme, law):
    """(nc,) bool: the contacts that collide in the step from (t, q, v).

    A contact collides when it is closing (n^T v < 0) and its predicted gap
    f(q) + h n^T v_free is below the window, where v_free = v + h M^{-1} F is the
    velocity the step would reach without contact forces. Also returns the
    contacts taking part in the impact (predicted gap below the window, closing or
    not) and n^T v.
    """
    N = system.normals(q)
    vn = N.T @ v
    free = v + dt * jnp.linalg.solve(system.M(q), system.generalized_force(t, q, v))
    predicted = system.gap(q) + dt * (N.T @ free)
    touching = (predicted < _impact_window(scheme, law)) & system.active(q)
    return touching & (vn < 0), touching, vn


def resolve_impact(system, t, q, v, *, dt, scheme, law, solver, cone=None):
    """Poisson's impact at (t, q, v): returns (v+, v^c, impulses (c_n, c_f, c_g), residual, converged).

    c_f (nc, d) are the friction impulses in contact coordinates.

    Compression (000 eq. (27)) and decompression (eq. (28)) on the contacts whose
    predicted gap is below the window; no external force acts during the impact.
    """
    cone = friction_cone(system, q) if cone is None else cone
    _, touching, _ = colliding_contacts(system, t, q, v, dt=dt, scheme=scheme, law=law)
    comp = _problem(system, cone, q, v, active=touching)
    sol_c = _solve(comp, solver)
    v_c = comp.velocity(sol_c.z)
    c_n, c_f = comp.normal(sol_c.z), comp.friction(sol_c.z)
    e = system.coefficients(q)[1]
    e_t = (e if law.tangential is None else jnp.broadcast_to(law.tangential, e.shape))[:, None]
    I_r = comp.N @ (e * c_n) + jnp.einsum("cdv,cd->v", comp.T, e_t * c_f)
    decompress = touching & (not law.expedient)
    decomp = _problem(system, cone, q, v_c + jnp.linalg.solve(comp.M, I_r), active=decompress)
    sol_d = _solve(decomp, solver)
    v_plus = decomp.velocity(sol_d.z)
    impulses = (
        (1 + e) * c_n + decomp.normal(sol_d.z),
        (1 + e_t) * c_f + decomp.friction(sol_d.z),
        comp.joint(sol_c.z) + decomp.joint(sol_d.z),
    )
    residual = jnp.maximum(sol_c.residual, sol_d.residual)
    return v_plus, v_c, impulses, residual, sol_c.converged & sol_d.converged


def step(system, state, z0, *, dt, scheme, solver, grad_smoothing=0.0, restitution=None, project=True, cone=None):
    """One time step: returns (next state, solution z, impulses, stats).

    The stats cover every complementarity solve of the step (impacts and the
    drift projection too). cone: the friction cone; None uses `friction_cone`.
    """
    t, q, v = state.t, state.q, state.v
    projection = None
    newton = None
    residual, converged = jnp.zeros((), q.dtype), jnp.ones((), bool)
    cone = friction_cone(system, q) if cone is None else cone
    nc, ng = system.ncontacts(q), system.constraint(q).shape[0]
    extra = (jnp.zeros((nc,), q.dtype), jnp.zeros((nc, cone.dim), q.dtype), jnp.zeros((ng,), q.dtype))
    if isinstance(restitution, Poisson):
        v, _, extra, residual, converged = resolve_impact(
            system, t, q, v, dt=dt, scheme=scheme, law=restitution, solver=solver, cone=cone
        )
    elif isinstance(restitution, Newton):
        colliding, _, vn = colliding_contacts(system, t, q, v, dt=dt, scheme=scheme, law=restitution)
        newton = (colliding, system.coefficients(q)[1] * vn)
    elif restitution is not None:
        raise TypeError(f"restitution must be None, jaxrbd.Newton() or jaxrbd.Poisson(), got {restitution!r}")
    F = system.generalized_force(t, q, v)
    predicted = system.gap(q + dt * system.G(q) @ v)
    geometric = system.active(q)
    if isinstance(scheme, AnitescuPotra):
        active = (predicted < scheme.delta) & geometric
        prob, sol, v_next, q_next = _solve_step(
            system, cone, q, v, F, q, dt, active, False, z0, solver, grad_smoothing, newton
        )
        if scheme.project:
            q_next, projection = _project(system, q_next, active, solver)
    elif isinstance(scheme, StewartTrinkle):
        active = geometric if scheme.delta is None else (predicted < scheme.delta) & geometric
        prob, sol, v_next, q_next = _solve_step(
            system, cone, q, v, F, q, dt, active, True, z0, solver, grad_smoothing, newton
        )
        for _ in range(scheme.fixed_point_iterations):
            qhat = q_next
            F_hat = system.generalized_force(t, qhat, v)
            prob, sol, v_next, q_next = _solve_step(
                system, cone, q, v, F_hat, qhat, dt, active, True, sol.z, solver, grad_smoothing, newton
            )
    else:
        raise TypeError(f"scheme must be StewartTrinkle or AnitescuPotra, got {type(scheme).__name__}")
    if project:
        q_next = project_to_joints(system, q_next)
    c_f = prob.friction(sol.z) + extra[1]
    moment = c_f[:, 2] if cone.dim == 3 else jnp.zeros((nc,), q.dtype)
    impulses = ContactImpulses(
        normal=prob.normal(sol.z) + extra[0], friction=c_f[:, :2], moment=moment, joint=prob.joint(sol.z) + extra[2]
    )
    residual = jnp.maximum(residual, sol.residual)
    converged = converged & sol.converged
    if projection is not None:
        residual = jnp.maximum(residual, projection.residual)
        converged = converged & projection.converged
    violation = jnp.max(jnp.abs(system.constraint(q_next)), initial=0.0)
    stats = StepStats(
        residual=residual,
        converged=converged,
        fallback=sol.fallback,
        active=active,
        joint_violation=violation,
        overflow=system.overflow(q),
    )
    return State(t + dt, q_next, v_next), sol.z, impulses, stats


def _choose_solver(system, q, cone, scheme, solver, restitution, grad_smoothing):
    """The solver: as given (a clear error when `ContactSweeps` cannot run the step), or by size.

    Without a solver, a scene of rigid bodies whose dense LCP has more than
    `_sweeps.AUTO_SIZE` rows runs on `ContactSweeps`; everything else on the dense
    `SemismoothNewton`.
    """
    reason = _sweeps.unsupported(system, cone, scheme, restitution, grad_smoothing)
    if isinstance(solver, ContactSweeps):
        if reason is not None:
            raise ValueError(f"solver=ContactSweeps(): {reason}")
        return solver
    if solver is not None:
        return solver
    if reason is None and cone.size(system.ncontacts(q), 0) > _sweeps.AUTO_SIZE:
        return ContactSweeps()
    return SemismoothNewton()


def _rollout(step_fn, state, z0, steps):
    def body(carry, _):
        state, z = carry
        state, z, impulses, stats = step_fn(state, z)
        return (state, z), (state, impulses, stats)

    _, (states, impulses, stats) = jax.lax.scan(body, (state, z0), None, length=steps)
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs])
    return Trajectory(cat(state.t, states.t), cat(state.q, states.q), cat(state.v, states.v), impulses, stats)


def _simulate_blocks(system, state, cone, *, dt, steps, scheme, solver):
    z0 = jnp.zeros((system.ncontacts(state.q), cone.k + 2), state.q.dtype)
    step_fn = lambda state, z: _sweeps.step_blocks(system, state, z, dt=dt, scheme=scheme, solver=solver, cone=cone)
    return _rollout(step_fn, state, z0, steps)


def _check_options(dt, steps):
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not isinstance(dt, jax.core.Tracer):
        dt_value = np.asarray(dt)
        if dt_value.shape != () or not np.isfinite(dt_value) or not dt_value > 0:
            raise ValueError(f"dt must be a finite scalar > 0, got {dt!r}")


def simulate(
    system,
    state,
    *,
    dt,
    steps,
    scheme=None,
    solver=None,
    friction=None,
    grad_smoothing=0.0,
    restitution=None,
    project_joints=True,
):
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
        solver: complementarity solver: `SemismoothNewton()` (dense), `Lemke()`,
            or `ContactSweeps()` (sparse block Gauss-Seidel for scenes of rigid
            bodies). None: `ContactSweeps()` for a body scene whose dense LCP has
            more than `_sweeps.AUTO_SIZE` rows and that it supports, otherwise
            `SemismoothNewton()`.
        friction: the friction cone (`jaxrbd.cones`); None uses `system.friction`
            or, without one, the polyhedral (or planar) default.
        grad_smoothing: passed to `solve_lcp` for the backward pass.
        restitution: the impact law: None (inelastic, the papers' schemes),
            `Newton()` or `Poisson(...)`; the coefficients are `system.restitution`.
        project_joints: move q back to g(q) = 0 after every step and before the
            first (`project_to_joints`); without it the joints drift.

    Returns:
        A `Trajectory`; check `traj.stats.converged` (every step reports its residual).
    """
    _check_options(dt, steps)
    check_system(system, state)
    if restitution is not None and not isinstance(restitution, (Newton, Poisson)):
        raise TypeError(f"restitution must be None, jaxrbd.Newton() or jaxrbd.Poisson(), got {restitution!r}")
    scheme = StewartTrinkle() if scheme is None else scheme
    dtype = jnp.result_type(state.q, state.v, float)
    state = State(jnp.asarray(state.t, dtype), jnp.asarray(state.q, dtype), jnp.asarray(state.v, dtype))
    if friction is not None and not is_cone(friction):
        raise TypeError(f"friction must be a jaxrbd.cones cone, got {friction!r}")
    cone = friction_cone(system, state.q) if friction is None else friction
    solver = _choose_solver(system, state.q, cone, scheme, solver, restitution, grad_smoothing)
    if isinstance(solver, ContactSweeps):
        return _simulate_blocks(system, state, cone, dt=dt, steps=steps, scheme=scheme, solver=solver)
    if project_joints:
        state = State(state.t, project_to_joints(system, state.q), state.v)
    jax.eval_shape(lambda q: system.contact_rows(q, cone.dim), state.q)  # a clear error on a mismatch
    ng = jax.eval_shape(system.constraint, state.q).shape[0]
    z0 = jnp.zeros(cone.size(system.ncontacts(state.q), ng), dtype)
    options = dict(
        cone=cone,
        dt=dt,
        scheme=scheme,
        solver=solver,
        grad_smoothing=grad_smoothing,
        restitution=restitution,
        project=project_joints,
    )

    return _rollout(lambda state, z: step(system, state, z, **options), state, z0, steps)
