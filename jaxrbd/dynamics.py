"""The dynamics every step solver shares: free velocity, integration, joint projection.

A step of every scheme is

    M (v+ - v) = impulses + h F(t, q, v),     q+ = normalize(q + h G(q) v+),

with F = k(q, v) - G^T grad V(q) + F_ext(t, q, v) (000 eq. (2), (36)). This module
computes the free velocity v + h M^{-1} F (dense, or per body for the sparse solver),
the integration and the projection onto the joints, once for all solvers.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

JOINT_PROJECTION_ITERATIONS = 4


class FreeMotion(eqx.Module):
    """The step's motion without contact impulses.

    Attributes:
        M: (nv, nv) the mass matrix at q.
        F: (nv,) the generalized force k - G^T grad V + F_ext at (t, q, v).
        v_free: (nv,) v + h M^{-1} F, the velocity at the end of the step without contact.
    """

    M: jax.Array
    F: jax.Array
    v_free: jax.Array


def free_motion(system, t, q, v, h, *, M=None):
    """The dense `FreeMotion` of the step from (t, q, v); M: the mass matrix when already formed."""
    M = system.M(q) if M is None else M
    F = system.generalized_force(t, q, v)
    return FreeMotion(M, F, v + h * jnp.linalg.solve(M, F))


class BodyMotion(eqx.Module):
    """The free motion per body, for the sparse solver of 3D body scenes.

    Attributes:
        Minv: (nb + 1, 6, 6) inverse mass blocks; the last (the world) is zero.
        v_free: (nb + 1, 6) free velocities; the world's is zero.
    """

    Minv: jax.Array
    v_free: jax.Array


def free_body_motion(system, t, q, v, h):
    """The `BodyMotion` of a 3D body scene: the same F as `free_motion`, with M inverted per body."""
    model = system.bodies
    nb, dtype = model.nbodies, q.dtype
    Minv = model.inverse_mass_blocks(q, system.params)
    F = system.generalized_force(t, q, v).reshape(nb, 6)
    v_free = v.reshape(nb, 6) + h * jnp.einsum("bij,bj->bi", Minv, F)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], dtype)])
    return BodyMotion(pad(Minv), pad(v_free))


def integrate(system, q, v, h):
    """q+ = normalize(q + h G(q) v) (000 §5); G v per body for body scenes (`System.qdot`)."""
    return system.project_q(q + h * system.qdot(q, v))


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
