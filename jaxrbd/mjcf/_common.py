"""What both MJCF models read from MuJoCo's compiled model: parsing, names, friction, filters, shapes."""

import os

import numpy as np

from ..geometry import Box, Capsule, ConvexMesh, Plane, Sphere

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3  # mjtJoint
GEOM_KINDS = {0: "plane", 1: "hfield", 2: "sphere", 3: "capsule", 4: "ellipsoid", 5: "cylinder", 6: "box", 7: "mesh"}
DEFAULT_SOLREF = (0.02, 1.0)
DEFAULT_SOLIMP = (0.9, 0.95, 0.001, 0.5, 2.0)


def _mujoco():
    try:
        import mujoco
    except ImportError as err:
        raise ImportError(
            "load_mjcf needs MuJoCo's Python package to parse MJCF: pip install jaxrbd[mjcf] (or pip install mujoco)"
        ) from err
    return mujoco


def _parse(mujoco, source):
    """The MjModel of a path or an XML string; errors name the file or say it is the string."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith("<")):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"load_mjcf: no MJCF file at {path!r}")
        try:
            return mujoco.MjModel.from_xml_path(path)
        except ValueError as err:
            raise ValueError(f"load_mjcf: MuJoCo could not compile {path!r}: {err}") from None
    if not isinstance(source, str):
        raise TypeError(f"load_mjcf: source must be a path or an XML string, got {type(source).__name__}")
    try:
        return mujoco.MjModel.from_xml_string(source)
    except ValueError as err:
        raise ValueError(f"load_mjcf: MuJoCo could not compile the XML string: {err}") from None


def _name(m, mujoco, obj, i, prefix):
    return mujoco.mj_id2name(m, obj, i) or f"{prefix}{i}"


def _initial(m, mujoco, keyframe):
    """(qpos, qvel) of qpos0 or of a keyframe given by name or index."""
    if keyframe is None:
        return np.array(m.qpos0), np.zeros(m.nv)
    names = [_name(m, mujoco, mujoco.mjtObj.mjOBJ_KEY, k, "key") for k in range(m.nkey)]
    if isinstance(keyframe, str):
        k = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, keyframe)
        if k < 0:
            raise ValueError(f"load_mjcf: no keyframe named {keyframe!r}; keyframes: {names}")
    elif isinstance(keyframe, int) and 0 <= keyframe < m.nkey:
        k = keyframe
    else:
        raise ValueError(f"load_mjcf: keyframe must be a keyframe name or an index in [0, {m.nkey}), got {keyframe!r}")
    return np.array(m.key_qpos[k]), np.array(m.key_qvel[k])


def _mu(m, g1, g2):
    """The pair's mu by MuJoCo's rule: the higher priority's sliding friction, else the max; 0 for condim 1."""
    if max(m.geom_condim[g1], m.geom_condim[g2]) == 1:
        return 0.0
    p1, p2 = m.geom_priority[g1], m.geom_priority[g2]
    if p1 != p2:
        return float(m.geom_friction[g1 if p1 > p2 else g2, 0])
    return float(max(m.geom_friction[g1, 0], m.geom_friction[g2, 0]))


def _collides(m, excluded, filterparent, g1, g2):
    """Whether MuJoCo's broad phase filter lets geoms g1 and g2 collide."""
    b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
    w1, w2 = m.body_weldid[b1], m.body_weldid[b2]
    if w1 == w2:
        return False
    if not (m.geom_contype[g1] & m.geom_conaffinity[g2] or m.geom_contype[g2] & m.geom_conaffinity[g1]):
        return False
    if frozenset((b1, b2)) in excluded:
        return False
    parent = m.body_weldid[m.body_parentid]
    if filterparent and w1 != 0 and w2 != 0 and (w1 == parent[w2] or w2 == parent[w1]):
        return False
    return True


def _shape(m, g, pos, quat, static=False, normal=None):
    size, kind = m.geom_size[g], GEOM_KINDS[int(m.geom_type[g])]
    pose = dict(position=tuple(map(float, pos)), orientation=tuple(map(float, quat)))
    if kind == "plane":
        n = np.asarray(normal, float)
        return Plane(normal=n, offset=n @ pos)
    if kind == "sphere":
        return Sphere(float(size[0]), **pose)
    if kind == "capsule":
        return Capsule(float(size[0]), float(size[1]), **pose)
    if kind == "mesh":  # MuJoCo collides a mesh as its convex hull, which is what a ConvexMesh is
        return ConvexMesh(_mesh_vertices(m, g), **pose)
    return Box(tuple(map(float, size[:3])), **pose)


def _mesh_vertices(m, g):
    """(n, 3) vertices of mesh geom g in its own frame."""
    mesh = m.geom_dataid[g]
    start, n = m.mesh_vertadr[mesh], m.mesh_vertnum[mesh]
    return np.array(m.mesh_vert[start : start + n], float)


def _inner_vertices(vertices):
    """How many vertices lie strictly inside their convex hull (0 for a convex mesh, or one spanning no solid,
    which `ConvexMesh` refuses with its own error)."""
    from scipy.spatial import ConvexHull, QhullError

    try:
        eq = ConvexHull(vertices).equations  # n . x + d <= 0 inside
    except (QhullError, ValueError):
        return 0
    size = np.max(np.linalg.norm(vertices - vertices.mean(0), axis=1))
    return int(np.sum(np.max(vertices @ eq[:, :3].T + eq[:, 3], axis=1) < -1e-9 * size))


def set_pairs(builder, m, pairs, collide, geom_name, refuse, explicit=None):
    """Each body pair's contacts on the builder, from its geom pairs {frozenset of two names: [(g1, g2), ...]}:
    excluded where MuJoCo collides none of them, with MuJoCo's friction where it collides all (`_mu`, or an
    explicit `<pair>`'s friction), refused where it collides some or their friction differs (jaxrbd filters
    and sets mu per body pair). `explicit` maps frozenset((g1, g2)) to the index of its `<pair>`. Returns the
    pairs of condim 1 (frictionless in MuJoCo)."""
    explicit = explicit or {}

    def mu_of(g1, g2):
        p = explicit.get(frozenset((g1, g2)))
        return _mu(m, g1, g2) if p is None else (0.0 if m.pair_dim[p] == 1 else float(m.pair_friction[p, 0]))

    def condim(g1, g2):
        p = explicit.get(frozenset((g1, g2)))
        return max(m.geom_condim[g1], m.geom_condim[g2]) if p is None else int(m.pair_dim[p])

    frictionless = set()
    for key, geom_pairs in pairs.items():
        hits = [collide(g1, g2) for g1, g2 in geom_pairs]
        if not any(hits):
            builder.exclude(*sorted(key))
            continue
        if not all(hits):
            named = [(geom_name(g1), geom_name(g2), h) for (g1, g2), h in zip(geom_pairs, hits)]
            refuse(
                f"{sorted(key)}: MuJoCo collides some of their geom pairs and not others {named}; jaxrbd "
                "filters contacts per body pair"
            )
        mus = {mu_of(g1, g2) for g1, g2 in geom_pairs}
        if len(mus) > 1:
            refuse(
                f"{sorted(key)}: their geom pairs have different friction {sorted(mus)}; jaxrbd's mu is per body pair"
            )
        builder.set_pair(*sorted(key), mu=mus.pop())
        if all(condim(g1, g2) == 1 for g1, g2 in geom_pairs):
            frictionless.add(key)
    return frictionless


def refuse(what):
    """NotImplementedError naming what a model file holds that jaxrbd does not simulate."""
    raise NotImplementedError(f"load_mjcf: {what}")


def refuse_unsupported(m, mujoco, pairs=False):
    """Refuse, by name, what the body model does not have: equality constraints, flexes, and explicit pairs
    unless `pairs`."""
    if m.neq:
        names = [_name(m, mujoco, mujoco.mjtObj.mjOBJ_EQUALITY, e, "equality") for e in range(m.neq)]
        refuse(f"equality constraints (closed loops, connect, weld) are not supported: {names}")
    if m.npair and not pairs:
        refuse(
            f"explicit <contact><pair> elements are not supported in maximal coordinates: {m.npair} pair(s) "
            "(load the file in joint coordinates)"
        )
    if m.nflex:
        refuse("flex (deformable) elements are not supported")
