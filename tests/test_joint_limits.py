"""Joint ranges (hinge and slide stops as unilateral rows) and motors driven by `simulate(controls=...)`.

Exact references: a body resting against a stop under gravity takes the impulse
h m g L sin(phi) (a hinge) or h m g (a slide) per step; a constant motor torque
on a wheel whose centre of mass is on its axle gives the angular acceleration
tau / I exactly; gradients against central finite differences in float64.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

G = 9.81
H = 2.5e-3
STEPS = 300
LIMIT = 0.5  # rad, the hinge range [-LIMIT, LIMIT]
PHI0 = 0.8  # rad, the bobs' initial angle from the vertical: they rest against a stop at PHI0 - LIMIT
SLIDE_LIMIT = 0.3  # m, the slide range [-SLIDE_LIMIT, inf)
PENETRATION_TOL = 1e-9  # rad and m: how far past a stop the position-level scheme may go
REST_RTOL = 1e-9  # the resting impulse against the exact h m g L sin(phi)
ZERO_TOL = 1e-12  # the impulse of a stop that is not touched
REPLAY_TOL = 1e-11  # a replayed log against the controller that made it: the two are different XLA programs,
# and at the stops' impacts each step's solve ends at its residual (up to 9e-12 here), not at 1 ulp
ACCEL_RTOL = 1e-10  # the wheel's angular acceleration against tau / I
FD_RTOL = 1e-6  # gradients against central differences
FD_EPS = 1e-3  # the final angle is noisy at ~1e-13 (the step solves): smaller steps see it
LENGTH, MASS = 1.0, 1.0
INERTIA = (0.01, 0.02, 0.03)  # principal moments of the arm; its hinge is the y axis
SLIDER_MASS = 0.7
GEARS = (2.0, 1.5, 0.5)  # the motors "drive" (the arm's hinge), "push" (the slide) and "thrust" (a body force)
# Indices: bodies arm 0, upper 1, lower 2, slider 3 (q: 7 per body, v: 6); joints and
# `joint_coordinates`: hinge 0, upper hinge 1, lower hinge 2, slide 3.
ARM_SPIN, SLIDER_Z, SLIDER_VZ = 4, 3 * 7 + 2, 3 * 6 + 2


def _scene(length, gravity):
    """Four bodies on joints to the world, released from rest; one compiled rollout serves every test.

    - "arm": on a hinge (axis y) at (0, 0, 2), its centre `length` out along x
      (length = 0: a wheel on its axle, the centre of mass on the axis); motor "drive".
    - "upper": a pendulum on a hinge with range [-LIMIT, LIMIT], from PHI0 on the +x side;
      its angle (about +y, zero at the start) grows to LIMIT as it falls towards the vertical.
    - "lower": the mirror image, on a hinge with the one-sided range (-LIMIT, inf): it
      falls into the lower stop at -LIMIT.
    - "slider": on a vertical slide with range (-SLIDE_LIMIT, inf): it drops onto the stop
      SLIDE_LIMIT below its start; motor "push" on the slide and "thrust", a body force along z.
    """
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, -gravity), collide_bodies=False)
    b.add_static("floor", rbd.Plane())
    b.add_body("arm", rbd.Sphere(0.05), mass=MASS, inertia=INERTIA, position=jnp.stack([length, 0.0, 2.0]))
    b.add_joint("hinge", "revolute", "arm", anchor=(0.0, 0.0, 2.0), axis=(0, 1, 0))
    for name, side, rng in (("upper", 1.0, (-LIMIT, LIMIT)), ("lower", -1.0, (-LIMIT, math.inf))):
        pivot = np.array([3.0 * side, 0.0, 2.0])
        bob = pivot + LENGTH * np.array([side * math.sin(PHI0), 0.0, -math.cos(PHI0)])
        b.add_body(name, rbd.Sphere(0.05), mass=MASS, position=bob)
        b.add_joint(name + " hinge", "revolute", name, anchor=pivot, axis=(0, 1, 0), range=rng)
    b.add_body("slider", rbd.Sphere(0.05), mass=SLIDER_MASS, position=(0.0, 1.0, 1.0))
    b.add_joint("slide", "slide", "slider", anchor=(0.0, 1.0, 1.0), axis=(0, 0, 1), range=(-SLIDE_LIMIT, math.inf))
    b.add_motor("drive", "hinge", gear=GEARS[0])
    b.add_motor("push", "slide", gear=GEARS[1])
    b.add_motor("thrust", body="slider", force=(0.0, 0.0, 1.0), gear=GEARS[2])
    return b.build()


def _run(length, gravity, u):
    """The final arm angle, the trajectory and the joint coordinates (steps + 1, 4) of `_scene` driven by u."""
    scene = _scene(length, gravity)
    traj = rbd.simulate(*scene, dt=H, steps=STEPS, controls=u)
    coords = jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q)
    return coords[-1, 0], traj, coords


@functools.cache
def _rollout():
    """(length, gravity, u (steps, 3)) -> `_run`: one compiled rollout serves the stops, replay and wheel tests."""
    run = jax.jit(_run)
    return lambda length, gravity, u: run(length, gravity, jnp.asarray(u, jnp.float64))


@pytest.fixture(scope="module")
def stops():
    """The scene falling under gravity with the motors off: the stops' trajectory."""
    _, traj, coords = _rollout()(LENGTH, G, jnp.zeros((STEPS, 3)))
    return _scene(LENGTH, G), traj, np.asarray(coords)


@pytest.mark.slow
def test_stops_are_rows_of_the_contact_record(stops):
    scene, traj, _ = stops
    rows = scene.bodies.limit_rows()
    assert [(name, side) for name, side, _ in rows] == [
        ("upper hinge", "lower"),
        ("upper hinge", "upper"),
        ("lower hinge", "lower"),
        ("slide", "lower"),
    ]
    nl = len(rows)
    assert traj.impulses.limit.shape == (STEPS, nl)
    np.testing.assert_array_equal(traj.impulses.limit, traj.impulses.normal[:, -nl:])
    assert [i for _, _, i in rows] == list(range(traj.impulses.normal.shape[1] - nl, traj.impulses.normal.shape[1]))


def test_stops_follow_the_broad_phase_slots():
    """With a broad phase the record has fewer slots than candidate pairs: the stops still follow the slots."""
    b = rbd.SceneBuilder(dim=3, broadphase=2)
    b.add_static("floor", rbd.Plane())
    for i in range(4):
        b.add_body(f"ball{i}", rbd.Sphere(0.1), mass=1.0, position=(0.3 * i, 0.0, 0.5))
    b.add_body("arm", rbd.Sphere(0.05), mass=1.0, position=(0.8, 2.0, 2.0))
    b.add_joint("hinge", "revolute", "arm", anchor=(0.0, 2.0, 2.0), axis=(0, 1, 0), range=(-0.5, 0.25))
    scene = b.build()
    contacts = jax.jit(scene.bodies.contacts)(scene.state.q, scene.system.params)  # compiled by build() already
    rows = scene.bodies.limit_rows()
    assert contacts.limits == 2 and [i for _, _, i in rows] == [contacts.size - 2, contacts.size - 1]
    assert contacts.size < len(scene.bodies.pair_names) + 2  # the broad phase keeps 2 of the 10 ball pairs
    np.testing.assert_allclose(contacts.gap[-2:], [0.5, 0.25], rtol=1e-15)  # the coordinate is 0 at the start
    assert float(contacts.mu[-1]) == 0.0 and bool(contacts.active[-1])


@pytest.mark.slow
def test_hinge_stops_the_pendulum_at_its_limit_and_reports_the_impulse(stops):
    scene, traj, coords = stops
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    angle = coords[:, 1]
    overshoot = angle.max() - LIMIT
    print(f"two-sided hinge: largest angle - limit = {overshoot:.2e} rad")
    assert overshoot <= PENETRATION_TOL
    assert angle.min() >= -PENETRATION_TOL  # it never swings back below its start
    impulse = np.asarray(traj.impulses.limit[:, 1])  # the upper stop of "upper hinge"
    lower = np.asarray(traj.impulses.limit[:, 0])
    # Away from the stop (the step starts, and the free step would end, short of it) the impulse is zero.
    hit = int(np.argmax(angle[1:] >= LIMIT - PENETRATION_TOL))  # the first step that ends at the stop
    assert 0 < hit < STEPS - 60
    assert np.abs(impulse[:hit]).max() <= ZERO_TOL
    assert np.abs(lower).max() <= ZERO_TOL
    # At the stop: positive in every step, and at rest exactly the gravity torque's impulse.
    assert np.all(impulse[hit:] > 0)
    assert np.all(angle[hit + 1 :] >= LIMIT - PENETRATION_TOL)
    exact = H * MASS * G * LENGTH * math.sin(PHI0 - LIMIT)
    rest = impulse[-50:]
    print(f"resting impulse {rest[-1]:.12e}, exact h m g L sin(phi) {exact:.12e}")
    np.testing.assert_allclose(rest, exact, rtol=REST_RTOL)


@pytest.mark.slow
def test_one_sided_hinge_and_slide_stops(stops):
    scene, traj, coords = stops
    angle, s = coords[:, 2], coords[:, 3]
    print(
        f"one-sided hinge: -limit - smallest angle = {-LIMIT - angle.min():.2e} rad; "
        f"slide: {-SLIDE_LIMIT - s.min():.2e} m"
    )
    assert angle.min() >= -LIMIT - PENETRATION_TOL and angle.max() <= PENETRATION_TOL
    assert s.min() >= -SLIDE_LIMIT - PENETRATION_TOL
    exact = H * MASS * G * LENGTH * math.sin(PHI0 - LIMIT)
    np.testing.assert_allclose(traj.impulses.limit[-50:, 2], exact, rtol=REST_RTOL)
    np.testing.assert_allclose(traj.impulses.limit[-50:, 3], H * SLIDER_MASS * G, rtol=REST_RTOL)
    # The slider falls freely (s = -g t^2 / 2, to O(h)) until it reaches the stop.
    free = np.asarray(traj.t) < math.sqrt(2 * SLIDE_LIMIT / G) - 2 * H
    np.testing.assert_allclose(s[free], -0.5 * G * np.asarray(traj.t)[free] ** 2, atol=2 * G * H * 0.3)
    assert float(traj.stats.joint_violation.max()) <= 1e-10


@pytest.mark.slow
def test_rate_rows_are_the_derivative_of_the_coordinates(stops):
    scene, traj, _ = stops
    system, model = scene.system, scene.bodies
    for k in (0, STEPS // 3, STEPS):
        q = traj.q[k]
        values, rows = model.joint_coordinates(q, system.params)
        exact = jax.jacfwd(lambda q: model.joint_coordinates(q, system.params)[0])(q) @ system.G(q)
        np.testing.assert_allclose(rows, exact, atol=1e-12)


def _controller(t, state):
    """A feedback law of time and state: damping on the arm's spin and a sinusoid; a spring on the slider."""
    push = -2.0 * (state.q[SLIDER_Z] - 1.0) - 0.1 * state.v[SLIDER_VZ]
    return jnp.stack([0.3 * jnp.sin(8.0 * t) - 0.05 * state.v[ARM_SPIN], push, 0.2 * jnp.cos(3.0 * t)])


@pytest.mark.slow
def test_a_replayed_log_reproduces_the_controller_trajectory():
    scene = _scene(LENGTH, G)
    traj = jax.jit(lambda s: rbd.simulate(*s, dt=H, steps=STEPS, controls=_controller))(scene)
    states = rbd.State(traj.t[:-1], traj.q[:-1], traj.v[:-1])
    log = jax.vmap(_controller)(states.t, states)
    _, replayed, _ = _rollout()(LENGTH, G, log)
    dq = float(jnp.abs(replayed.q - traj.q).max())
    dv = float(jnp.abs(replayed.v - traj.v).max())
    residual = float(jnp.maximum(traj.stats.residual.max(), replayed.stats.residual.max()))
    print(
        f"replay: max |dq| {dq:.1e}, max |dv| {dv:.1e} (step residuals up to {residual:.1e}); "
        f"the arm swings {float(jnp.ptp(traj.q[:, 0])):.3f} m"
    )
    assert dq <= REPLAY_TOL and dv <= REPLAY_TOL
    assert float(jnp.ptp(traj.q[:, 0])) > 0.1  # it moved


@pytest.mark.slow
def test_constant_motor_torque_on_a_wheel_gives_tau_over_I_and_forces_F_over_m():
    tau, push, thrust = 0.7, 0.4, -0.3
    u = jnp.tile(jnp.array([tau / GEARS[0], push, thrust]), (STEPS, 1))
    _, traj, coords = _rollout()(0.0, 0.0, u)
    omega = np.asarray(traj.v[:, ARM_SPIN])
    accel = np.diff(omega) / H
    exact = tau / INERTIA[1]
    print(f"angular acceleration {accel.min():.15g} .. {accel.max():.15g}, tau / I = {exact:.15g}")
    np.testing.assert_allclose(accel, exact, rtol=ACCEL_RTOL)
    np.testing.assert_allclose(np.asarray(traj.v[:, [0, 1, 2, 3, 5]]), 0.0, atol=1e-12)  # the wheel only spins
    # The angle: each step turns the wheel by the Cayley rotation of h omega+, 2 atan(h omega+ / 2).
    turns = np.concatenate([[0.0], np.cumsum(2 * np.arctan(0.5 * H * omega[1:]))])
    # (The 3D hinge angle is measured in (-pi, pi] without a range: compare modulo 2 pi.)
    wrapped = np.angle(np.exp(1j * (np.asarray(coords[:, 0]) - turns)))
    np.testing.assert_allclose(wrapped, 0.0, atol=ACCEL_RTOL * turns[-1])
    force = GEARS[1] * push + GEARS[2] * thrust
    slider_accel = np.diff(np.asarray(traj.v[:, SLIDER_VZ])) / H
    print(
        f"slider acceleration {slider_accel.min():.15g} .. {slider_accel.max():.15g}, F / m = {force / SLIDER_MASS:.15g}"
    )
    np.testing.assert_allclose(slider_accel, force / SLIDER_MASS, rtol=ACCEL_RTOL)
    np.testing.assert_allclose(np.asarray(traj.v[:, 6:SLIDER_VZ]), 0.0, atol=1e-12)  # nothing else moves
    np.testing.assert_allclose(np.asarray(traj.v[:, SLIDER_VZ + 1 :]), 0.0, atol=1e-12)


@pytest.mark.long
def test_final_angle_gradient_wrt_the_torque_log_matches_finite_differences():
    t = jnp.linspace(0.0, 6.0, STEPS)
    u = jnp.stack([0.2 * jnp.sin(t), 0.1 * jnp.cos(t), jnp.zeros_like(t)], -1)
    grad = jax.jit(jax.grad(lambda u: _run(LENGTH, G, u)[0]))(u)
    final = lambda u: float(_rollout()(LENGTH, G, u)[0])
    direction = jax.random.normal(jax.random.PRNGKey(0), u.shape)
    checks = [(f"u[{k}]", jnp.zeros_like(u).at[k, 0].set(1.0)) for k in (0, STEPS // 2, 3 * STEPS // 4)]
    checks.append(("random direction", direction))
    for label, d in checks:
        fd = (final(u + FD_EPS * d) - final(u - FD_EPS * d)) / (2 * FD_EPS)
        ad = float(jnp.vdot(grad, d))
        print(f"d(final angle)/d{label}: grad {ad:.12e}, central FD {fd:.12e}, rel {abs(ad - fd) / abs(fd):.1e}")
        assert abs(ad - fd) <= FD_RTOL * abs(fd)


def _hinged(**joint):
    b = rbd.SceneBuilder(dim=3)
    b.add_static("floor", rbd.Plane())
    b.add_body("arm", rbd.Sphere(0.05), mass=1.0, position=(1.0, 0.0, 2.0))
    return b, functools.partial(b.add_joint, "hinge", anchor=(0.0, 0.0, 2.0), **joint)


@pytest.mark.parametrize(
    "kind, rng, match",
    [
        ("revolute", (0.5, 0.5), "range must have lo < hi"),
        ("revolute", (0.5, -0.5), "range must have lo < hi"),
        ("revolute", (math.nan, 0.5), "range must have lo < hi"),
        ("revolute", (-math.inf, math.inf), "no finite limit"),
        ("revolute", (-4.0, 4.0), "less than one turn"),
        ("revolute", (0.5,), r"range must be a pair"),
        ("ball", (-0.5, 0.5), "range applies only to revolute and slide joints"),
    ],
)
def test_bad_ranges_are_rejected_naming_the_argument(kind, rng, match):
    _, add = _hinged()
    axis = (0, 1, 0) if kind == "revolute" else None
    with pytest.raises(ValueError, match=match) as err:
        add(kind, "arm", axis=axis, range=rng)
    assert "'hinge'" in str(err.value)


def test_a_joint_that_starts_outside_its_range_is_reported():
    """A range that excludes the initial configuration (coordinate 0): its stop would kick the joint inside in the
    first step, so the builder says so, naming the joint and the range (as for Gymnasium's humanoid, whose knees
    start at 0 with a range (-160, -2) degrees)."""
    _, add = _hinged()
    with pytest.warns(UserWarning, match=r"joint 'hinge' starts outside its range \(0.1, 0.5\)"):
        add("revolute", "arm", axis=(0, 1, 0), range=(0.1, 0.5))


@pytest.mark.slow
def test_bad_motors_and_controls_are_rejected_naming_the_argument(stops):
    b, add = _hinged()
    add("ball", "arm")
    with pytest.raises(ValueError, match="joint must name a joint added with add_joint, got 'elbow'"):
        b.add_motor("m", "elbow")
    for direction in ({}, {"force": (1, 0, 0)}):  # a ball joint's motor needs a torque direction
        with pytest.raises(ValueError, match="a motor on a ball joint needs a torque direction"):
            b.add_motor("m", "hinge", **direction)
    with pytest.raises(ValueError, match="torque of motor 'm'"):
        b.add_motor("m", "hinge", torque=(1, 0))
    with pytest.raises(ValueError, match="body must name a moving body"):
        b.add_motor("m", body="nobody", force=(1, 0, 0))
    with pytest.raises(ValueError, match="exactly one of force or torque"):
        b.add_motor("m", body="arm")
    with pytest.raises(ValueError, match="restitution of joint 'h2'"):
        b.add_joint("h2", "revolute", "arm", anchor=(0.0, 0.0, 2.0), axis=(0, 1, 0), restitution=1.5)
    with pytest.raises(ValueError, match="the system has no motors"):
        rbd.simulate(*b.build(), dt=H, steps=3, controls=jnp.zeros((3, 1)))
    scene = stops[0]
    for bad in (jnp.zeros((3, 2)), jnp.zeros((4, 3)), jnp.zeros(3)):
        with pytest.raises(ValueError, match=r"controls must be an array of shape \(steps, nu\) = \(3, 3\)"):
            rbd.simulate(*scene, dt=H, steps=3, controls=bad)
    with pytest.raises(ValueError, match=r"controls: the function u\(t, state\) must return shape \(3,\)"):
        rbd.simulate(*scene, dt=H, steps=3, controls=lambda t, s: jnp.zeros(2))


@pytest.mark.slow
def test_contact_sweeps_still_rejects_scenes_with_joints(stops):
    with pytest.raises(ValueError, match="does not support joints"):
        rbd.simulate(*stops[0], dt=H, steps=3, step_solver=rbd.ContactSweeps())


def _wheel_between_stops(omega0, e, dim=3):
    """A wheel on its axle (no gravity) spinning at omega0 between stops at -LIMIT and LIMIT of restitution e."""
    b = rbd.SceneBuilder(dim=dim, gravity=(0.0, 0.0, 0.0))
    if dim == 3:
        b.add_static("floor", rbd.Plane())
        b.add_body(
            "wheel",
            rbd.Sphere(0.05),
            mass=MASS,
            inertia=INERTIA,
            position=(0.0, 0.0, 2.0),
            angular_velocity=(0.0, omega0, 0.0),
        )
        b.add_joint(
            "axle", "revolute", "wheel", anchor=(0.0, 0.0, 2.0), axis=(0, 1, 0), range=(-LIMIT, LIMIT), restitution=e
        )
    else:
        b.add_static("floor", rbd.Plane(normal=(0.0, 1.0, 0.0)))
        b.add_body("wheel", rbd.Sphere(0.05), mass=MASS, inertia=INERTIA, position=(0.0, 2.0), angular_velocity=omega0)
        b.add_joint("axle", "revolute", "wheel", anchor=(0.0, 2.0), range=(-LIMIT, LIMIT), restitution=e)
    return b.build()


@pytest.mark.parametrize(
    "dim, law",
    [
        pytest.param(3, rbd.Newton(), marks=pytest.mark.slow),
        pytest.param(2, rbd.Newton(), marks=pytest.mark.slow),
        pytest.param(3, rbd.Poisson(), marks=pytest.mark.long),
    ],
    ids=repr,
)
def test_restitution_at_a_stop_reverses_the_rate_times_e(dim, law):
    e, omega0, steps = 0.5, 2.0, 600
    scene = _wheel_between_stops(omega0, e, dim)
    traj = rbd.simulate(*scene, dt=H, steps=steps, impact=law)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    angle = np.asarray(jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0][0])(traj.q))
    rate = np.asarray(traj.v[:, 4] if dim == 3 else traj.v[:, 2])
    # The rate takes the values omega0, -e omega0, e^2 omega0 between bounces.
    levels = [omega0, -e * omega0, e * e * omega0]
    changes = np.flatnonzero(np.abs(np.diff(rate)) > 1e-9)
    print(
        f"{dim}D: rate changes at steps {changes.tolist()}; overshoot {angle.max() - LIMIT:.1e}, "
        f"{-LIMIT - angle.min():.1e} rad"
    )
    assert len(changes) == 2
    np.testing.assert_allclose(rate[: changes[0] + 1], levels[0], rtol=ACCEL_RTOL)
    np.testing.assert_allclose(rate[changes[0] + 1 : changes[1] + 1], levels[1], rtol=ACCEL_RTOL)
    np.testing.assert_allclose(rate[changes[1] + 1 :], levels[2], rtol=ACCEL_RTOL)  # round-off drift ~1e-14 per step
    assert angle.max() <= LIMIT + PENETRATION_TOL and angle.min() >= -LIMIT - PENETRATION_TOL
    limit = np.asarray(traj.impulses.limit)
    I = INERTIA[1] if dim == 3 else INERTIA[2]
    np.testing.assert_allclose(limit[changes[0], 1], I * (1 + e) * omega0, rtol=1e-10)  # the upper stop
    np.testing.assert_allclose(limit[changes[1], 0], I * (1 + e) * e * omega0, rtol=1e-10)  # the lower stop


@pytest.mark.slow
def test_anitescu_potra_stops_within_its_velocity_level_drift():
    scene = _scene(LENGTH, G)
    delta = 1e-3
    traj = rbd.simulate(*scene, dt=H, steps=STEPS, scheme=rbd.AnitescuPotra(delta=delta))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    coords = np.asarray(jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q))
    past = (coords[:, 1].max() - LIMIT, -LIMIT - coords[:, 2].min(), -SLIDE_LIMIT - coords[:, 3].min())
    print(f"Anitescu-Potra: past the stops by {past[0]:.1e} rad, {past[1]:.1e} rad, {past[2]:.1e} m")
    # A stop enters the step when its predicted gap f(q + h v) < delta; the step's own
    # acceleration (g / L, or g) can carry it at most h^2 times that further.
    assert max(past[:2]) <= H * H * G / LENGTH and past[2] <= H * H * G
    # It comes to rest within delta of each stop (the velocity-level row only stops the approach),
    # where the stop takes the impulse of gravity's torque at the resting angle.
    rest = coords[-1, 1:]
    print(
        f"Anitescu-Potra: at rest {LIMIT - rest[0]:.1e} rad, {rest[1] + LIMIT:.1e} rad, "
        f"{rest[2] + SLIDE_LIMIT:.1e} m short of the stops"
    )
    assert abs(LIMIT - rest[0]) <= delta and abs(rest[1] + LIMIT) <= delta and abs(rest[2] + SLIDE_LIMIT) <= delta
    exact = H * MASS * G * LENGTH * np.sin(PHI0 - np.abs(rest[:2]))
    np.testing.assert_allclose(traj.impulses.limit[-1, [1, 2]], exact, rtol=REST_RTOL)
    np.testing.assert_allclose(traj.impulses.limit[-1, 3], H * SLIDER_MASS * G, rtol=REST_RTOL)


@pytest.mark.slow
def test_planar_hinge_stop_with_a_body_torque_motor():
    """A planar pendulum falls into a one-sided stop, pressed on by a constant body torque."""
    b = rbd.SceneBuilder(dim=2)
    b.add_static("floor", rbd.Plane(normal=(0.0, 1.0, 0.0)))
    pivot = np.array([0.0, 2.0])
    bob = pivot + LENGTH * np.array([math.sin(PHI0), -math.cos(PHI0)])
    b.add_body("bob", rbd.Sphere(0.05), mass=MASS, position=bob)
    # The planar angle is theta_bob - theta_bob(0): falling towards the vertical turns it by -phi.
    b.add_joint("hinge", "revolute", "bob", anchor=pivot, range=(-LIMIT, math.inf))
    b.add_motor("twist", body="bob", torque=(0.0, 0.0, 1.0))
    scene = b.build()
    tau = -0.5  # clockwise: into the stop
    traj = rbd.simulate(*scene, dt=H, steps=STEPS, controls=lambda t, s: jnp.array([tau]))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    angle = np.asarray(jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0][0])(traj.q))
    print(f"planar: past the stop by {-LIMIT - angle.min():.1e} rad")
    assert angle.min() >= -LIMIT - PENETRATION_TOL
    exact = H * (MASS * G * LENGTH * math.sin(PHI0 - LIMIT) - tau)
    np.testing.assert_allclose(traj.impulses.limit[-50:, 0], exact, rtol=REST_RTOL)


@pytest.mark.slow  # the motor ranges' checks of their arguments stay in the default set
def test_motor_ranges_clip_the_control_then_the_force_and_its_gradient():
    """`ctrl_range` clips u before the gear, `force_range` clips gear u after it (MuJoCo's ctrlrange and
    forcerange): a free puck pushed by a body-force motor and a wheel turned on its axle by a hinge motor, no
    gravity, accelerate by exactly the clipped force over the mass and torque over the inertia in each step; the
    final velocity's gradient with respect to each control is h gear / m where neither range binds, else 0. A
    sphere turned on a ball joint at its centre, its motor's torque fixed along D in the sphere's frame, spins
    up about R D (the body's rotation R, tilted at the start) by exactly f / I per step: that axis does not turn."""
    # No gravity, no floor and no contact between the bodies: the step solves the joint rows alone.
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, 0.0), collide_bodies=False)
    b.add_body("puck", rbd.Sphere(0.05), mass=2.0, position=(0.0, 0.0, 1.0))
    b.add_body("wheel", rbd.Sphere(0.05), mass=1.0, inertia=INERTIA, position=(1.0, 0.0, 1.0))
    b.add_joint("axle", "revolute", "wheel", anchor=(1.0, 0.0, 1.0), axis=(0, 1, 0))
    b.add_motor("push", body="puck", force=(1.0, 0.0, 0.0), gear=2.0, ctrl_range=(-1.0, 1.0), force_range=(-1.5, 3.0))
    b.add_motor("turn", "axle", gear=0.5, ctrl_range=(-math.inf, 4.0))
    tilt = np.array([0.9, 0.3, -0.2, 0.25]) / np.linalg.norm([0.9, 0.3, -0.2, 0.25])
    b.add_body("ball", rbd.Sphere(0.05), mass=1.0, position=(2.0, 0.0, 1.0), orientation=tilt)
    b.add_joint("socket", "ball", "ball", anchor=(2.0, 0.0, 1.0))
    D = np.array([1.0, -2.0, 0.5])
    b.add_motor("twist", "socket", torque=D, gear=0.1, force_range=(-0.25, 0.25))
    system, state = b.build()
    u = jnp.array([[0.5, 1.0, 1.0], [3.0, 10.0, 4.0], [-3.0, -20.0, -1.0], [0.2, 2.0, 0.0]])
    force = np.array([1.0, 2.0, -1.5, 0.4])  # clip(2 clip(u, -1, 1), -1.5, 3)
    torque = np.array([0.5, 2.0, -10.0, 1.0])  # 0.5 min(u, 4)

    def final(u):
        traj = rbd.simulate(system, state, dt=H, steps=4, controls=u)
        return traj.v[-1, 0], traj

    (_, traj), grad = jax.jit(jax.value_and_grad(final, has_aux=True))(u)
    assert bool(traj.stats.converged.all())
    np.testing.assert_allclose(np.diff(np.asarray(traj.v[:, 0])) / H, force / 2.0, rtol=ACCEL_RTOL)
    np.testing.assert_allclose(np.diff(np.asarray(traj.v[:, 6 + 4])) / H, torque / INERTIA[1], rtol=ACCEL_RTOL)
    twist = np.array([0.1, 0.25, -0.1, 0.0])  # clip(0.1 u, -0.25, 0.25)
    w, x, y, z = tilt
    R = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )
    axis = R @ D
    # The angular velocity after each step, to the step solves' 1e-12 (relative: its joint rows are solved to that).
    spin = np.concatenate([[0.0], np.cumsum(H * twist / (0.4 * 0.05**2))])[:, None] * axis
    np.testing.assert_allclose(np.asarray(traj.v[:, 15:18]), spin, rtol=0, atol=1e-12 * np.abs(spin).max())
    np.testing.assert_allclose(np.asarray(grad), [[H, 0, 0], [0, 0, 0], [0, 0, 0], [H, 0, 0]], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    "ranges, match",
    [
        ({"ctrl_range": (1.0, -1.0)}, r"ctrl_range of motor 'm' must have lo <= hi"),
        ({"force_range": (math.nan, 1.0)}, r"force_range of motor 'm' must be a number, not NaN"),
        ({"ctrl_range": (1.0,)}, r"ctrl_range of motor 'm' must be a pair \(lo, hi\)"),
        ({"force_range": "big"}, r"force_range of motor 'm' must be a pair \(lo, hi\)"),
    ],
)
def test_bad_motor_ranges_are_rejected_naming_the_argument(ranges, match):
    b, add = _hinged()
    add("revolute", "arm", axis=(0, 1, 0))
    with pytest.raises(ValueError, match=match):
        b.add_motor("m", "hinge", **ranges)
