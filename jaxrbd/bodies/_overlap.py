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

import numpy as np

from .. import _rotation as rot
from ..geometry._convex import hull


def solid(shape, p, R):
    """(kind, world centre, world rotation, shape) of a shape carried at the pose (p, R)."""
    Rs = R @ rot.to_matrix(rot.normalize(np.asarray(shape.orientation, float)))
    return shape.kind, p + R @ np.asarray(shape.position, float), Rs, shape


def _interval(solid, n):
    """(lo, hi) of the solid's projection onto the unit vector n."""
    kind, c, Rs, shape = solid
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


def _axes(solid):
    kind, _, Rs, shape = solid
    if kind == "sphere":
        return []
    if kind == "capsule":
        return [Rs[:, 2]]
    axes = list(Rs.T)
    if kind == "mesh":
        axes += list(hull(shape.vertices)["normals"] @ Rs.T)
    return axes


def may_overlap(a, b, tol):
    """False where the solids (`solid`) are shown apart or touching to within tol; True where they may overlap."""
    if "plane" in (a[0], b[0]):
        plane, other = (a, b) if a[0] == "plane" else (b, a)
        n = np.asarray(plane[3].normal, float)
        n = n / np.linalg.norm(n)
        return float(plane[3].offset) - _interval(other, n)[0] > tol
    ua, ub = _axes(a), _axes(b)
    candidates = ua + ub + [np.cross(u, v) for u, v in itertools.product(ua, ub)] + [b[1] - a[1]]
    for n in candidates:
        size = np.linalg.norm(n)
        if size < 1e-9:
            continue
        n = n / size
        (lo_a, hi_a), (lo_b, hi_b) = _interval(a, n), _interval(b, n)
        if min(hi_a - lo_b, hi_b - lo_a) <= tol:
            return False
    return True


def body_pose(q, dim):
    """(p (3,), R (3, 3)) of a body from its coordinates q (3D: position and quaternion; planar: x, y, theta)."""
    q = np.asarray(q, float)
    if dim == 3:
        return q[:3], rot.to_matrix(rot.normalize(q[3:7]))
    return np.array([q[0], q[1], 0.0]), rot.rotation_z(q[2])
