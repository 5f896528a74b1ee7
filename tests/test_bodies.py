"""Rigid bodies against the papers and exact solutions (four balls, incline, rolling ball)."""

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrbd as rbd
from jaxrbd.analysis import CONTACT, convergence_row, first_contact
from jaxrbd.bodies._builder import OVERLAP_TOL
from jaxrbd.reference import P2_PUBLISHED, P2_STEPS  # 003 Table 1

RESIDUAL_TOL = 1e-8
G = 9.81


def _assert_solved(traj):
    assert bool(jnp.all(traj.stats.converged))
    assert float(traj.stats.residual.max()) <= RESIDUAL_TOL
    assert bool(jnp.all(jnp.isfinite(traj.q))) and bool(jnp.all(jnp.isfinite(traj.v)))


def _four_balls(h):
    scene = rbd.scenes.four_balls()
    return scene, rbd.simulate(*scene, dt=h, steps=int(round(1.0 / h)))


@pytest.fixture(scope="module")
def p2():
    return _four_balls(0.005)


def test_p2_events_and_outcome(p2):
    """003 §4.2: table at t ~ 0.42, first ball at ~ 0.59, the line knocked to +x; 7 contacts, all solved."""
    scene, traj = p2
    _assert_solved(traj)
    assert scene.system.mu.shape == (7,)
    h = 0.005
    table = first_contact(traj, [0])
    balls = first_contact(traj, [4])  # thrown ball - first ball of the line
    assert abs(table - 0.42) <= 0.01 and abs(balls + h - 0.59) <= 0.01  # balls: the end of the step
    # The 1e-5 gaps close in the same step: the impulse crosses the whole line at once (003 Fig. 6).
    assert first_contact(traj, [5]) == balls and first_contact(traj, [6]) == balls
    velocities = np.asarray(scene.bodies.linear_velocities(traj.v[-1]))
    assert np.all(velocities[:, 0] > 0.05), velocities
    # The contacts left out (non-neighbours in the line) never come close.
    x = np.asarray(scene.bodies.positions(traj.q))
    for i, j in ((0, 2), (0, 3), (1, 3)):
        assert np.linalg.norm(x[:, i] - x[:, j], axis=-1).min() > 0.2 + 0.05


@pytest.mark.slow
def test_p2_convergence_table():
    """003 Table 1 at h = 0.02 .. 0.00125 against the h = 0.00125 reference, printed beside the paper.

    Errors fall roughly like h (log-log slope between 0.7 and 1.5 from 0.02 to 0.0025).
    Our position error is of the centres only; the paper's 24-component q also holds
    orientations, and our orientation error (the rotation angle) is the column that
    matches its numbers.
    """
    runs = {h: _four_balls(h) for h in P2_STEPS}
    scene, reference = runs[P2_STEPS[-1]]
    rows = []
    for h in P2_STEPS:
        _assert_solved(runs[h][1])
        rows.append(convergence_row(scene.bodies, runs[h][1], reference))
    print("\n    h   vel.err (paper)   pos.err  orient.err (paper)   variation (paper)")
    for row in rows:
        ve, pe, var = P2_PUBLISHED[row.h]
        print(
            f"{row.h:7.5f} {row.velocity_error:8.4f} ({ve}) {row.position_error:8.4f} "
            f"{row.orientation_error:8.4f} ({pe}) {row.variation:8.3f} ({var})"
        )
    coarse, fine = rows[0], rows[3]
    for name in ("velocity_error", "position_error", "orientation_error"):
        errors = [getattr(r, name) for r in rows[:-1]]
        assert all(a > b for a, b in zip(errors, errors[1:])), (name, errors)
        slope = math.log(getattr(coarse, name) / getattr(fine, name)) / math.log(coarse.h / fine.h)
        assert 0.7 <= slope <= 1.5, (name, slope)
    variations = [r.variation for r in rows]
    assert abs(variations[-1] - variations[-2]) <= 0.05 * variations[-1]  # converged to 5%


def _ball0_final(mu, velocity, steps=100, h=0.01):
    scene = rbd.scenes.four_balls(mu=mu, velocity=velocity)
    traj = rbd.simulate(*scene, dt=h, steps=steps)
    x = scene.bodies.positions(traj.q[-1])[0]
    T = jax.vmap(lambda q: scene.system.tangents(q, scene.system.params))(traj.q[:-1])
    slip = jnp.linalg.norm(jnp.einsum("scmv,sv->scm", T, traj.v[1:]), axis=-1)
    touching = traj.impulses.normal > CONTACT
    return x, (touching, touching & (slip > 1e-7)), traj.stats.residual.max()


_ball0_jit = jax.jit(_ball0_final)


@pytest.mark.slow
def test_p2_gradients_match_finite_differences():
    """d(final position of the thrown ball)/d(mu, initial velocity) over [0, 1] s against central differences.

    Every step's contact mode (touching, sliding) is checked to be the same at +-eps,
    so the difference quotient stays inside one smooth piece.
    """
    mu0, vel0 = jnp.array(0.4), jnp.array([1.5, 0.1, 0.0])
    jac = jax.jit(jax.jacrev(lambda mu, vel: _ball0_final(mu, vel)[0], argnums=(0, 1)))(mu0, vel0)
    d_mu, d_vel = (np.asarray(j) for j in jac)
    assert np.all(np.isfinite(d_mu)) and np.all(np.isfinite(d_vel))
    _, modes, _ = _ball0_jit(mu0, vel0)
    for k, (param, direction) in enumerate([("mu", None), ("vel", 0), ("vel", 1)]):
        eps = 1e-6
        if param == "mu":
            plus, minus = (_ball0_jit(mu0 + s * eps, vel0) for s in (1, -1))
            analytic = d_mu
        else:
            e = jnp.zeros(3).at[direction].set(eps)
            plus, minus = (_ball0_jit(mu0, vel0 + s * e) for s in (1, -1))
            analytic = d_vel[:, direction]
        for side in (plus, minus):
            for a, b in zip(side[1], modes):
                assert bool(jnp.all(a == b)), f"contact mode changes under a {param} perturbation"
            assert float(side[2]) <= RESIDUAL_TOL
        fd = (np.asarray(plus[0]) - np.asarray(minus[0])) / (2 * eps)
        np.testing.assert_allclose(analytic, fd, rtol=1e-4, atol=1e-7, err_msg=f"{param}[{direction}]")
    assert np.abs(d_mu).max() > 1e-3  # mu matters: the balls slide against each other


def test_cube_on_incline_sticks_without_creep():
    """mu > tan(30°) from rest: the cube does not move at all in 10 s at h = 0.01."""
    scene = rbd.scenes.block_on_incline(math.radians(30.0), 0.7)
    traj = rbd.simulate(*scene, dt=0.01, steps=1000)
    _assert_solved(traj)
    assert float(jnp.abs(traj.q - traj.q[0]).max()) < 1e-10
    assert float(jax.vmap(scene.system.gap)(traj.q).min()) >= -1e-8


@pytest.mark.slow
@pytest.mark.parametrize(
    "heading, cone_factor",
    [(0.0, 1.0), (math.pi / 8, math.cos(math.pi / 8))],
    ids=["aligned", "half-way between directions"],
)
def test_cube_slides_down_the_incline(heading, cone_factor):
    """mu < tan(30°): dv/dt = -g (sin - mu cos) with a direction along the slope.

    With the slope half-way between two of the 8 directions the inscribed polygon
    gives friction mu cos(pi/8) c_n along the slope: the known bias of the
    polyhedral cone, exactly. There the velocity is normal to a polygon edge, so
    maximal dissipation only fixes the sum of the two edge multipliers: the split,
    and with it the sideways force, is set-valued (anything up to
    mu sin(pi/8) c_n). The along-slope motion is unique and asserted exactly; the
    sideways velocity is only bounded by that set, h mu g cos(angle) sin(pi/8)
    per step. Aligned, the solution is unique and the cube slides straight.
    """
    angle, mu, h = math.radians(30.0), 0.3, 0.01
    scene = rbd.scenes.block_on_incline(angle, mu, heading=heading)
    traj = rbd.simulate(*scene, dt=h, steps=100)
    _assert_solved(traj)
    uphill = np.array([math.cos(angle) * math.cos(heading), math.cos(angle) * math.sin(heading), math.sin(angle)])
    v = np.asarray(scene.bodies.linear_velocities(traj.v))[:, 0]
    accel = np.diff(v @ uphill) / h
    exact = -G * (math.sin(angle) - mu * cone_factor * math.cos(angle))
    np.testing.assert_allclose(accel, exact, rtol=1e-6)
    side = v - np.outer(v @ uphill, uphill)
    if heading == 0.0:
        np.testing.assert_allclose(side, 0.0, atol=1e-12)  # straight down the slope
    else:
        tie = h * mu * G * math.cos(angle) * math.sin(math.pi / 8)  # the widest sideways impulse per unit mass
        assert float(np.linalg.norm(np.diff(side, axis=0), axis=1).max()) <= tie * (1 + 1e-9)
    assert float(jax.vmap(scene.system.gap)(traj.q).min()) >= -1e-8


@pytest.mark.slow
def test_polyhedral_bias_for_a_generic_misalignment_drifts_sideways():
    """At pi/16 from a direction the friction is a polygon vertex, not opposite the velocity: the cube veers."""
    angle, mu, h, heading = math.radians(30.0), 0.3, 0.01, math.pi / 16
    scene = rbd.scenes.block_on_incline(angle, mu, heading=heading)
    traj = rbd.simulate(*scene, dt=h, steps=100)
    _assert_solved(traj)
    v = np.asarray(scene.bodies.linear_velocities(traj.v))[:, 0]
    n = np.asarray(scene.system.params.shapes["plane"]["normal"][0])
    uphill = np.array([math.cos(angle) * math.cos(heading), math.cos(angle) * math.sin(heading), math.sin(angle)])
    side = np.abs(v @ np.cross(n, uphill)).max()
    assert side > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("h", [0.01, 0.005, 0.0025])
def test_rolling_ball_slip_time_and_final_speed(h):
    """Sliding ball: slip ends at 2 v0 / (7 mu g) (to within h), then rolls at 5 v0 / 7 (exact)."""
    v0, mu, r = 1.0, 0.3, 0.1
    scene = rbd.scenes.rolling_ball(v0, mu, radius=r)
    traj = rbd.simulate(*scene, dt=h, steps=int(round(0.3 / h)))
    _assert_solved(traj)
    v = np.asarray(scene.bodies.linear_velocities(traj.v))[:, 0]
    w = np.asarray(scene.bodies.angular_velocities(traj.v))[:, 0]
    slip = v[:, 0] - r * w[:, 1]
    rolling = int(np.argmax(np.abs(slip) < 1e-9))
    assert np.all(np.abs(slip[rolling:]) < 1e-9)
    assert abs(float(traj.t[rolling]) - 2 * v0 / (7 * mu * G)) <= h
    np.testing.assert_allclose(v[-1], [5 * v0 / 7, 0, 0], atol=1e-12)


@pytest.mark.slow
def test_rolling_ball_spin_gradient_is_exact_at_zero_spin():
    """d(final speed)/d(initial spin) at exactly zero spin: finite, and 2 r / 7 exactly.

    Angular momentum about the contact point is conserved: v_f = (5 v0 + 2 r w_y0) / 7.
    """
    r = 0.1
    scene = rbd.scenes.rolling_ball(1.0, 0.3, radius=r)

    def final_velocity(w0):
        state = rbd.State(scene.state.t, scene.state.q, scene.state.v.at[3:].set(w0))
        return rbd.simulate(scene.system, state, dt=0.01, steps=30).v[-1, :3]

    jac = np.asarray(jax.jit(jax.jacrev(final_velocity))(jnp.zeros(3)))
    assert np.all(np.isfinite(jac))
    np.testing.assert_allclose(jac[0, 1], 2 * r / 7, rtol=1e-9)


@pytest.mark.slow
def test_quaternions_stay_unit_over_ten_thousand_steps():
    """A box tumbling about its unstable middle axis, 10^4 steps at h = 1e-3: |quat| = 1 to 1e-12."""
    b = rbd.SceneBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_static("floor", rbd.Plane())
    b.add_body("box", rbd.Box((0.3, 0.2, 0.1)), mass=1.0, position=(0.0, 0.0, 1.0), angular_velocity=(0.01, 3.0, 0.02))
    scene = b.build()
    traj = rbd.simulate(*scene, dt=1e-3, steps=10_000)
    _assert_solved(traj)
    norms = np.linalg.norm(np.asarray(scene.bodies.orientations(traj.q)), axis=-1)
    assert np.abs(norms - 1.0).max() <= 1e-12
    w = np.asarray(scene.bodies.angular_velocities(traj.v))[:, 0]
    assert np.abs(w[:, 0]).max() > 1.0  # the middle axis is unstable: the gyroscopic term acts


@pytest.mark.long
def test_vmap_over_mu_equals_the_loop():
    mus = jnp.array([0.1, 0.3, 0.7])

    def final(mu):
        scene = rbd.scenes.block_on_incline(math.radians(30.0), mu)
        return rbd.simulate(*scene, dt=0.01, steps=50).q[-1]

    batched = jax.jit(jax.vmap(final))(mus)
    looped = jnp.stack([jax.jit(final)(mu) for mu in mus])
    np.testing.assert_allclose(batched, looped, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_mass_is_a_differentiable_leaf():
    """Sliding-block acceleration does not depend on mass; the gradient says so (finite, ~0)."""

    def final_x(mass):
        scene = rbd.scenes.block_on_incline(math.radians(30.0), 0.3, mass=mass)
        return scene.bodies.positions(rbd.simulate(*scene, dt=0.01, steps=20).q[-1])[0, 0]

    g = float(jax.grad(final_x)(jnp.array(2.0)))
    assert math.isfinite(g) and abs(g) < 1e-9


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda b: b.add_body("x", rbd.Sphere(0.1), mass=0.0, position=(0, 0, 1)), "mass"),
        (
            lambda b: b.add_body("x", rbd.Sphere(0.1), mass=1.0, inertia=(1.0, 1.0, -1.0), position=(0, 0, 1)),
            "positive definite",
        ),
        (
            lambda b: b.add_body("x", rbd.Sphere(0.1), mass=1.0, inertia=(1.0, 1.0, 3.0), position=(0, 0, 1)),
            "triangle inequality",
        ),
        (
            lambda b: b.add_body(
                "x", rbd.Sphere(0.1), mass=1.0, inertia=[[1, 0.5, 0], [0, 1, 0], [0, 0, 1]], position=(0, 0, 1)
            ),
            "symmetric",
        ),
        (
            lambda b: b.add_body("x", rbd.Sphere(0.1), mass=1.0, position=(0, 0, 1), orientation=(0, 0, 0, 0)),
            "orientation",
        ),
        (lambda b: b.add_body("x", rbd.Sphere(-0.1), mass=1.0, position=(0, 0, 1)), "radius"),
        (lambda b: b.add_body("x", rbd.Box((0.1, -0.1, 0.1)), mass=1.0, position=(0, 0, 1)), "half_extents"),
        (lambda b: b.add_body("x", rbd.Sphere(0.1, mu=-0.2), mass=1.0, position=(0, 0, 1)), "mu"),
        (lambda b: b.add_body("x", rbd.Sphere(0.1, restitution=1.5), mass=1.0, position=(0, 0, 1)), "restitution"),
        (lambda b: b.add_body("x", rbd.Plane(), mass=1.0, position=(0, 0, 1)), "static"),
        (lambda b: b.set_pair("floor", "nobody", mu=0.1), "nobody"),
        (lambda b: b.set_pair("floor", "floor", mu=-0.1), "mu"),
    ],
)
def test_bad_bodies_are_rejected_by_name(build, match):
    b = rbd.SceneBuilder()
    b.add_static("floor", rbd.Plane())
    with pytest.raises(ValueError, match=match):
        build(b)


def test_bad_scene_arguments():
    with pytest.raises(ValueError, match="mu"):
        rbd.SceneBuilder(mu=-0.1)
    with pytest.raises(ValueError, match="mu"):
        rbd.scenes.four_balls(mu=-0.4)
    with pytest.raises(ValueError, match="radius"):
        rbd.scenes.rolling_ball(radius=0.0)
    with pytest.raises(ValueError, match="spacing"):
        rbd.scenes.sphere_grid(4, spacing=0.1)


def test_overlapping_initial_bodies_warn_with_the_depth():
    b = rbd.SceneBuilder()
    b.add_static("floor", rbd.Plane())
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0, 0.5))
    b.add_body("b", rbd.Sphere(0.1), mass=1.0, position=(0.15, 0.0, 0.5))
    with pytest.warns(UserWarning, match=r"'a' and 'b' overlap by 0.05 m"):
        b.build()
    # A row of 14 balls, each 1 cm into the next and the middle pair 2 cm: 13 pairs, one warning naming the deepest.
    row = rbd.SceneBuilder()
    for i in range(14):
        row.add_body(f"ball{i}", rbd.Sphere(0.1), mass=1.0, position=(0.19 * i - 0.01 * (i > 7), 0.0, 0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row.build()
    said = [str(w.message) for w in caught]
    assert len(said) == 1 and said[0].startswith(
        "13 body pairs overlap in the initial state, the deepest 'ball7' and 'ball8' by 0.02 m"
    ), said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rbd.scenes.four_balls()  # touching to 1e-5 is not an overlap


SCENE_BUILDS = (
    "rbd.scenes.cube_toss()",
    "rbd.scenes.box_stack(3)",
    "rbd.scenes.four_balls()",
    "rbd.scenes.block_on_incline()",
    "rbd.scenes.block_on_incline(dim=2)",
    "rbd.scenes.sphere_grid(9)",
    "rbd.scenes.bouncing_ball()",
    "rbd.scenes.box_push()",
    "rbd.scenes.falling_rod()",
)


def test_building_the_scenes_compiles_nothing(compilations):
    # The scenes are built with numpy on the host, and the overlap check's separating axes clear bodies that start
    # apart or resting, so the contact geometry is not compiled to check them.
    for build, (count, first) in compilations(*SCENE_BUILDS).items():
        assert count == 0, f"{build}: {count} compilations while building, the first {first}"


_POSED_SHAPES = {
    "box": lambda size: rbd.Box(size * np.array([1.0, 0.6, 0.3])),
    "sphere": lambda size: rbd.Sphere(size),
    "capsule": lambda size: rbd.Capsule(0.5 * size, size),
    "mesh": lambda size: rbd.ConvexMesh(size * np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1.0]])),
}


@functools.cache
def _pair_gaps(kind_a, kind_b):
    """A scene of two bodies of these kinds, its builder, and the jitted gaps f(q, params) of the pair."""
    b = rbd.SceneBuilder(gravity=(0.0, 0.0, 0.0))
    b.add_body("a", _POSED_SHAPES[kind_a](0.1), mass=1.0, position=(0.0, 0.0, 0.0))
    b.add_body("b", _POSED_SHAPES[kind_b](0.1), mass=1.0, position=(1.0, 0.0, 0.0))
    scene = b.build()
    return scene, b, jax.jit(lambda q, params: scene.bodies.contacts(q, params).gap)


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.sampled_from([("box", "box"), ("box", "sphere"), ("capsule", "mesh"), ("mesh", "box")]),
    offset=st.lists(st.floats(-0.25, 0.25), min_size=3, max_size=3),
    quats=st.lists(st.floats(-1.0, 1.0), min_size=8, max_size=8).filter(
        lambda x: min(np.linalg.norm(x[:4]), np.linalg.norm(x[4:])) > 0.1
    ),
)
def test_the_overlap_filter_clears_only_pairs_that_do_not_overlap(kinds, offset, quats):
    scene, builder, gaps = _pair_gaps(*kinds)
    qa = np.concatenate([np.zeros(3), quats[:4] / np.linalg.norm(quats[:4])])
    qb = np.concatenate([np.asarray(offset), quats[4:] / np.linalg.norm(quats[4:])])
    q = np.concatenate([qa, qb])
    if not builder._may_overlap(scene.bodies, q):
        gap = np.asarray(gaps(jnp.asarray(q), scene.system.params))
        assert gap.min() >= -OVERLAP_TOL, (kinds, q, gap)
