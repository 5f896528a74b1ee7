"""Box-box, capsule-box and capsule-capsule contacts: separating axes, clipped manifolds, exact distances.

Each function has the signature of the pairs in `_pairs` (world arrays of shape a
and shape b, `dim`) and returns gap (C,), normal (C, 3) from a to b and point
(C, 3), the midpoint of the two witness points.

How a box pair is resolved (3D):
- the separating-axis test (SAT) over the 15 axes: the 3 + 3 face normals and the
  9 edge-edge cross products (an edge pair closer to parallel than `_PARALLEL`
  has no axis; the division is behind a double `where`). The smallest overlap
  over these axes is the exact penetration depth: the faces of the Minkowski
  difference A - B of two boxes have their normals among these 15 axes, the
  penetration depth is the distance from the origin to the nearest face, and
  any other direction u has a support h_{A-B}(u) at least that distance.
- the axis: a face of A is preferred to a face of B, and a face to an edge,
  unless the other separates by more than `_BIAS` times the size of the pair
  (an edge, near touching, by a fraction of the face's separation more:
  `_edge_wins`).
  With parallel faces several axes tie to rounding (a face of A, a face of B,
  edge-edge axes of the edges in the faces); the bias fixes the choice, so a
  box resting on a box gets the same reference face, hence the same points,
  from step to step.
- a face axis: the incident face (the face of the other box most anti-parallel
  to the axis) clipped to the reference face. The clipped polygon's vertices are
  the incident vertices inside the reference rectangle, the reference corners
  inside the incident face, and the crossings of the incident edges with the
  rectangle's sides: 4 + 4 + 16 candidates in fixed arrays with a mask. This is
  the vertex set of the Sutherland-Hodgman clip, without its order (which the
  selection does not need) and without a data-dependent loop. Every point is
  kept, above the reference face or below it: the position-level step needs the
  points that are about to touch. A quadrilateral clipped to a rectangle has at
  most 8 vertices, and all 8 slots are kept, in this order: the deepest (ties
  within `_TIE` of the size go to the largest of x + 0.618 y in the reference
  face, so a flat contact picks the same point every step), the farthest from
  it, the two farthest from the line through those two on either side (the
  widest quadrilateral, as Bullet reduces manifolds), then each next point the
  farthest from those chosen. Fewer than 8 distinct points repeat some. With 4
  slots a box tipping over the edge of the box below lost the polygon's vertex
  on that edge and sank 1.8e-5 m where the second-order bound was 1.0e-5 m;
  with 6 (the octagon's 6 most spread vertices) a 1.1 kg box under a 370 kg
  capsule tipped over a dropped vertex and sank 0.67 mm where the bound was
  0.12 mm (both from the hostile suite's Stewart-Trinkle profile).
  Each gap is the height of the incident point above the reference
  plane: the exact distance of the point to the face. The rows built from n and
  the witness points (`jaxrbd.bodies._model.contacts`) are the exact gradients of these gaps
  for incident vertices, for reference corners under a parallel face and for the
  exact and edge-edge contacts; for a crossing of a tilted incident edge with a
  side of the reference face they leave out the slide of the crossing along the
  edge (the usual approximation of a clipped manifold).
- an edge-edge axis: the closest points of the two edges (twice), and the
  mirror point of each edge in the other box's shadow with its signed distance
  to that box (`_mirror`): nearly parallel edges, or a face resting on an edge,
  touch along a segment and get both its ends; a single point would let the box
  pivot about it and sink at the other end. A point of one box inside the other
  is never deeper than the penetration depth, so the least gap stays exact.
  These are 3 distinct points (slot 0 is the exact one); the other 5 slots hold
  the face polygon's vertices 2 to 6 in the order above (its deepest lies by the
  edge contact), their depths bounded by the penetration depth: a box
  turning from an edge onto a face within the step needs the points of that
  face (with the edge contacts alone a 12 kg box spinning onto a 1 kg box left
  two far corners 15.7 mm deep, the second-order bound being 1.8 mm).
- separated boxes: the SAT separation is only a lower bound of the distance when
  the nearest features are edges or vertices, so the exact distance is computed
  too, as the least of the 8 + 8 vertex-box distances and the 144 edge-edge
  segment distances (the nearest points of two disjoint convex polytopes can
  always be taken on a vertex or on two edges). When the manifold's least gap
  exceeds it (by `_EXACT` of the size), the first slot is replaced by the
  exact closest points. At the switch the two agree.

Capsule-box uses the same steps for the capsule's axis segment and the box (the
axes: the 3 face normals and the 3 cross products of the segment with the box's
edges; the manifold: the segment clipped to the reference face, its two ends, or
on a cross axis beside the face the segment's points on either side of the
closest one), with the radius subtracted. Capsule-capsule keeps the exact
closest points in slot 0 and adds the mirror point of the overlap of the
segments' projections, so that parallel capsules get both ends of their overlap.

The three pair functions are jitted (dim static): the builder's first, eager
call then compiles each once instead of dispatching its few hundred operations
one by one; inside a traced step the jit is inlined.

Planar scenes (dim == 2): boxes are rectangles in the x-y plane; the SAT has the
4 in-plane face normals, the incident edge is clipped to the reference edge (2
points) and the exact distance is the least vertex-rectangle distance.
Capsule-box keeps its 3D form with the axes out of the plane left out.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

_TINY = 1e-30
_PARALLEL = 1e-12  # |u1 x u2|^2 below it: parallel directions (no cross-product axis)
_BIAS = 1e-9  # a face of B (an edge) must separate by this times the size more than a face of A (a face)
_FACE_PREFERENCE = 0.05  # near touching, an edge axis must also separate by this fraction of the face's more
_NEAR = 1e-7  # near touching: the face's separation above -_NEAR times the size
_TIE = 1e-9  # depths within this times the size are tied in the choice of the first point
_EXACT = 1e-10  # a manifold gap above the exact distance by more than this times the size is replaced
_NONE = -1e30  # the separation of an axis that does not exist

# The signs of a box's corners (3D, and the 4 of a rectangle in the x-y plane) and a rectangle's corners in order,
# integers so that they take the precision of the half-extents they scale.
_SIGNS_3D = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], np.int8)
_SIGNS_2D = np.array([[i, j, 0] for i in (-1, 1) for j in (-1, 1)], np.int8)
_QUAD = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]], np.int8)


def _edges():
    """The 12 edges of the unit box: (12, 3) signs of the centre (0 along the edge) and (12, 3) one-hot direction."""
    signs, dirs = [], []
    for i in range(3):
        for s1 in (-1.0, 1.0):
            for s2 in (-1.0, 1.0):
                s = np.zeros(3)
                s[(i + 1) % 3], s[(i + 2) % 3] = s1, s2
                signs.append(s)
                dirs.append(np.eye(3)[i])
    return np.array(signs, np.int8), np.array(dirs, np.int8)


_EDGE_SIGNS, _EDGE_DIRS = _edges()


def _norm(d):
    """|d| and d / |d| (e_z at d = 0), with the double-where guard."""
    sq = jnp.sum(d * d, -1)
    ok = sq > _TINY
    norm = jnp.sqrt(jnp.where(ok, sq, 1.0))
    e_z = jnp.zeros_like(d).at[..., 2].set(1.0)
    return jnp.where(ok, norm, 0.0), jnp.where(ok[..., None], d / norm[..., None], e_z)


def _sign(x):
    """+1 or -1 (+1 at 0)."""
    return jnp.where(x >= 0, 1.0, -1.0)


def _segment_params(c1, u1, h1, c2, u2, h2):
    """(s, t): the closest points c1 + s u1 and c2 + t u2 of two segments, |s| <= h1, |t| <= h2 (unit u1, u2).

    The global minimum of the convex quadratic over the rectangle (Ericson,
    Real-Time Collision Detection, 5.1.9); parallel segments start from s = -h1,
    which gives an end of the overlap. Broadcasts over leading axes.
    """
    r = c1 - c2
    cos, c, f = jnp.sum(u1 * u2, -1), jnp.sum(u1 * r, -1), jnp.sum(u2 * r, -1)
    denom = 1.0 - cos**2
    parallel = denom < _PARALLEL
    s = jnp.where(parallel, -h1, (cos * f - c) / jnp.where(parallel, 1.0, denom))
    s = jnp.clip(s, -h1, h1)
    t = jnp.clip(f + s * cos, -h2, h2)
    s = jnp.clip(t * cos - c, -h1, h1)
    return s, t


def _point_box(x, p, R, h):
    """Distance from the points x (..., 3) outside the box (p, R, h) and the nearest points of the box."""
    c = (x - p) @ R
    closest = jnp.clip(c, -h, h)
    dist, _ = _norm(c - closest)
    return dist, p + closest @ R.T


def _box_edges(p, R, h):
    """The 12 edges of a box: centres (12, 3), unit directions (12, 3), half lengths (12,)."""
    return p + (_EDGE_SIGNS * h) @ R.T, _EDGE_DIRS @ R.T, _EDGE_DIRS @ h


def _separations(L, d, Ra, ha, Rb, hb):
    """SAT separations of two boxes along the unit axes L (k, 3); d = p_b - p_a."""
    return jnp.abs(L @ d) - jnp.abs(L @ Ra) @ ha - jnp.abs(L @ Rb) @ hb


def _cross_axes(U, V):
    """Unit cross products of the rows of U (m, 3) and V (k, 3): (m k, 3) and whether each exists."""
    cross = jnp.cross(U[:, None, :], V[None, :, :]).reshape(-1, 3)
    sq = jnp.sum(cross * cross, -1)
    ok = sq > _PARALLEL
    return jnp.where(ok[:, None], cross / jnp.sqrt(jnp.where(ok, sq, 1.0))[:, None], 0.0), ok


def _edge_wins(sep_edge, sep_face, size):
    """Whether the SAT takes the edge-edge axis over the best face axis.

    The edge must separate by more than `_BIAS` times the size and, near
    touching (the face separated, or overlapping by less than `_NEAR` times the
    size), by more than `_FACE_PREFERENCE` of the face's separation (at least of
    `_NEAR` times the size). A face landing slightly tilted has edge axes within
    a fraction of a degree of its normal that separate by a hair more than the
    face; the single edge-edge point let it turn into the other shape (a
    pyramid landing on a box sank 9.8 mm in a step, then sprang off), while the
    face manifold holds it. When separated the choice changes the points, not
    the exact distance (`_with_exact`); deeper than `_NEAR` the depth stays the
    exact SAT minimum, and within it the face's depth exceeds it by at most
    `_FACE_PREFERENCE * _NEAR` times the size.
    """
    near = sep_face > -_NEAR * size
    margin = jnp.where(near, _FACE_PREFERENCE * jnp.maximum(jnp.abs(sep_face), _NEAR * size), 0.0)
    return sep_edge > sep_face + _BIAS * size + margin


def _nearest(dist, wa, wb):
    """The pair with the least distance: (distance, witness on a, witness on b, unit normal a to b)."""
    k = jnp.argmin(dist)
    _, n = _norm(wb[k] - wa[k])
    return dist[k], wa[k], wb[k], n


def _box_box_distance(pa, Ra, ha, pb, Rb, hb, planar=False):
    """Exact distance of two separated boxes: the least vertex-box and edge-edge distance, with its witnesses.

    planar: rectangles in the x-y plane (the vertices alone; the z extent ignored).
    """
    signs = _SIGNS_2D if planar else _SIGNS_3D
    va = pa + (signs * ha) @ Ra.T
    vb = pb + (signs * hb) @ Rb.T
    if planar:
        inf_z = jnp.array([0.0, 0.0, jnp.inf], ha.dtype)
        ha, hb = ha + inf_z, hb + inf_z
    d1, w1 = _point_box(va, pb, Rb, hb)
    d2, w2 = _point_box(vb, pa, Ra, ha)
    dist, wa, wb = [d1, d2], [va, w2], [w1, vb]
    if not planar:  # the edge pairs as well
        ca, ua, la = _box_edges(pa, Ra, ha)
        cb, ub, lb = _box_edges(pb, Rb, hb)
        ca, ua, la = ca[:, None], ua[:, None], la[:, None]
        s, t = _segment_params(ca, ua, la, cb[None], ub[None], lb[None])
        xa = (ca + s[..., None] * ua).reshape(-1, 3)
        xb = (cb[None] + t[..., None] * ub[None]).reshape(-1, 3)
        dist.append(_norm(xb - xa)[0])
        wa.append(xa)
        wb.append(xb)
    return _nearest(jnp.concatenate(dist), jnp.concatenate(wa), jnp.concatenate(wb))


def _spread(xy, z, valid, tie, count=4):
    """Indices of `count` (>= 4) of the valid points: the deepest, the farthest from it, the widest on either side,
    then each next the farthest from those chosen (repeats once no distinct point is left)."""
    big = jnp.inf
    zmin = jnp.min(jnp.where(valid, z, big))
    near = valid & (z <= zmin + tie)
    i0 = jnp.argmax(jnp.where(near, xy[:, 0] + 0.618 * xy[:, 1], -big))
    rel = xy - xy[i0]
    i1 = jnp.argmax(jnp.where(valid, jnp.sum(rel * rel, -1), -big))
    e = rel[i1]
    area = e[0] * rel[:, 1] - e[1] * rel[:, 0]
    i2 = jnp.argmax(jnp.where(valid, area, -big))
    i3 = jnp.argmin(jnp.where(valid, area, big))
    idx = [i0, i1, i2, i3]
    dist2 = lambda i: jnp.sum((xy - xy[i]) ** 2, -1)
    nearest = jnp.minimum(jnp.minimum(dist2(i0), dist2(i1)), jnp.minimum(dist2(i2), dist2(i3)))
    for _ in range(count - 4):
        i = jnp.argmax(jnp.where(valid, nearest, -big))
        idx.append(i)
        nearest = jnp.minimum(nearest, dist2(i))
    return jnp.stack(idx)


def _face_manifold(p_r, R_r, h_r, k, p_i, R_i, h_i, tie):
    """The incident face of box i clipped to face k of box r (the one facing box i): the clipped polygon.

    Returns the gaps (8,) (heights of the incident points above the reference
    plane), the reference face's outward normal n_r (3,) and the midpoints (8, 3).
    A quadrilateral clipped to a rectangle has at most 8 vertices, so all of them
    are kept; the first 4 are its widest quadrilateral (`_spread`).
    """
    e = R_r[:, k]
    n_r = _sign(e @ (p_i - p_r)) * e
    j, l = (k + 1) % 3, (k + 2) % 3
    frame = jnp.stack([R_r[:, j], R_r[:, l], n_r])  # rows: the reference face's x, y and its normal
    hx, hy = h_r[j], h_r[l]
    c_f = p_r + h_r[k] * n_r
    cosines = n_r @ R_i
    m = jnp.argmax(jnp.abs(cosines))
    o = -_sign(cosines[m]) * R_i[:, m]  # the incident face's outward normal, against n_r
    c_i = p_i + h_i[m] * o
    m1, m2 = (m + 1) % 3, (m + 2) % 3
    f = jnp.stack([R_i[:, m1] * h_i[m1], R_i[:, m2] * h_i[m2]])
    V = (c_i + jnp.asarray(_QUAD) @ f - c_f) @ frame.T  # incident vertices in the reference frame (x, y, z)
    inside_rect = lambda P: (jnp.abs(P[:, 0]) <= hx) & (jnp.abs(P[:, 1]) <= hy)
    # Reference corners under (or over) the incident face, at its height there.
    C = (c_i - c_f) @ frame.T
    oc = frame @ o  # oc[2] <= -1/sqrt(3): the incident face is the most anti-parallel one
    xy = jnp.asarray(_QUAD) * jnp.stack([hx, hy])
    z = C[2] - (oc[0] * (xy[:, 0] - C[0]) + oc[1] * (xy[:, 1] - C[1])) / oc[2]
    P2 = jnp.concatenate([xy, z[:, None]], -1)
    w = (P2 - C) @ frame
    in_face = (jnp.abs(w @ R_i[:, m1]) <= h_i[m1]) & (jnp.abs(w @ R_i[:, m2]) <= h_i[m2])
    # Incident edges crossing the rectangle's four sides.
    A, B = V, jnp.roll(V, -1, axis=0)
    points, valid = [V, P2], [inside_rect(V), in_face]
    for axis, bound, other, other_bound in ((0, hx, 1, hy), (1, hy, 0, hx)):
        for side in (-1.0, 1.0):
            den = B[:, axis] - A[:, axis]
            # An edge within _TIE of parallel to the side crosses it anywhere along an edge of the polygon, next
            # to the points that bound that edge (equal boxes stacked face to face): it is left out.
            ok = jnp.abs(den) > _TIE * jnp.linalg.norm(B - A, axis=-1) + _TINY
            t = (side * bound - A[:, axis]) / jnp.where(ok, den, 1.0)
            P = A + t[:, None] * (B - A)
            points.append(P)
            valid.append(ok & (t >= 0) & (t <= 1) & (jnp.abs(P[:, other]) <= other_bound))
    P = jnp.concatenate(points)
    valid = jnp.concatenate(valid)
    valid = jnp.where(jnp.any(valid), valid, jnp.arange(P.shape[0]) < 4)  # nothing inside: the incident face
    idx = _spread(P[:, :2], P[:, 2], valid, tie, count=8)
    P = P[idx]
    gap = P[:, 2]
    x = c_f + P @ frame - 0.5 * gap[:, None] * n_r
    return gap, n_r, x


def _support_edge(p, R, h, axis, direction):
    """The edge of a box along its local `axis` that is farthest along `direction`: centre, unit direction, half length."""
    s = _sign(direction @ R) * (1.0 - jax.nn.one_hot(axis, 3, dtype=R.dtype))
    return p + R @ (s * h), R[:, axis], h[axis]


def _signed_point_box(x, p, R, h):
    """Signed distance of the point x to the box (inside: minus its depth below the nearest face) and the unit
    normal out of the box at the nearest surface point (x - distance * normal)."""
    c = (x - p) @ R
    dist, n_out = _norm(c - jnp.clip(c, -h, h))
    depth = h - jnp.abs(c)
    inside = jnp.all(depth > 0)
    k = jnp.argmin(depth)
    n_in = jax.nn.one_hot(k, 3, dtype=c.dtype) * _sign(c[k])
    return jnp.where(inside, -depth[k], dist), R @ jnp.where(inside, n_in, n_out)


def _mirror(c, u, l, t0, p, R, h):
    """The point of the edge (c, u, l) mirrored from c + t0 u about the middle of the box's shadow on the edge.

    The shadow is the box's projection onto the edge's line, clamped to the edge.
    Where the edge lies along the box (nearly parallel to a contact line) the
    closest point is one end of the shadow and the mirror the other end; where
    it crosses the box the shadow is short and the mirror near the closest point.
    """
    centre, half = u @ (p - c), jnp.abs(u @ R) @ h
    lo, hi = jnp.clip(centre - half, -l, l), jnp.clip(centre + half, -l, l)
    return c + jnp.clip(lo + hi - t0, -l, l) * u


def _mirror_contact(c, u, l, t0, p, R, h, h_distance):
    """Signed distance and normal (out of the box) of the mirror point of the edge, after one alternation.

    At the end of the shadow the nearest point of the box is a corner, and the
    mirror point's normal would lean along the edge; the point of the edge
    nearest to the box's nearest point (one step of alternating projections)
    gives the normal across the edge. Returns (distance, normal, point on the edge).
    """
    P = _mirror(c, u, l, t0, p, R, h)
    g, n_out = _signed_point_box(P, p, R, h_distance)
    P = c + jnp.clip(u @ (P - g * n_out - c), -l, l) * u
    g, n_out = _signed_point_box(P, p, R, h_distance)
    return g, n_out, P


@functools.partial(jax.jit, static_argnames="dim")
def box_box(a, b, dim):
    """Box-box: SAT, the clipped face manifold or the edge-edge contact, exact distance when separated.

    Capacity 8 in 3D, 2 in planar scenes (see the module docstring).
    """
    if dim == 2:
        return _box_box_2d(a, b)
    pa, Ra, ha, pb, Rb, hb = a["p"], a["R"], a["half_extents"], b["p"], b["R"], b["half_extents"]
    d = pb - pa
    size = jax.lax.stop_gradient(jnp.sum(ha) + jnp.sum(hb))
    sep_face = _separations(jnp.concatenate([Ra.T, Rb.T]), d, Ra, ha, Rb, hb)
    L, ok = _cross_axes(Ra.T, Rb.T)
    sep_edge = jnp.where(ok, _separations(L, d, Ra, ha, Rb, hb), _NONE)
    ka, kb, ke = jnp.argmax(sep_face[:3]), jnp.argmax(sep_face[3:]), jnp.argmax(sep_edge)
    on_b = sep_face[3 + kb] > sep_face[ka] + _BIAS * size
    on_edge = _edge_wins(sep_edge[ke], jnp.where(on_b, sep_face[3 + kb], sep_face[ka]), size)
    # The face manifold, the reference face on a or on b.
    pick = lambda x, y: jnp.where(on_b, y, x)
    gap_f, n_r, x_f = _face_manifold(
        pick(pa, pb), pick(Ra, Rb), pick(ha, hb), pick(ka, kb), pick(pb, pa), pick(Rb, Ra), pick(hb, ha), _TIE * size
    )
    n_f = pick(n_r, -n_r)
    # The edge-edge contact.
    n_e = L[ke] * _sign(L[ke] @ d)
    ca, ua, la = _support_edge(pa, Ra, ha, ke // 3, n_e)
    cb, ub, lb = _support_edge(pb, Rb, hb, ke % 3, -n_e)
    s, t = _segment_params(ca, ua, la, cb, ub, lb)
    xa, xb = ca + s * ua, cb + t * ub
    # With the closest points, the mirror point of each edge in the other box's shadow, with its signed
    # distance to that box: nearly parallel edges touch along a segment and get both its ends.
    gb, nb, Pb = _mirror_contact(cb, ub, lb, t, pa, Ra, ha, ha)
    ga, na, Pa = _mirror_contact(ca, ua, la, s, pb, Rb, hb, hb)
    gap_e = jnp.stack([(xb - xa) @ n_e, gb, (xb - xa) @ n_e, ga])
    n_ee = jnp.stack([n_e, nb, n_e, -na])
    x_e = jnp.stack([0.5 * (xa + xb), Pb - 0.5 * gb * nb, 0.5 * (xa + xb), Pa - 0.5 * ga * na])
    # An edge-edge axis keeps the edge contacts' 3 distinct points and the face polygon's vertices 2 to 6 (its
    # deepest lies by the edge contact): within the step the boxes may turn face to face, and
    # those points are the ones about to touch. A point of one box inside the other is never deeper than the
    # penetration depth (the edge axis' overlap), which bounds their depths.
    n_f = jnp.broadcast_to(n_f, (8, 3))
    gap_fe = jnp.maximum(gap_f[1:6], sep_edge[ke])
    e3 = jnp.array([0, 1, 3])
    gap = jnp.where(on_edge, jnp.concatenate([gap_e[e3], gap_fe]), gap_f)
    n = jnp.where(on_edge, jnp.concatenate([n_ee[e3], n_f[1:6]]), n_f)
    x = jnp.where(on_edge, jnp.concatenate([x_e[e3], x_f[1:6]]), x_f)
    separated = jnp.maximum(jnp.max(sep_face), jnp.max(sep_edge)) > 0
    dist, wa, wb, n_star = _box_box_distance(pa, Ra, ha, pb, Rb, hb)
    return _with_exact(gap, n, x, separated, dist, n_star, 0.5 * (wa + wb), size)[:3]


def _with_exact(gap, n, x, separated, dist, n_star, x_star, size):
    """The exact contact of a separated pair in the slots whose gap is not a distance.

    When separated, a manifold gap is the distance of its point to the reference
    face, so it is at least the exact distance, unless the clip was empty and the
    unclipped incident face stood in: those slots take the exact contact. Slot 0
    takes it as well when every gap exceeds the exact distance (the nearest
    features are edges or vertices outside the reference face).
    """
    tol = _EXACT * size
    replace = separated & (gap < dist - tol)
    replace = replace.at[0].set(separated & (replace[0] | (jnp.min(gap) > dist + tol)))
    gap = jnp.where(replace, dist, gap)
    n = jnp.where(replace[:, None], n_star, n)
    x = jnp.where(replace[:, None], x_star, x)
    return gap, n, x, replace


def _box_box_2d(a, b):
    """Planar box-box: two rectangles in the x-y plane, 2 contacts (the incident edge clipped to the reference edge)."""
    pa, Ra, ha, pb, Rb, hb = a["p"], a["R"], a["half_extents"], b["p"], b["R"], b["half_extents"]
    flat = jnp.array([1.0, 1.0, 0.0], ha.dtype)
    ha, hb = ha * flat, hb * flat  # the z extent plays no part in the plane
    d = pb - pa
    size = jax.lax.stop_gradient(jnp.sum(ha) + jnp.sum(hb))
    sep = _separations(jnp.concatenate([Ra[:, :2].T, Rb[:, :2].T]), d, Ra, ha, Rb, hb)
    ka, kb = jnp.argmax(sep[:2]), jnp.argmax(sep[2:])
    on_b = sep[2 + kb] > sep[ka] + _BIAS * size
    pick = lambda x, y: jnp.where(on_b, y, x)
    p_r, R_r, h_r, k = pick(pa, pb), pick(Ra, Rb), pick(ha, hb), pick(ka, kb)
    p_i, R_i, h_i = pick(pb, pa), pick(Rb, Ra), pick(hb, ha)
    e = R_r[:, k]
    n_r = _sign(e @ (p_i - p_r)) * e
    tx, hx = R_r[:, 1 - k], h_r[1 - k]
    c_f = p_r + h_r[k] * n_r
    cosines = n_r @ R_i[:, :2]
    m = jnp.argmax(jnp.abs(cosines))
    c_i = p_i - _sign(cosines[m]) * h_i[m] * R_i[:, m]
    f = R_i[:, 1 - m] * h_i[1 - m]
    E0, E1 = c_i + f, c_i - f
    x0, x1 = (E0 - c_f) @ tx, (E1 - c_f) @ tx
    dx = x1 - x0
    ok = jnp.abs(dx) > _TINY
    ta, tb = (-hx - x0) / jnp.where(ok, dx, 1.0), (hx - x0) / jnp.where(ok, dx, 1.0)
    inside = jnp.abs(x0) <= hx
    lo = jnp.where(ok, jnp.maximum(0.0, jnp.minimum(ta, tb)), jnp.where(inside, 0.0, 1.0))
    hi = jnp.where(ok, jnp.minimum(1.0, jnp.maximum(ta, tb)), jnp.where(inside, 1.0, 0.0))
    deepest = jnp.where((E1 - E0) @ n_r < 0, 1.0, 0.0)
    empty = lo > hi
    t = jnp.stack([jnp.where(empty, deepest, lo), jnp.where(empty, deepest, hi)])
    P = E0 + t[:, None] * (E1 - E0)
    gap = (P - c_f) @ n_r
    x = P - 0.5 * gap[:, None] * n_r
    n = jnp.broadcast_to(pick(n_r, -n_r), (2, 3))
    separated = jnp.max(sep) > 0
    dist, wa, wb, n_star = _box_box_distance(pa, Ra, ha, pb, Rb, hb, planar=True)
    return _with_exact(gap, n, x, separated, dist, n_star, 0.5 * (wa + wb), size)[:3]


@functools.partial(jax.jit, static_argnames="dim")
def capsule_box(a, b, dim):
    """Capsule-box: the capsule's axis segment against the box, 4 contacts (a capsule flat on a face: both ends).

    The SAT of the segment and the box (3 face normals, 3 cross products of the
    segment with the box's edges; in planar scenes the box's z face and the
    axes out of the plane are left out), less the radius. A face axis: the
    segment clipped to the face, its two ends (twice); a cross axis: the closest
    points of the segment and the box edge, the mirror point (`_mirror`), and
    the two ends of the face clip with their depths bounded by the penetration
    depth (with the first two alone a 370 kg capsule turning onto a 1 kg box
    ended a step 7.65 mm deep in it, the second-order bound being 3.2 mm). When
    the segment is outside the box, the exact distance (ends to box, segment to
    the 12 edges) less the radius replaces slot 0 where the clipped ends do not
    reach it.

    A cross axis whose face clip is empty (the segment across an edge, beside
    the face) has no face points: slots 2 and 3 take the segment's points r / 4
    on either side of the closest one, each with its own distance to the box.
    Across an edge the gap is the least distance over the segment's points, and
    that least point slides along the segment as the capsule turns; the one
    linearized contact holds only its own point. With the slots repeating the
    closest point, a capsule turning at 1.3 rad/s across an edge at 21 degrees
    slid its closest point 14 mm in a step and ended 0.137 mm deep, the
    second-order bound being 0.085 mm. The distance of the segment's points to
    the edge bends over a length of about r / sin(angle); points at 0.09 to 0.25
    half lengths (r / 4 is 0.18) held that step, 0.5 did not.
    """
    c, u, hl, r = a["p"], a["R"][:, 2], a["half_length"], a["radius"]
    pb, Rb, hb = b["p"], b["R"], b["half_extents"]
    d = pb - c
    size = jax.lax.stop_gradient(hl + r + jnp.sum(hb))
    sep_of = lambda L: jnp.abs(L @ d) - hl * jnp.abs(L @ u) - jnp.abs(L @ Rb) @ hb
    sep_face = sep_of(Rb.T)
    L, ok = _cross_axes(u[None], Rb.T)
    sep_cross = jnp.where(ok, sep_of(L), _NONE)
    if dim == 2:  # the z face and the cross products with x, y leave the plane
        sep_face = sep_face.at[2].set(_NONE)
        sep_cross = sep_cross.at[:2].set(_NONE)
    kf, ke = jnp.argmax(sep_face), jnp.argmax(sep_cross)
    on_edge = _edge_wins(sep_cross[ke] - r, sep_face[kf] - r, size)  # the surfaces' separations
    # The face manifold: the segment clipped to face kf (outward normal n_r, towards the capsule).
    e = Rb[:, kf]
    n_r = -_sign(e @ d) * e
    c_f = pb + hb[kf] * n_r
    lo, hi = -hl, hl
    for axis in (1, 2):
        tx = Rb[:, (kf + axis) % 3]
        bound = hb[(kf + axis) % 3]
        if dim == 2:
            bound = jnp.where((kf + axis) % 3 == 2, jnp.inf, bound)  # unbounded along z in the plane
        x0, ux = (c - c_f) @ tx, u @ tx
        okx = jnp.abs(ux) > _TINY
        ta = (-bound - x0) / jnp.where(okx, ux, 1.0)
        tb = (bound - x0) / jnp.where(okx, ux, 1.0)
        inside = jnp.abs(x0) <= bound
        lo = jnp.maximum(lo, jnp.where(okx, jnp.minimum(ta, tb), jnp.where(inside, -hl, hl)))
        hi = jnp.minimum(hi, jnp.where(okx, jnp.maximum(ta, tb), jnp.where(inside, hl, -hl)))
    deepest = -hl * _sign(u @ n_r)
    empty = lo > hi
    s = jnp.stack([jnp.where(empty, deepest, lo), jnp.where(empty, deepest, hi)])
    P = c + s[:, None] * u
    z = (P - c_f) @ n_r
    gap_f = z - r
    x_f = P - 0.5 * (r + z)[:, None] * n_r
    # The cross axis: the segment against the box edge farthest along -n.
    n_e = L[ke] * _sign(L[ke] @ d)
    ce, ue, le = _support_edge(pb, Rb, hb, ke, -n_e)
    s_e, t_e = _segment_params(c, u, hl, ce, ue, le)
    xa, xb = c + s_e * u, ce + t_e * ue
    hb_d = hb.at[2].set(jnp.inf) if dim == 2 else hb  # planar: unbounded along z

    def capsule_contact(g, n_out, P):
        """The contact of the capsule's sphere at the segment point P, whose signed distance to the box is g along
        n_out (out of the box): gap, normal (capsule to box), midpoint."""
        return g - r, -n_out, P - 0.5 * (r + g) * n_out

    def mirrored(s0):
        """The contact of the mirror of the segment point s0 in the box's shadow."""
        return capsule_contact(*_mirror_contact(c, u, hl, s0, pb, Rb, hb, hb_d))

    g1, n1, x1 = mirrored(s_e)
    gap_e = jnp.stack([(xb - xa) @ n_e - r, g1])
    n_e = jnp.stack([n_e, n1])
    x_e = jnp.stack([xa + (r + 0.5 * gap_e[0]) * n_e[0], x1])
    # A cross axis keeps the face manifold's two ends beside its contacts, their depths bounded by the
    # penetration depth (as for box-box): within the step the capsule may turn onto the face.
    n_f = jnp.broadcast_to(-n_r, (2, 3))
    gap = jnp.where(on_edge, jnp.concatenate([gap_e, jnp.maximum(gap_f, gap_e[0])]), jnp.concatenate([gap_f, gap_f]))
    n = jnp.where(on_edge, jnp.concatenate([n_e, n_f]), jnp.concatenate([n_f, n_f]))
    x = jnp.where(on_edge, jnp.concatenate([x_e, x_f]), jnp.concatenate([x_f, x_f]))
    # The segment outside the box: its exact distance.
    outside = jnp.maximum(jnp.max(sep_face), jnp.max(sep_cross)) > 0
    ends = c + jnp.array([[-1], [1]], jnp.int8) * hl * u
    d1, w1 = _point_box(ends, pb, Rb, hb_d)
    ce, ue, le = _box_edges(pb, Rb, hb)
    s_k, t_k = _segment_params(c, u, hl, ce, ue, le)
    xa_e, xb_e = c + s_k[:, None] * u, ce + t_k[:, None] * ue
    dist, wa, wb, n_star = _nearest(
        jnp.concatenate([d1, _norm(xb_e - xa_e)[0]]),
        jnp.concatenate([ends, xa_e]),
        jnp.concatenate([w1, xb_e]),
    )
    gap_star = dist - r
    gap, n, x, replaced = _with_exact(gap, n, x, outside, gap_star, n_star, wa + (r + 0.5 * gap_star) * n_star, size)
    # Slot 0 replaced: slot 1 takes the mirror of the exact point (a capsule along a box edge gets both ends).
    s_0 = jnp.where(replaced[0], (wa - c) @ u, s_e)
    g1, n1, x1 = mirrored(s_0)
    gap = gap.at[1].set(jnp.where(replaced[0], g1, gap[1]))
    n = n.at[1].set(jnp.where(replaced[0], n1, n[1]))
    x = x.at[1].set(jnp.where(replaced[0], x1, x[1]))
    # A cross axis with an empty face clip (the segment across a box edge, beside the face): slots 2 and 3 take the
    # segment's points r / 4 on either side of the closest one, with their own distances to the box.
    s_23 = jnp.clip(s_0 + jnp.array([-0.25, 0.25], r.dtype) * r, -hl, hl)
    g23, n23, x23 = jax.vmap(lambda s: capsule_contact(*_signed_point_box(c + s * u, pb, Rb, hb_d), c + s * u))(s_23)
    beside = on_edge & empty
    return (
        gap.at[2:].set(jnp.where(beside, g23, gap[2:])),
        n.at[2:].set(jnp.where(beside, n23, n[2:])),
        x.at[2:].set(jnp.where(beside, x23, x[2:])),
    )


@functools.partial(jax.jit, static_argnames="dim")
def capsule_capsule(a, b, dim):
    """Capsule-capsule, 2 contacts: the closest points of the axis segments, and the mirror point of the overlap.

    Slot 0 is exact: the closest points of the two segments. Slot 1 takes the
    point of the first segment mirrored about the middle of the projection of
    the second segment onto it (clamped to the first), paired with its closest
    point on the second segment. For parallel or nearly parallel segments the
    closest point is an end of that overlap, so the two slots are its two ends
    and a capsule lying on another is held at both; for crossing segments the
    mirror point is the closest point itself (or near it), and the slot repeats
    it. The mirror point is continuous wherever the closest points are.
    """
    c1, u1, h1, r1 = a["p"], a["R"][:, 2], a["half_length"], a["radius"]
    c2, u2, h2, r2 = b["p"], b["R"][:, 2], b["half_length"], b["radius"]
    s, t = _segment_params(c1, u1, h1, c2, u2, h2)
    centre, half = u1 @ (c2 - c1), h2 * jnp.abs(u1 @ u2)
    s_lo, s_hi = jnp.clip(centre - half, -h1, h1), jnp.clip(centre + half, -h1, h1)
    s1 = jnp.clip(s_lo + s_hi - s, -h1, h1)
    t1 = jnp.clip(u2 @ (c1 + s1 * u1 - c2), -h2, h2)
    pa = c1 + jnp.stack([s, s1])[:, None] * u1
    pb = c2 + jnp.stack([t, t1])[:, None] * u2
    dist, n = _norm(pb - pa)
    gap = dist - r1 - r2
    return gap, n, pa + (r1 + 0.5 * gap)[:, None] * n
