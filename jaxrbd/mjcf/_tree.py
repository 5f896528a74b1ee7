"""MJCF as a kinematic tree in joint coordinates (`jaxrbd.bodies.Tree`): MuJoCo's qpos and qvel are the state.

Everything is read on the host from MuJoCo's compiled model with numpy; nothing
is compiled while loading.
"""

import warnings

import jax
import numpy as np

from ..bodies import SceneBuilder
from ..bodies._tree import ActuatorParams, Tree, TreeParams
from ..cones import PolyhedralCone
from ..model import State
from ._common import (
    BALL,
    DEFAULT_SOLIMP,
    DEFAULT_SOLREF,
    FREE,
    GEOM_KINDS,
    HINGE,
    SLIDE,
    _collides,
    _initial,
    _inner_vertices,
    _mesh_vertices,
    _name,
    _shape,
    refuse,
    refuse_unsupported,
    set_pairs,
)

# Contact pairs of one kind pair (planes aside) above which a broad phase keeps the nearest ones: the
# humanoid's 66 capsule pairs would otherwise all be solved in every step.
BROADPHASE_ABOVE = 16


def _quat_matrix(quat):
    w, x, y, z = quat
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def load_tree(m, mujoco, *, keyframe, directions, friction, broadphase):
    """(system, state, tree, motor names) of the compiled MjModel m, in joint coordinates."""
    obj = mujoco.mjtObj
    body_name = lambda i: _name(m, mujoco, obj.mjOBJ_BODY, i, "body")
    geom_name = lambda g: _name(m, mujoco, obj.mjOBJ_GEOM, g, "geom")
    joint_name = lambda j: _name(m, mujoco, obj.mjOBJ_JOINT, j, "joint")
    refuse_unsupported(m, mujoco, pairs=True)
    qpos, qvel = _initial(m, mujoco, keyframe)
    data = mujoco.MjData(m)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(m, data)

    # The tree: MuJoCo's bodies 1.. in MuJoCo's order (parents first), the world as -1.
    parent = tuple(int(p) - 1 for p in m.body_parentid[1:])
    joints = []
    for j in range(m.njnt):
        jtype, b = int(m.jnt_type[j]), int(m.jnt_bodyid[j])
        if jtype == FREE and m.body_jntnum[b] > 1:
            refuse(f"body {body_name(b)!r}: a free joint with other joints on the same body")
        joints.append((joint_name(j), jtype, b - 1, int(m.jnt_qposadr[j]), int(m.jnt_dofadr[j])))
    # A hinge or slide has a stop at each end; a limited ball joint one on its rotation angle, whose bound
    # MuJoCo takes as the larger of its range's two numbers.
    limits = tuple(
        (j, side)
        for j in range(m.njnt)
        if m.jnt_limited[j] and m.jnt_type[j] in (HINGE, SLIDE, BALL)
        for side in ((0,) if m.jnt_type[j] == BALL else (1, -1))
    )
    ball = m.jnt_type == BALL
    lower = np.where(m.jnt_limited & ~ball, m.jnt_range[:, 0], -np.inf)
    upper = np.where(m.jnt_limited, np.where(ball, m.jnt_range.max(axis=1), m.jnt_range[:, 1]), np.inf)

    # Actuators: joint transmissions on hinges, slides and ball joints, no activation dynamics, fixed gain, affine bias:
    # MuJoCo's motor, position and velocity servos and general actuators of that form.
    actuators, gear, axis, gain, bias, ctrl_range, force_range = [], [], [], [], [], [], []
    for u in range(m.nu):
        name = _name(m, mujoco, obj.mjOBJ_ACTUATOR, u, "actuator")
        j = int(m.actuator_trnid[u, 0])
        supported = (
            m.actuator_trntype[u] == mujoco.mjtTrn.mjTRN_JOINT
            and m.jnt_type[j] in (HINGE, SLIDE, BALL)
            and m.actuator_dyntype[u] == mujoco.mjtDyn.mjDYN_NONE
            and m.actuator_gaintype[u] == mujoco.mjtGain.mjGAIN_FIXED
            and int(m.actuator_biastype[u]) in (int(mujoco.mjtBias.mjBIAS_NONE), int(mujoco.mjtBias.mjBIAS_AFFINE))
        )
        if not supported:
            refuse(
                f"actuator {name!r}: in joint coordinates only actuators on hinge, slide and ball joints without "
                "activation dynamics, with a fixed gain and an affine bias (motor, position, velocity) are supported"
            )
        actuators.append((name, j))
        if m.jnt_type[j] == BALL:  # the torque axis gear[:3] in the body frame, as its size and its direction
            size = float(np.linalg.norm(m.actuator_gear[u, :3]))
            gear.append(size)
            axis.append(m.actuator_gear[u, :3] / size if size > 0 else np.zeros(3))
        else:
            gear.append(m.actuator_gear[u, 0])
            axis.append(np.zeros(3))
        gain.append(m.actuator_gainprm[u, 0])
        affine = m.actuator_biastype[u] == mujoco.mjtBias.mjBIAS_AFFINE
        bias.append(m.actuator_biasprm[u, :3] if affine else np.zeros(3))
        inf = np.array([-np.inf, np.inf])
        ctrl_range.append(m.actuator_ctrlrange[u] if m.actuator_ctrllimited[u] else inf)
        force_range.append(m.actuator_forcerange[u] if m.actuator_forcelimited[u] else inf)
    actuator_params = None
    if actuators:
        f = lambda x: jax.device_put(np.array(x, float))
        actuator_params = ActuatorParams(
            gear=f(gear), gain=f(gain), bias=f(bias), ctrl_range=f(ctrl_range), force_range=f(force_range), axis=f(axis)
        )

    ignored = _ignored(m, mujoco, joint_name)
    geometry, geometry_bodies, shapes, mu, restitution, cone, frictionless = _geometry(
        m, mujoco, data, body_name, geom_name, refuse, ignored, directions, friction, broadphase
    )
    inertia = np.stack(
        [
            _quat_matrix(m.body_iquat[i]) @ np.diag(m.body_inertia[i]) @ _quat_matrix(m.body_iquat[i]).T
            for i in range(1, m.nbody)
        ]
    )
    stiffness = np.where(np.isin(m.jnt_type, (HINGE, SLIDE)), m.jnt_stiffness, 0.0)
    a = lambda x: jax.device_put(np.asarray(x, float))
    params = TreeParams(
        body_pos=a(np.array(m.body_pos[1:], float)),
        body_quat=a(np.array(m.body_quat[1:], float)),
        mass=a(np.array(m.body_mass[1:], float)),
        inertia=a(inertia),
        com=a(np.array(m.body_ipos[1:], float)),
        gravity=a(np.array(m.opt.gravity, float)),
        joint_pos=a(np.array(m.jnt_pos, float).reshape(-1, 3)),
        joint_axis=a(np.array(m.jnt_axis, float).reshape(-1, 3)),
        qpos0=a(np.array(m.qpos0, float)),
        armature=a(np.array(m.dof_armature, float)),
        damping=a(np.array(m.dof_damping, float)),
        stiffness=a(np.asarray(stiffness, float)),
        springref=a(np.array(m.qpos_spring, float)),
        lower=a(np.asarray(lower, float)),
        upper=a(np.asarray(upper, float)),
        stop_restitution=a(np.zeros(m.njnt)),
        frictionloss=a(m.dof_frictionloss),
        actuators=actuator_params,
        control=None if not actuators else a(np.zeros(len(actuators))),
        shapes=shapes,
    )
    tree = Tree(
        names=tuple(body_name(i) for i in range(1, m.nbody)),
        parent=parent,
        joints=tuple(joints),
        nq=int(m.nq),
        nv=int(m.nv),
        geometry=geometry,
        geometry_bodies=geometry_bodies,
        limits=limits,
        actuators=tuple(actuators),
        damped=bool(np.any(m.dof_damping != 0)),
        frictionless=frictionless,
        frictionloss=tuple(int(d) for d in np.flatnonzero(m.dof_frictionloss > 0)),
    )
    if ignored:
        warnings.warn("load_mjcf ignores these MJCF elements: " + "; ".join(ignored), stacklevel=3)
    if friction is None:  # MuJoCo's pyramid; no friction unknowns on the stops and the pairs of condim 1
        fixed, record_size = _frictionless_slots(geometry, frictionless)
        stops = record_size + len(tree.frictionloss)  # the dry-friction entries come before the stops
        cone = PolyhedralCone(directions, frictionless=fixed + tuple(stops + k for k in range(len(limits))))
    system = tree.system(params, mu, restitution, directions, cone)
    state = State(a(0.0), a(qpos), a(qvel))
    return system, state, tree, tuple(name for name, _ in actuators)


def _frictionless_slots(geometry, frictionless):
    """(the contact record's frictionless entries, the geometry's record size) from the frictionless candidates:
    a group without a broad phase keeps its candidates in order; a broad phase's slots hold any of its group's
    pairs, so they are frictionless only where all of the group's candidates are."""
    if geometry is None:
        return (), 0
    frictionless, out = set(frictionless), []
    candidate = record = 0
    for g in geometry.groups:
        n = len(g.index_a) * g.capacity
        size = n if g.slots is None else g.slots * g.capacity
        if g.slots is None:
            out += [record + i for i in range(n) if candidate + i in frictionless]
        elif all(candidate + i in frictionless for i in range(n)):
            out += list(range(record, record + size))
        candidate, record = candidate + n, record + size
    return tuple(out), record


def _ignored(m, mujoco, joint_name):
    """The MJCF elements the tree model does not have (one warning lists them)."""
    obj = mujoco.mjtObj
    out = []

    def ignore(what, names):
        if len(names):
            out.append(f"{what} {list(names)}")

    ignore("tendons", [_name(m, mujoco, obj.mjOBJ_TENDON, i, "tendon") for i in range(m.ntendon)])
    ignore("sensors", [_name(m, mujoco, obj.mjOBJ_SENSOR, i, "sensor") for i in range(m.nsensor)])
    ignore(
        "mocap (held static at their initial pose) bodies",
        [_name(m, mujoco, obj.mjOBJ_BODY, i, "body") for i in range(m.nbody) if m.body_mocapid[i] >= 0],
    )
    ignore(
        "stiffness of ball and free joints",
        [joint_name(j) for j in range(m.njnt) if m.jnt_type[j] in (BALL, FREE) and m.jnt_stiffness[j]],
    )
    if m.opt.density or m.opt.viscosity or np.any(m.opt.wind):
        out.append("fluid forces (density, viscosity, wind)")
    return out


def _geometry(m, mujoco, data, body_name, geom_name, refuse, ignored, directions, friction, broadphase):
    """The contact geometry: (BodyModel or None, tree body of each of its bodies, shapes, mu, restitution, cone,
    the candidate contacts without friction: MuJoCo's condim 1).

    Each MuJoCo body not welded to the world that carries a colliding geom is a
    body of the geometry, its shapes posed in the body frame; geoms of bodies
    welded to the world are static shapes, posed in the world. Pairs are
    filtered as MuJoCo filters them (`_collides`).
    """
    excluded = {frozenset(((s >> 16), s & 0xFFFF)) for s in m.exclude_signature}
    filterparent = not (m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT)
    # An explicit <pair> collides its two geoms whatever the filters say, with its own friction and condim,
    # in place of the filtered pair of the same geoms (as MuJoCo's mj_collision).
    explicit = {frozenset((int(m.pair_geom1[p]), int(m.pair_geom2[p]))): p for p in range(m.npair)}
    collide = lambda g1, g2: frozenset((g1, g2)) in explicit or _collides(m, excluded, filterparent, g1, g2)
    live = [g for g in range(m.ngeom) if any(collide(g, h) for h in range(m.ngeom) if h != g)]
    for g in live:
        kind = GEOM_KINDS.get(int(m.geom_type[g]), str(m.geom_type[g]))
        if kind not in ("plane", "sphere", "capsule", "box", "mesh"):
            refuse(f"geom {geom_name(g)!r} is a {kind}, which jaxrbd does not support")
    soft = [
        geom_name(g)
        for g in live
        if not (np.allclose(m.geom_solref[g], DEFAULT_SOLREF) and np.allclose(m.geom_solimp[g], DEFAULT_SOLIMP))
    ]
    for what, names in (
        ("solref/solimp of geoms", soft),
        ("margin/gap of geoms", [geom_name(g) for g in live if m.geom_margin[g] or m.geom_gap[g]]),
        ("condim > 3 (torsional, rolling friction) of geoms", [geom_name(g) for g in live if m.geom_condim[g] > 3]),
        (
            "solref/solimp, margin/gap and condim > 3 of <pair> elements",
            [
                f"{geom_name(int(m.pair_geom1[p]))}/{geom_name(int(m.pair_geom2[p]))}"
                for p in explicit.values()
                if m.pair_dim[p] > 3
                or m.pair_margin[p]
                or m.pair_gap[p]
                or not np.allclose(m.pair_solref[p], DEFAULT_SOLREF)
                or not np.allclose(m.pair_solimp[p], DEFAULT_SOLIMP)
            ],
        ),
        (
            "the hollows of non-convex mesh geoms (collided as their convex hull, as MuJoCo does)",
            [geom_name(g) for g in live if m.geom_type[g] == 7 and _inner_vertices(_mesh_vertices(m, g))],
        ),
    ):
        if names:
            ignored.append(f"{what} {names}")
    static = lambda g: m.body_weldid[m.geom_bodyid[g]] == 0
    moving = sorted({int(m.geom_bodyid[g]) for g in live if not static(g)})
    if not moving:
        return None, (), {}, jax.device_put(np.zeros(0)), jax.device_put(np.zeros(0)), friction, ()
    if broadphase is None:
        broadphase = _default_broadphase(m, live, moving, collide)
    b = SceneBuilder(dim=3, directions=directions, cone=friction, broadphase=broadphase)
    owner = {}
    for g in live:
        if not static(g):
            continue
        if m.geom_type[g] != 0 and not any(collide(g, h) for h in live if not static(h)):
            continue  # static against static only
        name = f"{geom_name(g)} (geom {g})"
        pos, mat = np.array(data.geom_xpos[g]), np.array(data.geom_xmat[g]).reshape(3, 3)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, mat.reshape(-1))
        b.add_static(name, _shape(m, g, pos, quat, static=True, normal=mat[:, 2]))
        owner[g] = name
    for i in moving:
        geoms = [g for g in live if m.geom_bodyid[g] == i]
        for g in geoms:
            if m.geom_type[g] == 0:
                refuse(f"geom {geom_name(g)!r}: a plane on a moving body (planes are static in jaxrbd)")
        shapes = [_shape(m, g, np.array(m.geom_pos[g]), np.array(m.geom_quat[g])) for g in geoms]
        b.add_body(body_name(i), *shapes, mass=1.0, inertia=1.0, position=(0.0, 0.0, 0.0))
        owner.update({g: body_name(i) for g in geoms})
    pairs = {}
    for g1 in owner:
        for g2 in owner:
            if g1 < g2 and owner[g1] != owner[g2] and not (static(g1) and static(g2)):
                pairs.setdefault(frozenset((owner[g1], owner[g2])), []).append((g1, g2))
    frictionless = set_pairs(b, m, pairs, collide, geom_name, refuse, explicit)
    model, params, mu, restitution, cone = b.build_model()
    frictionless = tuple(i for i, pair in enumerate(model.pair_names) if frozenset(pair) in frictionless)
    return model, tuple(i - 1 for i in moving), params.shapes, mu, restitution, cone, frictionless


def _default_broadphase(m, live, moving, collide):
    """A broad phase for models with many self-collision pairs, or None: the slots are the larger of
    BROADPHASE_ABOVE and twice the number of colliding moving bodies, as MuJoCo sizes its contact buffer
    from the model."""
    body_pairs = {
        frozenset((int(m.geom_bodyid[g1]), int(m.geom_bodyid[g2])))
        for g1 in live
        for g2 in live
        if g1 < g2 and m.geom_type[g1] != 0 and m.geom_type[g2] != 0 and collide(g1, g2)
    }
    if len(body_pairs) <= BROADPHASE_ABOVE:
        return None
    return max(BROADPHASE_ABOVE, 2 * len(moving))
