"""Time stepping in generalized coordinates, against the papers and exact solutions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.analysis import rod_events

RESIDUAL_TOL = 1e-8
CONTACT = 1e-9  # an impulse above this counts as contact
P1_H = 0.0025


@pytest.fixture(scope="module")
def p1():
    system, state = rbd.scenes.falling_rod()
    return system, rbd.simulate(system, state, dt=P1_H, steps=int(0.8 / P1_H))


def _assert_solved(traj):
    assert bool(jnp.all(traj.stats.converged))
    assert float(traj.stats.residual.max()) <= RESIDUAL_TOL
    assert bool(jnp.all(jnp.isfinite(traj.q))) and bool(jnp.all(jnp.isfinite(traj.v)))


def _assert_energy_never_increases(system, traj):
    energy = np.asarray(jax.vmap(system.energy)(traj.q, traj.v))
    increase = np.diff(energy)
    assert np.all(increase <= 1e-9 * np.abs(energy[:-1]) + 1e-15), increase.max()


def test_p1_falling_rod(p1):
    """003 §4.1 at h = 0.0025: impact, slap-down and rest times; every step solved."""
    system, traj = p1
    _assert_solved(traj)
    ev = rod_events(system, traj)
    assert 0.375 <= ev.first_impact <= 0.390
    assert abs(ev.full_contact - 0.548) <= 0.03
    assert ev.rest - ev.full_contact <= 0.06
    q = np.asarray(traj.q[-1])
    assert abs(math.sin(q[2])) < 1e-9  # lying flat
    np.testing.assert_allclose(np.asarray(system.gap(traj.q[-1])), 0.0, atol=1e-9)
    _assert_energy_never_increases(system, traj)


def test_p1_contact_end_slides_then_slap_down(p1):
    """After the impact the contact end slides left; slap-down slides left briefly, then rest (003 §4.1)."""
    system, traj = p1
    phases = [phase for phase, _, _ in rod_events(system, traj).phases]
    assert phases[0] == "flight" and phases[1].startswith("impact")
    assert phases.index("slide left") < phases.index("full contact: slide left") == len(phases) - 2
    assert phases[-1] == "rest"


def test_painleve_steps_through_with_a_tangential_impulse():
    """004 §1.3: no force solution exists; the step applies an impulsive friction force instead."""
    system, state = rbd.scenes.painleve_rod()
    assert float(rbd.scenes.painleve_margin(system, state.q[2])) < 0  # Painlevé's regime
    h = 0.001
    traj = rbd.simulate(system, state, dt=h, steps=300)
    _assert_solved(traj)
    _assert_energy_never_increases(system, traj)
    # A tangential impact: the first step's friction impulse is far above h mu m g (the
    # most a bounded force of that size gives) and arrests the slip of 1 m/s in 1 ms.
    friction = float(jnp.abs(traj.impulses.friction[0, 1, 0]))
    assert friction > 10 * h * float(system.mu[1] * system.params["mass"]) * 9.81
    slip = system.tangents(traj.q[0], system.params)[1, 0] @ traj.v[:2].T
    assert float(slip[0]) == -1.0 and abs(float(slip[1])) < 1e-9
    # Penetration: at most the second-order error of linearizing the curved gap, h^2/2 |v^T H v|.
    hess = jax.vmap(jax.hessian(system.gap))(traj.q[1:])
    curvature = jnp.abs(jnp.einsum("si,scij,sj->sc", traj.v[1:], hess, traj.v[1:])).max()
    assert float(jax.vmap(system.gap)(traj.q).min()) >= -0.5 * h**2 * float(curvature) - 1e-15


SLOPE = math.radians(30.0)


def test_block_slides_with_exact_acceleration():
    system, state = rbd.scenes.block_on_incline(SLOPE, 0.3, dim=2)
    h = 0.01
    traj = rbd.simulate(system, state, dt=h, steps=200)
    _assert_solved(traj)
    _assert_energy_never_increases(system, traj)
    tangent = jnp.array([math.cos(SLOPE), math.sin(SLOPE)])
    accel = np.diff(np.asarray(traj.v[:, :2] @ tangent)) / h
    exact = -9.81 * (math.sin(SLOPE) - 0.3 * math.cos(SLOPE))
    np.testing.assert_allclose(accel, exact, rtol=1e-9)


def test_block_sticks_without_creep():
    system, state = rbd.scenes.block_on_incline(SLOPE, 0.7, dim=2)  # mu > tan(30°) = 0.577
    traj = rbd.simulate(system, state, dt=0.01, steps=1000)
    _assert_solved(traj)
    assert float(jnp.abs(traj.q - traj.q[0]).max()) < 1e-12


def _rod_end_state(params, steps):
    mu, inertia, theta0, omega0 = params
    system, state = rbd.scenes.falling_rod(mu=mu, inertia=inertia, theta0=theta0, omega0=omega0, y0=0.991)
    traj = rbd.simulate(system, state, dt=P1_H, steps=steps)
    return jnp.stack([traj.q[-1, 0], traj.q[-1, 2]]), traj.impulses.normal > CONTACT


@pytest.mark.parametrize(
    "steps",
    [
        160,  # 0 to 0.40 s: flight, the impact step (sticking), flight again; theta still varies
        # 0 to 0.55 s: through the slap-down step, which slides; x depends on mu
        pytest.param(220, marks=pytest.mark.slow),
    ],
)
def test_rod_gradients_match_finite_differences(steps):
    """d(final x, theta)/d(mu, J, theta0, omega0) against central differences (step 1e-5 relative).

    The contact mode of every step is checked to be the same at +-eps, so the
    difference quotient is taken inside one smooth piece. Tolerance 1e-4 relative,
    plus 1e-7 absolute: the FD noise of a 1e-14 residual over a 1e-6 step is about 1e-8 (a
    1e-6 relative step left 1.2e-7 of noise where the exact derivative, d theta / d mu while
    sticking, is 0).
    """
    p0 = jnp.array([0.6, 0.002, math.radians(30.0), 4.0])
    run = jax.jit(lambda p: _rod_end_state(p, steps))
    jac = jax.jit(jax.jacrev(lambda p: _rod_end_state(p, steps)[0]))(p0)
    assert bool(jnp.all(jnp.isfinite(jac)))
    _, mode = run(p0)
    for i in range(4):
        eps = 1e-5 * abs(float(p0[i]))
        (up, mode_up), (down, mode_down) = run(p0.at[i].add(eps)), run(p0.at[i].add(-eps))
        assert bool(jnp.all(mode_up == mode)) and bool(jnp.all(mode_down == mode))
        fd = (up - down) / (2 * eps)
        np.testing.assert_allclose(np.asarray(jac[:, i]), np.asarray(fd), rtol=1e-4, atol=1e-7)


def _check_vmap_over_mu_matches_loop(mus, dt, steps):
    def final_q(mu):
        return rbd.simulate(*rbd.scenes.falling_rod(mu=mu), dt=dt, steps=steps).q

    run, batched = jax.jit(final_q), jax.jit(jax.vmap(final_q))(mus)
    for i, mu in enumerate(mus):
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(run(mu)), rtol=1e-10, atol=1e-12)


@pytest.mark.long
def test_vmap_over_mu_matches_loop():
    _check_vmap_over_mu_matches_loop(jnp.linspace(0.05, 1.5, 8), dt=0.005, steps=120)


@pytest.mark.long  # test_sysid.py's 4,096-rod sweep against a loop is in the slow set
def test_vmap_over_256_mu_matches_loop():
    _check_vmap_over_mu_matches_loop(jnp.linspace(0.0, 2.0, 256), dt=0.0025, steps=240)


@pytest.mark.slow
@pytest.mark.parametrize("h", [0.01, 0.005, 0.00125])
def test_p1_other_step_sizes(h):
    """The published times at the coarser and finer steps (003 Figures 3-5)."""
    system, state = rbd.scenes.falling_rod()
    traj = rbd.simulate(system, state, dt=h, steps=int(round(0.8 / h)))
    _assert_solved(traj)
    _assert_energy_never_increases(system, traj)
    ev = rod_events(system, traj)
    print(f"\nh = {h}: first impact {ev.first_impact:.4f}, full contact {ev.full_contact:.4f}, rest {ev.rest:.4f}")
    assert 0.37 <= ev.first_impact <= 0.39
    assert abs(ev.full_contact - 0.548) <= 0.03


@pytest.mark.slow
def test_anitescu_potra_and_nonlinear_schemes_on_the_rod():
    system, state = rbd.scenes.falling_rod()
    for scheme in (rbd.AnitescuPotra(), rbd.AnitescuPotra(project=True), rbd.StewartTrinkle(fixed_point_iterations=2)):
        traj = rbd.simulate(system, state, dt=P1_H, steps=320, scheme=scheme)
        _assert_solved(traj)
        ev = rod_events(system, traj)
        assert 0.375 <= ev.first_impact <= 0.390 and abs(ev.full_contact - 0.548) <= 0.03
        if not (isinstance(scheme, rbd.AnitescuPotra) and scheme.project):
            _assert_energy_never_increases(system, traj)  # projection moves q, so it may add potential energy
        if isinstance(scheme, rbd.AnitescuPotra) and scheme.project:
            assert float(jax.vmap(system.gap)(traj.q).min()) >= -1e-6


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: rbd.scenes.falling_rod(mass=0.0), "mass"),
        (lambda: rbd.scenes.falling_rod(inertia=-1.0), "inertia"),
        (lambda: rbd.scenes.falling_rod(mu=-0.1), "mu"),
        (lambda: rbd.scenes.block_on_incline(mu=-1.0), "mu"),
        (lambda: rbd.scenes.block_on_incline(angle=2.0), "angle"),
        (lambda: rbd.scenes.painleve_rod(length=0.0), "length"),
    ],
)
def test_bad_scene_parameters(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_bad_system_and_options():
    system, state = rbd.scenes.falling_rod()
    bad = rbd.System(
        params=system.params,
        mu=system.mu,
        mass_matrix=system.mass_matrix,
        potential=system.potential,
        gaps=lambda q, p: q[:1],  # one gap for two contacts
        tangents=system.tangents,
    )
    with pytest.raises(ValueError, match="gaps"):
        rbd.scenes.Scene(bad, state)
    with pytest.raises(ValueError, match="dt"):
        rbd.simulate(system, state, dt=0.0, steps=10)
    with pytest.raises(ValueError, match="dt"):
        rbd.simulate(system, state, dt=-0.01, steps=10)
    with pytest.raises(ValueError, match="steps"):
        rbd.simulate(system, state, dt=0.01, steps=0)
    with pytest.raises(ValueError, match="delta"):
        rbd.AnitescuPotra(delta=-1.0)


def test_unsolved_steps_are_reported():
    """A NaN parameter under jit gives converged = False on the steps it reaches, not silence."""
    run = jax.jit(lambda mu: rbd.simulate(*rbd.scenes.falling_rod(mu=mu), dt=0.01, steps=50).stats.converged)
    assert not bool(jnp.any(run(jnp.nan)[-10:]))
