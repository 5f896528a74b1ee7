"""Box-box, capsule-box and two-point capsule-capsule contact (`jaxrbd.geometry._boxes`).

Gaps are checked against brute-force references that share no code with the
library: separated distances by bounded-variable least squares (scipy's BVLS,
an active-set method that ends at the exact minimiser of |x_a - x_b| over the
two shapes written as box-bounded parametrisations), penetration depths by the
convex hull of the vertex differences (qhull): A - B is that hull, and the
penetration depth is the distance from the origin to its nearest facet.
"""

import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import lsq_linear
from scipy.spatial import ConvexHull

import jaxrbd as rbd
from jaxrbd import _rotation as rot
from jaxrbd import geometry

POSES = 1000
SEPARATED = 1e-9  # distance of separated shapes against BVLS
DEPTH = 1e-6  # penetration depth against the hull
FD = 1e-6  # relative agreement of gradients with central differences (float64)
RESIDUAL = 1e-8  # every step's complementarity residual
G = 9.81
H = 0.01  # time step of the physics tests

_SIGNS = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)


# --- Brute-force references (numpy and scipy only) -----------------------------------------------


def _bvls_distance(A, b):
    """min |A y - b| over y in [-1, 1]^k: the distance of two shapes x_a - x_b = A y - b."""
    y = lsq_linear(A, b, bounds=(-1.0, 1.0), method="bvls", tol=1e-15).x
    return float(np.linalg.norm(A @ y - b))


def _hull_depth(points_a, points_b):
    """Penetration depth of the convex hulls of two point sets (the origin inside A - B)."""
    hull = ConvexHull((points_a[:, None] - points_b[None]).reshape(-1, points_a.shape[1]))
    return float(np.min(-hull.equations[:, -1]))


def _box_vertices(p, R, h):
    return p + (_SIGNS * h) @ R.T


def reference_box_box(pa, Ra, ha, pb, Rb, hb):
    dist = _bvls_distance(np.hstack([Ra * ha, -Rb * hb]), pb - pa)
    if dist > 1e-7:
        return dist
    return -_hull_depth(_box_vertices(pa, Ra, ha), _box_vertices(pb, Rb, hb))


def reference_capsule_box(c, u, hl, r, pb, Rb, hb):
    dist = _bvls_distance(np.hstack([hl * u[:, None], -Rb * hb]), pb - c)
    if dist > 1e-7:
        return dist - r
    ends = c + np.array([[-1.0], [1.0]]) * hl * u
    return -_hull_depth(ends, _box_vertices(pb, Rb, hb)) - r


def reference_capsule_capsule(c1, u1, h1, r1, c2, u2, h2, r2):
    return _bvls_distance(np.stack([h1 * u1, -h2 * u2], 1), c2 - c1) - r1 - r2


# --- Random poses, one vmapped compile per pair --------------------------------------------------


def _rotations(rng, n):
    q = rng.normal(size=(n, 4))
    return np.asarray(jax.vmap(rot.to_matrix)(jnp.asarray(q / np.linalg.norm(q, axis=1, keepdims=True))))


def _box(p, R, h):
    return {"p": p, "R": R, "half_extents": h}


def _capsule(p, R, hl, r):
    return {"p": p, "R": R, "half_length": hl, "radius": r}


@jax.jit
def _box_box_batch(pa, Ra, ha, pb, Rb, hb):
    return jax.vmap(lambda *x: geometry.box_box(_box(*x[:3]), _box(*x[3:]), 3))(pa, Ra, ha, pb, Rb, hb)


@jax.jit
def _capsule_box_batch(c, Ra, hl, r, pb, Rb, hb):
    return jax.vmap(lambda *x: geometry.capsule_box(_capsule(*x[:4]), _box(*x[4:]), 3))(c, Ra, hl, r, pb, Rb, hb)


@jax.jit
def _capsule_capsule_batch(c1, R1, h1, r1, c2, R2, h2, r2):
    return jax.vmap(lambda *x: geometry.capsule_capsule(_capsule(*x[:4]), _capsule(*x[4:]), 3))(
        c1, R1, h1, r1, c2, R2, h2, r2
    )


@pytest.fixture(scope="module")
def poses():
    """POSES random pairs: sizes 0.05..0.5, centres up to 1.2 apart (about half of them overlapping)."""
    rng = np.random.default_rng(17)
    return dict(
        pa=np.zeros((POSES, 3)),
        Ra=_rotations(rng, POSES),
        ha=rng.uniform(0.05, 0.5, (POSES, 3)),
        pb=rng.uniform(-1.0, 1.0, (POSES, 3)) * rng.uniform(0.2, 1.2, (POSES, 1)),
        Rb=_rotations(rng, POSES),
        hb=rng.uniform(0.05, 0.5, (POSES, 3)),
        r=rng.uniform(0.02, 0.2, (POSES, 2)),
    )


def _check_against(gap, reference, label):
    """The least gap of each pair against the reference: separated to SEPARATED, overlapping to DEPTH."""
    least = np.asarray(gap).min(1)
    separated = reference > 0
    assert separated.sum() > POSES // 5 and (~separated).sum() > POSES // 5, separated.sum()
    err_sep = np.abs(least - reference)[separated].max()
    err_depth = np.abs(least - reference)[~separated].max()
    print(f"\n{label}: separated {separated.sum()}, max error {err_sep:.2e}; overlapping, max error {err_depth:.2e}")
    assert err_sep <= SEPARATED
    assert err_depth <= DEPTH


def _check_normals(n):
    np.testing.assert_allclose(np.linalg.norm(np.asarray(n), axis=-1), 1.0, atol=1e-12)


def test_box_box_gap_matches_brute_force(poses):
    P = poses
    gap, n, _ = _box_box_batch(P["pa"], P["Ra"], P["ha"], P["pb"], P["Rb"], P["hb"])
    ref = np.array([reference_box_box(*(P[k][i] for k in ("pa", "Ra", "ha", "pb", "Rb", "hb"))) for i in range(POSES)])
    _check_against(gap, ref, "box-box")
    _check_normals(n)


def test_capsule_box_gap_matches_brute_force(poses):
    P = poses
    hl, r = P["ha"][:, 2], P["r"][:, 0]
    gap, n, _ = _capsule_box_batch(P["pa"], P["Ra"], hl, r, P["pb"], P["Rb"], P["hb"])
    ref = np.array(
        [
            reference_capsule_box(P["pa"][i], P["Ra"][i][:, 2], hl[i], r[i], P["pb"][i], P["Rb"][i], P["hb"][i])
            for i in range(POSES)
        ]
    )
    _check_against(gap, ref, "capsule-box")
    _check_normals(n)


def test_capsule_capsule_gap_matches_brute_force(poses):
    """Slot 0 is the exact signed distance; slot 1 is a pair of points at least as far apart."""
    P = poses
    h1, h2, r1, r2 = P["ha"][:, 2], P["hb"][:, 2], P["r"][:, 0], P["r"][:, 1]
    gap, n, _ = _capsule_capsule_batch(P["pa"], P["Ra"], h1, r1, P["pb"], P["Rb"], h2, r2)
    gap = np.asarray(gap)
    ref = np.array(
        [
            reference_capsule_capsule(
                P["pa"][i], P["Ra"][i][:, 2], h1[i], r1[i], P["pb"][i], P["Rb"][i][:, 2], h2[i], r2[i]
            )
            for i in range(POSES)
        ]
    )
    _check_against(gap, ref, "capsule-capsule")
    np.testing.assert_allclose(gap[:, 0], ref, atol=SEPARATED)
    assert np.all(gap[:, 1] >= gap[:, 0] - 1e-12)
    _check_normals(n)


def test_planar_box_box_matches_brute_force():
    """dim == 2: rectangles (and capsules) in the x-y plane, 2 contacts, normals in the plane."""
    rng = np.random.default_rng(2)
    n_poses = 300
    R = lambda: np.asarray(jax.vmap(rot.rotation_z)(jnp.asarray(rng.uniform(-np.pi, np.pi, n_poses))))
    Ra, Rb = R(), R()
    ha, hb = rng.uniform(0.05, 0.5, (n_poses, 3)), rng.uniform(0.05, 0.5, (n_poses, 3))
    pa, pb = np.zeros((n_poses, 3)), np.zeros((n_poses, 3))
    pb[:, :2] = rng.uniform(-1.0, 1.0, (n_poses, 2)) * rng.uniform(0.2, 1.2, (n_poses, 1))
    fn = jax.jit(jax.vmap(lambda *x: geometry.box_box(_box(*x[:3]), _box(*x[3:]), 2)))
    gap, n, _ = (np.asarray(v) for v in fn(pa, Ra, ha, pb, Rb, hb))
    assert gap.shape == (n_poses, 2)
    ref = []
    for i in range(n_poses):
        A = np.hstack([Ra[i][:2, :2] * ha[i][:2], -Rb[i][:2, :2] * hb[i][:2]])
        dist = _bvls_distance(A, pb[i][:2])
        if dist <= 1e-7:
            corners = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], float)
            va = (corners * ha[i][:2]) @ Ra[i][:2, :2].T
            vb = pb[i][:2] + (corners * hb[i][:2]) @ Rb[i][:2, :2].T
            dist = -_hull_depth(va, vb)
        ref.append(dist)
    ref = np.array(ref)
    least = gap.min(1)
    assert np.abs(least - ref)[ref > 0].max() <= SEPARATED
    assert np.abs(least - ref)[ref <= 0].max() <= DEPTH
    assert np.abs(n[..., 2]).max() == 0.0
    # Capsule-box in the plane: the capsule's axis (its local z) turned into the plane.
    across = np.asarray(_R([0.0, 1.0, 0.0], math.pi / 2))
    Rc = Ra @ across
    hl, r = ha[:, 0], ha[:, 1] * 0.3
    fn = jax.jit(jax.vmap(lambda *x: geometry.capsule_box(_capsule(*x[:4]), _box(*x[4:]), 2)))
    gap, n, _ = (np.asarray(v) for v in fn(pa, Rc, hl, r, pb, Rb, hb))
    ref = []
    for i in range(n_poses):
        u = Rc[i][:2, 2]
        dist = _bvls_distance(np.hstack([hl[i] * u[:, None], -Rb[i][:2, :2] * hb[i][:2]]), pb[i][:2])
        if dist <= 1e-7:
            corners = np.array([[1, 1], [1, -1], [-1, 1], [-1, -1]], float)
            ends = np.array([[-1.0], [1.0]]) * hl[i] * u
            vb = pb[i][:2] + (corners * hb[i][:2]) @ Rb[i][:2, :2].T
            dist = -_hull_depth(ends, vb)
        ref.append(dist - r[i])
    ref = np.array(ref)
    least = gap.min(1)
    assert (ref > 0).sum() > n_poses // 5 and (ref <= 0).sum() > n_poses // 5
    assert np.abs(least - ref)[ref > 0].max() <= SEPARATED
    assert np.abs(least - ref)[ref <= 0].max() <= DEPTH
    assert np.abs(n[..., 2]).max() <= 1e-15


# --- Manifolds -------------------------------------------------------------------------------


_box_box = jax.jit(geometry.box_box, static_argnums=2)
_capsule_box = jax.jit(geometry.capsule_box, static_argnums=2)
_capsule_capsule = jax.jit(geometry.capsule_capsule, static_argnums=2)


def _R(axis, angle):
    return rot.to_matrix(rot.from_axis_angle(jnp.asarray(axis, float), angle))


def _clip_to_square(poly, half):
    """Sutherland-Hodgman: the polygon (m, 2), counter-clockwise, clipped to the square |x|, |y| <= half."""
    for axis in (0, 1):
        for side in (-1.0, 1.0):
            out = []
            for p, q in zip(poly, np.roll(poly, -1, axis=0)):
                p_in, q_in = side * p[axis] <= half, side * q[axis] <= half
                if p_in:
                    out.append(p)
                if p_in != q_in:
                    t = (side * half - p[axis]) / (q[axis] - p[axis])
                    out.append(p + t * (q - p))
            poly = np.asarray(out)
    return poly


def test_parallel_faces_give_the_whole_octagon_through_touching():
    """A box turned 30 degrees about z on a box: the 8 vertices of the octagon, which do not move as the gap crosses 0.

    Above, at and below touching by 1e-13 m the manifold holds the same points (to
    rounding) with gaps equal to the offset: the stack neither jitters nor creeps.
    """
    lower = _box(jnp.zeros(3), jnp.eye(3), jnp.array([0.2, 0.2, 0.1]))
    centre, angle = np.array([0.01, -0.02]), math.radians(30.0)
    out = []
    for offset in (1e-13, 0.0, -1e-13):
        upper = _box(jnp.array([*centre, 0.2 + offset]), _R([0, 0, 1], angle), jnp.array([0.2, 0.2, 0.1]))
        gap, n, x = (np.asarray(v) for v in _box_box(lower, upper, 3))
        np.testing.assert_allclose(gap, offset, atol=1e-15)
        np.testing.assert_allclose(n, np.tile([0.0, 0.0, 1.0], (8, 1)), atol=1e-15)
        out.append(x)
    np.testing.assert_allclose(out[0], out[1], atol=1e-12)
    np.testing.assert_allclose(out[2], out[1], atol=1e-12)
    # The exact intersection of the two squares, clipped here independently: the points are its 8 vertices.
    c, s_ = math.cos(angle), math.sin(angle)
    turned = centre + 0.2 * np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]]) @ np.array([[c, s_], [-s_, c]])
    octagon = _clip_to_square(turned, 0.2)
    assert len(octagon) == 8
    xy = out[1][:, :2]
    distance = np.linalg.norm(xy[:, None] - octagon[None], axis=-1)
    np.testing.assert_allclose(distance.min(axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(distance.min(axis=0), 0.0, atol=1e-12)


def test_tilted_box_on_a_face_gets_its_lowest_edge_and_capsule_both_ends():
    """Manifold contents: a box tilted about x on a face touches along its lowest edge (two corners, equal
    gaps); a capsule lying on a face, and one lying on another capsule, get both ends."""
    lower = _box(jnp.zeros(3), jnp.eye(3), jnp.array([0.5, 0.5, 0.1]))
    tilt = 0.2
    h = jnp.array([0.1, 0.1, 0.1])
    lowest = 0.1 * (math.cos(tilt) + math.sin(tilt))
    upper = _box(jnp.array([0.0, 0.0, 0.1 + lowest + 0.003]), _R([1, 0, 0], tilt), h)
    gap = np.sort(np.asarray(_box_box(lower, upper, 3)[0]))
    np.testing.assert_allclose(gap[:2], 0.003, atol=1e-14)  # both corners of the lowest edge
    assert gap[2] > 0.003 + 0.01
    cap = _capsule(jnp.array([0.05, 0.0, 0.1 + 0.03 + 0.002]), _R([0, 1, 0], math.pi / 2), 0.2, 0.03)
    gap, n, x = (np.asarray(v) for v in _capsule_box(cap, lower, 3))
    np.testing.assert_allclose(gap, 0.002, atol=1e-14)
    np.testing.assert_allclose(np.sort(x[:, 0]), [-0.15, -0.15, 0.25, 0.25], atol=1e-14)  # the two ends, twice
    np.testing.assert_allclose(n, np.tile([0.0, 0.0, -1.0], (4, 1)), atol=1e-15)
    on_top = _capsule(jnp.array([0.12, 0.0, 0.132 + 0.061]), _R([0, 1, 0], math.pi / 2), 0.2, 0.03)
    gap, n, x = (np.asarray(v) for v in _capsule_capsule(cap, on_top, 3))
    np.testing.assert_allclose(gap, 0.001, atol=1e-14)
    np.testing.assert_allclose(np.sort(x[:, 0]), [-0.08, 0.25], atol=1e-14)  # both ends of the overlap


# --- Gradients -------------------------------------------------------------------------------


def _skew(w):
    return jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _moved(shape, xi):
    """The shape translated by xi[:3] and turned about its centre by the Cayley rotation of xi[3:].

    (I - K/2)^-1 (I + K/2) is a rotation for every xi, smooth, with derivative K at 0.
    """
    K = _skew(xi[3:])
    out = dict(shape)
    out["p"] = shape["p"] + xi[:3]
    out["R"] = jnp.linalg.solve(jnp.eye(3) - 0.5 * K, jnp.eye(3) + 0.5 * K) @ shape["R"]
    return out


def _outputs(fn, a, b, xi):
    """gap, normal and point of the pair with a moved by xi[:6] and b by xi[6:], flattened."""
    return jnp.concatenate([x.reshape(-1) for x in fn(_moved(a, xi[:6]), _moved(b, xi[6:]), 3)])


_jacobian = jax.jit(jax.jacfwd(_outputs, argnums=3), static_argnums=0)


@functools.partial(jax.jit, static_argnums=0)
def _outputs_batch(fn, a, b, xis):
    return jax.vmap(lambda xi: _outputs(fn, a, b, xi))(xis)


def _gap_jacobian(fn, a, b):
    """d gap / d (translation, rotation vector) of shape b, by autodiff and by central differences."""
    capacity = jax.eval_shape(functools.partial(fn, dim=3), a, b)[0].shape[0]
    jac = np.asarray(_jacobian(fn, a, b, jnp.zeros(12)))[:capacity, 6:]
    eps = 1e-6
    steps = np.concatenate([np.zeros((12, 6)), np.concatenate([np.eye(6), -np.eye(6)]) * eps], 1)
    out = np.asarray(_outputs_batch(fn, a, b, jnp.asarray(steps)))[:, :capacity]
    fd = ((out[:6] - out[6:]) / (2 * eps)).T
    return jac, fd


BOX = _box(jnp.zeros(3), jnp.eye(3), jnp.array([0.3, 0.2, 0.1]))
GENERIC = {
    "box corner into a face": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.05, 0.02, 0.26]), _R([1.0, 0.4, 0.2], 0.7), jnp.array([0.1, 0.12, 0.09])),
    ),
    "box tilted above a face": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.02, -0.03, 0.25]), _R([1.0, 0.3, 0.0], 0.25), jnp.array([0.1, 0.12, 0.09])),
    ),
    "box edges crossing": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.35, 0.25, 0.22]), _R([1.0, -1.0, 0.3], 0.9), jnp.array([0.1, 0.12, 0.09])),
    ),
    "capsule across a face": (
        geometry.capsule_box,
        _capsule(jnp.array([0.05, 0.02, 0.16]), _R([1.0, 0.2, 0.0], 1.3), 0.15, 0.05),
        BOX,
    ),
    "capsule beyond an edge": (
        geometry.capsule_box,
        _capsule(jnp.array([0.45, 0.3, 0.2]), _R([0.3, 1.0, 0.0], 0.8), 0.1, 0.04),
        BOX,
    ),
    "capsules crossing": (
        geometry.capsule_capsule,
        _capsule(jnp.zeros(3), jnp.eye(3), 0.2, 0.05),
        _capsule(jnp.array([0.12, 0.05, 0.03]), _R([0.0, 1.0, 0.2], 1.2), 0.15, 0.04),
    ),
    "capsules nearly parallel": (
        geometry.capsule_capsule,
        _capsule(jnp.zeros(3), jnp.eye(3), 0.2, 0.05),
        _capsule(jnp.array([0.095, 0.0, 0.07]), _R([0.0, 1.0, 0.0], 0.05), 0.15, 0.04),
    ),
}


def _capsule_pairs_by_default(cases):
    """The case names, those not capsule-capsule marked slow: the box-box and capsule-box gradient programs take
    15 to 20 s each to compile, so they run with the slow set."""
    return [
        n if fn is geometry.capsule_capsule else pytest.param(n, marks=pytest.mark.slow)
        for n, (fn, *_) in cases.items()
    ]


@pytest.mark.parametrize("name", _capsule_pairs_by_default(GENERIC))
def test_gap_gradients_match_central_differences(name):
    """Generic poses (no feature switch within 1e-6): d gap / d pose of b, autodiff against differences."""
    fn, a, b = GENERIC[name]
    jac, fd = _gap_jacobian(fn, a, b)
    assert np.all(np.isfinite(jac))
    np.testing.assert_allclose(jac, fd, rtol=FD, atol=FD * np.abs(fd).max())


DEGENERATE = {
    "identical boxes": (geometry.box_box, BOX, BOX),
    "box resting on a box (touching, parallel faces)": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.0, 0.0, 0.2]), jnp.eye(3), jnp.array([0.3, 0.2, 0.1])),
    ),
    "boxes touching edge to edge, parallel edges": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.6, 0.0, 0.2]), jnp.eye(3), jnp.array([0.3, 0.2, 0.1])),
    ),
    "boxes corner to corner": (
        geometry.box_box,
        BOX,
        _box(jnp.array([0.6, 0.4, 0.2]), jnp.eye(3), jnp.array([0.3, 0.2, 0.1])),
    ),
    "capsule on a face, parallel": (
        geometry.capsule_box,
        _capsule(jnp.array([0.0, 0.0, 0.15]), _R([0, 1, 0], math.pi / 2), 0.2, 0.05),
        BOX,
    ),
    "capsule axis inside the box": (geometry.capsule_box, _capsule(jnp.zeros(3), jnp.eye(3), 0.05, 0.05), BOX),
    "capsule end on an edge": (
        geometry.capsule_box,
        _capsule(jnp.array([0.3, 0.2, 0.15]), jnp.eye(3), 0.05, 0.0),
        BOX,
    ),
    "identical capsules": (
        geometry.capsule_capsule,
        _capsule(jnp.zeros(3), jnp.eye(3), 0.2, 0.05),
        _capsule(jnp.zeros(3), jnp.eye(3), 0.2, 0.05),
    ),
    "parallel capsules touching": (
        geometry.capsule_capsule,
        _capsule(jnp.zeros(3), jnp.eye(3), 0.2, 0.05),
        _capsule(jnp.array([0.1, 0.0, 0.05]), jnp.eye(3), 0.2, 0.05),
    ),
}


@pytest.mark.parametrize("name", _capsule_pairs_by_default(DEGENERATE))
def test_gradients_are_finite_at_degenerate_poses(name):
    """Touching, parallel faces and edges, identical poses: every output's Jacobian is finite."""
    fn, a, b = DEGENERATE[name]
    jac = _jacobian(fn, a, b, jnp.zeros(12))
    assert bool(jnp.all(jnp.isfinite(jac)))
    assert bool(jnp.all(jnp.isfinite(_outputs_batch(fn, a, b, jnp.zeros((12, 12))))))


# --- Scenes and physics ------------------------------------------------------------------------


@pytest.mark.slow
def test_box_pairs_build_with_their_capacities():
    """Box-box (8 contacts, 2 planar), capsule-box (4) and capsule-capsule (2) are accepted by the builder."""
    b = rbd.SceneBuilder(collide_bodies=True)
    b.add_static("table", rbd.Box((1.0, 1.0, 0.05), position=(0.0, 0.0, -0.05)))
    b.add_body("crate", rbd.Box(0.1), mass=1.0, position=(0.0, 0.0, 0.1))
    b.add_body("rod", rbd.Capsule(0.03, 0.1), mass=1.0, position=(1.0, 0.0, 0.5))
    b.add_body("pin", rbd.Capsule(0.03, 0.1), mass=1.0, position=(-1.0, 0.0, 0.5))
    scene = b.build()
    # box-box: crate-table 8; capsule-box: rod-table, pin-table, rod-crate, pin-crate 4 each; capsule-capsule 2.
    assert scene.system.mu.shape == (8 + 4 * 4 + 2,)
    b = rbd.SceneBuilder(dim=2)
    b.add_static("floor", rbd.Box((1.0, 0.05, 0.05), position=(0.0, -0.05, 0.0)))
    b.add_body("block", rbd.Box(0.1), mass=1.0, position=(0.0, 0.1))
    scene = b.build()
    gap = np.asarray(jax.jit(lambda q: scene.system.gap(q))(scene.state.q))
    np.testing.assert_allclose(gap, [0.0, 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="n must be an integer"):
        rbd.scenes.box_stack(0)


@pytest.fixture(scope="module")
def cube_on_table():
    """`scenes.cube_toss` (a cube on a table that is a box) and one compiled 200-step rollout from any state."""
    scene = rbd.scenes.cube_toss(mu=0.5)
    run = jax.jit(lambda state: rbd.simulate(scene.system, state, dt=H, steps=200))
    gaps = jax.jit(jax.vmap(lambda q: scene.system.gap(q)))
    return scene, run, gaps


def _assert_solved(traj):
    assert bool(jnp.all(traj.stats.converged))
    assert float(traj.stats.residual.max()) <= RESIDUAL


def test_box_sliding_on_a_box_decelerates_at_mu_g(cube_on_table):
    """A cube sliding along x on a box: dv/dt = -mu g exactly until it stops, at v0^2 / (2 mu g) to O(h)."""
    scene, run, _ = cube_on_table
    mu, v0, h = 0.5, 1.0, 0.05
    q0 = jnp.array([0.0, 0.0, h, 1.0, 0.0, 0.0, 0.0])
    traj = run(rbd.State(jnp.array(0.0), q0, jnp.array([v0, 0.0, 0.0, 0.0, 0.0, 0.0])))
    _assert_solved(traj)
    x = np.asarray(traj.q[:, :3])
    v = np.asarray(traj.v[:, :3])
    # Stopped: |v| at round-off (the same 1e-12 as below), whichever its sign.
    stop = int(np.argmax(v[:, 0] <= 1e-12))
    assert 0 < stop < len(v) - 1
    accel = np.diff(v[:stop, 0]) / H
    np.testing.assert_allclose(accel, -mu * G, atol=1e-9)
    np.testing.assert_allclose(v[stop:, 0], 0.0, atol=1e-12)  # stopped, not turned back
    distance = v0**2 / (2 * mu * G)
    assert abs(x[-1, 0] - distance) <= v0 * H
    np.testing.assert_allclose(x[:, 1:], [[0.0, h]] * len(x), atol=1e-12)  # straight, at its height


def test_tilted_box_dropped_on_a_box_settles_flat(cube_on_table):
    """A cube released 2 cm above the table, tilted 0.35 rad: it lands on an edge, tips flat and rests.

    Stewart-Trinkle (position level): every gap stays above -1e-6 m through the landing.
    """
    scene, run, gap_of = cube_on_table
    axis = jnp.array([1.0, 0.3, 0.0]) / math.hypot(1.0, 0.3)
    quat = rot.from_axis_angle(axis, 0.35)
    h = 0.05
    lowest = h * float(np.abs(np.asarray(rot.to_matrix(quat))[2]).sum())  # the centre above the lowest corner
    q0 = jnp.concatenate([jnp.array([0.0, 0.0, lowest + 0.02]), quat])
    traj = run(rbd.State(jnp.array(0.0), q0, jnp.zeros(6)))
    _assert_solved(traj)
    gaps = np.asarray(gap_of(traj.q))
    print(f"\ndrop: least gap {gaps.min():.2e} m")
    assert gaps.min() >= -1e-6
    assert gaps[0].min() > 0.019 and np.any(gaps.min(1) < 1e-6)  # released in the air, then lands
    R = np.asarray(rot.to_matrix(traj.q[-1, 3:]))
    assert abs(abs(R[2]).max() - 1.0) <= 1e-9  # a face down
    np.testing.assert_allclose(traj.q[-1, 2], h, atol=1e-6)
    np.testing.assert_allclose(traj.v[-1], 0.0, atol=1e-9)  # at rest


def test_box_overhanging_the_table_edge_does_not_sink(cube_on_table):
    """A cube released 0.45 mm above the table with 3 cm overhanging its edge, tilted 0.05 rad: the table's
    edge meets the cube's face along a segment (an edge-edge axis of nearly parallel edges). Both ends of
    the segment are contacts, so the cube does not pivot about one and sink at the other: no gap below -1e-6."""
    _, run, gap_of = cube_on_table
    quat = rot.from_axis_angle(jnp.array([0.0, 1.0, 0.2]) / math.hypot(1.0, 0.2), 0.05)
    q0 = jnp.concatenate([jnp.array([0.98, 0.01, 0.0515]), quat])
    traj = run(rbd.State(jnp.array(0.0), q0, jnp.zeros(6)))
    _assert_solved(traj)
    gaps = np.asarray(gap_of(traj.q))
    assert gaps[0].min() > 4e-4
    assert gaps.min() >= -1e-6


@pytest.mark.slow
def test_gradients_through_a_box_sliding_on_a_box_are_exact():
    """d x(t) / d mu and d x(t) / d v0 after 10 steps of sliding, through the box-box rollout.

    While it slides, v_k = v0 - k h mu g and x_N = h sum_k v_k (k = 1..N), so the
    derivatives are -h^2 g N (N + 1) / 2 and N h; central differences agree.
    """
    scene = rbd.scenes.cube_toss(mu=0.5)
    q0 = jnp.array([0.0, 0.0, 0.05, 1.0, 0.0, 0.0, 0.0])
    steps = 10

    def final_x(mu, v0):
        system = eqx.tree_at(lambda s: s.mu, scene.system, jnp.broadcast_to(mu, scene.system.mu.shape))
        state = rbd.State(jnp.array(0.0), q0, jnp.stack([v0, 0.0, 0.0, 0.0, 0.0, 0.0]))
        return rbd.simulate(system, state, dt=H, steps=steps).q[-1, 0]

    d_mu, d_v0 = jax.jit(jax.grad(final_x, argnums=(0, 1)))(0.5, 1.0)
    np.testing.assert_allclose(d_mu, -(H**2) * G * steps * (steps + 1) / 2, rtol=1e-9)
    np.testing.assert_allclose(d_v0, steps * H, rtol=1e-9)
    f, eps = jax.jit(final_x), 1e-6
    np.testing.assert_allclose((f(0.5 + eps, 1.0) - f(0.5 - eps, 1.0)) / (2 * eps), d_mu, rtol=FD)


@pytest.mark.slow
def test_stack_of_five_boxes_rests_for_ten_seconds():
    """`scenes.box_stack(5)`: 1000 steps of h = 0.01, every body moves < 1e-9 m, every step solves to 1e-8."""
    scene = rbd.scenes.box_stack(5)
    traj = rbd.simulate(*scene, dt=H, steps=1000)
    _assert_solved(traj)
    x = np.asarray(scene.bodies.positions(traj.q))
    drift = np.abs(x - x[0]).max()
    print(f"\nstack of 5: drift {drift:.2e} m, residual {float(traj.stats.residual.max()):.2e}")
    assert drift < 1e-9
    assert float(jnp.abs(traj.q - traj.q[0]).max()) < 1e-9  # orientations too


@pytest.mark.slow
def test_pushed_boxes_slide_together_at_the_exact_acceleration():
    """`scenes.box_push`: once the pusher reaches the second box they slide together at (F - mu g (m1 + m2)) / (m1 + m2)."""
    force, mu = 8.0, 0.3
    scene = rbd.scenes.box_push(force, mu=mu)
    traj = rbd.simulate(*scene, dt=H, steps=100)
    _assert_solved(traj)
    v = np.asarray(scene.bodies.linear_velocities(traj.v))[:, :, 0]
    hit = int(np.argmax(v[:, 1] > 1e-6))  # the first step that moves the second box
    assert 1 < hit < 80
    alone = np.diff(v[:hit, 0]) / H
    np.testing.assert_allclose(alone, force - mu * G, atol=1e-9)  # the pusher alone: (F - mu m g) / m
    np.testing.assert_allclose(v[:hit, 1], 0.0, atol=1e-12)  # the second box waits at rest
    # In the step that closes the distance the pusher ends just touching (position level); after it they
    # move as one (inelastic).
    np.testing.assert_allclose(v[hit + 1 :, 0], v[hit + 1 :, 1], atol=1e-12)
    accel = np.diff(v[hit + 1 :, 1]) / H
    np.testing.assert_allclose(accel, (force - mu * G * 2.0) / 2.0, atol=1e-9)
