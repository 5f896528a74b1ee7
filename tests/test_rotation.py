"""Free rotation: the energy-momentum step of rigid bodies against the invariants and the exact solution.

A torque-free body keeps its world angular momentum and its kinetic energy, and
the body-frame angular velocity of a box spun near its intermediate axis is a
Jacobi elliptic function whose half period (the time between two flips) is
2 K(k) / lambda (Landau & Lifshitz, Mechanics §37).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special

import jaxrbd as rbd
from jaxrbd import _rotation as rot
from jaxrbd.bodies import _flight
from jaxrbd.bodies._flight import energy_momentum_rotation, free_rotation, midpoint_rate

BOX = rbd.Box((0.1, 0.05, 0.025))  # the 0.2 x 0.1 x 0.05 box: distinct principal moments
CAPSULE = rbd.Capsule(0.05, 0.1)  # radius 0.05, length 0.2


def free_body(shape, w0, *, mass=1.0):
    """One body in free flight: no gravity, a floor far below whose contacts the margin masks out."""
    builder = rbd.SceneBuilder(gravity=(0.0, 0.0, 0.0), margin=1.0)
    builder.add_static("floor", rbd.Plane((0.0, 0.0, 1.0), -100.0))
    builder.add_body("body", shape, mass=mass, position=(0.0, 0.0, 1.0), angular_velocity=w0)
    return builder.build()


STEPS = 1000  # one compiled rollout per shape kind; longer runs chain it
ENERGY_DRIFT_EPS = 10  # the energy's round-off drift a step, in eps (relative)


@jax.jit
def _rollout(system, state, dt):
    return rbd.simulate(system, state, dt=dt, steps=STEPS)


def rollout(scene, dt, chunks=1):
    """(t, q, v) of `chunks` x STEPS steps from the scene's state."""
    state, ts, qs, vs = scene.state, [], [], []
    for k in range(chunks):
        traj = _rollout(scene.system, state, dt)
        assert np.all(np.asarray(traj.stats.converged))
        start = 0 if k == 0 else 1
        ts.append(traj.t[start:]), qs.append(traj.q[start:]), vs.append(traj.v[start:])
        state = rbd.State(traj.t[-1], traj.q[-1], traj.v[-1])
    return rbd.State(*(jnp.concatenate(x) for x in (ts, qs, vs)))


def invariants(scene, traj):
    """(energy (T,), world angular momentum (T, 3)) along the trajectory."""
    energy = jax.vmap(scene.system.energy)(traj.q, traj.v)
    R = rot.to_matrix(traj.q[:, 3:7])
    inertia = R @ scene.system.params.inertia[0] @ jnp.swapaxes(R, -1, -2)
    return np.asarray(energy), np.asarray(jnp.einsum("tij,tj->ti", inertia, traj.v[:, 3:6]))


def body_rates(traj):
    """(T, 3) the angular velocity in the body frame."""
    R = rot.to_matrix(traj.q[:, 3:7])
    return np.asarray(jnp.einsum("tji,tj->ti", R, traj.v[:, 3:6]))


def flip_half_period(inertia, w):
    """2 K(k) / lambda: the time between two sign changes of the intermediate-axis rate (I1 < I2 < I3)."""
    I1, I2, I3 = inertia
    L2, E2 = np.sum((inertia * w) ** 2), np.sum(inertia * w * w)
    if L2 > E2 * I2:
        lam = np.sqrt((I3 - I2) * (L2 - E2 * I1) / (I1 * I2 * I3))
        k2 = (I2 - I1) * (E2 * I3 - L2) / ((I3 - I2) * (L2 - E2 * I1))
    else:
        lam = np.sqrt((I2 - I1) * (E2 * I3 - L2) / (I1 * I2 * I3))
        k2 = (I3 - I2) * (L2 - E2 * I1) / ((I2 - I1) * (E2 * I3 - L2))
    return 2.0 * scipy.special.ellipk(k2) / lam


@pytest.mark.parametrize(
    "shape, w0",
    [
        (BOX, (0.1, 10.0, 0.1)),
        (BOX, (3.0, -5.0, 8.0)),
        pytest.param(CAPSULE, (3.0, -5.0, 8.0), marks=pytest.mark.slow),
        pytest.param(CAPSULE, (0.1, 10.0, 0.1), marks=pytest.mark.slow),
        # Elongated bodies at large h |w|, where one midpoint solve fails and the substeps take over:
        (rbd.Box((0.5, 0.05, 0.01)), (159.5, 209.9, 143.2)),  # moments 1 : 96 : 97, h |w| = 3.0
        # moments 1700 : 1700 : 1, h |w| = 5.4
        pytest.param(rbd.Capsule(0.01, 0.5), (30.0, 200.0, 500.0), marks=pytest.mark.slow),
    ],
)
def test_torque_free_body_keeps_energy_and_world_momentum(shape, w0):
    """10 s at h = 0.01: no step gains energy (1e-12 relative), |L_world| and L_world are kept to round-off.

    The step keeps the energy exactly in exact arithmetic. In float64 each step
    moves it by a few eps (at most 35 eps relative in one step over these six
    runs), and that round-off need not average out: over the 1,000 steps the
    mean was -0.4 to +4.8 eps a step (the largest on the 1 : 96 : 97 box, whose
    steps take 8 substeps). So the 10 s drift is bounded by ENERGY_DRIFT_EPS eps
    a step, not by a constant.
    """
    scene = free_body(shape, w0)
    traj = rollout(scene, 0.01)
    energy, L = invariants(scene, traj)
    assert np.max(np.diff(energy)) <= 1e-12 * energy[0]
    assert abs(energy[-1] - energy[0]) <= ENERGY_DRIFT_EPS * np.finfo(float).eps * STEPS * energy[0]
    assert np.max(np.linalg.norm(L - L[0], axis=1)) <= 1e-10 * np.linalg.norm(L[0])
    assert np.max(np.abs(np.linalg.norm(traj.q[:, 3:7], axis=1) - 1.0)) <= 1e-12


def test_intermediate_axis_flip_period_matches_the_elliptic_integral():
    """The Dzhanibekov flip of the box at h = 0.001: every half period within 1e-4 of 2 K(k) / lambda."""
    w0 = np.array([0.3, 10.0, 0.0])
    scene = free_body(BOX, tuple(w0))
    traj = rollout(scene, 0.001, chunks=10)
    rate = body_rates(traj)[:, 1]  # the intermediate axis (y)
    t = np.asarray(traj.t)
    i = np.nonzero(rate[:-1] * rate[1:] < 0)[0]
    flips = t[i] + (t[i + 1] - t[i]) * rate[i] / (rate[i] - rate[i + 1])
    exact = flip_half_period(np.diag(np.asarray(scene.system.params.inertia[0])), w0)
    assert len(flips) >= 6  # 10 s hold six flips (exact half period 1.566 s)
    np.testing.assert_allclose(np.diff(flips), exact, rtol=1e-4)


def test_a_failed_midpoint_solve_falls_back_to_substeps():
    """The elongated box at h |w| = 3: the one-step solve fails, the 8 substeps solve it."""
    inertia = jnp.diag(jnp.array([1.0, 96.0, 97.0])) * 1e-3
    L = inertia @ jnp.array([159.5, 209.9, 143.2])
    assert not bool(midpoint_rate(inertia, L, 0.01)[1])
    quat, rate, solved = energy_momentum_rotation(jnp.array([[1.0, 0.0, 0.0, 0.0]]), inertia[None], L[None], 0.01)
    assert bool(solved[0])
    L_next = rot.to_matrix(quat[0]) @ (inertia @ rate[0])
    np.testing.assert_allclose(np.asarray(L_next), np.asarray(L), rtol=1e-13)
    np.testing.assert_allclose(float(rate[0] @ inertia @ rate[0]), float(L @ jnp.linalg.solve(inertia, L)), rtol=1e-13)


def test_a_batch_takes_the_substeps_only_when_one_of_its_lanes_needs_them():
    """Under `vmap` the substeps stay a branch (`every_lane`), not a select that runs them in every batched step,
    and each lane still gets its own answer: the elongated box of the test above needs them, a sphere does not."""
    inertias = jnp.stack([jnp.diag(jnp.array([1.0, 96.0, 97.0])) * 1e-3, 4e-3 * jnp.eye(3)])
    Ls = jnp.einsum("bij,bj->bi", inertias, jnp.array([[159.5, 209.9, 143.2], [3.0, -2.0, 1.0]]))
    quats = jnp.array([[1.0, 0.0, 0.0, 0.0], [0.6, 0.0, 0.8, 0.0]])
    one = lambda quat, inertia, L: energy_momentum_rotation(quat[None], inertia[None], L[None], 0.01)
    assert "cond[" in str(jax.make_jaxpr(jax.vmap(one))(quats, inertias, Ls))
    for batch in (slice(None), slice(1, 2)):  # with the box (the substeps run) and the sphere alone (they do not)
        together = jax.jit(jax.vmap(one))(quats[batch], inertias[batch], Ls[batch])
        for lane, i in enumerate(range(2)[batch]):
            alone = jax.jit(one)(quats[i], inertias[i], Ls[i])
            for x, y in zip(together, alone, strict=True):
                np.testing.assert_allclose(np.asarray(x[lane]), np.asarray(y), rtol=1e-14, atol=1e-15)
    assert bool(jnp.all(together[2]))


def test_spin_about_a_principal_axis_is_steady():
    """A spin about a principal axis is a relative equilibrium: w stays (0, 0, 7) exactly, for any h."""
    scene = free_body(BOX, (0.0, 0.0, 7.0))
    traj = rollout(scene, 0.05)
    np.testing.assert_allclose(np.asarray(traj.v[:, 3:6]), np.broadcast_to([0.0, 0.0, 7.0], (STEPS + 1, 3)), atol=1e-12)
    angle = jnp.arctan2(traj.q[-1, 6], traj.q[-1, 3]) * 2.0  # about z: the Cayley angle 2 atan(h w / 2) per step
    exact = STEPS * 2 * np.arctan(0.05 * 7.0 / 2)
    np.testing.assert_allclose(np.mod(angle, 2 * np.pi), np.mod(exact, 2 * np.pi), atol=1e-9)


def _final_orientation(w0, inertia):
    scene = free_body(BOX, (0.0, 0.0, 0.0))
    system = eqx.tree_at(lambda s: s.params.inertia, scene.system, inertia[None])
    state = rbd.State(scene.state.t, scene.state.q, scene.state.v.at[3:6].set(w0))
    return rbd.simulate(system, state, dt=0.01, steps=20).q[-1, 3:7]


def test_the_free_rotations_reverse_pass_matches_automatic_differentiation():
    """`free_rotation`'s hand-built reverse pass (the one-step derivative from the saved midpoint rate, or autodiff
    of the substeps) against `jax.vjp` of the same step on arrays: random bodies with full inertia tensors, spins,
    torques, unnormalized quaternions; then with an elongated fast body that takes the substeps."""
    rng = np.random.default_rng(7)
    nb = 6
    A = rng.normal(size=(nb, 3, 3))
    inertia = jnp.asarray(np.einsum("bij,bkj->bik", A, A) + 0.5 * np.eye(3))
    quat, w, p = (jnp.asarray(rng.normal(size=(nb, n))) for n in (4, 3, 3))
    w = 5.0 * w
    h = jnp.asarray(0.01)
    by_autodiff = lambda *a: _flight._rotation_arrays(*a)[0]
    cotangents = tuple(jnp.asarray(rng.normal(size=(nb, n))) for n in (3, 4, 3))

    @jax.jit
    def both(*args):  # (one step taken, values, expected values, cotangents, expected cotangents)
        values, pullback = jax.vjp(lambda *a: free_rotation(*a)[:3], *args)
        expected_values, expected_pullback = jax.vjp(by_autodiff, *args)
        one_step = _flight._rotation_arrays(*args)[1][2]
        return one_step, values, expected_values, pullback(cotangents), expected_pullback(cotangents)

    for case in ("one step", "substeps"):
        if case == "substeps":  # the elongated box of `test_a_failed_midpoint_solve_falls_back_to_substeps`
            inertia = inertia.at[0].set(jnp.diag(jnp.array([1.0, 96.0, 97.0])) * 1e-3)
            w = w.at[0].set(jnp.array([159.5, 209.9, 143.2]))
            quat, p = quat.at[0].set(jnp.array([1.0, 0.0, 0.0, 0.0])), p.at[0].set(0.0)
        one_step, values, expected_values, bars, expected_bars = both(quat, w, p, inertia, h)
        assert bool(one_step) == (case == "one step")
        for x, y in zip(values, expected_values, strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-14, atol=1e-14)
        for x, y in zip(bars, expected_bars, strict=True):
            np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-9, atol=1e-11 * float(jnp.max(jnp.abs(y))))


@pytest.mark.slow
def test_rotation_gradients_match_central_differences():
    """d(final quaternion)/d(w0, inertia) through 20 energy-momentum steps against central differences (float64)."""
    w0 = jnp.array([0.3, 4.0, 1.0])
    inertia = jnp.diag(jnp.array([0.2, 0.5, 0.7]))
    f = jax.jit(lambda w0, inertia: _final_orientation(w0, inertia) @ jnp.array([0.3, -0.2, 0.5, 0.7]))
    g_w, g_I = jax.grad(f, argnums=(0, 1))(w0, inertia)
    eps = 1e-6
    fd_w = [(f(w0.at[i].add(eps), inertia) - f(w0.at[i].add(-eps), inertia)) / (2 * eps) for i in range(3)]
    fd_I = [(f(w0, inertia.at[i, i].add(eps)) - f(w0, inertia.at[i, i].add(-eps))) / (2 * eps) for i in range(3)]
    np.testing.assert_allclose(np.asarray(g_w), np.asarray(fd_w), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.diag(np.asarray(g_I)), np.asarray(fd_I), rtol=1e-6, atol=1e-9)
    assert np.all(np.isfinite(np.asarray(jax.grad(f, argnums=(0, 1))(jnp.zeros(3), inertia)[0])))


@pytest.mark.parametrize(
    "scheme, law",
    [(rbd.AnitescuPotra(delta=1e-3), None), pytest.param(rbd.StewartTrinkle(), rbd.Poisson(), marks=pytest.mark.slow)],
)
def test_tumbling_bodies_landing_never_gain_energy(scheme, law):
    """A spinning box and capsule thrown onto a table: contact in the metric M(q0) and the turn about w+ add no energy."""
    builder = rbd.SceneBuilder(mu=0.5, restitution=0.5 if law is not None else 0.0)
    builder.add_static("floor", rbd.Plane((0.0, 0.0, 1.0), 0.0))
    spin = dict(angular_velocity=(3.0, -5.0, 8.0))
    builder.add_body(
        "box",
        rbd.Box((0.2, 0.1, 0.05)),
        mass=1.0,
        position=(0.0, 0.0, 0.4),
        orientation=(0.9, 0.3, 0.2, 0.1),
        velocity=(1, 0, 0),
        **spin,
    )
    builder.add_body(
        "capsule", rbd.Capsule(0.05, 0.1), mass=0.5, position=(1.0, 0.0, 0.4), orientation=(0.9, 0.1, 0.4, 0.1), **spin
    )
    builder.exclude("box", "capsule")
    scene = builder.build()
    traj = rbd.simulate(*scene, dt=0.005, steps=600, scheme=scheme, impact=law)
    energy = np.asarray(jax.vmap(scene.system.energy)(traj.q, traj.v))
    assert np.all(np.asarray(traj.stats.converged))
    assert np.max(np.diff(energy)) <= 1e-12 * energy[0]
    assert energy[-1] < 0.2 * energy[0]  # they landed and came to rest (friction and inelastic impacts)


def test_the_rotation_helpers_take_numpy_and_concrete_or_traced_jax_arrays_alike():
    """The helpers compute with numpy for concrete inputs (a scene builds without compiling) and with jax.numpy
    for traced ones; a concrete JAX array closed over by a jitted function (a scene's state) gives the same."""
    q = np.array([0.9, 0.3, -0.2, 0.25]) / np.linalg.norm([0.9, 0.3, -0.2, 0.25])
    p = np.array([0.1, -0.4, 0.3, 0.2]) / np.linalg.norm([0.1, -0.4, 0.3, 0.2])
    scene = rbd.scenes.cube_toss()
    on_host = (rot.to_matrix(q), rot.multiply(q, p), rot.normalize(2 * q), rot.rotation_z(0.3))
    on_host += (scene.bodies.poses(np.asarray(scene.state.q))[1],)
    closed = jnp.asarray(q), jnp.asarray(p), scene.state.q

    @jax.jit
    def inside(x):  # the closed-over arrays are concrete inside the trace, x is traced
        q, p, state_q = closed
        rotations = (rot.to_matrix(q) + 0 * x, rot.multiply(q, p), rot.normalize(2 * q), rot.rotation_z(0.3 + x))
        return rotations + (scene.bodies.poses(state_q)[1],)

    for got, want in zip(inside(0.0), on_host, strict=True):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-15)
