"""Generated kinematic trees with range stops, dampers and actuators, attacked with hypothesis.

The trees of `test_tree._trees(driven=True)`: 1-5 bodies on free, ball, hinge and slide joints, some of them
limited (a hinge's or slide's range, a ball's cone), damped and driven by a motor or a position or velocity
servo (a ball's about a random axis, some with control and force ranges). Checked against MuJoCo's C engine
on the same file, and for the invariants of a step: every step converged, nothing NaN, no stop passed, a
finite gradient.
"""

import warnings

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tree import _euler, _load, _trees, check_actuator_forces

import jaxrbd as rbd

STOP_TOL = 1e-7  # rad or m: a hinge's or slide's stop is linear in q, so the step holds it to the solve's tolerance
CONE_TOL = 1e-6  # rad: a ball's cone is not: its angle is linearized over a step, O(h^2 w^2) past it (below)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xml=_trees(driven=True), seed=st.integers(0, 2**31 - 1))
def test_generated_actuators_apply_mujocos_forces(xml, seed):
    """At random states and controls, the actuators' joint forces equal MuJoCo's qfrc_actuator to round-off."""
    if mujoco.MjModel.from_xml_string(xml).nu:
        check_actuator_forces(_load(xml), xml, np.random.default_rng(seed), states=3, ctrl_scale=3.0)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xml=_trees(driven=True), seed=st.integers(0, 2**31 - 1))
def test_generated_driven_trees_step_converged_within_their_stops_with_finite_gradients(xml, seed):
    """100 steps of 0.01 s from qpos0, random controls pushing the joints onto their stops: every step
    converged, nothing NaN, no hinge or slide past its stop by more than the tolerance (a ball's cone by more
    than its linearization), and the gradient of the final state with respect to the controls finite."""
    m, _ = _euler(xml)
    if m.nv == 0:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = _load(xml)
    rng = np.random.default_rng(seed)
    u = jnp.asarray(rng.uniform(-3.0, 3.0, size=(100, m.nu))) if m.nu else None

    def run(u):
        return rbd.simulate(scene.system, scene.state, dt=0.01, steps=100, controls=u)

    traj = jax.jit(run)(u)
    assert bool(traj.stats.converged.all()), np.asarray(traj.stats.residual).max()
    assert np.all(np.isfinite(np.asarray(traj.q))) and np.all(np.isfinite(np.asarray(traj.v)))
    q, params = np.asarray(traj.q), scene.system.params
    for j, side in scene.bodies.limits:
        _, jtype, _, a, d = scene.bodies.joints[j]
        if side > 0:
            assert q[:, a].min() >= float(params.lower[j]) - STOP_TOL
        elif side < 0:
            assert q[:, a].max() <= float(params.upper[j]) + STOP_TOL
        else:
            w, v = np.abs(q[:, a]), np.linalg.norm(q[:, a + 1 : a + 4], axis=1)
            spin = np.linalg.norm(np.asarray(traj.v)[:, d : d + 3], axis=1)
            # the step holds the angle's linearization; its second-order remainder is (h w)^2 / theta at most
            bound = CONE_TOL + (0.01 * spin.max()) ** 2 / float(params.upper[j])
            assert (2.0 * np.arctan2(v, w)).max() <= float(params.upper[j]) + bound
    if m.nu:
        grad = jax.jit(jax.grad(lambda u: jnp.sum(run(u).q[-1])))(u)
        assert np.all(np.isfinite(np.asarray(grad)))
