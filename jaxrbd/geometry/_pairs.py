"""The closed-form shape pairs, registered with their capacity, and the contact frames.

Each pair function takes the world arrays of one shape of each kind (with "p": the
centre and "R": the rotation) and returns gap (C,), normal (C, 3) from the first
shape to the second, and point (C, 3), where C is the pair's capacity. Adding a
shape pair is one function here (or in `_boxes`: box-box, capsule-box and
capsule-capsule) and one entry of `COLLIDERS`.
"""

import jax
import jax.numpy as jnp

from .. import _rotation as rot
from ._boxes import _SIGNS_2D, _SIGNS_3D, box_box, capsule_box, capsule_capsule
from ._convex import box_mesh, capsule_mesh, mesh_mesh, mesh_mesh_count, plane_mesh, sphere_mesh

_TINY = 1e-30


def safe_norm(d):
    """|d| and d / |d|, with the double-where guard: at d = 0 the direction is e_z and gradients stay finite."""
    sq = jnp.sum(d * d, -1)
    ok = sq > _TINY
    norm = jnp.sqrt(jnp.where(ok, sq, 1.0))
    e_z = jnp.zeros_like(d).at[..., 2].set(1.0)
    return jnp.where(ok, norm, 0.0), jnp.where(ok[..., None], d / norm[..., None], e_z)


def _balls(ca, ra, cb, rb):
    """Two balls: centres ca, cb and radii ra, rb."""
    dist, n = safe_norm(cb - ca)
    gap = dist - ra - rb
    return gap[None], n[None], (ca + (ra + 0.5 * gap)[..., None] * n)[None]


def _plane_ball(plane, c, r):
    n, d = plane["normal"], plane["offset"]
    gap = c @ n - d - r
    return gap, n, c - (r + 0.5 * gap) * n


def plane_sphere(a, b, dim):
    gap, n, x = _plane_ball(a, b["p"], b["radius"])
    return gap[None], n[None], x[None]


def plane_capsule(a, b, dim):
    ends = b["p"] + jnp.array([[1], [-1]], jnp.int8) * b["half_length"] * b["R"][:, 2]
    gap, n, x = jax.vmap(lambda c: _plane_ball(a, c, b["radius"]))(ends)
    return gap, n, x


def plane_box(a, b, dim):
    """The box's lowest corners: 4 of 8 in 3D, 2 of 4 in planar scenes (the others never touch first).

    The slots hold them in the corners' own order, not by depth: a box resting flat has its lowest corners
    tied to round-off, and ordering them by depth would shuffle the slots from step to step, which spoils
    the next step's warm start (the cube on the incline needed 7-10 Newton iterations at such steps).
    """
    corners, capacity = (_SIGNS_3D, 4) if dim == 3 else (_SIGNS_2D, 2)
    w = b["p"] + (corners * b["half_extents"]) @ b["R"].T
    n, d = a["normal"], a["offset"]
    gaps = w @ n - d
    idx = jnp.sort(jax.lax.top_k(-gaps, capacity)[1])
    gap = gaps[idx]
    return gap, jnp.broadcast_to(n, (capacity, 3)), w[idx] - 0.5 * gap[:, None] * n


def sphere_sphere(a, b, dim):
    return _balls(a["p"], a["radius"], b["p"], b["radius"])


def _closest_on_segment(c, centre, axis, half_length):
    s = jnp.clip((c - centre) @ axis, -half_length, half_length)
    return centre + s * axis


def sphere_capsule(a, b, dim):
    axis = b["R"][:, 2]
    p = _closest_on_segment(a["p"], b["p"], axis, b["half_length"])
    return _balls(a["p"], a["radius"], p, b["radius"])


def sphere_box(a, b, dim):
    """Closest point of the box to the sphere's centre; inside the box, the nearest face."""
    R, h, r = b["R"], b["half_extents"], a["radius"]
    c = R.T @ (a["p"] - b["p"])
    if dim == 2:
        h = h.at[2].set(jnp.inf)  # planar: the box is a rectangle, unbounded along z
    closest = jnp.clip(c, -h, h)
    dist, n_out = safe_norm(c - closest)
    depth = h - jnp.abs(c)
    inside = jnp.all(depth > 0)
    face = jnp.argmin(depth)
    n_in = jax.nn.one_hot(face, 3, dtype=c.dtype) * jnp.where(c[face] >= 0, 1.0, -1.0)
    n_local = jnp.where(inside, n_in, n_out)  # from the box to the sphere's centre
    signed = jnp.where(inside, -depth[face], dist)
    gap = signed - r
    n = R @ n_local
    return gap[None], -n[None], (a["p"] - (r + 0.5 * gap) * n)[None]


def _box_capacity(dim, vertices):
    return 4 if dim == 3 else 2


def _box_box_capacity(dim, vertices):
    return 8 if dim == 3 else 2


# (kind a, kind b) -> (closed form, capacity(dim, vertices)); kinds in the order of KINDS. `vertices` is the
# number of hull vertices the scene's meshes are padded to (`pad_meshes`; 0 without meshes).
COLLIDERS = {
    ("plane", "sphere"): (plane_sphere, lambda dim, vertices: 1),
    ("plane", "capsule"): (plane_capsule, lambda dim, vertices: 2),
    ("plane", "box"): (plane_box, _box_capacity),
    ("sphere", "sphere"): (sphere_sphere, lambda dim, vertices: 1),
    ("sphere", "capsule"): (sphere_capsule, lambda dim, vertices: 1),
    ("sphere", "box"): (sphere_box, lambda dim, vertices: 1),
    ("capsule", "capsule"): (capsule_capsule, lambda dim, vertices: 2),
    ("capsule", "box"): (capsule_box, lambda dim, vertices: 4),  # see `capsule_box`
    ("box", "box"): (box_box, _box_box_capacity),
    ("plane", "mesh"): (plane_mesh, lambda dim, vertices: 8),
    ("sphere", "mesh"): (sphere_mesh, lambda dim, vertices: 1),
    ("capsule", "mesh"): (capsule_mesh, lambda dim, vertices: 2),
    ("box", "mesh"): (box_mesh, lambda dim, vertices: 8),
    ("mesh", "mesh"): (mesh_mesh, lambda dim, vertices: mesh_mesh_count(vertices)),
}


def collider(kind_a, kind_b):
    """The closed form and capacity for a pair in canonical order; ValueError naming a pair without one."""
    if (kind_a, kind_b) not in COLLIDERS:
        have = ", ".join(f"{a}-{b}" for a, b in COLLIDERS)
        raise ValueError(f"no closed-form contact for the pair {kind_a}-{kind_b}; supported pairs: {have}")
    return COLLIDERS[kind_a, kind_b]


def contact_frame(n):
    """(t, o) with (t, o, n) right-handed: the smallest rotation taking e_z to n applied to (e_x, e_y).

    Smooth in n everywhere except at n = -e_z, where the limit along the x axis,
    t = e_x and o = -e_y, is used.
    """
    nx, ny, nz = n[..., 0], n[..., 1], n[..., 2]
    # 1 / (1 + nz), written as (1 - nz) / (nx^2 + ny^2) on the lower half (same value on
    # the unit sphere) so that the frame stays orthonormal to rounding near n = -e_z.
    k = nx * nx + ny * ny
    ok = k > 1e-30
    upper = nz >= 0
    inv_s = jnp.where(upper, 1.0 / jnp.where(upper, 1.0 + nz, 1.0), (1.0 - nz) / jnp.where(ok, k, 1.0))
    ok = upper | ok
    t = jnp.stack([1 - nx * nx * inv_s, -nx * ny * inv_s, -nx], -1)
    o = jnp.stack([-nx * ny * inv_s, 1 - ny * ny * inv_s, -ny], -1)
    t = jnp.where(ok[..., None], t, jnp.array([1.0, 0.0, 0.0], n.dtype))
    o = jnp.where(ok[..., None], o, jnp.array([0.0, -1.0, 0.0], n.dtype))
    return t, o


def planar_tangent(n):
    """The tangent t = n x e_z of a planar contact (in the x-y plane; +x for the floor n = e_y)."""
    return jnp.stack([n[..., 1], -n[..., 0], jnp.zeros_like(n[..., 0])], -1)


def world_pose(arrays, body_p, body_R):
    """Add the world centre "p" and rotation "R" of a shape carried by a body at (body_p, body_R)."""
    out = dict(arrays)
    if "position" in arrays:
        out["p"] = body_p + body_R @ arrays["position"]
    R = body_R
    if "orientation" in arrays:
        R = body_R @ rot.to_matrix(rot.normalize(arrays["orientation"]))
    out["R"] = R
    return out
