"""Bilateral joints against exact solutions: pendulum drift, period, wall strike, chain at rest."""

import functools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

G = 9.81
LENGTH, RADIUS = 1.0, 0.05


def _exact_period(theta0, length=LENGTH, radius=RADIUS):
    """The period of the ball on a hinge at amplitude theta0: 4 sqrt(I / (m g L)) K(sin(theta0 / 2))."""
    a, b = 1.0, math.sqrt(1.0 - math.sin(theta0 / 2) ** 2)
    for _ in range(30):  # arithmetic-geometric mean
        a, b = (a + b) / 2, math.sqrt(a * b)
    K = math.pi / (2 * a)
    return 4 * math.sqrt((length**2 + 0.4 * radius**2) / (G * length)) * K


def _crossings(t, x):
    """Times where x crosses zero upwards, by linear interpolation."""
    t, x = np.asarray(t), np.asarray(x)
    i = np.where((x[:-1] < 0) & (x[1:] >= 0))[0]
    return t[i] - x[i] * (t[i + 1] - t[i]) / (x[i + 1] - x[i])


@functools.lru_cache(maxsize=None)
def _swing(h, steps, project):
    return jax.jit(
        lambda theta0: rbd.simulate(
            *rbd.scenes.pendulum(LENGTH, theta0=theta0), dt=h, steps=steps, project_joints=project
        )
    )


@pytest.mark.long
def test_free_pendulum_keeps_its_joint_with_projection_and_drifts_without():
    violation = {}
    constraint = rbd.scenes.pendulum(LENGTH, theta0=0.5).system.constraint
    for project in (True, False):
        traj = _swing(1e-3, 10_000, project)(0.5)
        assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
        violation[project] = float(traj.stats.joint_violation.max())
        g = jax.vmap(constraint)(traj.q)
        assert abs(float(jnp.abs(g).max()) - violation[project]) <= 1e-12  # the reported violation is g(q)
    print(f"10^4 steps, h = 1e-3: max |g(q)| {violation[True]:.1e} with projection, {violation[False]:.1e} without")
    assert violation[True] <= 1e-10
    # Without the projection the joint rows' curvature offsets (`jaxrbd.dynamics.joint_curvature`) still hold the
    # pendulum to second order per step, but the error accumulates (rows J v+ = 0 alone drifted above 1e-4).
    assert violation[False] > 1e3 * violation[True]


@pytest.mark.long
def test_a_swinging_pendulum_keeps_its_energy_without_drift():
    """The joint rows J v+ + (h / 2) d^2 g / dt^2 = 0 make v+ tangent at the step's midpoint, so the joint's impulse
    turns the velocity without shortening it. A pendulum released from 1 rad then keeps its energy within a band of
    order h (semi-implicit Euler's, symplectic) for 20 s, with no drift: rows J v+ = 0 lost 12% in those 20 s at
    h = 0.01 (a fraction (h w)^2 of the kinetic energy per step)."""
    system = rbd.scenes.pendulum(LENGTH, theta0=1.0).system
    for h in (0.01, 0.005):
        traj = _swing(h, round(20.0 / h), True)(1.0)
        assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
        energy = np.asarray(jax.vmap(system.energy)(traj.q, traj.v))
        change = energy / energy[0] - 1.0
        window = round(5.0 / h)
        drift = change[-window:].mean() - change[:window].mean()
        print(f"h = {h}: energy within {np.abs(change).max():.2e} of its start; drift of the 5 s means {drift:.1e}")
        assert np.abs(change).max() <= 0.6 * h
        assert abs(drift) <= 1e-4


@pytest.mark.long
def test_pendulum_period_converges_to_the_exact_one():
    theta0 = 0.1
    exact = _exact_period(theta0)
    errors = []
    for h in (0.01, 0.005, 0.0025):
        traj = _swing(h, round(2.2 * exact / h), True)(theta0)
        crossings = _crossings(traj.t, traj.q[:, 0])
        assert len(crossings) >= 2
        period = crossings[1] - crossings[0]
        errors.append(abs(period - exact))
        print(f"h = {h}: period {period:.6f} s, exact {exact:.6f} s (small-angle {_exact_period(0.0):.6f} s)")
    assert errors[0] <= 0.01 * 1.0 and errors[-1] < errors[0]  # O(h): |error| <= h (seconds)
    assert all(e <= h for e, h in zip(errors, (0.01, 0.005, 0.0025), strict=True))


@pytest.mark.parametrize(
    "law",
    [
        pytest.param(rbd.Newton(), marks=pytest.mark.slow),
        pytest.param(rbd.Poisson(), marks=pytest.mark.long),
        pytest.param(rbd.Poisson(expedient=True), marks=pytest.mark.long),
    ],
    ids=repr,
)
def test_pendulum_strikes_the_wall_and_rebounds_with_e(law):
    e, theta0, h = 0.5, 0.3, 1e-3
    traj = rbd.simulate(
        *rbd.scenes.pendulum(LENGTH, theta0=theta0, wall=True, restitution=e), dt=h, steps=900, impact=law
    )
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    assert float(traj.stats.joint_violation.max()) <= 1e-10
    theta_dot = -np.asarray(traj.v[:, 4])  # the hinge is the y axis; theta grows towards +x
    k = int(np.where((theta_dot[:-1] < 0) & (theta_dot[1:] > 0))[0][0])
    before, after = theta_dot[k], theta_dot[k + 1]
    exact = math.sqrt(2 * G * LENGTH * (1 - math.cos(theta0)) / (LENGTH**2 + 0.4 * RADIUS**2))
    print(
        f"{law!r}: impact at t = {float(traj.t[k]):.3f}, theta' {before:.6f} -> {after:.6f}, ratio {-after / before:.7f}"
    )
    assert abs(-before / exact - 1) <= 1e-3  # energy kept on the way down
    assert abs(-after / before - e) <= 1e-5
    assert float(traj.q[:, 0].min()) >= -1e-8  # never inside the wall


@pytest.mark.long
def test_chain_rests_on_the_ground():
    scene = rbd.scenes.chain(5)
    traj = rbd.simulate(*scene, dt=0.01, steps=100)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    moved = float(jnp.abs(traj.q - traj.q[0]).max())
    print(f"chain of 5 at rest for 1 s: moved {moved:.1e}, max |g| {float(traj.stats.joint_violation.max()):.1e}")
    assert moved <= 1e-10 and float(traj.stats.joint_violation.max()) <= 1e-10
    # The table carries the weight, 5 links x 0.1 kg, per step; the joints carry nothing vertical.
    np.testing.assert_allclose(traj.impulses.normal.sum(axis=1), 5 * 0.1 * G * 0.01, rtol=1e-9)
    assert traj.impulses.joint.shape == (100, 12)


@pytest.mark.long
def test_pendulum_gradients_match_central_differences():
    """d(state after 1 s)/d(length, mass); the bob's inertia is fixed so that the mass matters."""
    h, steps = 0.005, 200

    def final(length, mass):
        scene = rbd.scenes.pendulum(length, mass=mass, inertia=0.02, theta0=0.4)
        traj = rbd.simulate(*scene, dt=h, steps=steps)
        return jnp.concatenate([traj.q[-1, :3], traj.v[-1, [0, 2, 4]]])

    f = jax.jit(final)
    jac = jax.jit(jax.jacrev(final, argnums=(0, 1)))(1.0, 1.0)
    eps = 1e-6
    for i, x in enumerate((1.0, 1.0)):
        args_p, args_m = [1.0, 1.0], [1.0, 1.0]
        args_p[i], args_m[i] = x + eps, x - eps
        fd = (f(*args_p) - f(*args_m)) / (2 * eps)
        print(
            f"d/d{('length', 'mass')[i]}: implicit {np.round(np.asarray(jac[i]), 6)}, central {np.round(np.asarray(fd), 6)}"
        )
        assert np.all(np.isfinite(np.asarray(jac[i])))
        np.testing.assert_allclose(jac[i], fd, rtol=1e-4, atol=1e-7)
    assert float(jnp.abs(jac[1]).max()) > 1e-3  # the mass does matter here


def test_bad_joint_input():
    b = rbd.SceneBuilder()
    b.add_static("floor", rbd.Plane())
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0, 0, 1))
    with pytest.raises(ValueError, match="'ghost'"):
        b.add_joint("j", "ball", "a", "ghost", anchor=(0, 0, 1))
    with pytest.raises(ValueError, match="'ghost'"):
        b.add_joint("j", "ball", "ghost", anchor=(0, 0, 1))
    with pytest.raises(ValueError, match="kind must be one of"):
        b.add_joint("j", "weld", "a", anchor=(0, 0, 1))
    with pytest.raises(ValueError, match="needs its axis"):
        b.add_joint("j", "revolute", "a", anchor=(0, 0, 1))
    with pytest.raises(ValueError, match="either anchor"):
        b.add_joint("j", "ball", "a", anchor=(0, 0, 1), anchor_a=(0, 0, 0))


def test_violated_initial_joint_warns_and_is_projected():
    b = rbd.SceneBuilder()
    b.add_static("floor", rbd.Plane())
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0, 0, 1))
    b.add_body("c", rbd.Sphere(0.1), mass=1.0, position=(0.25, 0, 1))
    b.add_joint("link", "ball", "a", "c", anchor_a=(0.1, 0, 0), anchor_b=(-0.1, 0, 0))  # 0.05 m apart
    with pytest.warns(UserWarning, match=r"joint 'link' is violated by 0.05"):
        scene = b.build()
    assert float(jnp.abs(scene.system.constraint(scene.state.q)).max()) <= 1e-12
    # The smallest mass-weighted correction: equal masses meet half-way.
    np.testing.assert_allclose(scene.bodies.positions(scene.state.q)[:, 0], [0.025, 0.225], atol=1e-12)
    b2 = rbd.SceneBuilder()
    b2.add_static("floor", rbd.Plane())
    b2.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0, 0, 1))
    b2.add_joint("hinge", "revolute", "a", anchor=(0, 0, 2), axis=(0, 1, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a joint built from a world anchor holds exactly: no warning
        b2.build()


@pytest.mark.slow
def test_planar_pendulum_period():
    """A disk on a pin in a planar scene: the same exact period, with the joint's 2 rows."""
    theta0, h = 0.1, 0.0025
    b = rbd.SceneBuilder(dim=2)
    b.add_static("floor", rbd.Plane(normal=(0.0, 1.0, 0.0)))
    pivot = np.array([0.0, LENGTH + 1.0])
    b.add_body(
        "bob",
        rbd.Sphere(RADIUS),
        mass=1.0,
        inertia=0.4 * RADIUS**2,  # the solid ball's, so the exact period is the 3D one
        position=pivot + LENGTH * np.array([np.sin(theta0), -np.cos(theta0)]),
        angle=theta0,
    )
    b.add_joint("pin", "revolute", "bob", anchor=pivot)
    scene = b.build()
    exact = _exact_period(theta0)
    traj = rbd.simulate(*scene, dt=h, steps=round(2.2 * exact / h))
    assert bool(traj.stats.converged.all()) and float(traj.stats.joint_violation.max()) <= 1e-10
    crossings = _crossings(traj.t, traj.q[:, 0])
    period = crossings[1] - crossings[0]
    print(f"planar pin, h = {h}: period {period:.6f} s, exact {exact:.6f} s")
    assert traj.impulses.joint.shape[-1] == 2 and abs(period - exact) <= h
