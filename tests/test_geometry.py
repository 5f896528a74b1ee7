"""Closed-form contact geometry, frames and Jacobian rows, checked against exact formulas."""

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import _rotation as rot
from jaxrbd import geometry

EXACT = 1e-12


def _pose(shape, p=(0.0, 0.0, 0.0), R=None):
    arrays = {k: jnp.asarray(v, float) for k, v in shape.arrays().items()}
    return geometry.world_pose(arrays, jnp.asarray(p, float), jnp.eye(3) if R is None else R)


def _collide(a, b, dim=3):
    fn, _ = geometry.collider(a["kind"], b["kind"])
    a, b = {k: v for k, v in a.items() if k != "kind"}, {k: v for k, v in b.items() if k != "kind"}
    return [np.asarray(x) for x in fn(a, b, dim)]


def _shape(shape, p=(0.0, 0.0, 0.0), R=None):
    return {**_pose(shape, p, R), "kind": shape.kind}


def _box_distance(c, h):
    """Signed distance from point c to the axis-aligned box of half extents h (exact)."""
    d = np.abs(c) - h
    return np.linalg.norm(np.maximum(d, 0.0)) + min(d.max(), 0.0)


def test_sphere_sphere_and_plane_sphere():
    gap, n, x = _collide(_shape(rbd.Sphere(0.1)), _shape(rbd.Sphere(0.2), (0.3, 0.4, 0.0)))
    np.testing.assert_allclose(gap, [0.5 - 0.3], atol=EXACT)
    np.testing.assert_allclose(n, [[0.6, 0.8, 0.0]], atol=EXACT)
    np.testing.assert_allclose(x, [[0.6 * 0.2, 0.8 * 0.2, 0.0]], atol=EXACT)  # midway between the surfaces
    plane = _shape(rbd.Plane((0.0, 0.0, 2.0), 1.0))  # normal normalized; surface z = 1
    gap, n, x = _collide(plane, _shape(rbd.Sphere(0.25), (3.0, 1.0, 2.0)))
    np.testing.assert_allclose(gap, [0.75], atol=EXACT)
    np.testing.assert_allclose(x, [[3.0, 1.0, 1.375]], atol=EXACT)


def test_plane_box_takes_the_lowest_corners():
    R = rot.to_matrix(rot.from_axis_angle(jnp.array([0.0, 1.0, 0.0]), 0.3))
    h = np.array([0.3, 0.2, 0.1])
    box = _shape(rbd.Box(h), (0.0, 0.0, 1.0), R)
    gap, n, _ = _collide(_shape(rbd.Plane()), box)
    corners = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)]) * h
    heights = np.sort(1.0 + (corners @ np.asarray(R).T)[:, 2])[:4]
    np.testing.assert_allclose(np.sort(gap), heights, atol=EXACT)
    # Planar scenes: the rectangle's two lowest corners.
    gap2, _, _ = _collide(_shape(rbd.Plane((0.0, 1.0, 0.0))), _shape(rbd.Box(h), (0.0, 1.0, 0.0)), dim=2)
    np.testing.assert_allclose(gap2, [0.8, 0.8], atol=EXACT)


@pytest.mark.parametrize(
    "centre",
    [(0.5, 0.0, 0.0), (0.4, 0.3, 0.0), (0.4, 0.3, 0.25), (0.05, -0.02, 0.01), (-0.1, 0.12, -0.02)],
    ids=["face", "edge", "corner", "inside", "inside-near-y-face"],
)
def test_sphere_box_matches_the_exact_distance(centre):
    h = np.array([0.2, 0.15, 0.1])
    angle = 0.4
    R = rot.to_matrix(rot.from_axis_angle(jnp.array([0.0, 0.0, 1.0]), angle))
    p_box = np.array([1.0, -1.0, 0.5])
    c_world = p_box + np.asarray(R) @ np.asarray(centre)
    gap, n, _ = _collide(_shape(rbd.Sphere(0.05), c_world), _shape(rbd.Box(h), p_box, R))
    np.testing.assert_allclose(gap, [_box_distance(np.asarray(centre), h) - 0.05], atol=EXACT)
    np.testing.assert_allclose(np.linalg.norm(n), 1.0, atol=EXACT)
    # The normal points from the sphere into the box: moving the sphere against it closes the gap.
    step = 1e-7
    moved = _collide(_shape(rbd.Sphere(0.05), c_world - step * n[0]), _shape(rbd.Box(h), p_box, R))[0]
    np.testing.assert_allclose((moved - gap) / step, [1.0], rtol=1e-6)


def test_capsules():
    """Capsule-capsule has two slots: the closest points, and the other end of the axes' overlap."""
    along_z = _shape(rbd.Capsule(0.05, 0.5))
    along_x = rbd.Capsule(0.1, 0.3, orientation=rot.from_axis_angle(jnp.array([0.0, 1.0, 0.0]), math.pi / 2))
    gap, n, _ = _collide(along_z, _shape(along_x, (0.0, 0.7, 0.2)))  # crossing axes, 0.7 apart: one point, twice
    np.testing.assert_allclose(gap, [0.7 - 0.15] * 2, atol=EXACT)
    np.testing.assert_allclose(n, [[0.0, 1.0, 0.0]] * 2, atol=EXACT)
    # parallel, overlapping span: both ends of the overlap at the same distance
    gap, _, x = _collide(along_z, _shape(rbd.Capsule(0.05, 0.5), (0.3, 0.0, 0.2)))
    np.testing.assert_allclose(gap, [0.2, 0.2], atol=EXACT)
    np.testing.assert_allclose(sorted(x[:, 2]), [-0.3, 0.5], atol=EXACT)
    gap, _, _ = _collide(along_z, _shape(rbd.Capsule(0.05, 0.5), (0.0, 0.0, 1.5)))  # end to end
    np.testing.assert_allclose(gap, [0.4, 0.4], atol=EXACT)
    gap, _, _ = _collide(_shape(rbd.Sphere(0.1)), _shape(along_x, (0.5, 0.0, 0.3)))  # sphere beyond the end
    np.testing.assert_allclose(gap, [math.hypot(0.2, 0.3) - 0.2], atol=EXACT)
    plane = _shape(rbd.Plane())
    gap, _, _ = _collide(plane, _shape(along_x, (0.0, 0.0, 0.5)))
    np.testing.assert_allclose(gap, [0.4, 0.4], atol=EXACT)


def test_pair_without_a_closed_form_is_named():
    """Every pair of moving kinds has a closed form; two static planes (never paired by the builder) do not."""
    with pytest.raises(ValueError, match="plane-plane"):
        geometry.collider("plane", "plane")
    for a, b in itertools.combinations_with_replacement(("sphere", "capsule", "box", "mesh"), 2):
        geometry.collider(a, b)


def test_contact_frame_is_orthonormal_smooth_and_finite_at_the_pole():
    angles = np.linspace(0.0, math.pi - 1e-3, 200)
    n = jnp.stack([jnp.sin(angles) * 0.6, jnp.sin(angles) * 0.8, jnp.cos(angles)], -1)
    t, o = geometry.contact_frame(n)
    for a, b in ((t, t), (o, o), (n, n)):
        np.testing.assert_allclose(jnp.sum(a * b, -1), 1.0, atol=EXACT)
    np.testing.assert_allclose(jnp.sum(t * o, -1), 0.0, atol=EXACT)
    np.testing.assert_allclose(jnp.cross(t, o), n, atol=EXACT)
    assert float(jnp.abs(jnp.diff(t, axis=0)).max()) < 0.05  # no jumps along the path
    pole = jnp.array([0.0, 0.0, -1.0])
    t, o = geometry.contact_frame(pole)
    np.testing.assert_allclose(jnp.cross(t, o), pole, atol=EXACT)
    grad = jax.jacfwd(lambda n: jnp.concatenate(geometry.contact_frame(n)))(pole)
    assert bool(jnp.all(jnp.isfinite(grad)))


@pytest.fixture(scope="module")
def mixed_scene():
    """Every supported kind pair, in a generic configuration (no symmetric placement)."""
    b = rbd.SceneBuilder(mu=0.3)
    b.add_static("floor", rbd.Plane((0.1, 0.0, 1.0), -0.05))
    b.add_static("post", rbd.Sphere(0.3, position=(2.0, 2.0, 0.2)))
    tilt = rot.from_axis_angle(jnp.array([0.6, 0.8, 0.0]), 0.7)
    b.add_body("ball", rbd.Sphere(0.1), mass=1.0, position=(0.1, 0.2, 0.3), angular_velocity=(1.0, -2.0, 0.5))
    b.add_body(
        "rod",
        rbd.Capsule(0.05, 0.3),
        mass=2.0,
        position=(0.6, -0.1, 0.4),
        orientation=tilt,
        velocity=(0.2, 0.1, -0.3),
        angular_velocity=(0.3, 0.2, 1.0),
    )
    b.add_body(
        "crate",
        rbd.Box((0.2, 0.1, 0.15)),
        mass=3.0,
        position=(-0.4, 0.5, 0.5),
        orientation=tilt,
        velocity=(0.0, -0.5, 0.1),
        angular_velocity=(-1.0, 0.4, 0.2),
    )
    b.exclude("rod", "crate")
    return b.build()


def test_jacobian_rows_agree_with_the_gap_derivatives(mixed_scene):
    """J_n equals n = G^T grad f by autodiff; J_t and J_o are the tangential velocities of the point."""
    system, state = mixed_scene
    c = jax.jit(mixed_scene.bodies.contacts)(state.q, system.params)
    J_n = c.J_n
    c = jax.tree_util.tree_map(np.asarray, c)
    # The closed-form rows against autodiff of the gaps: grad f(q) G(q).
    autodiff = jax.jit(lambda s, q: jax.jacfwd(s.gap)(q) @ s.G(q))(system, state.q)
    np.testing.assert_allclose(autodiff, J_n, atol=1e-12)
    # Rotate the scene rigidly about n at the contact point: only the torsional row sees it.
    nb = mixed_scene.bodies.nbodies
    for j in range(c.gap.shape[0]):
        a, b = (int(k[j]) for k in mixed_scene.bodies.contact_bodies)
        body = b if b < nb else a
        sign = 1.0 if body == b else -1.0
        p = np.asarray(mixed_scene.bodies.positions(state.q))[body]
        v = np.zeros(6 * nb)
        v[6 * body + 3 : 6 * body + 6] = c.normal[j]
        v[6 * body : 6 * body + 3] = np.cross(c.normal[j], p - c.point[j])  # the point x stays fixed
        np.testing.assert_allclose(c.J_r[j] @ v, sign, atol=1e-12)
        np.testing.assert_allclose([c.J_n[j] @ v, c.J_t[j] @ v, c.J_o[j] @ v], 0.0, atol=1e-12)


def test_gyroscopic_force_matches_the_autodiff_coriolis_term(mixed_scene):
    system, state = mixed_scene
    hamel = dataclasses.replace(system, coriolis_force=None)
    coriolis = jax.jit(lambda s, q, v: s.coriolis(q, v))
    np.testing.assert_allclose(coriolis(system, state.q, state.v), coriolis(hamel, state.q, state.v), atol=1e-12)


def test_planar_capsule_is_the_falling_rod_plus_the_rolling_term():
    """The planar capsule has the rod's gaps and normals (003 §4.1); its tangent rows add the rolling term.

    The rod model takes the tangential velocity of the end's centre; the capsule's
    is that of its own witness point, the capsule's lowest point a radius below it
    (`jaxrbd.bodies._model.contacts`), so omega enters too.
    """
    rod_system, rod_state = rbd.scenes.falling_rod()
    p = rod_system.params
    b = rbd.SceneBuilder(dim=2)
    b.add_static("table", rbd.Plane((0.0, 1.0, 0.0)))
    across = rot.from_axis_angle(jnp.array([0.0, 1.0, 0.0]), math.pi / 2)  # capsule axis along body x
    x, y, theta = (float(v) for v in rod_state.q)
    b.add_body(
        "rod",
        rbd.Capsule(p["radius"], 0.5 * p["length"], orientation=across),
        mass=p["mass"],
        inertia=(1.0, 1.0, p["inertia"]),
        position=(x, y),
        angle=theta,
    )
    scene = b.build()
    q = rod_state.q
    np.testing.assert_allclose(scene.system.gap(q), rod_system.gap(q), atol=EXACT)
    np.testing.assert_allclose(scene.system.normals(q), rod_system.normals(q), atol=EXACT)
    np.testing.assert_allclose(scene.system.M(q), rod_system.M(q), atol=EXACT)
    T_capsule = scene.system.tangents(q, scene.system.params)[:, 0]
    T_rod = rod_system.tangents(q, p)[:, 0]
    lever = p["radius"] * jnp.ones_like(rod_system.gap(q))
    np.testing.assert_allclose(T_capsule - T_rod, jnp.stack([0 * lever, 0 * lever, lever], -1), atol=EXACT)
