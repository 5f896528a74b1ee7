"""The fixed-capacity broad phase: the nearest pairs in fixed slots, the same physics, overflow reported.

Checked against the scenes without a broad phase (every pair in the step), which
are the reference: the four balls of P2 (dense step) and a pile of balls
(`ContactSweeps`), and against a brute-force nearest-pair search.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.scenes import P2_POSITIONS

jax.config.update("jax_enable_x64", True)

TOL = 1e-8  # per-step residual of the reference problems
SAME = 1e-9  # the broad phase must not change the trajectory


def _four_balls(broadphase):
    """P2 with every ball pair allowed to touch; the paper's scene has only the 3 neighbours."""
    b = rbd.SceneBuilder(mu=0.4, directions=8, broadphase=broadphase)
    b.add_static("table", rbd.Plane())
    for i, x in enumerate(P2_POSITIONS):
        b.add_body(f"ball{i}", rbd.Sphere(0.1), mass=1.0, position=x, velocity=(1.5, 0.1, 0.0) if i == 0 else None)
    return b.build()


def _pile(broadphase, n=12):
    """Two layers of balls on the table: each upper ball rests on lower ones (many ball-ball contacts)."""
    b = rbd.SceneBuilder(mu=0.3, broadphase=broadphase)
    b.add_static("table", rbd.Plane())
    rng = np.random.default_rng(0)
    for i in range(n):
        layer, k = divmod(i, n // 2)
        x = (0.21 * (k % 3) + 0.105 * layer + 0.002 * rng.standard_normal(), 0.21 * (k // 3) + 0.105 * layer)
        b.add_body(f"b{i}", rbd.Sphere(0.1), mass=1.0, position=(*x, 0.1 + 0.17 * layer + 1e-3))
    return b.build()


@jax.jit
def _run_p2(system, state):
    return rbd.simulate(system, state, dt=0.01, steps=100)


@jax.jit
def _run_pile(system, state):
    return rbd.simulate(system, state, dt=0.01, steps=60, step_solver=rbd.ContactSweeps())


@pytest.mark.slow
def test_all_pairs_four_balls_with_three_slots_is_the_paper_scene():
    """Six ball pairs, three slots: the broad phase keeps the pairs that touch, and P2 is unchanged."""
    reference = rbd.scenes.four_balls()
    scene = _four_balls(3)
    assert scene.system.mu.shape == (10,)  # 4 table + 6 ball-ball candidates
    assert scene.system.ncontacts(scene.state.q) == 7  # 4 table + 3 slots, as the paper's scene
    ref, traj = _run_p2(*reference), _run_p2(*scene)
    assert float(traj.stats.residual.max()) <= TOL
    assert int(traj.stats.overflow.max()) == 0
    np.testing.assert_allclose(traj.q, ref.q, atol=SAME)
    np.testing.assert_allclose(traj.v, ref.v, atol=SAME)
    # Which pairs hold the slots: at the start the three pairs in the line; after the throw, the
    # thrown ball and its neighbour replace the pair of the first and third balls.
    names = scene.bodies.pair_names
    slots = lambda q: sorted(names[i] for i in np.asarray(scene.bodies.contacts(q, scene.system.params).index)[4:])
    assert slots(traj.q[0]) == [("ball1", "ball2"), ("ball1", "ball3"), ("ball2", "ball3")]
    assert slots(traj.q[-1]) == [("ball0", "ball1"), ("ball1", "ball2"), ("ball2", "ball3")]


@pytest.mark.long  # the pile's gradient through the broad phase (slow set) runs the same scene
def test_pile_with_slots_equals_all_pairs_on_contact_sweeps():
    full, scene = _pile(None), _pile(24)
    nc_full, nc = full.system.ncontacts(full.state.q), scene.system.ncontacts(scene.state.q)
    assert (nc_full, nc) == (12 + 66, 12 + 24)
    ref, traj = _run_pile(*full), _run_pile(*scene)
    assert float(ref.stats.residual.max()) <= TOL and float(traj.stats.residual.max()) <= TOL
    assert bool(traj.stats.converged.all())
    assert int(traj.stats.overflow.max()) == 0
    np.testing.assert_allclose(traj.q, ref.q, atol=SAME)
    # The upper layer lands on the lower one: ball-ball contacts push in the pile's steps.
    assert int(np.sum(np.asarray(traj.impulses.normal[:, 12:]).max(0) > 1e-3)) >= 6


def test_selection_is_the_nearest_pairs_by_bounding_spheres():
    scene = _pile(10)
    q = scene.state.q
    c = scene.bodies.contacts(q, scene.system.params)
    x = np.asarray(scene.bodies.positions(q))
    names = scene.bodies.names
    dist = {(a, b): np.linalg.norm(x[names.index(a)] - x[names.index(b)]) for a, b in scene.bodies.pair_names[12:]}
    nearest = sorted(dist, key=dist.get)[:10]
    chosen = [scene.bodies.pair_names[i] for i in np.asarray(c.index[12:])]
    assert sorted(chosen) == sorted(nearest)
    # Each slot's bodies and gap are those of its pair.
    for a, b, i, gap in zip(np.asarray(c.body_a[12:]), np.asarray(c.body_b[12:]), np.asarray(c.index[12:]), c.gap[12:]):
        assert (names[a], names[b]) == scene.bodies.pair_names[i]
        np.testing.assert_allclose(gap, np.linalg.norm(x[a] - x[b]) - 0.2, atol=1e-12)


@pytest.mark.slow
def test_overflow_counts_the_near_pairs_left_without_a_slot():
    """With 4 slots and a 5 cm distance, every other pair of the pile within 5 cm is counted."""
    scene = _pile(rbd.BroadPhase(slots=4, distance=0.05))
    q, params = scene.state.q, scene.system.params
    x = np.asarray(scene.bodies.positions(q))
    names = scene.bodies.names
    near = sum(
        np.linalg.norm(x[names.index(a)] - x[names.index(b)]) - 0.2 <= 0.05 for a, b in scene.bodies.pair_names[12:]
    )
    assert near > 4
    assert int(scene.bodies.contacts(q, params).overflow) == near - 4
    assert int(scene.system.overflow(q)) == near - 4
    traj = rbd.simulate(*scene, dt=0.01, steps=1, step_solver=rbd.ContactSweeps())
    assert int(traj.stats.overflow[0]) == near - 4


def test_per_slot_coefficients_follow_the_pairs():
    """mu set per pair reaches the slot that holds the pair, wherever the broad phase puts it."""
    b = rbd.SceneBuilder(mu=0.1, broadphase=1)
    b.add_static("table", rbd.Plane())
    for i, x in enumerate([(0.0, 0.0, 0.1), (0.2, 0.0, 0.1), (1.0, 0.0, 0.1)]):
        b.add_body(f"b{i}", rbd.Sphere(0.1), mass=1.0, position=x)
    b.set_pair("b0", "b1", mu=0.7)
    b.set_pair("b1", "b2", mu=0.4, restitution=0.5)
    scene = b.build()
    mu, e = scene.system.coefficients(scene.state.q)
    np.testing.assert_allclose(mu, [0.1, 0.1, 0.1, 0.7])
    np.testing.assert_allclose(e, [0.0, 0.0, 0.0, 0.0])
    moved = scene.state.q.at[7].set(0.8)  # b1 next to b2 (x = 1.0): that pair takes the slot
    mu, e = scene.system.coefficients(moved)
    np.testing.assert_allclose(mu, [0.1, 0.1, 0.1, 0.4])
    np.testing.assert_allclose(e, [0.0, 0.0, 0.0, 0.5])


@pytest.mark.slow
def test_gradient_through_the_broad_phase_matches_all_pairs():
    """d(final x of the last ball in the line)/d mu of P2, with and without the broad phase."""

    def final_x(mu, broadphase):
        scene = _four_balls(broadphase)
        system = eqx.tree_at(lambda s: s.mu, scene.system, jnp.full(scene.system.mu.shape, mu))
        return rbd.simulate(system, scene.state, dt=0.01, steps=80).q[-1, 0]

    g_all = jax.jit(jax.grad(lambda mu: final_x(mu, None)))(0.4)
    g_bp = jax.jit(jax.grad(lambda mu: final_x(mu, 3)))(0.4)
    assert np.isfinite(float(g_bp))
    np.testing.assert_allclose(g_bp, g_all, rtol=1e-8)


def test_bad_broad_phase_input_names_the_argument():
    with pytest.raises(ValueError, match="slots must be an integer >= 1"):
        rbd.BroadPhase(slots=0)
    with pytest.raises(ValueError, match="distance must be >= 0"):
        rbd.BroadPhase(slots=3, distance=-1.0)
    with pytest.raises(TypeError, match="broadphase must be None, an integer or a jaxrbd.BroadPhase"):
        rbd.SceneBuilder(broadphase="nearest")
    b = rbd.SceneBuilder(broadphase=1)
    b.add_static("table", rbd.Plane())
    for i in range(3):
        b.add_body(f"b{i}", rbd.Sphere(0.1), mass=1.0, position=(0.3 * i, 0.0, 0.1))
    b.set_pair("b0", "b1", cone=rbd.EllipticCone())
    with pytest.raises(ValueError, match="set_pair\\(cone=...\\) is not supported with a broad phase"):
        b.build()
    with pytest.raises(ValueError, match="depend on q"):
        _pile(4).bodies.contact_bodies
