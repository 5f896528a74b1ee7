"""Validation at the door.

Concrete inputs are checked on the host, with an error that names the argument;
under `jit`, where values are traced, `traj.stats.status` (a `StepStatus` per step)
says why a run is bad, and `simulate(throw=True)` raises it. The `jit` tests share
ONE compiled rollout (`_stats`), whose inputs are the parameter values.
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

DT = 0.01
STEPS = 20


def _ball(shape, **shape_kwargs):
    """A scene with one moving body carrying `shape` above the table."""
    b = rbd.SceneBuilder()
    b.add_static("table", rbd.Plane())
    b.add_body("ball", shape, mass=1.0, position=(0.0, 0.0, 1.0))
    return b.build()


@pytest.fixture(scope="module")
def ball():
    """A ball resting on the table and sliding (mu = 0.3, no restitution)."""
    return rbd.scenes.bouncing_ball(0.0, height=0.0, mu=0.3, velocity=(0.5, 0.0, 0.0))


# ------------------------------------------------------------------ host checks: shapes


def test_plane_with_zero_normal_is_rejected():
    with pytest.raises(ValueError, match="plane normal must be a nonzero vector"):
        rbd.Plane((0.0, 0.0, 0.0))


def test_plane_with_nan_normal_is_rejected():
    with pytest.raises(ValueError, match="plane normal must be finite"):
        rbd.Plane((np.nan, 0.0, 1.0))


def test_plane_with_infinite_offset_is_rejected():
    with pytest.raises(ValueError, match="plane offset must be finite"):
        rbd.Plane(offset=np.inf)


def test_nan_shape_offset_on_a_body_is_rejected():
    with pytest.raises(ValueError, match="sphere position must be finite"):
        _ball(rbd.Sphere(0.1, position=(np.nan, 0.0, 0.0)))


def test_shape_offset_replaced_after_construction_is_rejected_by_name_at_build():
    shape = eqx.tree_at(lambda s: s.position, rbd.Sphere(0.1), jnp.array([0.0, np.nan, 0.0]))
    with pytest.raises(ValueError, match="sphere position of 'ball' must be finite"):
        _ball(shape)


def test_box_with_two_half_extents_is_rejected():
    with pytest.raises(ValueError, match=r"half_extents must be a scalar or of shape \(3,\), got shape \(2,\)"):
        rbd.Box((0.1, 0.1))


def test_sphere_with_nan_radius_is_rejected():
    with pytest.raises(ValueError, match="sphere radius must be finite"):
        rbd.Sphere(np.nan)


def test_shape_with_a_non_scalar_mu_is_rejected():
    with pytest.raises(ValueError, match="capsule mu must be a scalar"):
        rbd.Capsule(0.1, 0.2, mu=(0.1, 0.2))


# ------------------------------------------------------------------ host checks: scene builder


def test_scene_builder_rejects_an_array_mass_and_a_nan_margin():
    b = rbd.SceneBuilder()
    with pytest.raises(ValueError, match="mass of body 'ball' must be a scalar"):
        b.add_body("ball", rbd.Sphere(0.1), mass=(1.0, 2.0), position=(0.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="margin must be a number, not NaN"):
        rbd.SceneBuilder(margin=np.nan)


# ------------------------------------------------------------------ host checks: simulate


def test_simulate_rejects_a_nan_q(ball):
    system, state = ball
    with pytest.raises(ValueError, match="state.q must be finite"):
        rbd.simulate(system, rbd.State(state.t, state.q.at[0].set(np.nan), state.v), dt=DT, steps=1)


def test_simulate_rejects_an_infinite_v(ball):
    system, state = ball
    with pytest.raises(ValueError, match="state.v must be finite"):
        rbd.simulate(system, rbd.State(state.t, state.q, state.v.at[1].set(np.inf)), dt=DT, steps=1)


def test_simulate_rejects_a_zero_quaternion(ball):
    system, state = ball
    with pytest.raises(ValueError, match="quaternion of body 'ball' in state.q must be a nonzero vector"):
        rbd.simulate(system, rbd.State(state.t, state.q.at[3:7].set(0.0), state.v), dt=DT, steps=1)


def test_simulate_rejects_a_negative_mass_set_with_tree_at(ball):
    system, state = ball
    system = eqx.tree_at(lambda s: s.params.mass, system, -jnp.ones(1))
    with pytest.raises(ValueError, match=r"system.params.mass must be > 0"):
        rbd.simulate(system, state, dt=DT, steps=1)


def test_simulate_rejects_an_indefinite_inertia_set_with_tree_at(ball):
    system, state = ball
    system = eqx.tree_at(lambda s: s.params.inertia, system, -system.params.inertia)
    with pytest.raises(ValueError, match="system.params.inertia of body 'ball' must be positive definite"):
        rbd.simulate(system, state, dt=DT, steps=1)


def test_simulate_rejects_a_string_solver(ball):
    with pytest.raises(TypeError, match=r"solver must be None or .*jaxrbd.SemismoothNewton\(\), jaxrbd.Lemke\(\)"):
        rbd.simulate(*ball, dt=DT, steps=1, solver="lemke")


def test_simulate_rejects_negative_grad_smoothing_and_a_non_bool_throw(ball):
    with pytest.raises(ValueError, match="grad_smoothing must be >= 0"):
        rbd.simulate(*ball, dt=DT, steps=1, grad_smoothing=-1.0)
    with pytest.raises(TypeError, match="throw must be True or False"):
        rbd.simulate(*ball, dt=DT, steps=1, throw="yes")


def _trace(scene, **options):
    """Run simulate's host checks and trace its rollout without compiling it (the scene stays concrete)."""
    jax.eval_shape(lambda: rbd.simulate(*scene, dt=DT, steps=1, **options))


def test_restitution_without_an_impact_law_warns_once():
    scene = rbd.scenes.bouncing_ball(0.75)
    with pytest.warns(UserWarning, match=r"impact=rbd.NewtonRestitution\(\) or rbd.PoissonRestitution\(\)") as record:
        _trace(scene)
    assert sum("impact law" in str(w.message) for w in record) == 1


def test_no_warning_with_an_impact_law_or_without_restitution(ball):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _trace(rbd.scenes.bouncing_ball(0.75), impact=rbd.NewtonRestitution())
        _trace(ball)


# ------------------------------------------------------------------ host checks: solvers and problems


def test_solver_with_a_negative_tol_is_rejected():
    with pytest.raises(ValueError, match="SemismoothNewton: tol must be None or a finite number > 0"):
        rbd.SemismoothNewton(tol=-1)
    with pytest.raises(ValueError, match="Lemke: tol must be"):
        rbd.Lemke(tol=np.nan)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: rbd.SemismoothNewton(iterations=2.5), "iterations must be a positive integer"),
        (lambda: rbd.SemismoothNewton(regularization=np.inf), "regularization must be a finite number > 0"),
        (lambda: rbd.Lemke(max_pivots=True), "max_pivots must be None or a positive integer"),
        (lambda: rbd.Lemke(polish_iterations=-1), "polish_iterations must be an integer >= 0"),
        (lambda: rbd.StewartTrinkle(fixed_point_iterations=1.5), "fixed_point_iterations must be an integer"),
        (lambda: rbd.AnitescuPotra(delta=np.nan), "delta must be a number"),
    ],
)
def test_solver_and_scheme_fields_are_checked(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_friction_lcp_rejects_a_negative_mu():
    M, N, D = jnp.eye(2), jnp.array([[0.0], [1.0]]), jnp.array([[1.0, -1.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="mu must be >= 0"):
        rbd.friction_lcp(M, N, D, -1.0, (2,), jnp.zeros(2))


def test_solve_lcp_rejects_a_string_solver_by_listing_the_solvers():
    with pytest.raises(TypeError, match=r"solver must be jaxrbd.SemismoothNewton\(...\) or jaxrbd.Lemke\(...\)"):
        rbd.solve_lcp(jnp.eye(2), -jnp.ones(2), solver="lemke")


def test_solve_lcp_rejects_a_fractional_n_free():
    with pytest.raises(ValueError, match=r"n_free must be an integer in \[0, 2\]"):
        rbd.solve_lcp(jnp.eye(2), -jnp.ones(2), n_free=0.5)


def test_non_spanning_cone_directions_name_the_tangent_plane():
    with pytest.raises(ValueError, match=r"directions must positively span the tangent plane \(t, o\)"):
        rbd.PolyhedralCone(directions=[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match=r"directions must positively span the tangent plane \(t, o\)"):
        rbd.PolyhedralCone(directions=[[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(TypeError, match="directions="):
        rbd.PolyhedralCone(np.eye(2))


def test_sweep_rejects_an_empty_batch():
    with pytest.raises(ValueError, match="batch must have at least one element"):
        rbd.sweep(lambda x: x, jnp.zeros((0,)))
    with pytest.raises(TypeError, match="chunk_size"):
        rbd.sweep(lambda x: x, jnp.zeros((2,)), chunk_size=1.5)


def test_fit_checks_its_options():
    loss = lambda p: p["a"] ** 2
    with pytest.raises(TypeError, match="loss must be a function"):
        rbd.sysid.fit(None, {"a": 1.0})
    with pytest.raises(TypeError, match=r"bounds\['a'\] must be Free\(\), Positive\(\) or Interval"):
        rbd.sysid.fit(loss, {"a": 1.0}, bounds={"a": "positive"})
    with pytest.raises(ValueError, match="grad_tol must be >= 0"):
        rbd.sysid.fit(loss, {"a": 1.0}, grad_tol=-1.0)
    with pytest.raises(ValueError, match="patience must be an integer >= 1"):
        rbd.sysid.fit(loss, {"a": 1.0}, patience=0)


# ------------------------------------------------------------------ statuses under jit


def _run(scene, dt, mu, mass, restitution, gravity, q):
    system, state = scene
    system = eqx.tree_at(
        lambda s: (s.mu, s.params.mass, s.restitution, s.params.gravity), system, (mu, mass, restitution, gravity)
    )
    return rbd.simulate(system, rbd.State(state.t, q, state.v), dt=dt, steps=STEPS).stats


_stats = jax.jit(_run)  # one compile for every status test


def _inputs(ball, **changes):
    system, state = ball
    p = system.params
    inputs = dict(dt=DT, mu=system.mu, mass=p.mass, restitution=system.restitution, gravity=p.gravity, q=state.q)
    return {**inputs, **changes}


def _statuses(ball, **changes):
    stats = _stats(ball, **_inputs(ball, **changes))
    return np.asarray(stats.status), np.asarray(stats.converged)


def test_good_run_under_jit_reports_success(ball):
    status, converged = _statuses(ball)
    assert np.all(status == rbd.StepStatus.SUCCESS) and np.all(converged)


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda b: dict(dt=-0.01), rbd.StepStatus.BAD_DT),
        (lambda b: dict(dt=np.inf), rbd.StepStatus.BAD_DT),
        (lambda b: dict(mu=-jnp.ones_like(b.system.mu)), rbd.StepStatus.NEGATIVE_MU),
        (lambda b: dict(mass=-jnp.ones_like(b.system.params.mass)), rbd.StepStatus.NEGATIVE_MASS),
        (lambda b: dict(restitution=jnp.full_like(b.system.restitution, 1.5)), rbd.StepStatus.BAD_RESTITUTION),
        (lambda b: dict(q=b.state.q.at[0].set(np.nan)), rbd.StepStatus.NONFINITE_STATE),
    ],
    ids=["negative dt", "infinite dt", "negative mu", "negative mass", "restitution 1.5", "nan q"],
)
def test_bad_traced_input_sets_the_status_of_every_step(ball, change, expected):
    status, converged = _statuses(ball, **change(ball))
    assert np.all(status == expected), status
    assert not np.any(converged)
    assert rbd.StepStatus.message(status[0]) == rbd.StepStatus.message(expected)


def test_nan_made_by_a_step_is_a_failed_step_not_a_silent_nan(ball):
    status, converged = _statuses(ball, gravity=jnp.array([0.0, 0.0, np.nan]))
    assert status[0] == rbd.StepStatus.SOLVER_FAILED
    assert np.all(status[1:] == rbd.StepStatus.NONFINITE_STATE)
    assert not np.any(converged)


def test_throw_raises_the_status_message_under_jit():
    rod = rbd.scenes.falling_rod()  # a small rollout: a second compile, since throw is static
    run = eqx.filter_jit(lambda dt: rbd.simulate(*rod, dt=dt, steps=3, throw=True).stats.status)
    assert np.all(run(jnp.asarray(DT)) == rbd.StepStatus.SUCCESS)
    with pytest.raises(RuntimeError, match=r"StepStatus.BAD_DT\): the step size dt is not a finite number > 0"):
        run(jnp.asarray(-DT))


def test_step_status_messages_cover_every_code():
    for code in rbd.StepStatus:
        assert rbd.StepStatus.message(code)
    assert rbd.StepStatus.message(jnp.int32(3)) == rbd.StepStatus.message(rbd.StepStatus.BAD_DT)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: rbd.ContactSweeps(tol=-1.0), "tol must be > 0"),
        (lambda: rbd.ContactSweeps(tol=float("nan")), "tol must be finite"),
        (lambda: rbd.ContactSweeps(fallback=1), "fallback must be a bool"),
        (lambda: rbd.Newton(distance=-1.0), "distance must be >= 0"),
        (lambda: rbd.Poisson(distance=float("inf")), "distance must be finite"),
        (lambda: rbd.DenseStep("lemke"), "solver must be a complementarity solver"),
    ],
)
def test_step_solver_and_impact_law_fields_are_checked(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_lcp_whose_friction_layout_does_not_match_its_size_is_rejected():
    """`LCP.counts` (the friction LCP's layout, read by the solvers' fallback) must cover every row."""
    A, b = jnp.eye(7), jnp.ones(7)
    assert rbd.LCP(A, b, 1, (4,)).counts == (4,)  # 1 joint row + normal + 4 friction + cone
    with pytest.raises(ValueError, match=r"LCP: counts \(4, 4\) with n_free = 0 give 12 rows, but b has 7"):
        rbd.LCP(A, b, 0, (4, 4))
