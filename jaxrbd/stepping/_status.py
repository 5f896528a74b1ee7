"""The status of a step: why a run is bad, computed from traced values so that it works under `jit`."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._status import StatusCode


class StepStatus(StatusCode):
    """The status of one step of a rollout (`traj.stats.status`, an int array under `jit`).

    `simulate` sets it (a step solver alone reports SUCCESS). The bad-parameter
    codes come from the values themselves (dt, mu, restitution, the body masses
    and inertias), so they name the cause when the numbers are traced and no host
    check could run. When several apply, a bad parameter wins (in the order BAD_DT,
    NEGATIVE_MASS, NEGATIVE_MU, BAD_RESTITUTION), then NONFINITE_STATE, then
    SOLVER_FAILED. `StepStatus.message(code)` says what a code means.
    """

    SUCCESS = 0, "the step converged"
    SOLVER_FAILED = 1, "the step's solve did not converge, or produced NaN or inf"
    NONFINITE_STATE = 2, "NaN or inf in the state (q, v) before the step"
    BAD_DT = 3, "the step size dt is not a finite number > 0"
    NEGATIVE_MASS = 4, "a body's mass is not > 0, or its inertia is not positive definite (or not finite)"
    NEGATIVE_MU = 5, "a friction coefficient mu is negative or not finite"
    BAD_RESTITUTION = 6, "a restitution coefficient is outside [0, 1]"


def _all_finite(*trees):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(trees)]))


def parameter_status(system, dt):
    """() int32: the first bad parameter of a rollout (`StepStatus`), SUCCESS when there is none."""
    system, dt = jax.lax.stop_gradient((system, jnp.asarray(dt)))
    bad = [(~(jnp.isfinite(dt) & (dt > 0)), StepStatus.BAD_DT)]
    if system.bodies is not None:
        bad.append((~system.bodies.parameters_valid(system.params), StepStatus.NEGATIVE_MASS))
    bad.append((~jnp.all(jnp.isfinite(system.mu) & (system.mu >= 0)), StepStatus.NEGATIVE_MU))
    if system.restitution is not None:
        e = system.restitution
        bad.append((~jnp.all((e >= 0) & (e <= 1)), StepStatus.BAD_RESTITUTION))
    conditions, codes = zip(*bad)
    return jnp.select(conditions, [jnp.int32(c) for c in codes], jnp.int32(StepStatus.SUCCESS))


def step_status(parameters, state, new_state, impulses, stats):
    """The stats of a step with its `StepStatus` set and `converged` False unless the status is SUCCESS.

    Args:
        parameters: () the rollout's `parameter_status`.
        state, new_state: the `State` before and after the step.
        impulses: the step's `ContactImpulses`.
        stats: the step's `StepStats` as its step solver made it.
    """
    before = _all_finite(state.q, state.v)
    after = _all_finite(new_state.q, new_state.v, impulses, stats.residual)
    status = jnp.select(
        [parameters != StepStatus.SUCCESS, ~before, ~(stats.converged & after)],
        [parameters, jnp.int32(StepStatus.NONFINITE_STATE), jnp.int32(StepStatus.SOLVER_FAILED)],
        jnp.int32(StepStatus.SUCCESS),
    )
    converged = stats.converged & (status == StepStatus.SUCCESS)
    return eqx.tree_at(lambda s: (s.converged, s.status), stats, (converged, status))
