"""Which shape pairs of a scene may start interpenetrating: a separating-axis test on the host, with numpy.

`SceneBuilder.build` warns when bodies start overlapping. The exact depths come from the
scene's own contact geometry, which compiles an XLA program (seconds for box-box pairs);
this test runs first and clears the pairs that a separating axis shows apart or merely
touching, so that building a scene whose bodies start apart or resting compiles nothing.

Each shape's projection onto an axis n is an interval: a sphere's is c.n +- r, a capsule's
c.n +- (h |a.n| + r), a box's c.n +- sum_i h_i |R_i.n|, a mesh's the extremes of its
vertices. Where the two intervals overlap by at most the tolerance on some axis, the
shapes' penetration depth (the least overlap over all directions) is at most the
tolerance too. Only pairs that no tried axis clears go to the exact test; the axes are
the shapes' frame axes, a mesh's face normals, their cross products and the line through
the centres, and a plane's normal against the other shape's support (exact).
"""

import itertools
from typing import NamedTuple

import numpy as np

from .. import _rotation as rot
from ..geometry._convex import hull


class Solid(NamedTuple):
    """A shape carried at a pose: its kind, world centre and rotation, the shape, and its candidate axes."""

    kind: str
    centre: np.ndarray
    rotation: np.ndarray
    shape: object
    axes: list


def solid(shape, p, R):
    """The `Solid` of a shape carried at the pose (p, R)."""
    p, R = np.asarray(p, float), np.asarray(R, float)
    Rs = R @ rot.to_matrix(rot.normalize(np.asarray(shape.orientation, float)))
    kind = shape.kind
    if kind in ("sphere", "plane"):
        axes = []
    elif kind == "capsule":
        axes = [Rs[:, 2]]
    else:
        axes = list(Rs.T)
        if kind == "mesh":
            axes += list(hull(shape.vertices)["normals"] @ Rs.T)
    return Solid(kind, p + R @ np.asarray(shape.position, float), Rs, shape, axes)


def _interval(solid, n):
    """(lo, hi) of the solid's projection onto the unit vector n."""
    kind, c, Rs, shape, _ = solid
    local = Rs.T @ n
    if kind == "mesh":
        x = np.asarray(shape.vertices, float) @ local
        return c @ n + x.min(), c @ n + x.max()
    if kind == "sphere":
        half = float(shape.radius)
    elif kind == "capsule":
        half = float(shape.half_length) * abs(local[2]) + float(shape.radius)
    else:  # box
        half = float(np.abs(np.broadcast_to(np.asarray(shape.half_extents, float), (3,))) @ np.abs(local))
    return c @ n - half, c @ n + half


def may_overlap(a, b, tol):
    """False where the solids (`solid`) are shown apart or touching to within tol; True where they may overlap."""
    if "plane" in (a.kind, b.kind):
        plane, other = (a, b) if a.kind == "plane" else (b, a)
        n = np.asarray(plane.shape.normal, float)
        n = n / np.linalg.norm(n)
        return float(plane.shape.offset) - _interval(other, n)[0] > tol
    ua, ub = a.axes, b.axes
    candidates = ua + ub + [np.cross(u, v) for u, v in itertools.product(ua, ub)] + [b.centre - a.centre]
    for n in candidates:
        size = np.linalg.norm(n)
        if size < 1e-9:
            continue
        n = n / size
        (lo_a, hi_a), (lo_b, hi_b) = _interval(a, n), _interval(b, n)
        if min(hi_a - lo_b, hi_b - lo_a) <= tol:
            return False
    return True
