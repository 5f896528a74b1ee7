"""What a step and a rollout return: impulses, statistics, trajectory."""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._status import StepStatus


class ContactImpulses(eqx.Module):
    """Per-step impulses (h times the average forces over the step, impacts included).

    Attributes:
        normal: (..., nc) normal impulses c_n.
        friction: (..., nc, m) friction impulses in each contact's tangent coordinates.
        moment: (..., nc) frictional moment impulses c_r about the normal (zero
            unless the cone has torsion: soft-finger and mixed cones).
        joint: (..., ng) joint constraint impulses (the multipliers of g(q) = 0).
        limit: (..., nl) the impulses of the joint-range stops, >= 0 (torque impulses
            in N m s for a hinge, force impulses in N s for a slide), in the order
            of `scene.bodies.limit_rows()`; they are also the last nl entries of
            `normal`. (nl = 0 without ranges; None from `ContactSweeps`.)
    """

    normal: jax.Array
    friction: jax.Array
    moment: jax.Array
    joint: jax.Array
    limit: jax.Array | None = None


class StepStats(eqx.Module):
    """Per-step solver statistics.

    Attributes:
        residual: the largest complementarity residual of the step's solves.
        converged: every solve of the step converged, and its `status` is SUCCESS.
        fallback: the Lemke fallback ran in the step's main solve.
        iterations: the work of the step's main solve: Newton iterations (plus Lemke
            pivots where the fallback ran) of the dense step, sweeps of `ContactSweeps`.
        active: (nc,) the contacts in the step's LCP.
        joint_violation: max |g(q+)| after the step (0 without joints).
        overflow: shape pairs the broad phase left without a contact slot at the
            start of the step although within its distance (0 without one;
            `jaxrbd.BroadPhase`).
        status: a `StepStatus` code, set by `simulate`: why a step is bad
            (`StepStatus.message(code)`); SUCCESS from a step solver alone.
    """

    residual: jax.Array
    converged: jax.Array
    fallback: jax.Array
    iterations: jax.Array
    active: jax.Array
    joint_violation: jax.Array
    overflow: jax.Array
    status: jax.Array = eqx.field(default=StepStatus.SUCCESS, converter=lambda x: jnp.asarray(x, jnp.int32))


class Trajectory(eqx.Module):
    """A rollout: t (steps+1,), q (steps+1, nq), v (steps+1, nv), per-step impulses and stats."""

    t: jax.Array
    q: jax.Array
    v: jax.Array
    impulses: ContactImpulses
    stats: StepStats
