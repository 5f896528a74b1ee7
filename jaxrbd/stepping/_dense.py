"""The dense step: the whole step problem in one matrix, solved by a complementarity solver.

Each step solves the complementarity problem built from the contact record at the
current configuration:

    M (v+ - v_free) = N c_n + T^T c_f,     q+ = normalize(q0 + h G(q0) v+),

with the free motion (v_free, q0) of `jaxrbd.dynamics` and the normal rows of the scheme (003 eq. (13)-(20), 000 eq. (7), (14)) and the
rows of the friction cone (`jaxrbd.cones`): the friction LCP of 004 §3.2 for a
polyhedral cone (c_f = D beta), a mixed NCP for the smooth cones. c_n and c_f are
impulses (h times the paper's forces).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import dynamics
from ..complementarity import SemismoothNewton, Solver, solve, solve_lcp
from ..model import State
from ._rows import step_problem
from ._solver import StepSolver
from ._types import ContactImpulses, StepStats


def _solve_at(
    system,
    cone,
    solver,
    contacts,
    motion,
    J,
    q0,
    qhat,
    dt,
    *,
    active,
    position_level,
    z0,
    smoothing,
    impact,
    bj,
    compliance,
):
    """Build and solve the step's problem with the geometry (record, joint rows) at qhat (None: at q).

    The position-level rows carry the gap at q0, the configuration the step
    integrates from: at q, f(q) + J_n shift (`FreeMotion.shift`); at an estimate
    qhat of q+, the linearization f(qhat) + grad f(qhat) (q0 - qhat) of 003 §3.4.
    `impact` (an `Impact`) gives the Newton rows of the colliding contacts.
    """
    bn = _normal_offsets(system, contacts, motion, dt, position_level, q0=q0, qhat=qhat, impact=impact)
    prob = step_problem(
        cone, contacts, motion.M, J, motion.v_free, dt, bn=bn, active=active, bj=bj, compliance=compliance
    )
    sol = solve(prob.problem, solver=solver, z0=z0, grad_smoothing=smoothing)
    return prob, sol, prob.velocity(sol.z)


def _normal_offsets(system, contacts, motion, dt, position_level, *, q0=None, qhat=None, impact=None):
    """(nc,) the offsets b_n of the normal rows: the gap at q0 over h (position level) or 0, Newton's where colliding."""
    f = contacts.gap
    if qhat is not None:  # grad f (q0 - qhat) = J_n G^+ (q0 - qhat): the displacement in velocity coordinates
        f = f + contacts.J_n @ jnp.linalg.lstsq(system.G(qhat), q0 - qhat)[0]
    elif motion.shift is not None:
        f = f + contacts.J_n @ motion.shift
    bn = f / dt if position_level else jnp.zeros_like(f)
    if impact is not None and impact.colliding is not None:
        newton = impact.offset + jnp.minimum(f, 0.0) / dt if position_level else impact.offset
        bn = jnp.where(impact.colliding, newton, bn)
    return bn


@eqx.filter_jit
def step_problem_at(system, state, dt, *, scheme, cone):
    """(problem, motion): the step's complementarity problem at `state`, unsolved, and its `FreeMotion`.

    The same problem `DenseStep.step` solves from `state` (linearized scheme, no
    impact law), for losses that score an observed v+ against it
    (`jaxrbd.sysid.violation_loss`). Compiled (`equinox.filter_jit`): called
    outside `jit`, the contact geometry and the free motion run as one program,
    not operation by operation (about 15 s for a cube on a table).
    """
    q, v = state.q, state.v
    contacts = system.contacts(q)
    J = system.constraint_jacobian(q)
    motion = dynamics.free_motion(system, state.t, q, v, dt)
    active = step_active(system, contacts, q, v, dt, scheme.delta)
    bn = _normal_offsets(system, contacts, motion, dt, scheme.position_level)
    bj = _joint_offsets(system, contacts, q, v, dt)
    problem = step_problem(
        cone, contacts, motion.M, J, motion.v_free, dt, bn=bn, active=active, bj=bj, compliance=scheme.compliance
    )
    return problem, motion


def _joint_offsets(system, contacts, q, v, dt):
    """The joint rows' offsets bj: their curvature along v (`dynamics.joint_curvature`), faded out on the
    joints of a mechanism one of whose stops is within the step's reach.

    A stop that engages within the step changes the velocities of every body its mechanism joins (the
    bodies connected by joints, not counting the world), so the curvature along v no longer predicts their
    motion: their joints would land off the manifold, and the projection would turn the bodies past the
    stop. The rows of a mechanism are scaled by min over its stops of clip(r / (h |rate|), 0, 1), where
    r = gap + h rate is where the stop would be at the end of the step at velocity v: 1 while its stops are
    at least a step away, 0 when one can be reached, continuous between (a replayed control log and finite
    differences see no switch). None without joints.
    """
    bj = dynamics.joint_curvature(system, q, v, dt)
    if bj is None or not contacts.limits:
        return bj
    stops = slice(contacts.size - contacts.limits, None)
    rate = contacts.J_n[stops] @ v
    reach = contacts.gap[stops] + dt * rate
    clear = jnp.clip(reach / (dt * jnp.abs(rate) + jnp.finfo(v.dtype).tiny), 0.0, 1.0)
    clear = jnp.where(contacts.active[stops], clear, 1.0)
    owner = system.bodies.stop_mechanisms()
    return jnp.min(jnp.where(owner, clear[:, None], 1.0), axis=0) * bj


def _advance(system, q0, v_next, dt, impact, v_free):
    """q+ from q0: h v+, or with a located impact (`Impact.time` tau) tau v_free, then (h - tau) v+."""
    if impact is None or impact.time is None:
        return dynamics.integrate(system, q0, v_next, dt)
    tau = impact.time
    return dynamics.integrate(system, dynamics.integrate(system, q0, tau * v_free, 1.0), (dt - tau) * v_next, 1.0)


def _project(system, contacts, q, active, solver):
    """Smallest M-norm correction q + G M^{-1} N c with 0 <= c ⊥ f + N^T M^{-1} N c >= 0 (linearized)."""
    M = system.M(q)
    N = contacts.J_n.T
    MinvN = jnp.linalg.solve(M, N)
    keep = active.astype(q.dtype)
    A = (N.T @ MinvN) * keep[:, None] * keep[None, :] + jnp.diag(1.0 - keep)
    b = jnp.minimum(contacts.gap, 0.0) * keep + (1.0 - keep)
    sol = solve_lcp(A, b, solver=solver)
    return system.project_q(q + system.G(q) @ (MinvN @ sol.z)), sol


def step_active(system, contacts, q, v, dt, delta):
    """(nc,) the contacts in the step: those the geometry keeps, and with `delta` those whose
    predicted gap f(q + h G v) is below it (one more collision, at the predicted configuration)."""
    if delta is None:
        return contacts.active
    predicted = system.contacts(dynamics.integrate(system, q, v, dt)).gap
    return (predicted < delta) & contacts.active


class DenseStep(StepSolver):
    """The dense step: the whole friction LCP (or NCP) of the step, solved by `solver`.

    Supports every system, scheme, cone and impact law. `simulate(solver=...)` also
    accepts the complementarity solver itself (`SemismoothNewton()`, `Lemke()`) and
    wraps it in a `DenseStep`.

    Attributes:
        solver: the complementarity solver, `SemismoothNewton()` by default.
    """

    solver: Solver = eqx.field(default_factory=SemismoothNewton)

    def __check_init__(self):
        if not isinstance(self.solver, Solver):
            raise TypeError(
                f"DenseStep: solver must be a complementarity solver (jaxrbd.SemismoothNewton(), jaxrbd.Lemke()), "
                f"got {self.solver!r}"
            )

    @property
    def name(self):
        return f"dense {type(self.solver).__name__}"

    def supports(self, system, options):
        return None

    def init(self, system, state, cone):
        ng = jax.eval_shape(system.constraint, state.q).shape[0]
        return jnp.zeros(cone.size(system.ncontacts(state.q), ng), state.q.dtype)

    def step(self, system, state, z, options):
        """One dense step; the record runs once at q and once per fixed-point iterate.

        The stats cover every complementarity solve of the step (impacts and the
        drift projection too).
        """
        dt, scheme, cone, restitution = options.dt, options.scheme, options.cone, options.impact
        grad_smoothing, project_joints = options.grad_smoothing, options.project_joints
        solver = self.solver
        t, q, v = state.t, state.q, state.v
        contacts = system.contacts(q)
        J = system.constraint_jacobian(q)
        motion = dynamics.free_motion(system, t, q, v, dt)
        impact = None
        if restitution is not None:
            impact = restitution.resolve(
                system, contacts, motion, J, state, dt=dt, scheme=scheme, solver=solver, cone=cone
            )
            if impact.colliding is None:  # the impact changed v: the free motion starts from it
                v = impact.v
                M = motion.M if system.passive is None else None  # M + h B: M is formed again
                motion = dynamics.free_motion(system, t, q, v, dt, M=M)
        active = step_active(system, contacts, q, v, dt, scheme.delta)
        bj = _joint_offsets(system, contacts, q, v, dt)
        options = dict(
            active=active,
            position_level=scheme.position_level,
            smoothing=grad_smoothing,
            impact=impact,
            bj=bj,
            compliance=scheme.compliance,
        )
        q0, v_free = motion.q0, motion.v_free
        prob, sol, v_next = _solve_at(system, cone, solver, contacts, motion, J, q0, None, dt, z0=z, **options)
        q_next = _advance(system, q0, v_next, dt, impact, v_free)
        for _ in range(scheme.fixed_point_iterations):
            qhat = q_next
            contacts_hat = system.contacts(qhat)
            if system.free_flight is None:  # M and F at qhat too (003 §3.4)
                motion = dynamics.free_motion(system, t, qhat, v, dt)
            J_hat = system.constraint_jacobian(qhat)
            prob, sol, v_next = _solve_at(
                system, cone, solver, contacts_hat, motion, J_hat, q0, qhat, dt, z0=sol.z, **options
            )
            q_next = _advance(system, q0, v_next, dt, impact, v_free)
        residual, converged = sol.residual, sol.converged & motion.solved
        if scheme.projects:
            q_next, projection = _project(system, system.contacts(q_next), q_next, active, solver)
            residual = jnp.maximum(residual, projection.residual)
            converged = converged & projection.converged
        if project_joints:
            q_next = dynamics.project_to_joints(system, q_next)
        nc = contacts.size
        c_f = prob.friction(sol.z)
        c_n, c_g = prob.normal(sol.z), prob.joint(sol.z)
        if impact is not None:
            c_n, c_f, c_g = c_n + impact.normal, c_f + impact.friction, c_g + impact.joint
            residual = jnp.maximum(residual, impact.residual)
            converged = converged & impact.converged
        impulses = ContactImpulses(
            normal=c_n,
            friction=c_f[:, :2],
            moment=c_f[:, 2] if cone.dim == 3 else jnp.zeros((nc,), q.dtype),
            joint=c_g,
            limit=c_n[nc - contacts.limits :],
        )
        stats = StepStats(
            residual=residual,
            converged=converged,
            fallback=sol.fallback,
            iterations=sol.iterations,
            active=active,
            joint_violation=jnp.max(jnp.abs(system.constraint(q_next)), initial=0.0),
            overflow=contacts.overflow,
        )
        return State(t + dt, q_next, v_next), sol.z, impulses, stats
