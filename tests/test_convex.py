"""Convex meshes (`jaxrbd.ConvexMesh`, `jaxrbd.geometry._convex`) against plane, sphere, capsule, box
and each other.

Gaps are checked against a brute-force reference that shares no code with the
library: the signed distance of the origin to the convex hull of the vertex
differences A - B (qhull), outside as the least point-triangle distance over the
hull's triangles (closed form, numpy), inside as minus the distance to the
nearest facet plane. A mesh made of a box's 8 corners must also give the Box
shape's contacts.
"""

import functools
import importlib.util
import math
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial import ConvexHull

import jaxrbd as rbd
from jaxrbd import _rotation as rot
from jaxrbd import geometry

POSES = 400
SEPARATED = 1e-9  # distance of separated shapes against the reference
DEPTH = 1e-6  # penetration depth against the reference
EXACT = 1e-12  # mass properties and the box-as-mesh agreement
FD = 1e-6  # relative agreement of gradients with central differences (float64)
RESIDUAL = 1e-8
CREEP = 1e-9
H = 0.01
BENCHMARKS = pathlib.Path(__file__).parent.parent / "benchmarks"

_SIGNS = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
TETRA = np.array([[0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.0, 0.2, 0.0], [0.0, 0.0, 0.2]])


def _random_mesh(seed, n=14):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    return 0.15 * x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.7, 1.3, (1, 3))


BLOB = _random_mesh(3)
BLOB2 = _random_mesh(5, 10)


# --- Brute-force reference (numpy and scipy only) -------------------------------------------------


def _segment_distance(x, a, b):
    """(t,) distances of the point x to the segments a b (t, 3)."""
    e = b - a
    s = np.clip(np.sum((x - a) * e, -1) / np.maximum(np.sum(e * e, -1), 1e-300), 0.0, 1.0)
    return np.linalg.norm(x - (a + s[:, None] * e), axis=-1)


def _triangle_distance(x, T):
    """(t,) exact distances of the point x to the triangles T (t, 3, 3)."""
    a, b, c = T[:, 0], T[:, 1], T[:, 2]
    n = np.cross(b - a, c - a)
    n = n / np.linalg.norm(n, axis=-1, keepdims=True)
    h = np.sum((x - a) * n, -1)
    y = x - h[:, None] * n
    inside = np.ones(len(T), bool)
    for p, q in ((a, b), (b, c), (c, a)):
        inside &= np.sum(np.cross(q - p, y - p) * n, -1) >= 0
    edges = np.min([_segment_distance(x, p, q) for p, q in ((a, b), (b, c), (c, a))], 0)
    return np.where(inside, np.abs(h), edges)


def reference_signed_distance(x, points):
    """Signed distance of the point x to the convex hull of points (inside: minus the depth)."""
    hull = ConvexHull(points)
    depth = -(hull.equations[:, :3] @ x + hull.equations[:, 3])
    if np.all(depth > 0):
        return -float(depth.min())
    return float(_triangle_distance(x, points[hull.simplices]).min())


def reference_gap(points_a, points_b):
    """Signed distance of two convex hulls: of the origin to the hull of B - A."""
    return reference_signed_distance(np.zeros(3), (points_b[None] - points_a[:, None]).reshape(-1, 3))


# --- Compiled batches, shared by the tests ---------------------------------------------------------


def _leaves(arrays):
    """Shape leaves as jax arrays: the floats in float64, a mesh's index tables as they are."""
    return {
        k: jnp.asarray(v) if jnp.issubdtype(jnp.asarray(v).dtype, jnp.integer) else jnp.asarray(v, float)
        for k, v in arrays.items()
    }


def _arrays(shape):
    return _leaves(shape.arrays())


def _posed(arrays, p, R):
    return geometry.world_pose(arrays, p, R)


@functools.partial(jax.jit, static_argnames="fn")
def _pair(fn, a, b):
    """fn(a, b, 3) compiled: one program per pair function and shapes, not one per operation."""
    return fn(a, b, 3)


@functools.partial(jax.jit, static_argnames="fn")
def _batch(fn, a, b, pa, Ra, pb, Rb):
    return jax.vmap(lambda *x: fn(_posed(a, x[0], x[1]), _posed(b, x[2], x[3]), 3))(pa, Ra, pb, Rb)


def _rotations(rng, n):
    q = rng.normal(size=(n, 4))
    return np.asarray(jax.vmap(rot.to_matrix)(jnp.asarray(q / np.linalg.norm(q, axis=1, keepdims=True))))


@pytest.fixture(scope="module")
def poses():
    rng = np.random.default_rng(17)
    return dict(
        pa=np.zeros((POSES, 3)),
        Ra=_rotations(rng, POSES),
        pb=rng.uniform(-1.0, 1.0, (POSES, 3)) * rng.uniform(0.1, 0.45, (POSES, 1)),
        Rb=_rotations(rng, POSES),
    )


def _world_points(points, p, R):
    return p + points @ R.T


def _check_against(gap, reference, label):
    least = np.asarray(gap).min(1)
    separated = reference > 0
    assert separated.sum() > POSES // 8 and (~separated).sum() > POSES // 8, separated.sum()
    err_sep = np.abs(least - reference)[separated].max()
    err_depth = np.abs(least - reference)[~separated].max()
    print(f"\n{label}: separated {separated.sum()}, max error {err_sep:.2e}; overlapping, max error {err_depth:.2e}")
    assert err_sep <= SEPARATED
    assert err_depth <= DEPTH


# --- The hull and its mass properties ---------------------------------------------------------------


def test_hull_faces_edges_and_mass_properties():
    """A box's corners: 6 quadrilateral faces, 12 edges, 3 directions, and the Box shape's inertia; a
    tetrahedron: volume abc/6, centroid at the vertex mean, the inertia of the closed form."""
    h = np.array([0.1, 0.2, 0.3])
    data = geometry.hull(_SIGNS * h)
    assert data["faces"].shape == (6, 4, 3) and data["edges"].shape == (12, 2, 3)
    assert data["directions"].shape == (3, 3)
    np.testing.assert_allclose(data["volume"], 8 * np.prod(h), rtol=EXACT)
    mesh = rbd.ConvexMesh(_SIGNS * h)
    np.testing.assert_allclose(mesh.inertia(2.0), rbd.Box(h).inertia(2.0), atol=EXACT)
    tet = geometry.hull(TETRA)
    np.testing.assert_allclose(tet["volume"], 0.2**3 / 6, rtol=EXACT)
    np.testing.assert_allclose(tet["centroid"], [0.05] * 3, atol=EXACT)
    # Closed form for the corner tetrahedron of side a: about the centroid, I_xx = 3 m a^2 / 80 ... computed
    # from the second moments: E[x^2] = a^2 / 10, E[x y] = a^2 / 20, mean a / 4.
    a = 0.2
    cov = np.full((3, 3), a**2 / 20) + np.eye(3) * a**2 / 20 - (a / 4) ** 2
    np.testing.assert_allclose(tet["inertia"], np.trace(cov) * np.eye(3) - cov, atol=EXACT)
    # Every face polygon is counter-clockwise about its outward normal, and every vertex is on or under it.
    for d in (data, tet, geometry.hull(BLOB)):
        P, n, off = d["faces"], d["normals"], d["offsets"]
        area = np.cross(P[:, 1] - P[:, 0], P[:, 2] - P[:, 0])
        assert np.all(np.sum(area * n, -1) > 0)
        assert np.all(d["vertices"] @ n.T - off <= 1e-12)


@pytest.mark.long  # a padded mesh's contacts are checked in the slow set
def test_builder_pads_meshes_of_different_sizes():
    """Meshes of 4, 10 and 14 vertices in one scene (padded to common counts): each pair's gaps equal the
    pair function's on the unpadded arrays, with and without a broad phase (1 slot: the nearest pair)."""
    meshes = {"tet": rbd.ConvexMesh(TETRA, position=-np.full(3, 0.05)), "a": rbd.ConvexMesh(BLOB2)}
    meshes["b"] = rbd.ConvexMesh(BLOB)
    places = {"tet": (0.0, 0.0, 1.0), "a": (0.0, 0.05, 1.25), "b": (0.6, 0.0, 1.1)}
    for broadphase in (None, 1):
        b = rbd.SceneBuilder(broadphase=broadphase)
        b.add_static("floor", rbd.Plane())
        for name, mesh in meshes.items():
            b.add_body(name, mesh, mass=3.0, position=places[name])
        scene = b.build()
        c = jax.jit(scene.bodies.contacts)(scene.state.q, scene.system.params)
        names = scene.bodies.names
        for i, j in ((0, 1), (0, 2), (1, 2)):
            on_pair = (np.asarray(c.body_a) == i) & (np.asarray(c.body_b) == j)
            A = _posed(_arrays(meshes[names[i]]), jnp.asarray(places[names[i]]), jnp.eye(3))
            B = _posed(_arrays(meshes[names[j]]), jnp.asarray(places[names[j]]), jnp.eye(3))
            if broadphase is None or (i, j) == (0, 1):
                np.testing.assert_allclose(np.asarray(c.gap)[on_pair], _pair(geometry.mesh_mesh, A, B)[0], atol=EXACT)
            else:
                assert not on_pair.any()


# --- Distances against the brute force ---------------------------------------------------------------


def test_box_as_a_mesh_matches_the_box(poses):
    """The 8 corners of a box as a mesh against a box: the box-box pair's least gaps."""
    P = poses
    h = np.array([0.1, 0.2, 0.15])
    mesh, box = _arrays(rbd.ConvexMesh(_SIGNS * h)), _arrays(rbd.Box(h))
    other = _arrays(rbd.Box(np.array([0.2, 0.05, 0.1])))
    args = (P["pa"], P["Ra"], P["pb"], P["Rb"])
    gm, nm, _ = _batch(geometry.box_mesh, other, mesh, *args)
    gb, _, _ = _batch(geometry.box_box, other, box, *args)
    np.testing.assert_allclose(np.min(gm, 1), np.min(gb, 1), atol=DEPTH)
    sep = np.min(gb, 1) > 0
    np.testing.assert_allclose(np.min(gm, 1)[sep], np.min(gb, 1)[sep], atol=SEPARATED)
    np.testing.assert_allclose(np.linalg.norm(nm, axis=-1), 1.0, atol=1e-12)


def _edge_on_edge(yaw, shift):
    """Two 0.2 m cubes turned 45 degrees about x, one on the other edge on edge, 1 mm into it, the upper one
    turned by `yaw` about z and shifted by `shift` along the lower one's top edge."""
    c, s = math.cos(math.pi / 4), math.sin(math.pi / 4)
    roll = np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])
    turn = np.array([[math.cos(yaw), -math.sin(yaw), 0.0], [math.sin(yaw), math.cos(yaw), 0.0], [0.0, 0.0, 1.0]])
    top = 0.1 * math.sqrt(2.0)
    return jnp.zeros(3), jnp.asarray(roll), jnp.array([shift, 0.0, 2 * top - 1e-3]), jnp.asarray(turn @ roll)


@pytest.mark.parametrize("yaw, shift", [(0.02, 0.03), (0.1, 0.01)])
def test_an_edge_on_an_edge_gets_both_ends_of_the_touching_segment_as_the_boxes_do(yaw, shift):
    """Nearly parallel edges touch along a segment: besides the closest points, each edge's mirror point in the
    other shape's shadow (the segment's other end). Box-mesh and mesh-mesh keep the same 3 edge contacts as
    box-box on the same cubes (gaps, normals, points); with the closest points alone the upper cube pivots."""
    h = np.full(3, 0.1)
    box, mesh = _arrays(rbd.Box(h)), _arrays(rbd.ConvexMesh(_SIGNS * h))
    pa, Ra, pb, Rb = _edge_on_edge(yaw, shift)
    ref = [np.asarray(x)[:3] for x in geometry.box_box(_posed(box, pa, Ra), _posed(box, pb, Rb), 3)]
    assert ref[0][0] == pytest.approx(-1e-3, abs=1e-5)  # the closest points: the edge-edge penetration depth
    assert np.max(np.abs(ref[2][1:, 0] - ref[2][0, 0])) > 0.005, ref[2]  # a point at the segment's other end
    for fn, a in ((geometry.box_mesh, box), (geometry.mesh_mesh, mesh)):
        got = fn(_posed(a, pa, Ra), _posed(mesh, pb, Rb), 3)
        for want, have in zip(ref, got, strict=True):
            np.testing.assert_allclose(np.asarray(have)[:3], want, atol=EXACT)


def test_mesh_mesh_gap_matches_brute_force(poses):
    P = poses
    a, b = _arrays(rbd.ConvexMesh(BLOB)), _arrays(rbd.ConvexMesh(BLOB2))
    gap, n, _ = _batch(geometry.mesh_mesh, a, b, P["pa"], P["Ra"], P["pb"], P["Rb"])
    np.testing.assert_allclose(np.linalg.norm(n, axis=-1), 1.0, atol=1e-12)
    Va, Vb = geometry.hull(BLOB)["vertices"], geometry.hull(BLOB2)["vertices"]
    ref = np.array(
        [
            reference_gap(_world_points(Va, P["pa"][i], P["Ra"][i]), _world_points(Vb, P["pb"][i], P["Rb"][i]))
            for i in range(POSES)
        ]
    )
    _check_against(gap, ref, "mesh-mesh")


@pytest.mark.slow
def test_box_mesh_gap_matches_brute_force(poses):
    P = poses
    h = np.array([0.2, 0.05, 0.1])
    a, b = _arrays(rbd.Box(h)), _arrays(rbd.ConvexMesh(BLOB))
    gap, _, _ = _batch(geometry.box_mesh, a, b, P["pa"], P["Ra"], P["pb"], P["Rb"])
    Vb = geometry.hull(BLOB)["vertices"]
    ref = np.array(
        [
            reference_gap(_world_points(_SIGNS * h, P["pa"][i], P["Ra"][i]), _world_points(Vb, P["pb"][i], P["Rb"][i]))
            for i in range(POSES)
        ]
    )
    _check_against(gap, ref, "box-mesh")
    # A sphere against the box's corners as a mesh: the sphere-box pair's gap.
    mesh, box, sphere = _arrays(rbd.ConvexMesh(_SIGNS * h)), _arrays(rbd.Box(h)), _arrays(rbd.Sphere(0.1))
    gm, _, _ = _batch(geometry.sphere_mesh, sphere, mesh, P["pa"], P["Ra"], P["pb"], P["Rb"])
    gb, _, _ = _batch(geometry.sphere_box, sphere, box, P["pa"], P["Ra"], P["pb"], P["Rb"])
    np.testing.assert_allclose(gm, gb, atol=EXACT)


def test_sphere_and_capsule_mesh_gaps_match_brute_force(poses):
    P = poses
    r, hl = 0.08, 0.12
    m = _arrays(rbd.ConvexMesh(BLOB))
    Vb = geometry.hull(BLOB)["vertices"]
    gs, ns, _ = _batch(geometry.sphere_mesh, _arrays(rbd.Sphere(r)), m, P["pa"], P["Ra"], P["pb"], P["Rb"])
    gc, _, _ = _batch(geometry.capsule_mesh, _arrays(rbd.Capsule(r, hl)), m, P["pa"], P["Ra"], P["pb"], P["Rb"])
    np.testing.assert_allclose(np.linalg.norm(ns, axis=-1), 1.0, atol=1e-12)
    ref_s, ref_c = [], []
    for i in range(POSES):
        W = _world_points(Vb, P["pb"][i], P["Rb"][i])
        ref_s.append(reference_signed_distance(P["pa"][i], W) - r)
        ends = P["pa"][i] + np.array([[-1.0], [1.0]]) * hl * P["Ra"][i][:, 2]
        ref_c.append(reference_gap(ends, W) - r)
    _check_against(gs, np.array(ref_s), "sphere-mesh")
    _check_against(gc, np.array(ref_c), "capsule-mesh")


@pytest.mark.slow
def test_a_hull_pressed_into_a_box_keeps_its_deepest_vertex():
    """A flat hull of 15 points pressed 2 mm into a wide box's top in 400 orientations: the least gap is -2 mm
    (the penetration depth) and its point lies over the lowest vertex, also where the vertex is not on the
    incident face (the hull's face most anti-parallel to the top), as in 15 of these orientations."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(15, 3))
    V = 0.1 * x / np.linalg.norm(x, axis=1, keepdims=True) * np.array([1.6, 1.0, 0.5])
    H = geometry.hull(V)
    Rb = _rotations(np.random.default_rng(2), POSES)
    Vw = np.einsum("nij,vj->nvi", Rb, H["vertices"])
    low = np.argmin(Vw[..., 2], 1)
    lowest = Vw[np.arange(POSES), low]
    incident = np.argmin(np.einsum("nij,fj->nfi", Rb, H["normals"])[..., 2], 1)
    on_face = [np.any(np.all(np.isclose(H["faces"][f], H["vertices"][v]), -1)) for f, v in zip(incident, low)]
    assert POSES - sum(on_face) == 15
    depth, top = 0.002, 0.1
    pb = np.array([0.0, 0.0, top - depth]) - lowest
    a, b = _arrays(rbd.Box((0.5, 0.5, top))), _arrays(rbd.ConvexMesh(V))
    gap, _, point = _batch(geometry.box_mesh, a, b, np.zeros((POSES, 3)), np.broadcast_to(np.eye(3), Rb.shape), pb, Rb)
    k = np.argmin(np.asarray(gap), 1)
    np.testing.assert_allclose(np.asarray(gap).min(1), -depth, atol=EXACT)
    np.testing.assert_allclose(np.asarray(point)[np.arange(POSES), k, :2], (lowest + pb)[:, :2], atol=EXACT)


@pytest.mark.slow
def test_a_padded_mesh_gets_the_same_contacts(poses):
    """A hull of 7 vertices padded to a hull of 13's counts (a scene or a batch holding both), against a plane
    and a box in 400 poses: the same contacts as unpadded. The padding repeats the first vertex, and the
    4 lowest had taken it several times (a dropped hull then sank 16 mm into the floor)."""
    small, large = _random_mesh(30, 7), _random_mesh(43, 13)
    arrays = [{k: np.asarray(v) for k, v in rbd.ConvexMesh(m).arrays().items()} for m in (small, large)]
    padded = geometry.pad_meshes(arrays)[0]
    assert padded["vertices"].shape[0] > arrays[0]["vertices"].shape[0]
    assert padded["face_index"].shape[0] > arrays[0]["face_index"].shape[0]
    plain, padded = _leaves(arrays[0]), _leaves(padded)
    P = dict(poses, pb=poses["pb"] + [0.0, 0.0, 0.1])
    plane, box = _arrays(rbd.Plane()), _arrays(rbd.Box((0.3, 0.3, 0.15)))
    for fn, other in ((geometry.plane_mesh, plane), (geometry.box_mesh, box)):
        ours = [_batch(fn, other, mesh, P["pa"], P["Ra"], P["pb"], P["Rb"]) for mesh in (plain, padded)]
        for x, y in zip(*ours):
            np.testing.assert_allclose(np.asarray(y), np.asarray(x), atol=EXACT)


def test_plane_mesh_takes_the_lowest_vertices():
    m = _arrays(rbd.ConvexMesh(BLOB))
    R = np.asarray(rot.to_matrix(jnp.array([0.9, 0.2, -0.3, 0.1]) / np.linalg.norm([0.9, 0.2, -0.3, 0.1])))
    p = np.array([0.1, -0.2, 0.05])
    gap, n, x = geometry.plane_mesh(_arrays(rbd.Plane()), _posed(m, jnp.asarray(p), jnp.asarray(R)), 3)
    z = np.sort(_world_points(geometry.hull(BLOB)["vertices"], p, R)[:, 2])[:8]
    np.testing.assert_allclose(np.sort(gap), z, atol=EXACT)
    np.testing.assert_allclose(n, [[0.0, 0.0, 1.0]] * 8, atol=0)

    # A hexagonal prism standing on its 6-vertex face: all 6 (the widest 4, then the other 2) and the 2 lowest
    # above them (on the top face).
    angle = np.arange(6) * np.pi / 3
    ring = np.stack([0.1 * np.cos(angle), 0.1 * np.sin(angle), np.zeros(6)], 1)
    prism = np.concatenate([ring, ring + [0.0, 0.0, 0.2]])
    gap, _, x = geometry.plane_mesh(
        _arrays(rbd.Plane()), _posed(_arrays(rbd.ConvexMesh(prism)), jnp.zeros(3), jnp.eye(3)), 3
    )
    np.testing.assert_allclose(np.sort(gap), [0.0] * 6 + [0.2] * 2, atol=EXACT)
    base = np.asarray(x)[np.asarray(gap) < 0.1]
    np.testing.assert_allclose(np.sort(base, axis=0), np.sort(ring, axis=0), atol=EXACT)


# --- Gradients -------------------------------------------------------------------------------------------


def _gap_of(fn, a, b, R):
    return jax.jit(
        jax.value_and_grad(lambda p: jnp.min(fn(_posed(a, jnp.zeros(3), jnp.eye(3)), _posed(b, p, R), 3)[0]))
    )


def _check_central_differences(f, p):
    _, g = f(p)
    eps = 1e-6
    fd = np.array([(f(p + eps * e)[0] - f(p - eps * e)[0]) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=FD, atol=FD)


def test_sphere_mesh_gradient_matches_central_differences_and_is_finite_at_touching():
    """d(gap)/d(mesh position) with a sphere over a face of the mesh (smooth) against central differences;
    finite with the sphere's centre on a vertex (zero distance) and just touching it."""
    m = _arrays(rbd.ConvexMesh(BLOB))
    f = _gap_of(geometry.sphere_mesh, _arrays(rbd.Sphere(0.05)), m, jnp.eye(3))
    data = geometry.hull(BLOB)
    face = data["faces"][0].mean(0) + 0.3 * data["normals"][0]
    _check_central_differences(f, -jnp.asarray(face))  # the mesh at -face: the sphere's centre over the face
    v = data["vertices"][0]
    for c in (v, v * (1 + 0.05 / np.linalg.norm(v))):
        value, g = f(-jnp.asarray(c))
        assert np.all(np.isfinite(np.asarray(g))) and np.isfinite(float(value))


@pytest.mark.slow
def test_box_mesh_gradient_matches_central_differences_and_is_finite_at_parallel_faces():
    """d(least gap)/d(position) of a mesh above a box face (a vertex-face distance) against central
    differences; a cube given as a mesh resting flat on the box (parallel faces, touching): finite."""
    m = _arrays(rbd.ConvexMesh(BLOB))
    box = _arrays(rbd.Box(np.array([0.3, 0.3, 0.1])))
    R = jnp.asarray(_rotations(np.random.default_rng(1), 1)[0])
    _check_central_differences(_gap_of(geometry.box_mesh, box, m, R), jnp.array([0.02, -0.01, 0.4]))
    cube = _arrays(rbd.ConvexMesh(_SIGNS * 0.1))
    value, g = _gap_of(geometry.box_mesh, box, cube, jnp.eye(3))(jnp.array([0.0, 0.0, 0.2]))
    assert np.all(np.isfinite(np.asarray(g))) and float(value) == pytest.approx(0.0, abs=EXACT)


def _with_vertices(arrays, V):
    return {**arrays, "vertices": V}


@functools.partial(jax.jit, static_argnames=("fn", "flip"))
def _vertex_gap(fn, flip, a, b, Va, pb, Rb):
    """The least gap of the pair (a with vertices Va at the origin, b at (pb, Rb)), in the pair function's
    order (b first where flip), and its gradient in Va."""

    def least(V):
        pair = (_posed(_with_vertices(a, V), jnp.zeros(3), jnp.eye(3)), _posed(b, pb, Rb))
        return jnp.min(fn(*(pair[::-1] if flip else pair), 3)[0])

    return jax.value_and_grad(least)(Va)


@pytest.mark.parametrize(
    "case",
    [
        "mesh pressed into a mesh",  # the default set's: face planes, polygons and edge axes of both
        *(
            pytest.param(case, marks=pytest.mark.slow)
            for case in ("sphere over a face", "box pressed into the mesh", "mesh beside a mesh")
        ),
    ],
)
def test_gradients_in_the_vertices_match_central_differences(case):
    """d(least gap)/d(vertices) of a mesh against central differences in every coordinate of every vertex: the
    face planes, polygons and edges follow the vertices (a sphere over a face: that face's plane; a box pressed
    in: the penetration depth along a face normal or an edge axis; meshes apart: the exact distance; pressed
    together: the separating-axis depth)."""
    data = geometry.hull(BLOB)
    R = jnp.asarray(_rotations(np.random.default_rng(4), 1)[0])
    other, p = {
        "sphere over a face": (rbd.Sphere(0.05), data["faces"][0].mean(0) + 0.1 * data["normals"][0]),
        "box pressed into the mesh": (rbd.Box((0.1, 0.08, 0.06)), np.array([0.05, 0.15, 0.1])),
        "mesh beside a mesh": (rbd.ConvexMesh(BLOB2), np.array([0.2, -0.1, 0.1])),
        "mesh pressed into a mesh": (rbd.ConvexMesh(BLOB2), np.array([0.15, -0.1, 0.1])),
    }[case]
    a, b = _arrays(rbd.ConvexMesh(BLOB)), _arrays(other)
    fn = {"sphere": geometry.sphere_mesh, "box": geometry.box_mesh, "mesh": geometry.mesh_mesh}[other.kind]
    flip = other.kind in ("sphere", "box")  # the pair functions take the kinds in their canonical order
    gap = lambda V: _vertex_gap(fn, flip, a, b, V, jnp.asarray(p), R)

    V = jnp.asarray(data["vertices"])
    value, g = gap(V)
    assert (float(value) > 0) == case.startswith(("sphere", "mesh beside")), float(value)
    eps = 1e-6
    fd = np.zeros(V.shape)
    for i in range(V.shape[0]):
        for j in range(3):
            e = jnp.zeros(V.shape).at[i, j].set(eps)
            fd[i, j] = (float(gap(V + e)[0]) - float(gap(V - e)[0])) / (2 * eps)
    assert np.count_nonzero(np.abs(fd) > 1e-3) >= 3  # the gap moves with several vertices
    np.testing.assert_allclose(g, fd, rtol=FD, atol=FD)


def test_a_face_landing_slightly_tilted_keeps_its_manifold():
    """MJX's convex.xml at 0.462 s: its pyramid (base 0.4 m square) comes down base first, tilted 0.01 rad, onto
    its box (0.4 m cube), 1.8e-6 m apart. An edge-edge axis separates by 9e-9 m more than the base's normal;
    taken, its single point let the pyramid turn 9.8 mm into the box in the next step and spring off. The face
    manifold is kept instead (`_boxes._edge_wins`): the base's 4 corners as 4 distinct points within a centimetre,
    the least gap the exact distance."""
    pyramid = _arrays(
        rbd.ConvexMesh([[-0.1, 0.2, 0.2], [-0.1, -0.2, -0.2], [-0.1, -0.2, 0.2], [-0.1, 0.2, -0.2], [0.3, 0, 0]])
    )
    box = _arrays(rbd.Box(np.array([0.2, 0.2, 0.2])))
    p_box = jnp.array([0.0012831114743106626, 1.998284403842492, 1.7471303233028983])
    R_box = jnp.array(
        [
            [0.7065267877519072, -0.7074470037333176, 0.018402040585849336],
            [0.7074526080335943, 0.7067228528091413, 0.007322342779125546],
            [-0.0181853120797417, 0.007845140283045218, 0.9998038548627937],
        ]
    )
    p_pyramid = jnp.array([0.00024170951162056904, 1.9998240087444563, 2.0493607839344263])
    R_pyramid = jnp.array(
        [
            [0.010589350132971576, -0.7066799069600458, 0.7074541502901142],
            [-0.0005030372876691502, -0.7074974938441159, -0.7067156734909648],
            [0.9999438047296727, 0.007127783894142425, -0.00784742502416269],
        ]
    )
    gap, _, x = _pair(geometry.box_mesh, _posed(box, p_box, R_box), _posed(pyramid, p_pyramid, R_pyramid))
    near = np.asarray(gap) < 1e-2  # the base, tilted 0.01 rad over 0.4 m; the apex is 0.4 m above
    assert len(np.unique(np.round(np.asarray(x)[near], 9), axis=0)) == 4
    corners = _world_points(_SIGNS * 0.2, np.asarray(p_box), np.asarray(R_box))
    vertices = _world_points(np.asarray(pyramid["vertices"]), np.asarray(p_pyramid), np.asarray(R_pyramid))
    reference = reference_gap(corners, vertices)
    assert 1e-6 < reference < 2e-6 and abs(float(gap.min()) - reference) <= SEPARATED


# --- Bad input ---------------------------------------------------------------------------------------------


def test_bad_vertices_are_named():
    with pytest.raises(ValueError, match=r"mesh vertices must be an array of shape \(n, 3\)"):
        rbd.ConvexMesh(np.zeros((5, 2)))
    with pytest.raises(ValueError, match="mesh vertices must hold at least 4 points"):
        rbd.ConvexMesh(TETRA[:3])
    with pytest.raises(ValueError, match="mesh vertices must be finite"):
        rbd.ConvexMesh(np.vstack([TETRA, [[np.nan, 0.0, 0.0]]]))
    with pytest.raises(ValueError, match="mesh vertices must span a solid"):
        rbd.ConvexMesh(np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0], [0.5, 0.5, 0]]))
    with pytest.raises(ValueError, match="3D scenes only"):
        b = rbd.SceneBuilder(dim=2)
        b.add_static("floor", rbd.Plane(normal=(0.0, 1.0, 0.0)))
        b.add_body("tet", rbd.ConvexMesh(TETRA), mass=1.0, inertia=1.0, position=(0.0, 1.0))
        b.build()


# --- Physics ----------------------------------------------------------------------------------------------


def _assert_solved(traj):
    assert bool(jnp.all(traj.stats.converged))
    assert float(traj.stats.residual.max()) <= RESIDUAL


@pytest.mark.slow
def test_mesh_rests_on_a_plane_and_on_a_box_without_creep():
    """A cube given as a mesh resting on a plane, a second on a box table, with friction: over 1 s at
    h = 0.01 no body moves more than 1e-9 m and every step solves to 1e-8. The second cube's vertices are
    off its shape origin: the builder's inertia is the Box's about the centroid."""
    h = 0.05
    b = rbd.SceneBuilder(mu=0.5, collide_bodies=False)
    b.add_static("floor", rbd.Plane())
    b.add_static("table", rbd.Box((0.3, 0.3, 0.05), position=(2.0, 0.0, 0.15)))
    b.add_body("on_floor", rbd.ConvexMesh(_SIGNS * h), mass=1.0, position=(0.0, 0.0, h))
    # Vertices off the shape's origin, the shape placed so that its centroid is the body's origin: the builder
    # gives the inertia about the centroid.
    off = np.array([0.3, -0.2, 0.1])
    b.add_body("on_table", rbd.ConvexMesh(_SIGNS * h + off, position=-off), mass=1.0, position=(2.05, 0.03, 0.2 + h))
    b.exclude("on_floor", "table")
    b.exclude("on_table", "floor")
    scene = b.build()
    np.testing.assert_allclose(scene.system.params.inertia[1], rbd.Box(h).inertia(1.0), atol=EXACT)
    traj = jax.jit(lambda s: rbd.simulate(scene.system, s, dt=H, steps=100))(scene.state)
    _assert_solved(traj)
    q = np.asarray(traj.q)
    moved = np.abs(q - q[0]).max()
    print(f"\nresting meshes: largest motion {moved:.2e}")
    assert moved <= CREEP


@pytest.mark.long  # the gap's derivatives in the vertices are checked against central differences by default
def test_a_rollout_differentiates_in_the_mesh_vertices():
    """A ball resting off-centre on the top face of a static slab given as a mesh (sphere-mesh), and a
    tetrahedron resting on a face on the floor (plane-mesh), 0.3 s at h = 0.01 under gravity tilted off the
    normal (the ball rolls, the tetrahedron sticks). Moving the slab's vertices tilts its top face; moving the
    tetrahedron's changes its base. The gradient of the final poses with respect to both meshes' vertices
    (`params.shapes["mesh"]["vertices"]`, through the steps' implicit derivatives), along random directions,
    against central differences. (With gravity along the normal every friction row of a resting contact is
    biactive, a point where the implicit derivative takes the friction as inactive.)"""
    tet = TETRA - geometry.hull(TETRA)["centroid"]
    b = rbd.SceneBuilder(mu=0.8, gravity=(1.5, 0.8, -9.81))
    b.add_static("floor", rbd.Plane())
    b.add_static("slab", rbd.ConvexMesh(_SIGNS * [0.3, 0.3, 0.05], position=(1.0, 0.0, 0.05)))
    b.add_body("ball", rbd.Sphere(0.05), mass=0.2, position=(1.1, -0.05, 0.15))
    b.add_body("tet", rbd.ConvexMesh(tet), mass=0.5, position=(0.0, 0.0, -tet[:, 2].min()))
    b.exclude("ball", "tet")
    scene = b.build()
    V = scene.system.params.shapes["mesh"]["vertices"]  # (2, 8, 3): the tetrahedron padded by its first vertex
    weights = jnp.asarray(np.random.default_rng(0).normal(size=scene.state.q.shape))

    @jax.jit
    def final(V):
        system = eqx.tree_at(lambda s: s.params.shapes["mesh"]["vertices"], scene.system, V)
        traj = rbd.simulate(system, scene.state, dt=H, steps=30)
        return jnp.sum(weights * traj.q[-1]), traj.stats

    (_, stats), g = jax.value_and_grad(final, has_aux=True)(V)
    assert bool(stats.converged.all()) and float(stats.residual.max()) <= RESIDUAL
    # A padded copy moves with the vertex it copies (moved apart, it would be a new point of the hull).
    source = np.array([[np.all(m == m[k], axis=1).argmax() for k in range(len(m))] for m in np.asarray(V)])
    assert len(np.unique(source)) < source.size  # the tetrahedron is padded
    eps = 1e-6
    for direction in np.random.default_rng(1).normal(size=(3,) + V.shape):
        d = jnp.asarray(np.take_along_axis(direction, source[..., None], axis=1))
        fd = (float(final(V + eps * d)[0]) - float(final(V - eps * d)[0])) / (2 * eps)
        assert abs(fd) > 1e-2, fd  # the poses move with the vertices
        np.testing.assert_allclose(float(jnp.sum(g * d)), fd, rtol=1e-6)


@pytest.mark.slow
def test_tetrahedron_dropped_on_a_plane_comes_to_rest():
    """A tetrahedron released tilted 5 cm above the floor lands on a vertex, tips onto a face and rests."""
    mesh = rbd.ConvexMesh(TETRA - geometry.hull(TETRA)["centroid"])
    b = rbd.SceneBuilder(mu=0.6)
    b.add_static("floor", rbd.Plane())
    quat = np.asarray(rot.from_axis_angle(jnp.array([1.0, 0.4, 0.0]) / math.hypot(1.0, 0.4), 0.6))
    b.add_body("tet", mesh, mass=0.5, position=(0.0, 0.0, 0.25), orientation=quat)
    scene = b.build()
    traj = jax.jit(lambda s: rbd.simulate(scene.system, s, dt=H, steps=150))(scene.state)
    _assert_solved(traj)
    gaps = np.asarray(jax.vmap(scene.system.gap)(traj.q))
    assert gaps[0].min() > 0.04 and gaps.min() >= -1e-6
    np.testing.assert_allclose(traj.v[-1], 0.0, atol=1e-9)
    # A face down: three vertices on the floor.
    np.testing.assert_allclose(np.sort(gaps[-1])[:3], 0.0, atol=1e-6)


@functools.cache
def _mesh_drops():
    """The `benchmarks/mesh_drops.py` module: its draws, surfaces and penetration depths."""
    spec = importlib.util.spec_from_file_location("mesh_drops", BENCHMARKS / "mesh_drops.py")
    drops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drops)
    return drops


def test_a_hull_landing_on_a_curved_hull_keeps_its_nearest_vertices():
    """`benchmarks/mesh_drops.py`'s draw 77 at step 31: a 6-point hull (radius 4.8 cm), spinning, 1.35 mm above
    the static 48-point hull. The reference face is a facet of the static hull and the clip sees only the points
    under it; the falling hull's vertex 5.24 mm off a neighbouring facet went 18.9 mm into it in the next step.
    Every vertex of either hull within 3 cm of the other is now a contact at its exact distance (scipy), in either
    order of the pair; a pair of meshes of more than 8 vertices keeps 8 contacts, of boxes given as meshes 4."""
    drops = _mesh_drops()
    points = np.array(
        [
            [-0.00839936963351845, 0.03986133076382904, -0.025384031019623],
            [0.04020446732971441, -0.00889348456935034, -0.02310043707330202],
            [0.02128599996143738, -0.03703456778613908, -0.02108032842083891],
            [-0.00303391103814779, 0.047227694709731, 0.00253805032442737],
            [0.01725668345912248, -0.03663751224934855, -0.02559915214362828],
            [0.03891281654204282, -0.02573101489371243, -0.00271165314017719],
        ]
    )
    np.testing.assert_allclose(drops.draw(77)[1], points, rtol=1e-14)
    q = np.array([-0.9059451887385106, -0.1897796209511648, 0.20884103532388526])
    R = np.asarray(
        rot.to_matrix(jnp.array([-0.3192368932672421, 0.07402149441573945, -0.9438248575676531, 0.0424648393254872]))
    )
    hull = _posed(_arrays(rbd.ConvexMesh(points)), jnp.asarray(q), jnp.asarray(R))
    rock = _posed(_arrays(rbd.ConvexMesh(drops.ROCK)), jnp.asarray(drops.ROCK_AT, float), jnp.eye(3))
    hull_points, rock_points = q + points @ R.T, drops.ROCK + drops.ROCK_AT
    near = [reference_signed_distance(v, rock_points) for v in hull_points]
    near += [reference_signed_distance(v, hull_points) for v in rock_points]
    near = np.sort([d for d in near if d < 0.03])
    assert len(near) >= 3 and 5.2e-3 < near[1] < 5.3e-3  # the vertex that went through
    for a, b in ((hull, rock), (rock, hull)):
        gap = np.asarray(_pair(geometry.mesh_mesh, a, b)[0])
        assert gap.shape == (8,)
        for d in near:
            assert np.abs(gap - d).min() <= SEPARATED, (d, gap)
    cube = _arrays(rbd.ConvexMesh(_SIGNS * 0.1))
    below, above = (_posed(cube, jnp.array([0.0, 0.0, z]), jnp.eye(3)) for z in (0.0, 0.2))
    assert _pair(geometry.mesh_mesh, below, above)[0].shape == (4,)


def test_a_hull_tumbling_onto_a_box_keeps_every_low_vertex():
    """`benchmarks/mesh_drops.py`'s draw 45 at step 26: an 18-point hull (radius 7.9 cm) spinning at 21 rad/s
    over the table, with two vertices 0.6 mm above its top and four more within the manifold's band (5% of the
    radius). The band's widest spread took one of the two, and the slots above the band took vertices 8 and
    11 mm up: the other went 2.1 mm into the table in the next step. Every vertex within the band is now a
    contact at its height."""
    drops = _mesh_drops()
    points = drops.draw(45)[1]
    q = jnp.array([-0.05245743646041445, -0.6379515426452876, -0.7682782510005953, -0.00381780512407813])
    p = jnp.array([-0.14158205402269664, -0.10902487986874598, 0.32134945292899475])
    R = rot.to_matrix(q)
    hull = _posed(_arrays(rbd.ConvexMesh(points)), p, R)
    table = rbd.Box(tuple(drops.TABLE), position=(0.0, 0.0, drops.TABLE[2]))
    table = _posed(_arrays(table), jnp.zeros(3), jnp.eye(3))
    heights = np.asarray(p + points @ np.asarray(R).T)[:, 2] - 2 * drops.TABLE[2]
    low = np.sort(heights)[:6]
    assert np.all(low > 0) and low[1] - low[0] < 1e-4 and low[5] < 0.05 * 0.0795 + low[0], low
    gap = np.asarray(_pair(geometry.box_mesh, table, hull)[0])
    assert gap.shape == (8,)
    for h in low:
        assert np.abs(gap - h).min() <= SEPARATED, (h, gap)


@pytest.mark.slow
def test_mesh_rests_on_a_static_mesh_without_creep():
    """A cube given as a mesh resting off-centre on a static slab given as a mesh (mesh-mesh, parallel
    faces), with friction: over 1 s at h = 0.01 it moves less than 1e-9 m, every step solves to 1e-8."""
    h = 0.05
    b = rbd.SceneBuilder(mu=0.5)
    b.add_static("slab", rbd.ConvexMesh(_SIGNS * [0.4, 0.3, 0.05], position=(0.0, 0.0, -0.05)))
    b.add_body("cube", rbd.ConvexMesh(_SIGNS * h), mass=1.0, position=(0.3, -0.1, h))
    scene = b.build()
    traj = jax.jit(lambda s: rbd.simulate(scene.system, s, dt=H, steps=100))(scene.state)
    _assert_solved(traj)
    q = np.asarray(traj.q)
    moved = np.abs(q - q[0]).max()
    print(f"\ncube mesh on a slab mesh: largest motion {moved:.2e}")
    assert moved <= CREEP


def _dropped(surfaces, count):
    """`benchmarks/mesh_drops.py`'s first `count` draws onto each of `surfaces`, 1.5 s at h = 0.01 in one vmap:
    the draws, the trajectory and each draw's deepest vertex at each step (draws, steps + 1)."""
    drops = _mesh_drops()
    draws = [drops.draw(seed) for seed in range(3 * count) if drops.SURFACES[seed % 3] in surfaces]
    assert sorted(d[2] for d in draws) == sorted(list(surfaces) * count)
    system, state = drops.stacked([d[0] for d in draws])
    traj = jax.jit(jax.vmap(lambda s, x: rbd.simulate(s, x, dt=H, steps=150)))(system, state)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= RESIDUAL
    return draws, traj, np.array([drops.depths(np.asarray(traj.q[i]), d[1], d[2]) for i, d in enumerate(draws)])


@pytest.mark.parametrize("count", [pytest.param(12, marks=pytest.mark.slow), pytest.param(50, marks=pytest.mark.long)])
def test_random_hulls_dropped_on_the_floor_and_a_box_hold(count):
    """The first `count` floor and table draws of `benchmarks/mesh_drops.py` (random hulls of 6-19 points, 0.1-10
    kg, mu 0.1-1.5, thrown spinning from 0.25-0.6 m onto the floor or a Box table): no vertex deeper than 2 mm
    below the floor or inside the table at any step, and every step converged to the solver's tolerance. The
    plane keeps 8 vertices a pair: with the 4 lowest, a hull rocking on a nearly level face of 5 or more
    vertices let the fifth fall 8 mm through."""
    draws, _, depth = _dropped(("floor", "table"), count)
    deepest = depth.max(axis=1)
    assert deepest.max() <= 2e-3, (draws[int(deepest.argmax())][2], int(deepest.argmax()), deepest.max())


@pytest.mark.parametrize("count", [pytest.param(24, marks=pytest.mark.slow), pytest.param(100, marks=pytest.mark.long)])
def test_random_hulls_dropped_on_a_static_hull_hold(count):
    """The first `count` draws onto the static 48-point hull (mesh-mesh): every step converged, and at every step no
    vertex deeper than 2 mm plus what the step's linearization of the rotation can leave, r (h |w|)^2 / 2 (r
    the hull's farthest vertex from its origin, w its angular velocity after the step). With only the clipped
    points as contacts, 17 of the first 100 draws went deeper than 2 mm, one of them 18.9 mm."""
    draws, traj, depth = _dropped(("rock",), count)
    r = np.array([np.linalg.norm(d[1], axis=1).max() for d in draws])[:, None]
    spin = np.linalg.norm(np.asarray(traj.v)[..., 3:6], axis=-1)
    allowed = 2e-3 + 0.5 * r * (H * spin) ** 2
    assert (depth <= allowed).all(), np.unravel_index(np.argmax(depth - allowed), depth.shape)
