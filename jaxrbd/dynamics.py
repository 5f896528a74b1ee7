"""The dynamics every step solver shares: free velocity, integration, joint projection.

A step of every scheme is

    M (v+ - v_free) = impulses,     q+ = normalize(q0 + h G(q0) v+),

with the free motion (v_free, q0) of the step without contact. Without
`system.free_flight` it is v_free = v + h M(q)^-1 F and q0 = q, with
F = k(q, v) - G^T grad V(q) + F_ext(t, q, v) (000 eq. (2), (36)): the
semi-implicit Euler step. Rigid bodies integrate the Coriolis (gyroscopic) force
implicitly instead: `jaxrbd.bodies._model.free_flight` gives v_free and q0, and M is taken at
q0 (see there). This module computes the free motion (dense, or per body for the
sparse solver), the integration and the projection onto the joints, once for all
solvers.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

JOINT_PROJECTION_ITERATIONS = 4


class FreeMotion(eqx.Module):
    """The step's motion without contact impulses.

    Attributes:
        M: (nv, nv) the mass matrix of the step's problem, at q0.
        v_free: (nv,) the velocity at the end of the step without contact.
        q0: (nq,) the configuration q+ is integrated from (q, unless the system has
            a `free_flight`).
        shift: (nv,) the displacement from q to q0 in velocity coordinates, or None
            when q0 = q. The position-level rows linearize the gap at q+ as
            f(q) + J_n (shift + h v+).
        solved: () whether the implicit part (`system.free_flight`) was solved.
    """

    M: jax.Array
    v_free: jax.Array
    q0: jax.Array
    shift: jax.Array | None
    solved: jax.Array


def free_motion(system, t, q, v, h, *, M=None):
    """The dense `FreeMotion` of the step from (t, q, v).

    With `system.passive` (A, B) the damping force -B v is taken at the end of
    the step, as in MuJoCo's Euler integrator: the step's mass matrix is M + h B,
    and (M + h B) v_free = M v + h F, so M (v+ - v) = h F + impulses - h B v+.
    With a `free_flight`, which moves the bodies with M - A (their own inertia,
    without the joints' armature), (M + h B) v_free = (M - A) v_flight + A v.

    M: the mass matrix at q when already formed (systems without `free_flight`).
    """
    if system.free_flight is None:
        M = system.M(q) if M is None else M
        F = system.generalized_force(t, q, v)
        if system.passive is None:
            return FreeMotion(M, v + h * jnp.linalg.solve(M, F), q, None, jnp.array(True))
        M_step = M + h * system.passive(q, system.params)[1]
        return FreeMotion(M_step, jnp.linalg.solve(M_step, M @ v + h * F), q, None, jnp.array(True))
    v_free, q0, shift, solved = free_flight(system, t, q, v, h)
    M = system.M(q0)
    if system.passive is None:
        return FreeMotion(M, v_free, q0, shift, solved)
    A, B = system.passive(q0, system.params)
    M_step = M + h * B
    return FreeMotion(M_step, jnp.linalg.solve(M_step, M @ v_free - A @ (v_free - v)), q0, shift, solved)


def free_flight(system, t, q, v, h):
    """`system.free_flight` over a step of length h after the impulse of every force but the Coriolis one:
    (v_free, q0, shift, solved)."""
    p = h * system.generalized_force(t, q, v, coriolis=False)
    return system.free_flight(q, v, p, h, system.params)


def integrate(system, q, v, h):
    """q+ = normalize(q + h G(q) v) (000 §5); G v per body for body scenes (`System.qdot`), or the system's own
    map (`System.advance`: kinematic trees turn their quaternions by the exact rotation)."""
    if system.advance is not None:
        return system.advance(q, v, h, system.params)
    return system.project_q(q + h * system.qdot(q, v))


def joint_curvature(system, q, v, h):
    """(ng,) the offsets bj of the joint rows J v+ + bj = 0: (h / 2) d^2 g / dt^2 along the motion from q at v.

    g(q+) = g(q) + h J v+ + (h^2 / 2) d^2 g / dt^2 + O(h^3), so with these offsets
    the step lands on the joint manifold to second order. Rows J v+ = 0 alone
    make v+ tangent to the manifold at q and turn a body about a hinge by the
    projection onto that tangent: it loses a fraction (h w)^2 of its kinetic
    energy per step (4% in 5 s for a pendulum swinging from 1 rad at h = 0.01).
    With them v+ is tangent at the step's midpoint, and the joint's impulse turns
    the velocity without shortening it. None without joints.
    """
    if system.constraints is None:
        return None
    qdot = system.qdot(q, v)
    rate = lambda q: jax.jvp(system.constraint, (q,), (system.qdot(q, v),))[1]
    return 0.5 * h * jax.jvp(rate, (q,), (qdot,))[1]


def project_to_joints(system, q, iterations=JOINT_PROJECTION_ITERATIONS):
    """q moved back to the joint manifold g(q) = 0 by the smallest M-norm correction (000 §2.5).

    Newton's method on the linearized problem min |dv|_M subject to
    g(q) + J dv = 0, that is dv = -M^{-1} J^T (J M^{-1} J^T)^{-1} g, q <- q + G dv,
    for a fixed number of iterations (quadratic convergence from the O(h^2) drift
    of a step). Identity without joints. The iterations are a `lax.fori_loop`, so
    a rollout compiles one of them, not `iterations` copies (`simulate` projects
    before its first step and after each).
    """
    if system.constraints is None:
        return q

    def newton(_, q):
        g = system.constraint(q)
        J = system.constraint_jacobian(q)
        MinvJt = jnp.linalg.solve(system.M(q), J.T)
        S = J @ MinvJt
        ridge = 1e-14 * (1.0 + jnp.trace(S)) * jnp.eye(S.shape[0], dtype=S.dtype)  # redundant joints
        return system.project_q(q - system.G(q) @ (MinvJt @ jnp.linalg.solve(S + ridge, g)))

    return lax.fori_loop(0, iterations, newton, q)
