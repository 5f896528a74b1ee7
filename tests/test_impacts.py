"""Impact laws against exact solutions: Newton and Poisson restitution.

Exact: a ball dropped from rest with Newton restitution e rebounds to e^2 times its
drop height, every bounce (the reference problems); the first apex e^2 h0 has derivative
2 e h0. Energy: Poisson's law with e_T = e never gains kinetic energy across an
impact (000 §4); Newton's law and Poisson's with e_T = 0 can, when the normal
impulse reverses the slip (004 §1.1), and the test shows it where the impacts guide says.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.stepping import StewartTrinkle, resolve_impact

E = 0.8
DROP = 1.0  # drop height of the centre above its resting height
RADIUS = 0.1


@functools.lru_cache(maxsize=None)
def _bouncing(h, seconds):
    """A jitted rollout of bouncing_ball(e) with Newton's law: e -> (z above rest, vz, stats)."""

    @jax.jit
    def run(e):
        traj = rbd.simulate(
            *rbd.scenes.bouncing_ball(e, height=DROP), dt=h, steps=round(seconds / h), impact=rbd.Newton()
        )
        return traj.q[:, 2] - RADIUS, traj.v[:, 2], traj.stats

    return run


def _apexes(z, vz):
    """Heights where vz turns from positive to non-positive."""
    z, vz = np.asarray(z), np.asarray(vz)
    i = np.where((vz[:-1] > 0) & (vz[1:] <= 0))[0]
    return z[i + 1]


@pytest.mark.slow
def test_bouncing_ball_apex_ratio_converges_like_h():
    errors = []
    for h in (0.004, 0.002, 0.001):
        z, vz, stats = _bouncing(h, 5.0)(E)
        assert np.all(np.asarray(stats.residual) <= 1e-8) and bool(stats.converged.all())
        assert float(z.min()) >= -1e-8
        apex = _apexes(z, vz)[:4]
        ratios = np.concatenate([[apex[0] / DROP], apex[1:] / apex[:-1]])
        err = np.abs(ratios - E**2)
        print(f"h = {h}: apexes {np.round(apex, 5)}, ratios {np.round(ratios, 5)}, |ratio - e^2| {np.round(err, 5)}")
        # O(h): the impact is applied at the start of the step in which the ball would land.
        assert np.max(err) <= 4.0 * h
        errors.append(np.mean(err))
    assert errors[0] > errors[1] > errors[2]


def test_inelastic_ball_does_not_bounce_and_elastic_ball_keeps_its_energy():
    run = _bouncing(0.001, 5.0)
    z, vz, _ = run(0.0)
    landed = int(np.argmax(np.asarray(z) < 1e-2))
    assert landed > 0 and float(jnp.max(vz[landed:])) <= 1e-12
    z, vz, stats = run(1.0)
    apex = _apexes(z, vz)
    assert len(apex) >= 5 and bool(stats.converged.all())
    energy = 9.81 * z + 0.5 * vz**2  # per unit mass
    loss = 1 - float(energy[-1]) / (9.81 * DROP)
    print(f"e = 1, h = 1e-3: apexes {np.round(apex[:5], 5)}, energy lost after {len(apex)} bounces {loss:.2e}")
    assert abs(loss) < 0.01 and np.all(np.abs(apex[:5] / DROP - 1) < 0.01)


@pytest.mark.slow
def test_apex_gradient_matches_2_e_h0():
    h = 2.5e-4
    steps = round(1.4 / h)

    def apex(e):
        traj = rbd.simulate(*rbd.scenes.bouncing_ball(e, height=DROP), dt=h, steps=steps, impact=rbd.Newton())
        return jnp.max(traj.q[round(0.6 / h) :, 2]) - RADIUS  # the first rebound apex

    value, grad = jax.jit(jax.value_and_grad(apex))(E)
    print(
        f"h = {h}: first apex {float(value):.6f} (exact {E**2 * DROP}), d/de {float(grad):.6f} (exact {2 * E * DROP})"
    )
    assert np.isfinite(grad)
    assert abs(float(grad) / (2 * E * DROP) - 1) <= 1e-3


def _kinetic(system, q, v):
    return 0.5 * v @ system.M(q) @ v


def _impact_energy_ratio(scene, traj, law, dt):
    """Per step: KE after Poisson's impact phase over KE before it, and the phase's residual."""
    system = scene.system

    def one(state):
        t, q, v = state
        impact = resolve_impact(
            system, rbd.State(t, q, v), dt=dt, scheme=StewartTrinkle(), law=law, solver=rbd.SemismoothNewton()
        )
        v_plus, residual, converged = impact.v, impact.residual, impact.converged
        before = _kinetic(system, q, v)
        return _kinetic(system, q, v_plus) - before, before, residual, converged

    # lax.map, not vmap: a vmapped batch runs the Lemke fallback's loop for every lane.
    return jax.jit(lambda states: jax.lax.map(one, states))((traj.t[:-1], traj.q[:-1], traj.v[:-1]))


ENERGY_SCENES = {
    "spinning ball with friction": (
        lambda: rbd.scenes.bouncing_ball(0.9, mu=0.5, velocity=(1.0, 0.0, 0.0), angular_velocity=(0.0, -30.0, 5.0)),
        0.002,
        1500,
    ),
    "pendulum striking a rough wall": (
        lambda: rbd.scenes.pendulum(theta0=0.4, wall=True, restitution=0.7, wall_mu=0.3),
        0.005,
        400,
    ),
    "four balls, e = 0.9": (lambda: rbd.scenes.four_balls(restitution=0.9), 0.005, 240),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow if n == "spinning ball with friction" else pytest.mark.long)
        for n in ENERGY_SCENES
    ],
)
def test_poisson_never_gains_kinetic_energy_across_an_impact(name):
    make, dt, steps = ENERGY_SCENES[name]
    scene = make()
    law = rbd.Poisson()
    traj = jax.jit(lambda s: rbd.simulate(*s, dt=dt, steps=steps, impact=law))(scene)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    gain, before, residual, converged = _impact_energy_ratio(scene, traj, law, dt)
    assert bool(converged.all()) and float(residual.max()) <= 1e-8
    impacts = np.asarray(gain) < -1e-6 * np.asarray(before)
    assert impacts.sum() >= 1  # the scene has impacts
    worst = float(jnp.max(gain / jnp.maximum(before, 1e-300)))
    print(f"{name}: {impacts.sum()} impact steps, max relative KE change across an impact {worst:.1e}")
    assert np.all(np.asarray(gain) <= 1e-9 * np.asarray(before) + 1e-14)


def _spinning_rod(mu, e=1.0):
    """A thin planar bar at 45 degrees whose lower corner touches the table: Kane's setting."""
    b = rbd.SceneBuilder(dim=2, mu=mu, restitution=e)
    b.add_static("table", rbd.Plane(normal=(0.0, 1.0, 0.0)))
    theta = np.pi / 4
    b.add_body(
        "rod",
        rbd.Box((0.25, 0.01, 0.05)),
        mass=1.0,
        position=(0.0, 0.25 * np.sin(theta) + 0.01 * np.cos(theta) + 1e-9),
        angle=theta,
        velocity=(-0.8, -2.0),
        angular_velocity=20.0,
    )
    return b.build()


@pytest.mark.slow
def test_energy_gain_where_the_readme_says():
    """Newton with friction and Poisson with e_T = 0 gain energy on the spinning rod; Poisson's default does not."""
    gains = {}
    for mu in (0.0, 0.3):
        scene = _spinning_rod(mu)
        system = scene.system
        traj = rbd.simulate(*scene, dt=1e-4, steps=2, impact=rbd.Newton())
        energy = jax.vmap(system.energy)(traj.q, traj.v)
        gains["newton", mu] = float(energy[-1] / energy[0] - 1)
        for label, law in (("poisson", rbd.Poisson()), ("poisson e_T=0", rbd.Poisson(tangential=0.0))):
            q, v = scene.state.q, scene.state.v
            v_plus = resolve_impact(
                system, rbd.State(0.0, q, v), dt=1e-4, scheme=StewartTrinkle(), law=law, solver=rbd.SemismoothNewton()
            ).v
            gains[label, mu] = float(_kinetic(system, q, v_plus) / _kinetic(system, q, v) - 1)
    print({k: f"{v:+.3f}" for k, v in gains.items()})
    assert abs(gains["newton", 0.0]) < 1e-3  # frictionless, e = 1: kept (up to one step of gravity)
    assert gains["newton", 0.3] > 0.1  # Kane's paradox: +18%
    assert gains["poisson e_T=0", 0.3] > 0.1
    assert gains["poisson", 0.3] <= 1e-9 and gains["poisson", 0.0] <= 1e-9


@pytest.mark.slow
def test_four_balls_with_restitution_bounce_off_the_table():
    """004 Figure 3: e = 0.9; the thrown ball leaves the table at 0.9 times its impact speed (no spin coupling)."""
    h = 0.0025
    traj = rbd.simulate(*rbd.scenes.four_balls(restitution=0.9), dt=h, steps=400, impact=rbd.Newton())
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    vz = np.asarray(traj.v[:, 2])
    k = int(np.argmax(vz > 0))  # first step with the thrown ball rising
    print(f"impact at t = {float(traj.t[k]):.4f}: vz {vz[k - 1]:.4f} -> {vz[k]:.4f}")
    assert abs(vz[k] / -vz[k - 1] - 0.9) < 0.01
    assert abs(float(traj.t[k]) - 0.4284) <= 2 * h


def test_bad_restitution_input():
    with pytest.raises(ValueError, match="e must be in"):
        rbd.scenes.bouncing_ball(1.5)
    with pytest.raises(ValueError, match="restitution"):
        rbd.SceneBuilder(restitution=-0.1)
    with pytest.raises(ValueError, match="tangential"):
        rbd.Poisson(tangential=2.0)
    scene = rbd.scenes.bouncing_ball(0.5)
    with pytest.raises(ValueError, match=r"system.restitution must be in \[0, 1\]"):
        bad = eqx.tree_at(lambda s: s.restitution, scene.system, jnp.array([1.2]))
        rbd.simulate(bad, scene.state, dt=0.01, steps=1)
    with pytest.raises(
        TypeError, match=r"impact must be None, jaxrbd.NewtonRestitution\(\) or jaxrbd.PoissonRestitution\(\), got 0.5"
    ):
        rbd.simulate(*scene, dt=0.01, steps=1, impact=0.5)


def _exact_bounces(t, drop, e, g=9.81):
    """Height above rest of a ball dropped from `drop` with Newton's law e, at times t (exact, piecewise parabolas)."""
    t_land, v = np.sqrt(2 * drop / g), np.sqrt(2 * g * drop)
    z = np.empty_like(t)
    for i, ti in enumerate(t):
        if ti < t_land:
            z[i] = drop - 0.5 * g * ti**2
            continue
        s, u = ti - t_land, e * v
        while s > 2 * u / g:
            s, u = s - 2 * u / g, e * u
        z[i] = u * s - 0.5 * g * s**2
    return z


@functools.lru_cache(maxsize=None)
def _located(h, steps):
    """Jitted: z above rest with Newton(locate=True), e = 0.6, vmapped over the drop height (from rest), and
    the trajectory from a drop height and a start speed."""
    run = lambda drop, vz0: rbd.simulate(
        *rbd.scenes.bouncing_ball(0.6, height=drop, velocity=jnp.stack([0.0, 0.0, vz0])),
        dt=h,
        steps=steps,
        impact=rbd.Newton(locate=True),
    )
    return jax.jit(jax.vmap(lambda drop: run(drop, 0.0).q[:, 2] - RADIUS)), jax.jit(run)


@pytest.mark.long
def test_located_newton_impact_is_continuous_in_the_drop_height_and_second_order_in_flight():
    """Newton(locate=True): the bounce starts where the contact closes within the step.

    - z after the first bounce is continuous in the drop height where the bounce crosses a step: over
      drop heights 1e-4 and 1e-5 apart (each range crosses steps), the largest change between neighbours
      shrinks with the spacing (a jump would not);
    - d z / d drop equals central differences;
    - against the exact piecewise parabolas: the semi-implicit step's velocity is the mean over the step
      before, the exact velocity half a step earlier, and the located bounce keeps to that. Started at rest,
      the start is half a step off and the error is first order, within the bound of the semi-implicit step
      (each flight off by at most h in time, at speeds up to sqrt(2 g drop)); started with the velocity
      of -h/2, g h / 2, the flights and the bounces are second order.
    """
    heights, _ = _located(1 / 240, 150)
    jumps = []
    for spacing in (1e-4, 1e-5):
        z = np.asarray(heights(jnp.asarray(0.5 + spacing * np.arange(-40, 41))))[:, 150]
        jumps.append(np.max(np.abs(np.diff(z))))
    print(f"\nlargest change of z(0.625 s) between drop heights 1e-4 / 1e-5 apart: {jumps}")
    assert jumps[1] <= 0.15 * jumps[0]
    grad = float(jax.grad(lambda d: heights(d[None])[0, 150])(0.5))
    fd = float((heights(jnp.array([0.5 + 1e-6]))[0, 150] - heights(jnp.array([0.5 - 1e-6]))[0, 150]) / 2e-6)
    assert np.isfinite(grad) and grad == pytest.approx(fd, rel=1e-6)

    errors = {0: [], 1: []}
    for h in (1 / 480, 1 / 960, 1 / 1920):
        steps = round(1.0 / h)
        for half_step in (0, 1):
            traj = _located(h, steps)[1](0.5, half_step * 9.81 * h / 2)
            z = np.asarray(traj.q[:, 2]) - RADIUS
            assert np.all(np.asarray(traj.stats.residual) <= 1e-8) and bool(traj.stats.converged.all())
            assert float(z.min()) >= -1e-8
            errors[half_step].append(np.max(np.abs(z - _exact_bounces(np.arange(steps + 1) * h, 0.5, 0.6))))
        bounces = 3  # in the first second from 0.5 m with e = 0.6
        assert errors[0][-1] <= (bounces + 1) * np.sqrt(2 * 9.81 * 0.5) * h
    first, second = (np.array(errors[k]) for k in (0, 1))
    print(
        f"largest error against the exact bounces, h = 1/480, 1/960, 1/1920: from rest {first}, from g h / 2 {second}"
    )
    assert np.all((1.8 <= first[:-1] / first[1:]) & (first[:-1] / first[1:] <= 2.2))
    # Second order: within (bounces + 1) g h^2, the chord of a parabola over one step being off by g h^2 / 8.
    assert np.all(second[:-1] / second[1:] >= 3.6) and np.all(second <= 4 * 9.81 * np.array([480, 960, 1920]) ** -2.0)
