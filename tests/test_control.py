"""Controls optimised by gradient through a model file: a pendulum swing-up, the hopper reaching a target through
contact, and the smoothed gradient of a joint resting on its range stop.

Each loss's gradient is checked against central differences at the start of its optimisation, in float64, before
the optimiser runs: the implicit gradient of every step is what the optimiser follows.
"""

import functools
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrbd as rbd
from jaxrbd import foreign

pytest.importorskip(
    "mujoco", reason="the control tests load model files with MuJoCo's parser (pip install jaxrbd[test])"
)

HOPPER = pathlib.Path(__file__).parent / "data" / "gymnasium" / "hopper.xml"
SWING_STEPS = 300  # 3 s at 100 Hz
HOPPER_STEPS = 500  # 1 s at MuJoCo's 2 ms
HOPPER_TARGET = 0.3  # m of torso travel along x
THIGH_STEPS = 150
THIGH_PUSH = 0.3  # the thigh motor's control that holds the thigh on its upper stop (q = 0)


def _central_differences(f, w, entries, delta):
    out = []
    for index in entries:
        e = jnp.zeros_like(w).at[index].set(delta)
        out.append(float((f(w + e) - f(w - e)) / (2 * delta)))
    return np.array(out)


def _adam(value_and_grad, w, learning_rate, iterations, reached):
    """Adam on w until `reached(w)` holds; returns (w, the iterations it took, the loss curve)."""
    optimizer = optax.adam(learning_rate)
    opt_state = optimizer.init(w)
    losses = []
    for i in range(iterations):
        if reached(w):
            return w, i, losses
        loss, g = value_and_grad(w)
        losses.append(float(loss))
        updates, opt_state = optimizer.update(g, opt_state)
        w = optax.apply_updates(w, updates)
    return w, iterations, losses


@functools.cache
def _pendulum():
    scene = rbd.load_mjcf(foreign.pendulum_xml(max_torque=1.0, mass=1.0, length=0.5))

    def rollout(w):
        return scene.simulate(SWING_STEPS, controls=jnp.tanh(w)[:, None])

    def loss(w):
        traj = rollout(w)
        return 1.0 + jnp.cos(traj.q[-1, 0]) + 0.1 * traj.v[-1, 0] ** 2

    return scene, jax.jit(rollout), jax.jit(loss), jax.jit(jax.value_and_grad(loss))


def _upright_error(traj):
    """|final angle - pi|, the angle taken modulo 2 pi (0 hangs down)."""
    return abs(float(jnp.mod(traj.q[-1, 0], 2 * math.pi)) - math.pi)


def test_the_pendulum_swings_up_to_upright_by_gradient_descent_on_its_controls():
    scene, rollout, loss, value_and_grad = _pendulum()
    # The motor's 1 N m is less than the m g l / 2 = 2.45 N m of the link held horizontal: it has to pump.
    params = scene.system.params
    assert float(params.actuators.gear[0]) < 9.81 * float(params.mass[0]) * float(jnp.linalg.norm(params.com[0]))
    w0 = 0.1 * jax.random.normal(jax.random.PRNGKey(0), (SWING_STEPS,))
    entries = [(0,), (150,), (280,)]
    g = value_and_grad(w0)[1]
    np.testing.assert_allclose([float(g[i]) for i in entries], _central_differences(loss, w0, entries, 1e-5), rtol=1e-6)

    def reached(w):
        traj = rollout(w)
        return _upright_error(traj) < 0.05 and abs(float(traj.v[-1, 0])) < 0.2

    w, iterations, losses = _adam(value_and_grad, w0, 0.1, 200, reached)
    traj = rollout(w)
    assert iterations < 200, f"not upright after 200 iterations: {_upright_error(traj):.3f} rad from it"
    assert losses[-1] < 0.1 * losses[0]
    assert bool(jnp.all(traj.stats.converged))
    swing = np.asarray(traj.q[:, 0])
    assert swing.max() > 1.0 and swing.min() < -3.0, "a swing-up pumps: the pendulum swings out to one side first"


def test_the_scene_simulates_at_mujocos_timestep_with_its_grad_smoothing():
    scene = rbd.load_mjcf(foreign.pendulum_xml(), grad_smoothing=1e-3)
    assert scene.grad_smoothing == 1e-3
    u = 0.5 * jnp.ones((20, 1))
    traj = scene.simulate(20, controls=u)
    same = rbd.simulate(scene.system, scene.state, dt=scene.dt, steps=20, controls=u, grad_smoothing=1e-3)
    np.testing.assert_array_equal(traj.q, same.q)
    np.testing.assert_allclose(float(traj.t[-1]), 20 * 0.01, rtol=1e-12)
    with pytest.raises(ValueError, match="grad_smoothing"):
        rbd.load_mjcf(foreign.pendulum_xml(), grad_smoothing=-1.0)


def test_the_pendulum_file_refuses_bad_arguments_by_name():
    with pytest.raises(ValueError, match="max_torque"):
        foreign.pendulum_xml(max_torque=0.0)
    with pytest.raises(ValueError, match="damping"):
        foreign.pendulum_xml(damping=-0.1)


@functools.cache
def _hopper(grad_smoothing=0.0):
    return rbd.load_mjcf(HOPPER, grad_smoothing=grad_smoothing)


@pytest.mark.slow
def test_the_hopper_torso_reaches_a_target_through_contact_within_one_second():
    scene = _hopper()

    def rollout(w):
        return scene.simulate(HOPPER_STEPS, controls=jnp.tanh(w))

    def loss(w):
        return (rollout(w).q[-1, 0] - HOPPER_TARGET) ** 2

    loss, rollout, value_and_grad = jax.jit(loss), jax.jit(rollout), jax.jit(jax.value_and_grad(loss))
    # Small random controls: w = 0 holds the thigh and the leg exactly on their stops with zero impulse, a kink
    # where the one-sided derivatives differ.
    w0 = 0.1 * jax.random.normal(jax.random.PRNGKey(0), (HOPPER_STEPS, 3))
    entries = [(0, 0), (200, 1), (450, 2)]
    g = value_and_grad(w0)[1]
    np.testing.assert_allclose([float(g[i]) for i in entries], _central_differences(loss, w0, entries, 1e-5), rtol=1e-6)

    w, iterations, losses = _adam(
        value_and_grad, w0, 0.02, 200, lambda w: abs(float(rollout(w).q[-1, 0]) - HOPPER_TARGET) < 0.02
    )
    traj = rollout(w)
    assert iterations < 200, f"torso at x = {float(traj.q[-1, 0]):.3f} m after 200 iterations"
    assert losses[-1] < losses[0]
    assert bool(jnp.all(traj.stats.converged))
    assert float(jnp.min(traj.q[:, 1])) > 0.7  # the torso's height (rootz) stays in Gymnasium's healthy range


@pytest.mark.long  # about 2 minutes; the hopper's torso target (slow set) differentiates through contact too
def test_the_thigh_on_its_stop_gets_a_smoothed_gradient_where_the_exact_one_is_zero():
    push = jnp.zeros((THIGH_STEPS, 3)).at[:, 0].set(THIGH_PUSH)

    def thigh(scene):
        return jax.jit(jax.grad(lambda u: scene.simulate(THIGH_STEPS, controls=u).q[-1, 3]))

    hopper, smoothed = _hopper(), _hopper(grad_smoothing=0.05)
    final = jax.jit(lambda u: hopper.simulate(THIGH_STEPS, controls=u).q[-1, 3])
    traj = jax.jit(lambda u: hopper.simulate(THIGH_STEPS, controls=u))(push)
    assert float(jnp.max(jnp.abs(traj.q[:, 3]))) < 1e-12, "the thigh rests on its upper stop for every step"
    assert bool(jnp.all(traj.impulses.normal[:, _thigh_upper_row()] > 0.1))

    exact = thigh(hopper)
    assert float(jnp.max(jnp.abs(exact(push)))) < 1e-15  # what a fit sees: nothing
    # Off the stop the same exact gradient equals central differences.
    free = -push
    entries, g = [(0, 0), (75, 0), (140, 1)], exact(free)
    np.testing.assert_allclose(
        [float(g[i]) for i in entries], _central_differences(final, free, entries, 1e-5), rtol=1e-6
    )

    smooth = thigh(smoothed)(push)
    assert bool(jnp.all(jnp.isfinite(smooth)))
    # The thigh's controls get a gradient, largest at the last step, whose sum has the sign of the difference
    # quotient that pulls the thigh off its stop: lowering the control past the stop's hold lowers the final angle.
    largest = int(jnp.argmax(jnp.abs(smooth[:, 0])))
    assert largest == THIGH_STEPS - 1 and float(smooth[largest, 0]) > 1e-5
    assert float(jnp.sum(smooth[:, 0])) > 0
    off = jnp.zeros_like(push).at[:, 0].set(1.0)
    assert (float(final(push)) - float(final(push - 0.35 * off))) / 0.35 > 0.5


def _thigh_upper_row():
    (row,) = [row for joint, side, row in _hopper().bodies.limit_rows() if (joint, side) == ("thigh_joint", "upper")]
    return row
