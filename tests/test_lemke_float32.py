"""Lemke in float32 on the friction LCPs of a four-ball rollout (reference problem P2)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import dynamics
from jaxrbd.stepping import default_cone

FLOAT32_TOL = 1e-5  # the default float32 tolerance of the solvers
DT = 0.005
STEPS = 200
FIRST, EVERY = 60, 5  # the states at t = 0.3, 0.305, ..., 1 s: 29 LCPs of size 70


def _step_lcps():
    """The LCPs of the dense step (as `DenseStep` builds them) at every 5th state of a float64 rollout."""
    scene = rbd.scenes.four_balls(mu=0.4)
    system = scene.system

    def lcp_at(t, q, v):
        contacts = system.contacts(q)
        cone = default_cone(system, contacts)
        motion = dynamics.free_motion(system, t, q, v, DT)
        J = system.constraint_jacobian(q)
        N, rows, bn = contacts.J_n.T, contacts.friction_rows(cone.dim), contacts.gap / DT
        prob = cone.build(motion.M, N, rows, contacts.mu, motion.v_free, bn=bn, active=contacts.active, J=J.T)
        return prob.problem.A, prob.problem.b

    @jax.jit
    def build(state):
        traj = rbd.simulate(system, state, dt=DT, steps=STEPS)
        pick = slice(FIRST, STEPS + 1, EVERY)
        return jax.vmap(lcp_at)(traj.t[pick], traj.q[pick], traj.v[pick])

    return build(scene.state)


@pytest.mark.slow
def test_lemke_float32_solves_every_four_ball_step():
    """All 29 LCPs converge in float32, by pivoting alone and with the default polish.

    With the float64 pivot and tie tolerances (1e-12, 1e-11) Lemke alone solved 97
    of the 200 LCPs of this rollout (one per step) in float32; 72 ended on a
    secondary ray and 31 with a residual above the tolerance (some at the pivot cap).
    Of these 29 it solved 13, and 14 with the polish.
    """
    A, b = _step_lcps()
    assert A.shape == (29, 70, 70)
    A, b = A.astype(jnp.float32), b.astype(jnp.float32)

    @jax.jit
    @jax.vmap
    def solve(A, b):
        return rbd.solve_lcp(A, b, solver=rbd.Lemke(polish_iterations=0)), rbd.solve_lcp(A, b, solver=rbd.Lemke())

    for sol in solve(A, b):
        assert sol.z.dtype == jnp.float32
        assert bool(jnp.all(sol.converged)), np.flatnonzero(~np.asarray(sol.converged))
        assert bool(jnp.all(sol.status == rbd.Status.SUCCESS))
        assert float(sol.residual.max()) <= FLOAT32_TOL
