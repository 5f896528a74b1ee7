"""Convex polytopes given by vertices (`ConvexMesh`): the hull on the host, then plane, sphere, capsule, box and
mesh contacts with fixed work under jit.

Host side (`hull`): the convex hull of the points (scipy's Qhull), its triangles
merged into face planes (coplanar to `_COPLANAR` of the size), each face a
polygon ordered counter-clockwise about its outward normal, the unique edges and
edge directions, the bounding radius about the shape's origin, and the volume,
centroid and inertia of the solid of uniform density (the hull split into
tetrahedra from an interior point). A mesh's leaves are its vertices and the
topology as index tables (face polygons, edges, one edge per distinct
direction); the step computes the planes, polygons, edges and directions from
the vertices (`_world`), so they follow a moved vertex and its derivative.
Meshes of one scene are padded to common counts by repeating an entry (a
repeated vertex, face, edge or direction changes no support, no separation and
no clip), so the counts are static.

Narrow phase (each pair function has the signature of `_pairs`):
- plane-mesh, 8 contacts: the signed distances of the vertices to the plane (exact per vertex): the 4
  lowest (more than 4 tied with the lowest, as on a resting face of more than 4 vertices: the widest 4),
  then the 4 lowest of the others. With 4 a hull rocking on a nearly level face of 5 or more vertices let
  the fifth fall 8 mm through the floor in a step.
- sphere-mesh: the exact signed distance of the centre to the polytope: inside,
  the largest of the face-plane distances; outside, the nearest of the face
  projections that fall inside their face and the nearest points of the edges.
- capsule-mesh: the separating-axis test of the axis segment and the polytope
  (the face normals and the cross products of the segment with the edge
  directions), less the radius; on a face axis the segment clipped to the face
  (its two extreme points), on an edge axis the closest points of the segment
  and the supporting edge (twice). Separated: the exact distance (segment ends
  against faces, segment against edges).
- box-mesh and mesh-mesh: the box as a mesh of 8 vertices, 6 faces, 12 edges
  and 3 directions; the SAT over the face normals of both and the cross
  products of their edge directions (the faces of the Minkowski difference of
  two polytopes have their normals among these, so the least overlap is the
  exact penetration depth); a face of A preferred to a face of B and a face to
  an edge unless the other separates by more than `_BIAS` of the size (as for
  box-box: parallel faces get the same reference face every step; an edge near
  touching by a fraction more, `_boxes._edge_wins`). A face axis:
  the incident face (the most anti-parallel face of the other shape) clipped to
  the reference face: incident vertices inside the reference prism, reference
  vertices inside the incident face (at the incident face's height), and the
  crossings of the incident edges with the reference sides, and the 8 lowest
  vertices of the other shape inside the reference prism (on a hull of many
  small faces the deepest vertex need not lie on the incident face), in fixed
  arrays with a mask, each point once. The first 4 contacts are the 4 lowest,
  or, where more than 4 lie within `_BAND` of the other shape's radius of the
  lowest (a face resting or nearly), the widest 4 of those (`_boxes._spread`);
  each gap is the height of its point above the reference plane. Box-mesh, and
  mesh-mesh where a mesh has more than 8 vertices (`mesh_mesh_count`; else 4
  contacts), keep 8: the other 4 are the lowest of the rest, those within the
  band first (a tumbling
  hull of 11 vertices had its fifth lowest vertex, 3 cm above a table, inside it
  after one step), among those points and the vertices the clip does not see:
  the `_NEAR` vertices of each polytope nearest the other (of the reference one
  off the reference face, of the incident one outside the reference prism), at
  their exact signed distance with the normal of the nearest face
  (`_point_mesh`), but not those within the band of a clipped point (faces of
  one outline resting on each other would give each corner twice). A hull
  landing on a small facet of a curved hull had every clipped point under that
  facet, and a vertex 5 mm off the neighbouring facet went 19 mm into it in one
  step. An edge axis: the closest
  points of the two supporting edges in slot 0, the mirror point of each edge in
  the other polytope's shadow in slots 1 and 2 (`_mirror_contact`, as for box-box:
  nearly parallel edges touch along a segment and get both its ends), and in the
  other slots the points 2 onwards of the better face axis' manifold, their depths
  bounded by the penetration depth (a hull pivoting on an edge turns onto a face
  within the step, and those are the points about to touch). Separated: the exact
  distance (vertex-face projections inside the face, and every edge pair)
  replaces the slots whose gap is not a distance (`_boxes._with_exact`).

A slot left without a point of its own (fewer distinct points than slots) repeats the lowest with its gap
raised by the pair's size, so it carries no impulse (`_spare`).

Meshes are 3D only (a planar scene with a mesh raises).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._validate import host_numpy
from ._boxes import (
    _NONE,
    _QUAD,
    _SIGNS_3D,
    _TINY,
    _cross_axes,
    _edge_wins,
    _norm,
    _segment_params,
    _sign,
    _spread,
    _with_exact,
)

_BIAS = 1e-9  # as in _boxes: the preference of a face of A, then of B, then of an edge, times the size
_TIE = 1e-9  # depths within this times the size are tied in the choice of the first point
_INSIDE = 1e-9  # point-in-polygon tolerance, times the edge length and the size
# A face manifold spreads its first 4 points over those within this times the incident radius of the lowest.
_BAND = 0.05
_LOWEST = 8  # the lowest vertices of the incident polytope inside the reference prism join a face manifold
_NEAR = 4  # the vertices of each polytope nearest the other that the clip does not see join an 8-point manifold
_COPLANAR = 1e-9  # hull triangles whose planes agree to this times the size form one face
_MESH_KEYS = ("vertices", "face_index", "edge_index", "direction_index")  # a mesh's leaves (`ConvexMesh.arrays`)


# ---------------------------------------------------------------------------------------------- host side


def _ordered(points, idx, normal):
    """The polygon's vertex indices ordered counter-clockwise about the normal."""
    P = points[idx]
    c = P.mean(0)
    t = P[0] - c
    t = t / np.linalg.norm(t)
    o = np.cross(normal, t)
    angle = np.arctan2((P - c) @ o, (P - c) @ t)
    return [idx[i] for i in np.argsort(angle)]


@functools.lru_cache(maxsize=256)
def _hull_cached(data, n):
    from scipy.spatial import ConvexHull, QhullError

    points = np.frombuffer(data, float).reshape(n, 3)
    try:
        h = ConvexHull(points)
    except (QhullError, ValueError) as err:
        raise ValueError(f"the points span no solid (zero volume): {str(err).splitlines()[0]}") from None
    size = np.max(np.linalg.norm(points - points.mean(0), axis=1))
    if not h.volume > 1e-12 * size**3:
        raise ValueError(f"the points span no solid (volume {h.volume:g})")
    # Merge coplanar triangles into faces.
    planes, members = [], []
    for simplex, eq in zip(h.simplices, h.equations):
        for k, (nrm, off) in enumerate(planes):
            if abs(nrm @ eq[:3] - 1) < _COPLANAR and abs(off + eq[3]) < _COPLANAR * size:
                members[k].update(simplex.tolist())
                break
        else:
            planes.append((eq[:3], -eq[3]))
            members.append(set(simplex.tolist()))
    used = sorted(set().union(*members))
    renum = {v: i for i, v in enumerate(used)}
    V = points[used]
    normals, offsets, polys = [], [], []
    for (nrm, _), mem in zip(planes, members):
        idx = _ordered(V, [renum[v] for v in mem], nrm)
        normals.append(nrm)
        offsets.append(np.mean(V[idx] @ nrm))
        polys.append(idx)
    K = max(len(p) for p in polys)
    face_index = np.array([p + [p[-1]] * (K - len(p)) for p in polys], np.int32)
    edge_index = np.array(sorted({tuple(sorted((p[i], p[(i + 1) % len(p)]))) for p in polys for i in range(len(p))}))
    E = V[edge_index]
    directions, direction_index = [], []
    for k, (a, b) in enumerate(E):
        u = (b - a) / np.linalg.norm(b - a)
        if not any(np.sum(np.cross(u, w) ** 2) < 1e-18 for w in directions):
            directions.append(u)
            direction_index.append(k)
    # Mass properties: tetrahedra from an interior point over the fan of each face.
    ref = V.mean(0)
    volume, first, second = 0.0, np.zeros(3), np.zeros((3, 3))
    for nrm, p in zip(normals, polys):
        for i in range(1, len(p) - 1):
            a, b, c = V[p[0]] - ref, V[p[i]] - ref, V[p[i + 1]] - ref
            det = np.linalg.det(np.stack([a, b, c]))  # > 0: counter-clockwise about the outward normal
            volume += det / 6
            first += det / 24 * (a + b + c)
            s = a + b + c
            second += det / 120 * (np.outer(a, a) + np.outer(b, b) + np.outer(c, c) + np.outer(s, s))
    centroid = first / volume
    cov = second / volume - np.outer(centroid, centroid)  # per unit mass, about the centroid
    inertia = np.trace(cov) * np.eye(3) - cov
    return {
        "vertices": V,
        "normals": np.array(normals),
        "offsets": np.array(offsets),
        "faces": V[face_index],
        "edges": E,
        "directions": np.array(directions),
        "face_index": face_index,
        "edge_index": edge_index.astype(np.int32),
        "direction_index": np.array(direction_index, np.int32),
        "radius": np.max(np.linalg.norm(V, axis=1)),
        "volume": volume,
        "centroid": centroid + ref,
        "inertia": inertia,
    }


def hull(vertices):
    """The convex hull of (n, 3) points on the host: a dict of numpy arrays (see the module docstring).

    Raises ValueError when the points span no solid.
    """
    v = np.ascontiguousarray(vertices, dtype=float)
    return _hull_cached(v.tobytes(), v.shape[0])


def pad_meshes(arrays):
    """Pad the mesh arrays of several shapes (`ConvexMesh.arrays`) to common counts so that they stack: each
    table repeats its first entry, and a face's vertex indices its last (the faces and edges index the mesh's
    own vertices, which only gain copies of the first)."""
    if not arrays or "face_index" not in arrays[0]:
        return arrays
    xp, out = host_numpy(arrays), []
    K = max(a["face_index"].shape[1] for a in arrays)
    sizes = {key: max(a[key].shape[0] for a in arrays) for key in _MESH_KEYS}
    for a in arrays:
        a = dict(a)
        faces = a["face_index"]
        if faces.shape[1] < K:
            a["face_index"] = xp.concatenate([faces, xp.repeat(faces[:, -1:], K - faces.shape[1], axis=1)], axis=1)
        for key in _MESH_KEYS:
            x = a[key]
            if sizes[key] > x.shape[0]:
                a[key] = xp.concatenate([x, xp.repeat(x[:1], sizes[key] - x.shape[0], axis=0)])
        out.append(a)
    return out


# ---------------------------------------------------------------------------------------------- narrow phase


def _world(m):
    """The mesh in world coordinates (`_posed`), its face planes, polygons, edges and edge directions computed
    from its vertices and the hull's index tables, so that they follow the vertices (a leaf) and their
    derivatives: a face's normal is the unit Newell normal of its polygon (the area-weighted normal,
    counter-clockwise about the outward side) and its offset the mean of its vertices' heights along it."""
    V = jnp.asarray(m["vertices"], m["p"].dtype)  # the pose's precision
    faces, edges = m["face_index"], m["edge_index"]
    P = V[faces]  # (f, k, 3); a polygon padded by repeating its last vertex
    _, n = _norm(jnp.sum(jnp.cross(P, jnp.roll(P, -1, axis=1)), axis=1))
    first = jnp.concatenate([jnp.ones_like(faces[:, :1], bool), faces[:, 1:] != faces[:, :-1]], axis=1)
    d = jnp.sum(jnp.where(first, jnp.sum(P * n[:, None, :], -1), 0.0), -1) / jnp.sum(first, -1)
    E = V[edges]
    _, U = _norm(E[m["direction_index"], 1] - E[m["direction_index"], 0])
    return _posed(m["p"], m["R"], V, n, d, P, E, U, mesh_radius(V))


def mesh_radius(V):
    """(...,) the distance of the farthest of the vertices V (..., v, 3) from the shape's origin."""
    return jnp.sqrt(jnp.max(jnp.sum(V * V, -1), -1))


def _posed(p, R, V, n, d, P, E, U, radius):
    """A polytope given in its own frame posed at (p, R): vertices V (v, 3), face normals n (f, 3) and offsets
    d (f,), polygons P (f, k, 3), edges E (e, 2, 3), edge directions U (u, 3), and the bounding radius."""
    n = n @ R.T
    return {
        "V": p + V @ R.T,
        "n": n,
        "d": d + n @ p,
        "P": p + P @ R.T,
        "E": p + E @ R.T,
        "U": U @ R.T,
        "radius": radius,
    }


def _box_tables():
    normals, faces, edges = [], [], []
    for i in range(3):
        j, l = (i + 1) % 3, (i + 2) % 3
        for s in (1.0, -1.0):
            normals.append(s * np.eye(3)[i])
            quad = np.zeros((4, 3))
            quad[:, i], quad[:, j], quad[:, l] = s, _QUAD[:, 0], _QUAD[:, 1]
            faces.append(quad if s > 0 else quad[::-1])
        for s1 in (-1.0, 1.0):
            for s2 in (-1.0, 1.0):
                a = np.zeros(3)
                a[j], a[l] = s1, s2
                b = a.copy()
                a[i], b[i] = -1.0, 1.0
                edges.append([a, b])
    return np.array(normals, np.int8), np.array(faces, np.int8), np.array(edges, np.int8)


_BOX_NORMALS, _BOX_FACES, _BOX_EDGES = _box_tables()


def _box_as_mesh(b):
    """A box's world arrays as a mesh's (`_world`)."""
    h = b["half_extents"]
    n = jnp.asarray(_BOX_NORMALS, h.dtype)
    return _posed(
        b["p"],
        b["R"],
        _SIGNS_3D * h,
        n,
        jnp.abs(n) @ h,
        _BOX_FACES * h,
        _BOX_EDGES * h,
        jnp.eye(3, dtype=h.dtype),
        jnp.sqrt(jnp.sum(h * h)),
    )


def _in_polygon(x, poly, n, tol):
    """Whether the points x (..., 3) lie in the prism of the convex polygon poly (k, 3) (counter-clockwise
    about n), to tol times each side's length. Repeated vertices (zero-length sides) pass."""
    e = jnp.roll(poly, -1, axis=0) - poly
    s = jnp.cross(n, e)  # inward, |s| = |e|
    length = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(e * e, -1)))
    side = jnp.sum((x[..., None, :] - poly) * s, -1)
    return jnp.all(side >= -tol * length, -1)


def _segments(E):
    """Centres, unit directions and half lengths of the segments E (..., 2, 3)."""
    half, u = _norm(0.5 * (E[..., 1, :] - E[..., 0, :]))
    return 0.5 * (E[..., 0, :] + E[..., 1, :]), u, half


def _point_mesh(x, M, size):
    """Signed distance of the point x to the polytope M (inside: minus the depth below the nearest face plane),
    the unit normal out of the polytope, and the nearest point of its surface (outside; inside: x's projection
    onto that face plane)."""
    h = M["n"] @ x - M["d"]
    k = jnp.argmax(h)
    inside = h[k] <= 0
    # Outside: the face projections inside their faces, and the edges.
    proj = x - h[:, None] * M["n"]
    ok = (h > 0) & jax.vmap(lambda q, poly, n: _in_polygon(q, poly, n, _INSIDE * size))(proj, M["P"], M["n"])
    c, u, hl = _segments(M["E"])
    on_edge = c + jnp.clip(jnp.sum((x - c) * u, -1), -hl, hl)[:, None] * u
    dist = jnp.concatenate([jnp.where(ok, h, jnp.inf), _norm(x - on_edge)[0]])
    closest = jnp.concatenate([proj, on_edge])[jnp.argmin(dist)]
    d_out, n_out = _norm(x - closest)
    signed = jnp.where(inside, h[k], d_out)
    normal = jnp.where(inside, M["n"][k], n_out)
    return signed, normal


def _mesh_distance(A, B, size):
    """Exact distance of two separated polytopes and its witnesses: vertex-face pairs whose projection falls
    inside the face, and every edge pair (`_boxes._nearest`)."""
    dist, wa, wb = [], [], []
    for X, Y, flip in ((A, B, False), (B, A, True)):
        if Y["n"].shape[0] == 0:  # a segment has no faces
            continue
        h = X["V"] @ Y["n"].T - Y["d"]  # (v, f)
        proj = X["V"][:, None, :] - h[..., None] * Y["n"]
        ok = (h >= 0) & jax.vmap(
            lambda q, poly, n: _in_polygon(q, poly, n, _INSIDE * size), in_axes=(1, 0, 0), out_axes=1
        )(proj, Y["P"], Y["n"])
        d = jnp.where(ok, h, jnp.inf).reshape(-1)
        on_x = jnp.broadcast_to(X["V"][:, None, :], proj.shape).reshape(-1, 3)
        on_y = proj.reshape(-1, 3)
        dist.append(d)
        wa.append(on_y if flip else on_x)
        wb.append(on_x if flip else on_y)
    ca, ua, la = _segments(A["E"])
    cb, ub, lb = _segments(B["E"])
    ca, ua, la = ca[:, None], ua[:, None], la[:, None]
    s, t = _segment_params(ca, ua, la, cb[None], ub[None], lb[None])
    xa = (ca + s[..., None] * ua).reshape(-1, 3)
    xb = (cb[None] + t[..., None] * ub[None]).reshape(-1, 3)
    dist.append(_norm(xb - xa)[0])
    wa.append(xa)
    wb.append(xb)
    dist, wa, wb = jnp.concatenate(dist), jnp.concatenate(wa), jnp.concatenate(wb)
    k = jnp.argmin(dist)
    _, n = _norm(wb[k] - wa[k])
    return dist[k], wa[k], wb[k], n


def _distinct(V, tol=0.0, valid=None):
    """(v,) whether each point differs by more than tol from every earlier one (of those valid, if given): a padded
    mesh repeats its first vertex (`pad_meshes`), and a choice of the lowest few must not take a point twice (the
    4 lowest of a hull of 7 vertices padded to 13 were one vertex 4 times, and the hull sank 16 mm into the
    floor)."""
    same = jnp.sum((V[:, None, :] - V[None, :, :]) ** 2, -1) <= tol * tol
    if valid is not None:
        same = same & valid[None, :]
    return ~jnp.any(jnp.tril(same, -1), 1)


def _lowest(xy, z, valid, tie, band, count=8, first4=None):
    """Indices of `count` (4 or 8) of the valid points: in slots 0-3 the 4 lowest (lowest first), or, where more
    than 4 lie within `band` of the lowest (a face resting flat, or nearly), the widest 4 of those
    (`_boxes._spread`, the lowest first), among `first4` (all by default); in slots 4-7 the 4 lowest of the
    points not yet taken, those of the band that the spread left out first (a hull tumbling onto a table with
    two vertices 0.6 mm above it and four more within the band kept one of the two, and the other went 2.1 mm
    into the table in the next step). Slots left without a point repeat the lowest (`_spare`)."""

    def lowest(mask, count):
        low, idx = jax.lax.top_k(-jnp.where(mask, z, jnp.inf), min(count, z.shape[0]))
        idx = jnp.where(jnp.isfinite(low), idx, first)
        return jnp.concatenate([idx, jnp.broadcast_to(first, (count - idx.shape[0],))]), low

    head = valid if first4 is None else valid & first4
    first = jnp.argmin(jnp.where(head, z, jnp.inf))
    low4, low = lowest(head, 4)
    near = head & (z <= band - low[0])
    base = jnp.where(jnp.sum(near) > 4, _spread(xy, z, near, tie), low4)
    if count == 4:
        return base
    taken = jnp.zeros(z.shape, bool).at[base].set(True)
    return jnp.concatenate([base, lowest(valid & ~taken, count - 4)[0]])


def _spare(gap, x, tol, size):
    """The gaps of the contacts at points x, those of a slot that repeats an earlier slot's point raised by size: a
    slot left without a point of its own holds a copy that never carries an impulse (unless the pair closes by
    its whole size in one step). Two identical rows leave the step's problem degenerate, and a dropped hull's
    step with a repeated point missed the solver's tolerance."""
    return jnp.where(_distinct(x, tol), gap, gap + size)


def _plane_frame(n):
    """Two unit vectors spanning the plane normal to n (used to order points, not differentiated)."""
    n = jax.lax.stop_gradient(n)
    e = jnp.where(jnp.abs(n[0]) < 0.9, jnp.array([1.0, 0.0, 0.0], n.dtype), jnp.array([0.0, 1.0, 0.0], n.dtype))
    t = e - (e @ n) * n
    t = t / jnp.sqrt(t @ t)
    return jnp.stack([t, jnp.cross(n, t)])


def _face_manifold(Ref, k, Inc, size, count):
    """The incident face of Inc clipped to face k of Ref: gaps (count,), normals from Ref towards Inc (count, 3)
    (the reference face's but on the vertices the clip does not see), midpoints (count, 3)."""
    n_r, d_r, poly = Ref["n"][k], Ref["d"][k], Ref["P"][k]
    m = jnp.argmin(Inc["n"] @ n_r)
    o, d_o, ipoly = Inc["n"][m], Inc["d"][m], Inc["P"][m]
    tol = _INSIDE * size
    # Incident vertices inside the reference prism.
    points, valid = [ipoly], [_in_polygon(ipoly, poly, n_r, tol)]
    # Reference vertices under (or over) the incident face, at its height there.
    on = o @ n_r
    ok = jnp.abs(on) > _TINY
    t = (d_o - poly @ o) / jnp.where(ok, on, 1.0)
    P2 = poly + t[:, None] * n_r
    points.append(P2)
    valid.append(ok & _in_polygon(P2, ipoly, o, tol))
    # Incident edges crossing the reference sides.
    A, B = ipoly, jnp.roll(ipoly, -1, axis=0)
    s = jnp.cross(n_r, jnp.roll(poly, -1, axis=0) - poly)  # inward side normals (k_r, 3)
    den = (B - A) @ s.T  # (k_i, k_r)
    okd = jnp.abs(den) > _TINY
    num = jnp.sum(s * poly, -1)[None, :] - A @ s.T
    tt = num / jnp.where(okd, den, 1.0)
    P3 = A[:, None, :] + tt[..., None] * (B - A)[:, None, :]
    P3 = P3.reshape(-1, 3)
    points.append(P3)
    valid.append((okd & (tt >= 0) & (tt <= 1)).reshape(-1) & _in_polygon(P3, poly, n_r, tol))
    # The lowest vertices of Inc inside the reference prism: on a hull of many small faces the deepest vertex
    # need not lie on the incident face (a hull pivoting on one vertex of its incident face had another
    # vertex 6.8 mm inside a box with no contact there).
    inside = _in_polygon(Inc["V"], poly, n_r, tol) & _distinct(Inc["V"])
    _, low = jax.lax.top_k(-jnp.where(inside, Inc["V"] @ n_r, jnp.inf), min(_LOWEST, Inc["V"].shape[0]))
    points.append(Inc["V"][low])
    valid.append(inside[low])
    P = jnp.concatenate(points)
    valid = jnp.concatenate(valid)
    valid = jnp.where(jnp.any(valid), valid, jnp.arange(P.shape[0]) < ipoly.shape[0])
    z = P @ n_r - d_r
    normal = jnp.broadcast_to(n_r, P.shape)
    clipped = jnp.ones(P.shape[0], bool)
    if count > 4:
        # For the slots above the band, the vertices the clip does not see (module docstring): those of Ref off
        # the reference face and those of Inc outside its prism, at their exact distance to the other polytope.
        V, g, out, ok = _near_vertices(Ref, Inc, Ref["V"] @ n_r - d_r < -_TIE * size, size)
        U, gi, outi, oki = _near_vertices(Inc, Ref, ~_in_polygon(Inc["V"], poly, n_r, tol), size)
        P = jnp.concatenate([P, V - g[:, None] * out, U])  # each on Inc's side, as the clipped points
        z = jnp.concatenate([z, g, gi])
        normal = jnp.concatenate([normal, -out, outi])  # from Ref towards Inc
        valid = jnp.concatenate([valid, ok, oki])
        clipped = jnp.arange(P.shape[0]) < clipped.shape[0]
    x = P - 0.5 * z[:, None] * normal
    valid = valid & _distinct(x, _TIE * size, valid)  # an incident face's vertex is also among the lowest vertices
    band = _BAND * jax.lax.stop_gradient(Inc["radius"])
    if count > 4:
        # Not within the band of a clipped point: on faces resting on faces of the same outline each corner's
        # contact would come twice, from either side.
        gone = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, -1) <= band * band
        valid = valid & (clipped | ~jnp.any(gone & (clipped & valid)[None, :], 1))
    xy = x @ _plane_frame(n_r).T
    idx = _lowest(xy, z, valid, _TIE * size, band, count, clipped)
    return _spare(z[idx], x[idx], _TIE * size, size), normal[idx], x[idx]


def _near_vertices(X, Y, mask, size):
    """The `_NEAR` vertices of X (among mask) nearest Y by their largest face-plane distance, at their exact
    signed distance to Y (`_point_mesh`): the vertices (k, 3), the distances (k,), Y's outward normals there
    (k, 3) and whether each is one of mask."""
    ok = mask & _distinct(X["V"])
    bound = jnp.max(X["V"] @ Y["n"].T - Y["d"], axis=1)  # at most the distance, the depth inside
    _, idx = jax.lax.top_k(-jnp.where(ok, bound, jnp.inf), min(_NEAR, X["V"].shape[0]))
    V = X["V"][idx]
    signed, out = jax.vmap(lambda v: _point_mesh(v, Y, size))(V)
    return V, signed, out, ok[idx]


def _support_edge(M, u, n, sign):
    """The edge of M parallel to u farthest along sign * n: centre, unit direction, half length."""
    c, e, hl = _segments(M["E"])
    par = jnp.sum(jnp.cross(e, u) ** 2, -1) < 1e-12
    ends = M["E"] @ n * sign
    score = jnp.where(par, jnp.min(ends, -1), -jnp.inf)
    i = jnp.argmax(score)
    return c[i], e[i], hl[i]


def _mirror_contact(c, u, l, t0, M, size):
    """The mirror point of the edge (c, u, l) in the shadow of the polytope M, after one alternation: its signed
    distance to M, M's outward normal there and the point on the edge (`_boxes._mirror_contact` for a box).

    The shadow is M's projection onto the edge's line, clamped to the edge; the mirror is the point t0 (the closest
    point's parameter) reflected about its middle. An edge lying along M (nearly parallel to an edge or a face of
    it) touches along a segment, and the closest point is one end of it and the mirror the other; an edge crossing
    M has a short shadow and its mirror near the closest point."""
    along = M["V"] @ u - c @ u
    lo, hi = jnp.clip(jnp.min(along), -l, l), jnp.clip(jnp.max(along), -l, l)
    P = c + jnp.clip(lo + hi - t0, -l, l) * u
    g, n_out = _point_mesh(P, M, size)
    # At the end of the shadow M's nearest point is a vertex and the normal leans along the edge; the edge's point
    # nearest that surface point gives the normal across the edge.
    P = c + jnp.clip(u @ (P - g * n_out - c), -l, l) * u
    g, n_out = _point_mesh(P, M, size)
    return g, n_out, P


def _polytopes(A, B, dim, count):
    """SAT, manifold and exact distance of two polytopes (world arrays): gap (c,), normal (c, 3), point (c, 3)."""
    if dim != 3:
        raise ValueError("a ConvexMesh is supported in 3D scenes only (dim=3)")
    size = jax.lax.stop_gradient(A["radius"] + B["radius"])
    sep_a = jnp.min(B["V"] @ A["n"].T - A["d"], 0)  # (fa,)
    sep_b = jnp.min(A["V"] @ B["n"].T - B["d"], 0)  # (fb,)
    L, ok = _cross_axes(A["U"], B["U"])
    pa, pb = A["V"] @ L.T, B["V"] @ L.T
    fwd = jnp.min(pb, 0) - jnp.max(pa, 0)
    bwd = jnp.min(pa, 0) - jnp.max(pb, 0)
    sep_e = jnp.where(ok, jnp.maximum(fwd, bwd), _NONE)
    ka, kb, ke = jnp.argmax(sep_a), jnp.argmax(sep_b), jnp.argmax(sep_e)
    on_b = sep_b[kb] > sep_a[ka] + _BIAS * size
    on_edge = _edge_wins(sep_e[ke], jnp.where(on_b, sep_b[kb], sep_a[ka]), size)
    gap_a, n_a, x_a = _face_manifold(A, ka, B, size, count)
    gap_b, n_b, x_b = _face_manifold(B, kb, A, size, count)
    gap_f = jnp.where(on_b, gap_b, gap_a)
    n_f = jnp.where(on_b, -n_b, n_a)
    x_f = jnp.where(on_b, x_b, x_a)
    # The edge-edge contact: closest points of the supporting edges.
    n_e = L[ke] * jnp.where(fwd[ke] >= bwd[ke], 1.0, -1.0)
    Eb = B["U"].shape[0]
    ca, ua, la = _support_edge(A, A["U"][ke // Eb], n_e, 1.0)
    cb, ub, lb = _support_edge(B, B["U"][ke % Eb], n_e, -1.0)
    s, t = _segment_params(ca, ua, la, cb, ub, lb)
    xa, xb = ca + s * ua, cb + t * ub
    # Beside the closest points, the mirror point of each edge in the other polytope's shadow, at its signed
    # distance to it: nearly parallel edges, or an edge resting along a face's edge, touch along a segment and
    # get both its ends (with the closest points alone the polytope pivots about one point and sinks at the other).
    gb, nb, Pb = _mirror_contact(cb, ub, lb, t, A, size)
    ga, na, Pa = _mirror_contact(ca, ua, la, s, B, size)
    gap_e = jnp.stack([(xb - xa) @ n_e, gb, ga])
    n_ee = jnp.stack([n_e, nb, -na])
    x_e = jnp.stack([0.5 * (xa + xb), Pb - 0.5 * gb * nb, Pa - 0.5 * ga * na])
    # An edge-edge axis keeps those 3 points and the face manifold's points from 2 on (its deepest lies by the edge
    # contact): a polytope pivoting on an edge turns face to face within a step, and those points are the ones
    # about to touch (with the edge contact alone a hull rocking on a box's edge sank 1.9 mm in a step). A point of
    # one polytope inside the other is never deeper than the penetration depth (the edge axis' overlap), which
    # bounds their depths. A mirror point that repeats the closest one (an edge crossing the other's middle) is
    # raised out of reach (`_spare`).
    keep = count - 3
    gap_fe = jnp.maximum(gap_f[1 : 1 + keep], sep_e[ke])
    x_edge = jnp.concatenate([x_e, x_f[1 : 1 + keep]])
    gap_edge = _spare(jnp.concatenate([gap_e, gap_fe]), x_edge, _TIE * size, size)
    gap = jnp.where(on_edge, gap_edge, gap_f)
    n = jnp.where(on_edge, jnp.concatenate([n_ee, n_f[1 : 1 + keep]]), n_f)
    x = jnp.where(on_edge, x_edge, x_f)
    separated = jnp.maximum(jnp.maximum(jnp.max(sep_a), jnp.max(sep_b)), jnp.max(sep_e)) > 0
    dist, wa, wb, n_star = _mesh_distance(A, B, size)
    return _with_exact(gap, n, x, separated, dist, n_star, 0.5 * (wa + wb), size)[:3]


def mesh_mesh_count(vertices):
    """The contacts of a mesh-mesh pair between meshes padded to `vertices` hull vertices: 8 where some mesh has
    more than 8 (a hull of many small facets, which a hull rocking on it meets at a neighbouring facet within a
    step), else 4 (boxes and wedges given as meshes: with 8, a packed pile of 18 mesh cubes did not converge)."""
    return 8 if vertices > 8 else 4


@functools.partial(jax.jit, static_argnames="dim")
def mesh_mesh(a, b, dim):
    """Mesh-mesh, 4 or 8 contacts (`mesh_mesh_count`): SAT over face normals and edge pairs, the clipped face
    manifold (module docstring)."""
    return _polytopes(_world(a), _world(b), dim, mesh_mesh_count(max(a["vertices"].shape[0], b["vertices"].shape[0])))


@functools.partial(jax.jit, static_argnames="dim")
def box_mesh(a, b, dim):
    """Box-mesh, 8 contacts: the box as a polytope, then as mesh-mesh with 4 more points (module docstring)."""
    return _polytopes(_box_as_mesh(a), _world(b), dim, 8)


@functools.partial(jax.jit, static_argnames="dim")
def plane_mesh(a, b, dim):
    """Plane-mesh, 8 contacts: the signed distances of the 4 lowest vertices and the 4 lowest above them (exact
    per vertex).

    Vertices tied with the lowest (a face of more than 4 vertices resting flat)
    are chosen by the widest spread (`_boxes._spread`), so the contacts span the
    face and are the same from step to step; the slots hold them in the vertices'
    order, so a resting face keeps each vertex in its slot (the warm start).
    """
    if dim != 3:
        raise ValueError("a ConvexMesh is supported in 3D scenes only (dim=3)")
    M = _world(b)
    V = M["V"]
    n, d = a["normal"], a["offset"]
    gaps = V @ n - d
    tie = _TIE * jax.lax.stop_gradient(M["radius"])
    # The spread of 4 points can skip one inside the triangle of the others: the widest only among the tied.
    idx = _lowest(V @ _plane_frame(n).T, gaps, _distinct(V), tie, tie)
    idx = jnp.sort(idx)  # in the vertices' order, not by depth: the slots of a resting face do not shuffle
    gap = gaps[idx]
    x = V[idx] - 0.5 * gap[:, None] * n
    return _spare(gap, x, tie, jax.lax.stop_gradient(M["radius"])), jnp.broadcast_to(n, (idx.shape[0], 3)), x


@functools.partial(jax.jit, static_argnames="dim")
def sphere_mesh(a, b, dim):
    """Sphere-mesh: the exact signed distance of the centre to the polytope, less the radius (1 contact)."""
    if dim != 3:
        raise ValueError("a ConvexMesh is supported in 3D scenes only (dim=3)")
    M = _world(b)
    c, r = a["p"], a["radius"]
    size = jax.lax.stop_gradient(M["radius"] + r)
    signed, n_out = _point_mesh(c, M, size)
    gap = signed - r
    return gap[None], -n_out[None], (c - (r + 0.5 * gap) * n_out)[None]


@functools.partial(jax.jit, static_argnames="dim")
def capsule_mesh(a, b, dim):
    """Capsule-mesh, 2 contacts: SAT of the axis segment and the polytope, less the radius (module docstring)."""
    if dim != 3:
        raise ValueError("a ConvexMesh is supported in 3D scenes only (dim=3)")
    c, u, hl, r = a["p"], a["R"][:, 2], a["half_length"], a["radius"]
    M = _world(b)
    size = jax.lax.stop_gradient(M["radius"] + hl + r)
    ends = c + jnp.array([[-1], [1]], jnp.int8) * hl * u
    sep_f = jnp.min(ends @ M["n"].T - M["d"], 0)  # (f,): the segment's distance to each face plane
    L, ok = _cross_axes(u[None], M["U"])
    pa, pb = ends @ L.T, M["V"] @ L.T
    fwd = jnp.min(pb, 0) - jnp.max(pa, 0)
    bwd = jnp.min(pa, 0) - jnp.max(pb, 0)
    sep_e = jnp.where(ok, jnp.maximum(fwd, bwd), _NONE)
    kf, ke = jnp.argmax(sep_f), jnp.argmax(sep_e)
    on_edge = _edge_wins(sep_e[ke] - r, sep_f[kf] - r, size)  # the surfaces' separations
    # A face axis: the segment clipped to face kf (its outward normal towards the capsule).
    n_r, d_r, poly = M["n"][kf], M["d"][kf], M["P"][kf]
    tol = _INSIDE * size
    s = jnp.cross(n_r, jnp.roll(poly, -1, axis=0) - poly)
    den = s @ u
    okd = jnp.abs(den) > _TINY
    tt = (jnp.sum(s * poly, -1) - s @ c) / jnp.where(okd, den, 1.0)  # the parameter along u of each side
    cross = c + tt[:, None] * u
    cand_t = jnp.concatenate([jnp.array([-1.0, 1.0], c.dtype) * hl, tt])
    valid = jnp.concatenate(
        [_in_polygon(ends, poly, n_r, tol), okd & (jnp.abs(tt) <= hl) & _in_polygon(cross, poly, n_r, tol)]
    )
    deepest = -hl * _sign(u @ n_r)
    lo = jnp.where(jnp.any(valid), jnp.min(jnp.where(valid, cand_t, jnp.inf)), deepest)
    hi = jnp.where(jnp.any(valid), jnp.max(jnp.where(valid, cand_t, -jnp.inf)), deepest)
    P = c + jnp.stack([lo, hi])[:, None] * u
    z = P @ n_r - d_r
    gap_f = z - r
    x_f = P - 0.5 * (r + z)[:, None] * n_r
    # An edge axis: the segment against the supporting edge of the mesh.
    n_e = L[ke] * jnp.where(fwd[ke] >= bwd[ke], 1.0, -1.0)  # from the capsule to the mesh
    ce, ue, le = _support_edge(M, M["U"][ke], n_e, -1.0)
    s_e, t_e = _segment_params(c, u, hl, ce, ue, le)
    xa, xb = c + s_e * u, ce + t_e * ue
    g_e = (xb - xa) @ n_e - r
    gap = jnp.where(on_edge, jnp.stack([g_e, g_e]), gap_f)
    n = jnp.where(on_edge, jnp.broadcast_to(n_e, (2, 3)), jnp.broadcast_to(-n_r, (2, 3)))
    x = jnp.where(on_edge, jnp.broadcast_to(xa + (r + 0.5 * g_e) * n_e, (2, 3)), x_f)
    # Separated: the exact distance of the segment (its ends against the faces, the segment against the edges).
    separated = jnp.maximum(jnp.max(sep_f), jnp.max(sep_e)) > 0
    seg = {
        "V": ends,
        "n": jnp.zeros((0, 3), c.dtype),
        "d": jnp.zeros((0,), c.dtype),
        "P": jnp.zeros((0, 3, 3), c.dtype),
        "E": ends[None],
    }
    dist, wa, wb, n_star = _mesh_distance(seg, M, size)
    gap_star = dist - r
    return _with_exact(gap, n, x, separated, gap_star, n_star, wa + (r + 0.5 * gap_star) * n_star, size)[:3]
