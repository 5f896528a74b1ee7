"""Primitive shapes with closed-form signed distances, contact points and frames.

Shapes are declared with array leaves (so sizes can be traced) and a pose relative
to the body that carries them. A pair of shapes is dispatched through `COLLIDERS`,
keyed by the pair of shape kinds in the order plane < sphere < capsule < box.
Each entry returns a fixed number of candidate contacts (its capacity), each with

    gap f >= 0 when separated, the unit normal n pointing from the first shape to
    the second, and the contact point x (the midpoint of the two witness points).

Gaps are exact signed distances of the convex primitives (box-plane: the signed
distances of the lowest corners), so grad f gives n^T J exactly.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _rotation as rot

_TINY = 1e-30
KINDS = ("plane", "sphere", "capsule", "box")


class Shape(eqx.Module):
    """Base class: a pose relative to the carrying body, friction and restitution.

    Attributes:
        position: (3,) offset of the shape's centre in the body frame (world frame
            for static geometry).
        orientation: (4,) unit quaternion wxyz of the shape frame in the body frame.
        mu: friction coefficient of the shape, or None for the scene default. A
            pair's mu is the mean of its two shapes' unless set per pair.
        restitution: restitution coefficient in [0, 1], or None for the default.
    """

    position: jax.Array = eqx.field(default=(0.0, 0.0, 0.0), converter=jnp.asarray, kw_only=True)
    orientation: jax.Array = eqx.field(default=(1.0, 0.0, 0.0, 0.0), converter=jnp.asarray, kw_only=True)
    mu: jax.Array | None = eqx.field(default=None, kw_only=True)
    restitution: jax.Array | None = eqx.field(default=None, kw_only=True)

    kind = ""

    def arrays(self):
        """The shape's geometric leaves as a dict of arrays (stacked per kind by the scene)."""
        raise NotImplementedError

    def inertia(self, mass):
        """(3, 3) the inertia of the solid shape of this mass about its centre, in its own frame."""
        raise NotImplementedError(f"a {self.kind} has no finite inertia")

    def sizes(self):
        """(name, value) of the lengths that must be > 0."""
        return ()


class Plane(Shape):
    """The half-space n . x <= offset (static geometry only); its surface is n . x = offset."""

    normal: jax.Array = eqx.field(default=(0.0, 0.0, 1.0), converter=jnp.asarray)
    offset: jax.Array = eqx.field(default=0.0, converter=jnp.asarray)
    kind = "plane"

    def arrays(self):
        n = self.normal / jnp.linalg.norm(self.normal)
        return {"normal": n, "offset": self.offset}


class Sphere(Shape):
    """A ball of the given radius (a disk in planar scenes)."""

    radius: jax.Array = eqx.field(converter=jnp.asarray)
    kind = "sphere"

    def arrays(self):
        return {"radius": self.radius, "position": self.position}

    def inertia(self, mass):
        return 0.4 * mass * self.radius**2 * jnp.eye(3)

    def sizes(self):
        return (("radius", self.radius),)


class Capsule(Shape):
    """The points within `radius` of the segment from -half_length to +half_length on the shape's z axis."""

    radius: jax.Array = eqx.field(converter=jnp.asarray)
    half_length: jax.Array = eqx.field(converter=jnp.asarray)
    kind = "capsule"

    def arrays(self):
        return {
            "radius": self.radius,
            "half_length": self.half_length,
            "position": self.position,
            "orientation": self.orientation,
        }

    def inertia(self, mass):
        """Cylinder plus two hemispherical caps, with the mass shared by volume."""
        r, h = self.radius, self.half_length
        cylinder = math.pi * r**2 * 2 * h
        caps = 4.0 / 3.0 * math.pi * r**3
        mc, ms = mass * cylinder / (cylinder + caps), mass * caps / (cylinder + caps)
        axial = mc * r**2 / 2 + ms * 2 * r**2 / 5
        across = mc * (r**2 / 4 + (2 * h) ** 2 / 12) + ms * (2 * r**2 / 5 + h**2 + 3 * h * r / 4)
        return jnp.diag(jnp.stack([across, across, axial]))

    def sizes(self):
        return (("radius", self.radius), ("half_length", self.half_length))


class Box(Shape):
    """A box with the given (3,) half extents along the shape's axes."""

    half_extents: jax.Array = eqx.field(converter=jnp.asarray)
    kind = "box"

    def arrays(self):
        return {
            "half_extents": jnp.broadcast_to(self.half_extents, (3,)),
            "position": self.position,
            "orientation": self.orientation,
        }

    def inertia(self, mass):
        a, b, c = (2 * jnp.broadcast_to(self.half_extents, (3,))) ** 2
        return mass / 12 * jnp.diag(jnp.stack([b + c, a + c, a + b]))

    def sizes(self):
        return (("half_extents", self.half_extents),)


# ---------------------------------------------------------------------------------------------
# Closed forms. Each takes the two shapes' arrays in world coordinates ("p": centre,
# "R": rotation) and returns gap (C,), normal (C, 3) from the first shape to the
# second, and point (C, 3).


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
    ends = b["p"] + jnp.array([[1.0], [-1.0]]) * b["half_length"] * b["R"][:, 2]
    gap, n, x = jax.vmap(lambda c: _plane_ball(a, c, b["radius"]))(ends)
    return gap, n, x


_CORNERS_3D = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
_CORNERS_2D = np.array([[i, j, 0] for i in (-1, 1) for j in (-1, 1)], float)


def plane_box(a, b, dim):
    """The box's lowest corners: 4 of 8 in 3D, 2 of 4 in planar scenes (the others never touch first)."""
    corners, capacity = (_CORNERS_3D, 4) if dim == 3 else (_CORNERS_2D, 2)
    w = b["p"] + (corners * b["half_extents"]) @ b["R"].T
    n, d = a["normal"], a["offset"]
    gaps = w @ n - d
    _, idx = jax.lax.top_k(-gaps, capacity)
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


def capsule_capsule(a, b, dim):
    """Closest points of the two axis segments (clamped; parallel axes take the first segment's midpoint)."""
    u1, u2 = a["R"][:, 2], b["R"][:, 2]
    h1, h2 = a["half_length"], b["half_length"]
    r = a["p"] - b["p"]
    cos, c, f = u1 @ u2, u1 @ r, u2 @ r
    denom = 1.0 - cos**2
    parallel = denom < 1e-12
    s = jnp.where(parallel, 0.0, (cos * f - c) / jnp.where(parallel, 1.0, denom))
    s = jnp.clip(s, -h1, h1)
    t = jnp.clip(f + s * cos, -h2, h2)
    s = jnp.clip(t * cos - c, -h1, h1)
    return _balls(a["p"] + s * u1, a["radius"], b["p"] + t * u2, b["radius"])


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


def _box_capacity(dim):
    return 4 if dim == 3 else 2


# (kind a, kind b) -> (closed form, capacity(dim)); kinds in the order of KINDS.
COLLIDERS = {
    ("plane", "sphere"): (plane_sphere, lambda dim: 1),
    ("plane", "capsule"): (plane_capsule, lambda dim: 2),
    ("plane", "box"): (plane_box, _box_capacity),
    ("sphere", "sphere"): (sphere_sphere, lambda dim: 1),
    ("sphere", "capsule"): (sphere_capsule, lambda dim: 1),
    ("sphere", "box"): (sphere_box, lambda dim: 1),
    ("capsule", "capsule"): (capsule_capsule, lambda dim: 1),
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
