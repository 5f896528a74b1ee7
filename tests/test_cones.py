"""Friction cones: P3 spinning sphere, elliptic exactness, anisotropy, gradients, bad input.

Exact solutions: the spinning sphere's omega_z falls with slope -5 g e_r mu / (2 r^2)
(reference problem P3); a block sliding with an elliptic cone decelerates at mu g
opposite its velocity for every direction; a block sliding at v0 stops after
v0^2 / (2 mu g).
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.cones import EllipticCone, MixedCone, PolyhedralCone, SoftFingerCone, soft_finger_directions

G = 9.81
RESIDUAL_TOL = 1e-8
EXACT_RTOL = 1e-8  # the P3 slope
ELLIPTIC_RTOL = 1e-9  # friction magnitude and anisotropy
ZERO_TOL = 1e-12  # the velocity components that must stay 0
FD_RTOL = 1e-4
P3_SLOPE = 1.962  # 5 g e_r mu / 2 with e_r = 0.4, mu = 0.2, r = 1


@functools.partial(jax.jit, static_argnames=("friction", "dt", "steps"))
def _spin(mu, e_r, *, friction, dt, steps, omega=1.962):
    scene = rbd.scenes.spinning_sphere(mu, e_r, cone=friction, omega=omega)
    return rbd.simulate(*scene, dt=dt, steps=steps)


@pytest.mark.parametrize("dt", [pytest.param(0.07, marks=pytest.mark.slow), 0.01])
@pytest.mark.parametrize("friction", ["exact", "eq5"])
def test_p3_spinning_sphere_exact(friction, dt):
    """002 §4.2: omega_z falls with slope -1.962 and stops in the step containing t = 1.0."""
    steps = int(round(1.2 / dt)) + 1
    traj = _spin(0.2, 0.4, friction=friction, dt=dt, steps=steps)
    w = np.asarray(traj.v[:, 5])
    t = np.asarray(traj.t)
    assert np.all(np.asarray(traj.stats.converged))
    assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL
    stop = int(np.searchsorted(t, 1.0))  # the step [t[stop - 1], t[stop]] contains t = 1.0
    np.testing.assert_allclose(w[:stop], P3_SLOPE * (1.0 - t[:stop]), rtol=EXACT_RTOL, atol=1e-14)
    assert np.max(np.abs(w[stop:])) <= ZERO_TOL
    assert float(jnp.max(jnp.abs(traj.v[:, :5]))) <= ZERO_TOL
    np.testing.assert_allclose(traj.impulses.normal[:, 0], G * dt, rtol=1e-12)
    np.testing.assert_allclose(traj.impulses.moment[: stop - 1, 0], -0.4 * 0.2 * G * dt, rtol=EXACT_RTOL)


@pytest.mark.slow
def test_p3_six_directions_slower():
    """002 eq. (6): no direction is pure torsion, so the moment is sin(elevation) of the exact one."""
    traj = _spin(0.2, 0.4, friction="eq6", dt=0.07, steps=18)
    w = np.asarray(traj.v[:, 5])
    slope = (w[0] - w[1]) / 0.07
    ratio = 0.3504 / 0.4  # the normalized torsion of the eq. (6) directions
    print(f"\neq. (6): slope {slope:.8f} = {slope / P3_SLOPE:.6f} of the exact; stops in step {np.argmax(w <= 0)}")
    print(f"residual tangential velocity max {float(jnp.max(jnp.abs(traj.v[:, :5]))):.2e}")
    np.testing.assert_allclose(slope, ratio * P3_SLOPE, rtol=EXACT_RTOL)
    assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL
    assert w[-1] == pytest.approx(0.0, abs=ZERO_TOL)


@pytest.mark.slow
def test_mixed_cone_decouples_torsion():
    """002 example (c): with |c_r| <= e_r mu c_n separate from the ellipse, sliding does not weaken the moment."""
    scene = rbd.scenes.rolling_ball(v0=1.0, mu=0.3, radius=0.1, cone=MixedCone(1.0, 1.0, 0.05))
    system, state = scene
    state = rbd.State(state.t, state.q, state.v.at[5].set(20.0))  # sliding and spinning
    dt = 0.001
    mixed = rbd.simulate(system, state, dt=dt, steps=2)
    coupled = rbd.simulate(system, state, dt=dt, steps=2, cone=SoftFingerCone(1.0, 1.0, 0.05))
    inertia = 0.4 * 0.1**2
    dw_mixed = float(mixed.v[1, 5] - mixed.v[0, 5]) / dt
    dw_coupled = float(coupled.v[1, 5] - coupled.v[0, 5]) / dt
    np.testing.assert_allclose(dw_mixed, -0.05 * 0.3 * G / inertia, rtol=ELLIPTIC_RTOL)
    np.testing.assert_allclose(mixed.impulses.friction[0, 0, 0], -0.3 * G * dt, rtol=ELLIPTIC_RTOL)
    assert abs(dw_coupled) < 0.9 * abs(dw_mixed)  # the ellipsoid shares mu c_n between slip and spin
    assert float(jnp.max(mixed.stats.residual)) <= RESIDUAL_TOL
    assert float(jnp.max(coupled.stats.residual)) <= RESIDUAL_TOL


@eqx.filter_jit
def _slide(headings, friction):
    return jax.vmap(lambda p: _slide_one(p, friction))(headings)


def _slide_one(heading, friction):
    scene = rbd.scenes.block_on_incline(angle=0.0, mu=0.3, speed=1.0, heading=heading, cone=friction)
    traj = rbd.simulate(*scene, dt=0.01, steps=2)
    return traj.v[:, :3], traj.stats.residual


HEADINGS = jnp.linspace(0.0, 2 * math.pi, 25)[:-1] + 0.01


@pytest.mark.slow
def test_elliptic_cone_is_exact_in_every_direction():
    """A cube sliding at heading phi feels friction mu N, exactly opposite its velocity, for every phi."""
    v, residual = _slide(HEADINGS, EllipticCone())
    force = -(v[:, 1] - v[:, 0]) / 0.01  # per unit mass
    direction = v[:, 0] / jnp.linalg.norm(v[:, 0], axis=1, keepdims=True)
    np.testing.assert_allclose(jnp.linalg.norm(force, axis=1), 0.3 * G, rtol=ELLIPTIC_RTOL)
    np.testing.assert_allclose(force / (0.3 * G), direction, atol=ELLIPTIC_RTOL)
    assert float(jnp.max(residual)) <= RESIDUAL_TOL


@pytest.mark.slow
def test_polyhedral_cone_bias_in_direction():
    """PolyhedralCone(8): the friction of a sliding cube is the octagon vertex nearest -v.

    Its magnitude is mu N except where -v bisects two directions (cos(pi/8) mu N
    there, the edge); the part opposite the velocity is mu N cos(phi - nearest
    direction), and the rest pushes sideways.
    """
    v, residual = _slide(HEADINGS, PolyhedralCone(8))
    force = -(v[:, 1] - v[:, 0]) / (0.01 * 0.3 * G)
    direction = v[:, 0] / jnp.linalg.norm(v[:, 0], axis=1, keepdims=True)
    offset = (np.asarray(HEADINGS) + math.pi / 8) % (math.pi / 4) - math.pi / 8  # to the nearest direction
    along = np.asarray(jnp.sum(force * direction, axis=1))
    print("\nphi, |F|/(mu N), F.(-v)/(mu N):")
    for p, f, a in zip(np.asarray(HEADINGS), np.asarray(jnp.linalg.norm(force, axis=1)), along):
        print(f"  {p:.3f}  {f:.9f}  {a:.9f}")
    np.testing.assert_allclose(jnp.linalg.norm(force, axis=1), 1.0, rtol=ELLIPTIC_RTOL)
    np.testing.assert_allclose(along, np.cos(offset), rtol=ELLIPTIC_RTOL)
    assert float(jnp.max(residual)) <= RESIDUAL_TOL


@pytest.mark.parametrize("axis", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_skate_anisotropy(axis):
    """The skate decelerates at mu_along g along its blade (x) and mu_across g across it (y)."""
    velocity = [0.0, 0.0, 0.0]
    velocity[axis] = 1.0
    scene = rbd.scenes.skate(mu_along=0.02, mu_across=0.6, velocity=tuple(velocity))
    traj = rbd.simulate(*scene, dt=0.01, steps=10)
    decel = -(traj.v[1:, axis] - traj.v[:-1, axis]) / 0.01
    expected = (0.02, 0.6)[axis] * G
    np.testing.assert_allclose(decel, expected, rtol=ELLIPTIC_RTOL)
    assert float(jnp.max(jnp.abs(traj.v[:, 1 - axis]))) <= ZERO_TOL
    assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL


@pytest.mark.slow
def test_p3_gradient_matches_exact_derivative():
    """omega_z(0.5) = 1.962 - (5 g e_r mu / 2) 0.5: d/dmu = -(5 g e_r / 2) 0.5, d/de_r = -(5 g mu / 2) 0.5."""
    f = lambda mu, e_r: _spin(mu, e_r, friction="exact", dt=0.05, steps=10).v[-1, 5]
    w, (d_mu, d_er) = jax.value_and_grad(f, argnums=(0, 1))(0.2, 0.4)
    np.testing.assert_allclose(w, 1.962 - 2.5 * G * 0.4 * 0.2 * 0.5, rtol=EXACT_RTOL)
    np.testing.assert_allclose(d_mu, -2.5 * G * 0.4 * 0.5, rtol=EXACT_RTOL)
    np.testing.assert_allclose(d_er, -2.5 * G * 0.2 * 0.5, rtol=EXACT_RTOL)


@pytest.mark.parametrize(
    "case", [pytest.param("apex", marks=pytest.mark.slow), pytest.param("zero_slip", marks=pytest.mark.long)]
)
def test_smooth_cone_gradients_finite_at_degenerate_points(case):
    """At the cone apex (a contact with c_n = 0) and at zero slip (sticking), gradients are finite."""

    def final(mu, e_r, lift):
        scene = rbd.scenes.spinning_sphere(mu, e_r, omega=0.0)
        system, state = scene
        state = rbd.State(state.t, state.q.at[2].add(lift), state.v)
        return rbd.simulate(system, state, dt=0.01, steps=3).q[-1, :3]

    lift = 1e-3 if case == "apex" else 0.0  # apex: touching only in the last step, c_n = 0 before
    jac = jax.jacrev(final, argnums=(0, 1, 2))(0.2, 0.4, lift)
    for j in jac:
        assert np.all(np.isfinite(np.asarray(j)))
    if case == "zero_slip":  # at rest: nothing moves whatever mu and e_r are
        np.testing.assert_allclose(jac[0], 0.0, atol=1e-14)
        np.testing.assert_allclose(jac[1], 0.0, atol=1e-14)


def _stop_distance(mu, v0, dt, steps):
    scene = rbd.scenes.block_on_incline(angle=0.0, mu=mu, speed=v0, cone=EllipticCone())
    return rbd.simulate(*scene, dt=dt, steps=steps).q[-1, 0]


_stop_grad = jax.jit(jax.value_and_grad(_stop_distance, argnums=(0, 1)), static_argnums=(2, 3))


@pytest.mark.slow
def test_stopping_distance_gradients():
    """d/dmu and d/dv0 of the stopping distance: exact for the scheme, central differences, and O(h) to v0^2/(2 mu g).

    With constant deceleration a = mu g the step gives v_k = v0 - k a h until it
    sticks in step K = ceil(v0 / (a h)), so the distance is
    d_h = h sum_{k<K} (v0 - k a h): d d_h/d v0 = (K - 1) h and
    d d_h/d mu = -g h^2 K (K - 1) / 2, which tend to v0 / (mu g) and
    -v0^2 / (2 mu^2 g) as h -> 0.
    """
    mu, v0 = 0.5, 1.0
    a = mu * G
    errors = []
    for dt, steps in ((0.004, 60), (0.001, 220)):
        d, (d_mu, d_v0) = _stop_grad(mu, v0, dt, steps)
        K = math.ceil(v0 / (a * dt))
        np.testing.assert_allclose(d, dt * sum(v0 - k * a * dt for k in range(1, K)), rtol=ELLIPTIC_RTOL)
        np.testing.assert_allclose(d_v0, (K - 1) * dt, rtol=ELLIPTIC_RTOL)
        np.testing.assert_allclose(d_mu, -G * dt**2 * K * (K - 1) / 2, rtol=ELLIPTIC_RTOL)
        exact = (v0 / a, -(v0**2) / (2 * mu * a))
        errors.append(max(abs(d_v0 / exact[0] - 1), abs(d_mu / exact[1] - 1)))
        assert errors[-1] <= 2 * a * dt / v0  # O(h)
    print(f"\nrelative gradient errors against v0^2/(2 mu g): {errors}")
    eps = 1e-6
    d_mu_fd = (_stop_grad(mu + eps, v0, 0.001, 220)[0] - _stop_grad(mu - eps, v0, 0.001, 220)[0]) / (2 * eps)
    d_v0_fd = (_stop_grad(mu, v0 + eps, 0.001, 220)[0] - _stop_grad(mu, v0 - eps, 0.001, 220)[0]) / (2 * eps)
    np.testing.assert_allclose(d_mu, d_mu_fd, rtol=FD_RTOL)
    np.testing.assert_allclose(d_v0, d_v0_fd, rtol=FD_RTOL)


# -------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: EllipticCone(e_t=0.0), "e_t must be > 0"),
        (lambda: EllipticCone(e_o=-1.0), "e_o must be > 0"),
        (lambda: SoftFingerCone(1.0, 1.0, 0.0), "e_r must be > 0"),
        (lambda: MixedCone(1.0, 1.0, -0.1), "e_r must be > 0"),
        (lambda: PolyhedralCone(2), "k must be an integer >= 3"),
        (lambda: PolyhedralCone(directions=[[1.0, 0.0], [-1.0, 0.0]]), ">= 3 directions"),
        (lambda: PolyhedralCone(directions=[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]), "do not positively span"),
        (lambda: PolyhedralCone(directions=[[1.0], [0.5]]), "do not positively span"),
        (lambda: SoftFingerCone(directions=soft_finger_directions("eq6")[:3]), "do not positively span"),
        (lambda: SoftFingerCone(directions=[[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]), "shape \\(k, 3\\)"),
        (lambda: soft_finger_directions("eq7"), "'eq5' or 'eq6'"),
    ],
)
def test_bad_cone_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_cone_for_scene():
    with pytest.raises(ValueError, match="mu must be >= 0"):
        rbd.scenes.spinning_sphere(mu=-0.1)
    with pytest.raises(ValueError, match="2 or 3 friction components"):
        rbd.scenes.rolling_ball(cone=rbd.cones.PlanarCone())
    system, state = rbd.scenes.falling_rod()
    with pytest.raises(ValueError, match="needs 3 friction components"):
        rbd.simulate(system, state, dt=0.01, steps=1, cone=SoftFingerCone())
    with pytest.raises(TypeError, match="cone must be a jaxrbd.cones cone"):
        rbd.simulate(system, state, dt=0.01, steps=1, cone="elliptic")


# -------------------------------------------------------------------------------------------
# P4: the sphere in the seam (002 §4.3)


@pytest.fixture(scope="module")
def seam():
    from jaxrbd.reference import SEAM_RUNS, seam_run

    return {label: seam_run(iterations, dt) for label, iterations, dt in SEAM_RUNS} | {
        "nonlinear, h = 0.0012": seam_run(2, 0.0012)
    }


@pytest.mark.slow
def test_p4_sphere_in_seam(seam):
    """Nonlinear at h = 0.1: on the surfaces, contact lost for good at ~3.6 s; linearized at h = 0.0012 agrees."""
    from jaxrbd.reference import contact_lost, loaded

    for label, (traj, gaps) in seam.items():
        assert np.all(np.asarray(traj.stats.converged)), label
        assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL, label
        assert float(jnp.min(gaps)) >= -1e-8, label  # the exact gaps are convex: no penetration
    traj, gaps = seam["nonlinear, h = 0.1"]
    on = loaded(traj)
    # The nonlinear scheme keeps the sphere on both surfaces while they push.
    assert float(np.max(np.where(on, np.asarray(gaps[1:]), 0.0))) <= 1e-8
    assert abs(contact_lost(traj) - 3.6) <= 0.1 + 1e-9
    for c in range(2):  # each contact breaks once, for good
        assert not np.any(on[np.argmin(on[:, c]) :, c]), f"contact {c} comes back"
    # The linearized scheme at h = 0.1 drifts off the curved surfaces while they still push.
    lin, lin_gaps = seam["linearized, h = 0.1"]
    drift = float(np.max(np.where(loaded(lin), np.asarray(lin_gaps[1:]), 0.0)))
    print(f"\nlinearized h = 0.1: gap under load up to {drift:.4f}; contact lost {contact_lost(lin):.2f}")
    assert drift > 1e-3
    # At h = 0.0012 the linearized and nonlinear schemes agree (both converge to the same motion).
    fine, _ = seam["linearized, h = 0.0012"]
    nonlinear_fine, _ = seam["nonlinear, h = 0.0012"]
    for t in (1.0, 2.0, 3.0):
        i = int(round(t / 0.0012))
        np.testing.assert_allclose(fine.v[i], nonlinear_fine.v[i], rtol=0.01, atol=0.002)
    assert abs(contact_lost(fine) - contact_lost(nonlinear_fine)) <= 0.01
    assert abs(contact_lost(fine) - 3.6) <= 0.15


@pytest.mark.slow
def test_p4_velocity_level_scheme_penetrates_and_bounces_across_the_seam():
    """002's linearized "Stewart method" at h = 0.1: growing penetration, contacts that break and come back.

    The position-level constraint f(q) + h n^T v+ >= 0 cannot penetrate convex gaps (see
    above); the velocity-level linearization n^T v+ >= 0 on the contacts whose predicted gap
    is below delta (Anitescu-Potra) can: a contact that drifted off the curved surface
    by more than delta is out of the step, the driving force pushes the sphere into it
    for a whole step, and nothing pushes it back out. Run with the paper's 20 directions.
    """
    from jaxrbd.reference import seam_velocity_level_run

    traj, gaps = seam_velocity_level_run(time=4.5)
    assert bool(traj.stats.converged.all())
    assert float(traj.stats.residual.max()) <= RESIDUAL_TOL
    gaps = np.asarray(gaps)
    pushing = np.asarray(traj.impulses.normal) > 1e-9
    # Penetration grows with speed: deeper in the second half of the run than in the first.
    first, second = -gaps[1:16].min(), -gaps[16:32].min()
    lost = 0.1 * (1 + np.flatnonzero(pushing.any(1))[-1])  # end of the last step with a pushing contact
    print(
        f"\nvelocity-level h = 0.1: penetration up to {first:.4f} (t <= 1.5), {second:.4f} (t <= 3.1); lost {lost:.1f}"
    )
    assert 0.01 < first < second
    # A contact breaks and comes back: the sphere bounces across the gap.
    for c in range(2):
        on = pushing[:, c]
        if np.any(on[np.argmin(on) :]):
            break
    else:
        raise AssertionError("no contact comes back after breaking")
    assert 2.9 <= lost <= 3.7  # the paper: about 3.6


@pytest.mark.slow
def test_smooth_cones_with_other_schemes_and_impact_laws():
    """Anitescu-Potra with the soft-finger cone keeps the exact P3 slope; Poisson and Newton work with EllipticCone."""
    traj = rbd.simulate(*rbd.scenes.spinning_sphere(), dt=0.07, steps=5, scheme=rbd.AnitescuPotra(delta=1e-3))
    np.testing.assert_allclose(np.diff(np.asarray(traj.v[:, 5])) / 0.07, -P3_SLOPE, rtol=EXACT_RTOL)
    assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL
    scene = rbd.scenes.bouncing_ball(0.5, height=0.2, mu=0.3, velocity=(0.5, 0.0, 0.0))
    for law in (rbd.Newton(), rbd.Poisson()):
        traj = rbd.simulate(*scene, dt=1e-3, steps=220, cone=EllipticCone(), impact=law)
        vz = np.asarray(traj.v[:, 2])
        hit = int(np.argmax(vz > 0))  # the first step that leaves the table
        impact_speed = math.sqrt(2 * G * 0.2)
        np.testing.assert_allclose(vz[hit], 0.5 * impact_speed, rtol=0.02)  # e = 0.5, impact within a step
        assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL
        energy = jax.vmap(scene.system.energy)(traj.q, traj.v)
        assert float(energy[hit] - energy[hit - 1]) <= 1e-9  # the impact dissipates


def _three_spinning_balls(per_pair):
    b = rbd.SceneBuilder(dim=3, mu=0.2, cone=SoftFingerCone(1.0, 1.0, 0.4), collide_bodies=False)
    b.add_static("table", rbd.Plane())
    for name, x, v in (("a", 0.0, (0, 0, 0)), ("b", 3.0, (1.0, 0, 0)), ("c", 6.0, (0, 1.0, 0))):
        b.add_body(name, rbd.Sphere(1.0), mass=1.0, position=(x, 0, 1.0), velocity=v, angular_velocity=(0, 0, 1.962))
    if per_pair:
        b.set_pair("table", "b", cone=EllipticCone())
        b.set_pair("table", "c", cone=PolyhedralCone(8))
    return b.build()


@pytest.mark.slow
def test_cone_per_contact():
    """set_pair(friction=...): each contact follows its own cone, exactly as in a scene of that cone alone."""
    scene = _three_spinning_balls(per_pair=True)
    assert isinstance(scene.system.friction, rbd.cones.PerContactCone)
    traj = rbd.simulate(*scene, dt=0.07, steps=5)
    assert float(jnp.max(traj.stats.residual)) <= RESIDUAL_TOL
    plain = _three_spinning_balls(per_pair=False)
    for ball, cone in enumerate((SoftFingerCone(1.0, 1.0, 0.4), EllipticCone(), PolyhedralCone(8))):
        alone = rbd.simulate(*plain, dt=0.07, steps=5, cone=cone)
        np.testing.assert_allclose(traj.v[:, 6 * ball : 6 * ball + 6], alone.v[:, 6 * ball : 6 * ball + 6], atol=1e-12)
    # a: soft finger, spin falls at 1.962 rad/s^2; b, c: no torsional friction, they slide, then roll at 5/7
    np.testing.assert_allclose(traj.v[-1, 5], 1.962 * (1 - 5 * 0.07), rtol=EXACT_RTOL)
    np.testing.assert_allclose(traj.v[-1, [11, 17]], 1.962, rtol=EXACT_RTOL)
    np.testing.assert_allclose(traj.v[-1, [6, 13]], 5 / 7, rtol=EXACT_RTOL)
    with pytest.raises(ValueError, match="index entries must be in"):
        rbd.cones.PerContactCone([EllipticCone()], [0, 1])


@pytest.mark.slow
def test_stopping_distance_gradients_match_exact_values():
    """At h = 1e-5 (about 20,000 steps) the gradients match d(v0^2 / (2 mu g)) to 1e-4 relative.

    The scheme's own error in them is 1/K with K = v0 / (mu g h) steps to the stop,
    so 1e-4 needs K > 1e4; see `test_stopping_distance_gradients` for the exact
    discrete values and the O(h) convergence.
    """
    mu, v0, dt = 0.5, 1.0, 1e-5
    steps = math.ceil(v0 / (mu * G * dt)) + 10
    _, (d_mu, d_v0) = _stop_grad(mu, v0, dt, steps)
    np.testing.assert_allclose(d_v0, v0 / (mu * G), rtol=FD_RTOL)
    np.testing.assert_allclose(d_mu, -(v0**2) / (2 * mu**2 * G), rtol=FD_RTOL)
