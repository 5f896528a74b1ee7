"""Scenes in float32 in a process with float64 enabled: every value of the step stays float32, and the Newton
solve converges on its own where round-off rows meet float32's range."""

import pathlib
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tree import _load, _trees

import jaxrbd as rbd
from jaxrbd._problems import inverse_row_sizes

HOPPER = pathlib.Path(__file__).parent / "data" / "gymnasium" / "hopper.xml"


def _float32(tree):
    return jax.tree_util.tree_map(lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x, tree)


def _hopper():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's solver options jaxrbd does not use
        scene = rbd.load_mjcf(HOPPER.read_text(), coordinates="joints")
    return (scene.system, scene.state), scene.dt


def _hull_on_a_box():
    vertices = np.random.default_rng(3).normal(size=(12, 3)) * np.array([0.06, 0.04, 0.05])
    b = rbd.SceneBuilder(dim=3, mu=0.6)
    b.add_static("table", rbd.Box((0.5, 0.5, 0.05), position=(0.0, 0.0, -0.05)))
    b.add_body("rock", rbd.ConvexMesh(vertices), mass=0.3, position=(0.0, 0.0, 0.2), velocity=(0.3, 0.0, 0.0))
    return b.build(), 0.01


SCENES = {
    "cube_toss": lambda: (rbd.scenes.cube_toss(), 0.01),
    "four_balls": lambda: (rbd.scenes.four_balls(), 0.005),
    "sphere_grid(64)": lambda: (rbd.scenes.sphere_grid(64), 0.01),
    "falling_rod": lambda: (rbd.scenes.falling_rod(), 0.0025),
    "hull on a box": _hull_on_a_box,
    "hopper": _hopper,
}


def _dtypes(jaxpr):
    """Every floating dtype of a jaxpr's values, its sub-jaxprs' (loops, conditionals, calls) included; weakly typed
    values (Python scalars, which take the other operand's dtype) aside."""
    found = set()
    for eqn in jaxpr.eqns:
        for var in [*eqn.invars, *eqn.outvars]:
            aval = getattr(var, "aval", None)
            dtype = getattr(aval, "dtype", None)
            if dtype is not None and jnp.issubdtype(dtype, jnp.floating) and not aval.weak_type:
                found.add(np.dtype(dtype))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                if isinstance(sub, jax.extend.core.ClosedJaxpr):
                    found |= _dtypes(sub.jaxpr)
                elif isinstance(sub, jax.extend.core.Jaxpr):
                    found |= _dtypes(sub)
    return found


@pytest.mark.parametrize("name", SCENES)
def test_a_float32_scene_steps_in_float32_with_float64_enabled(name):
    """Cast to float32, a scene's rollout holds no float64 value anywhere (collision, assembly, solver, fallback),
    although `jax_enable_x64` is on: a numpy float64 table or an untyped `jnp.array` of constants would promote
    the step, and the rollout's loop would refuse a float64 carry for a float32 start."""
    (system, state), dt = SCENES[name]()
    system, state = _float32((system, state))
    jaxpr = jax.make_jaxpr(lambda: rbd.simulate(system, state, dt=dt, steps=2))()
    assert _dtypes(jaxpr.jaxpr) == {np.dtype(np.float32)}


def test_a_round_off_row_is_not_scaled_past_the_machine_epsilon():
    """1 / m for a row of size m, 1 for a zero row, and at most 1 / (eps max m) for a row of round-off."""
    for dtype in (jnp.float32, jnp.float64):
        eps = float(jnp.finfo(dtype).eps)
        m = jnp.array([2.0, 0.5, 2e-23, 0.0], dtype)
        s = inverse_row_sizes(m)
        np.testing.assert_allclose(s, [0.5, 2.0, 1.0 / (2.0 * eps), 1.0], rtol=1e-6)
        assert s.dtype == dtype
    assert inverse_row_sizes(jnp.zeros(3)).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.slow
def test_the_hopper_in_float32_converges_by_newton_and_follows_float64():
    """Gymnasium's hopper falling from its start pose for 0.25 s (125 steps), random controls, in float32.

    One of its contact rows is round-off (2e-23 in float32): scaled by its inverse size, s w overflowed in
    the Fischer-Burmeister function, a wrong impulse of -5e9 looked like a solution to the line search, and
    Lemke had to finish 40% of the steps. Bounded, every step converges by Newton alone, and the float32
    trajectory stays within 1e-4 of float64's (2.9e-6 measured).
    """
    (system, state), dt = _hopper()
    steps = 125
    u = np.random.default_rng(0).uniform(-1.0, 1.0, (steps, 3))
    run = jax.jit(lambda s, st, u: rbd.simulate(s, st, dt=dt, steps=steps, controls=u))
    single = run(*_float32((system, state)), jnp.asarray(u, jnp.float32))
    double = run(system, state, jnp.asarray(u))
    assert single.q.dtype == jnp.float32
    assert bool(jnp.all(single.stats.converged))
    assert not bool(jnp.any(single.stats.fallback))
    np.testing.assert_allclose(single.q, double.q, atol=1e-4)


@pytest.mark.slow
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xml=_trees(driven=True), seed=st.integers(0, 2**31 - 1))
def test_generated_driven_trees_run_in_float32(xml, seed):
    """Generated trees (limited, damped, driven joints; `test_tree._trees`) cast to float32, 100 steps of 0.01 s
    with random controls pushing them onto their stops: no float64 value in the step, every step converged,
    nothing NaN."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = _load(xml)
    if scene.state.v.shape[0] == 0:
        return
    system, state = _float32((scene.system, scene.state))
    nu = mujoco.MjModel.from_xml_string(xml).nu
    u = jnp.asarray(np.random.default_rng(seed).uniform(-3.0, 3.0, (100, nu)), jnp.float32) if nu else None
    run = lambda u: rbd.simulate(system, state, dt=0.01, steps=100, controls=u)
    assert _dtypes(jax.make_jaxpr(run)(u).jaxpr) == {np.dtype(np.float32)}
    traj = jax.jit(run)(u)
    assert traj.q.dtype == jnp.float32
    assert bool(traj.stats.converged.all()), np.asarray(traj.stats.residual).max()
    assert np.all(np.isfinite(np.asarray(traj.q))) and np.all(np.isfinite(np.asarray(traj.v)))
