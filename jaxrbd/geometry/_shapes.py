"""Primitive shapes: plane, sphere, capsule, box and convex mesh, with array leaves and a pose on their body."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._validate import as_array, check_value, host_numpy, is_traced
from ._convex import hull

KINDS = ("plane", "sphere", "capsule", "box", "mesh")


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

    position: jax.Array = eqx.field(default=(0.0, 0.0, 0.0), converter=as_array, kw_only=True)
    orientation: jax.Array = eqx.field(default=(1.0, 0.0, 0.0, 0.0), converter=as_array, kw_only=True)
    mu: jax.Array | None = eqx.field(default=None, kw_only=True)
    restitution: jax.Array | None = eqx.field(default=None, kw_only=True)

    kind = ""

    def __check_init__(self):
        self.check()

    def check(self, where=""):
        """ValueError naming the field (and `where`, such as " of 'ball'") when a leaf is out of range.

        Runs when the shape is made, and again when a scene is built (a leaf may have
        been replaced since); traced leaves are checked for their shapes alone.
        """
        name = lambda field: f"{self.kind or 'shape'} {field}{where}"
        check_value(name("position"), self.position, shape=(3,))
        check_value(name("orientation"), self.orientation, shape=(4,), nonzero=True)
        check_value(name("mu"), self.mu, shape=(), nonnegative=True)
        check_value(name("restitution"), self.restitution, shape=(), unit_interval=True)
        for field, value, shape in self.sizes():
            check_value(name(field), value, shape=shape, positive=True)

    def arrays(self):
        """The shape's geometric leaves as a dict of arrays (stacked per kind by the scene)."""
        raise NotImplementedError

    def inertia(self, mass):
        """(3, 3) the inertia of the solid shape of this mass about its centre, in its own frame."""
        raise NotImplementedError(f"a {self.kind} has no finite inertia")

    def sizes(self):
        """(name, value, accepted shapes) of the lengths that must be > 0."""
        return ()

    def centroid(self):
        """(3,) the centre of mass of the solid shape in its own frame (the origin unless said)."""
        return np.zeros(3)


class Plane(Shape):
    """The half-space n . x <= offset (static geometry only); its surface is n . x = offset."""

    normal: jax.Array = eqx.field(default=(0.0, 0.0, 1.0), converter=as_array)
    offset: jax.Array = eqx.field(default=0.0, converter=as_array)
    kind = "plane"

    def check(self, where=""):
        super().check(where)
        check_value(f"plane normal{where}", self.normal, shape=(3,), nonzero=True)
        check_value(f"plane offset{where}", self.offset, shape=())

    def arrays(self):
        xp = host_numpy(self.normal)
        n = xp.asarray(self.normal)
        n = n / xp.linalg.norm(n)
        return {"normal": n, "offset": self.offset}


class Sphere(Shape):
    """A ball of the given radius (a disk in planar scenes)."""

    radius: jax.Array = eqx.field(converter=as_array)
    kind = "sphere"

    def arrays(self):
        return {"radius": self.radius, "position": self.position}

    def inertia(self, mass):
        xp = host_numpy(mass, self.radius)
        return 0.4 * mass * xp.asarray(self.radius) ** 2 * xp.eye(3)

    def sizes(self):
        return (("radius", self.radius, ()),)


class Capsule(Shape):
    """The points within `radius` of the segment from -half_length to +half_length on the shape's z axis."""

    radius: jax.Array = eqx.field(converter=as_array)
    half_length: jax.Array = eqx.field(converter=as_array)
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
        xp = host_numpy(mass, self.radius, self.half_length)
        r, h = xp.asarray(self.radius), xp.asarray(self.half_length)
        cylinder = math.pi * r**2 * 2 * h
        caps = 4.0 / 3.0 * math.pi * r**3
        mc, ms = mass * cylinder / (cylinder + caps), mass * caps / (cylinder + caps)
        axial = mc * r**2 / 2 + ms * 2 * r**2 / 5
        across = mc * (r**2 / 4 + (2 * h) ** 2 / 12) + ms * (2 * r**2 / 5 + h**2 + 3 * h * r / 4)
        return xp.diag(xp.stack([across, across, axial]))

    def sizes(self):
        return (("radius", self.radius, ()), ("half_length", self.half_length, ()))


class Box(Shape):
    """A box with the given (3,) half extents along the shape's axes (a scalar: a cube)."""

    half_extents: jax.Array = eqx.field(converter=as_array)
    kind = "box"

    def arrays(self):
        return {
            "half_extents": host_numpy(self.half_extents).broadcast_to(self.half_extents, (3,)),
            "position": self.position,
            "orientation": self.orientation,
        }

    def inertia(self, mass):
        xp = host_numpy(mass, self.half_extents)
        a, b, c = (2 * xp.broadcast_to(xp.asarray(self.half_extents), (3,))) ** 2
        return mass / 12 * xp.diag(xp.stack([b + c, a + c, a + b]))

    def sizes(self):
        return (("half_extents", self.half_extents, ((), (3,))),)


def _points(value):
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return value


class ConvexMesh(Shape):
    """The convex hull of the given (n, 3) points in the shape frame (n >= 4, spanning a solid).

    Points inside the hull are ignored. The hull's topology (its faces, coplanar
    triangles merged, as polygons of vertex indices, its edges and distinct edge
    directions) and its mass properties are computed on the host
    (`_convex.hull`). The hull's vertices are a leaf of the scene's parameters
    (`system.params.shapes["mesh"]["vertices"]`): the contacts compute the face
    planes, polygons and edges from them in the step, so gradients with respect
    to the vertices are exact while the topology holds (moved vertices keep
    their faces; the mass and inertia are leaves of their own). `inertia` is
    about the centroid, which need not be the shape's origin (`centroid()`; the
    builder adds the offset). 3D scenes only.
    """

    vertices: np.ndarray = eqx.field(converter=_points)
    kind = "mesh"

    def check(self, where=""):
        super().check(where)
        name = f"mesh vertices{where}"
        v = self.vertices
        if is_traced(v):
            raise ValueError(f"{name} must be concrete (host) numbers, not traced values")
        if not isinstance(v, np.ndarray) or v.ndim != 2 or v.shape[1] != 3:
            raise ValueError(
                f"{name} must be an array of shape (n, 3), got {np.shape(v) if isinstance(v, np.ndarray) else v!r}"
            )
        if v.shape[0] < 4:
            raise ValueError(f"{name} must hold at least 4 points, got {v.shape[0]}")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} must be finite, got {v.tolist()!r}")
        try:
            hull(v)
        except ValueError as err:
            raise ValueError(f"{name} must span a solid (nonzero volume): {err}") from None

    @property
    def _hull(self):
        return hull(self.vertices)

    @property
    def volume(self):
        """The hull's volume (host float)."""
        return float(self._hull["volume"])

    def arrays(self):
        h = self._hull
        out = {key: jnp.asarray(h[key]) for key in ("vertices", "face_index", "edge_index", "direction_index")}
        out.update(position=self.position, orientation=self.orientation)
        return out

    def inertia(self, mass):
        return mass * self._hull["inertia"]

    def centroid(self):
        return self._hull["centroid"]
