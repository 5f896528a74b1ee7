"""MJCF in maximal coordinates (`load_mjcf(coordinates="maximal")`): a body per moving MuJoCo body, joints as rows.

    scene = rbd.load_mjcf("cube.xml", coordinates="maximal")
    traj = rbd.simulate(*scene, dt=scene.dt, steps=200)
    qpos = scene.to_mujoco_qpos(traj.q)                   # (201, nq) MuJoCo's coordinates

MuJoCo works in joint coordinates; this model in maximal coordinates (per moving body
its centre of mass and a unit quaternion wxyz, the convention MuJoCo uses too) with
joints as equality rows. Each MuJoCo body with one free, ball, hinge or slide joint
becomes a jaxrbd body whose origin is MuJoCo's centre of mass (`body_ipos`) and
whose axes are MuJoCo's body axes, with the inertia MuJoCo computed rotated into
them (R(iquat) diag(body_inertia) R(iquat)^T). A body with no joint is welded to its
parent, as in MuJoCo (`body_weldid`): under the world it is static geometry, one static
shape per geom; under a moving body it is part of that rigid body, whose mass, centre of
mass and inertia are then the weld group's. The mapping of everything else is in
`load_maximal`'s docstring.
"""

import dataclasses
import functools
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _rotation as rot
from ..bodies import SceneBuilder
from ..model import Scene, State
from ..stepping import simulate
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
    _mujoco,
    _name,
    _shape,
    refuse,
    refuse_unsupported,
    set_pairs,
)

STATIC, WELDED, MOVING = -1, -2, 0  # the layout's marks of bodies: welded to the world, to a moving body, moving
_KIND = {BALL: "ball", SLIDE: "slide", HINGE: "revolute"}


@dataclasses.dataclass(frozen=True)
class MjcfLayout:
    """The static map between MuJoCo's joint coordinates and jaxrbd's q (hashable tuples).

    Attributes:
        nq, nv: MuJoCo's sizes of qpos and qvel.
        bodies: per MuJoCo body in tree order (the world excluded), (mujoco id,
            jaxrbd index or -1, parent's mujoco id, STATIC, WELDED or MOVING,
            body_pos, body_quat, the centre of mass in the body frame (of the bodies
            welded to it: `_welded_inertia`), joints), joints a tuple in MuJoCo's
            order of (joint type, qpos address, dof address, jnt_pos, jnt_axis,
            qpos0 of a hinge or slide, centre of a hinge's angle window).
        static_poses: per static MuJoCo body, (mujoco id, xpos, xquat).
    """

    nq: int
    nv: int
    bodies: tuple
    static_poses: tuple


class MjcfScene(Scene):
    """A `Scene` loaded from MJCF; unpacks to `(system, state)` like every scene.

    Attributes:
        dt: MuJoCo's `opt.timestep`, to pass as `simulate(..., dt=scene.dt)`.
        layout: the `MjcfLayout` of the maps between qpos/qvel and q/v in maximal
            coordinates; None in joint coordinates, where q and v are qpos and qvel.
        motors: the names of the `<motor>` actuators, the order of the controls u.
        grad_smoothing: the `grad_smoothing` that `simulate` uses unless told
            otherwise (`load_mjcf(..., grad_smoothing=)`).
    """

    dt: float = eqx.field(static=True, default=0.002)
    layout: MjcfLayout = eqx.field(static=True, default=None)
    motors: tuple = eqx.field(static=True, default=())
    grad_smoothing: float = eqx.field(static=True, default=0.0)

    def simulate(self, steps, *, controls=None, state=None, system=None, **options):
        """`jaxrbd.simulate` of this model from its initial state, at MuJoCo's timestep and with the scene's
        `grad_smoothing`: `scene.simulate(500, controls=u)`.

        Args:
            steps: the number of steps (static int >= 1).
            controls: (steps, nu) controls in `motors` order, a function of (t, q, v), or None.
            state: the initial `State`; None: `self.state`.
            system: the `System` (for example one with fitted parameters); None: `self.system`.
            **options: any other keyword of `jaxrbd.simulate` (dt and grad_smoothing override the scene's).

        Returns:
            the `Trajectory`.
        """
        options = dict(dt=self.dt, grad_smoothing=self.grad_smoothing) | options
        system = self.system if system is None else system
        state = self.state if state is None else state
        return simulate(system, state, steps=steps, controls=controls, **options)

    @property
    def joint_coordinates(self):
        """Whether the state is MuJoCo's qpos and qvel (a `jaxrbd.bodies.Tree`); the maps below are then identities."""
        return self.layout is None

    def from_mujoco_qpos(self, qpos):
        """jaxrbd's q (..., nq_jaxrbd) of MuJoCo's qpos (..., nq), by MuJoCo's forward kinematics (differentiable)."""
        if self.joint_coordinates:
            return jnp.asarray(qpos, float)
        return _batched(functools.partial(_q_of_qpos, self.layout), qpos)

    def to_mujoco_qpos(self, q):
        """MuJoCo's qpos (..., nq) of jaxrbd's q (..., nq_jaxrbd); a hinge angle is read in the joint's window."""
        if self.joint_coordinates:
            return jnp.asarray(q)
        return _batched(functools.partial(_qpos_of_q, self.layout), q)

    def from_mujoco(self, qpos, qvel, t=0.0):
        """The jaxrbd `State` of MuJoCo's (qpos, qvel) (single configuration)."""
        if self.joint_coordinates:
            q, v = jnp.asarray(qpos, float), jnp.asarray(qvel, float)
        else:
            q, v = _state_of_mujoco(self.layout, jnp.asarray(qpos, float), jnp.asarray(qvel, float))
        return State(jnp.asarray(t, q.dtype), q, v)

    def to_mujoco_qvel(self, q, v):
        """MuJoCo's qvel (..., nv) of jaxrbd's (q, v) (free joints: body-frame origin velocity, local spin)."""
        if self.joint_coordinates:
            return jnp.asarray(v)
        fn = lambda qv: _qvel_of(self.layout, qv[0], qv[1])
        q, v = jnp.asarray(q), jnp.asarray(v)
        for _ in range(q.ndim - 1):
            fn = jax.vmap(fn)
        return fn((q, v))


def _batched(fn, x):
    x = jnp.asarray(x, float)
    for _ in range(x.ndim - 1):
        fn = jax.vmap(fn)
    return fn(x)


def _rotate(quat, x):
    return rot.to_matrix(quat) @ x


def _frames(layout, qpos):
    """{mujoco id: (xpos, xquat)} of every body for qpos (MuJoCo's `mj_kinematics`: each joint in turn)."""
    poses = {0: (jnp.zeros(3), jnp.array([1.0, 0.0, 0.0, 0.0]))}
    for i, xpos, xquat in layout.static_poses:
        poses[i] = (jnp.asarray(xpos), jnp.asarray(xquat))
    for i, _, parent, mark, pos, quat, _, joints in layout.bodies:
        if mark == STATIC:
            continue
        pp, pq = poses[parent]
        xpos, xquat = pp + _rotate(pq, jnp.asarray(pos)), rot.multiply(pq, jnp.asarray(quat))
        for jtype, a, _, jpos, jaxis, qpos0, _ in joints:
            if jtype == FREE:
                xpos, xquat = qpos[a : a + 3], rot.normalize(qpos[a + 3 : a + 7])
            elif jtype == SLIDE:
                xpos = xpos + _rotate(xquat, jnp.asarray(jaxis)) * (qpos[a] - qpos0)
            else:  # ball or hinge: turn about the anchor
                anchor = xpos + _rotate(xquat, jnp.asarray(jpos))
                local = (
                    rot.normalize(qpos[a : a + 4])
                    if jtype == BALL
                    else rot.from_axis_angle(jnp.asarray(jaxis), qpos[a] - qpos0)
                )
                xquat = rot.multiply(xquat, local)
                xpos = anchor - _rotate(xquat, jnp.asarray(jpos))
        poses[i] = (xpos, xquat)
    return poses


def _joints_of(layout):
    """Every joint of the layout's bodies: (jtype, qpos address, dof address, ...)."""
    return [joint for body in layout.bodies for joint in body[7]]


def _from_qpos(layout, qpos):
    poses = _frames(layout, qpos)
    moving = [b for b in layout.bodies if b[1] >= 0]
    q = [jnp.concatenate([poses[b[0]][0] + _rotate(poses[b[0]][1], jnp.asarray(b[6])), poses[b[0]][1]]) for b in moving]
    return jnp.concatenate(q), poses


def _qpos_rate(layout, qpos, qvel):
    """d qpos / dt of qvel: quaternions of free and ball joints turn at the local angular velocity."""
    rate = jnp.zeros(layout.nq)
    for jtype, a, d, *_ in _joints_of(layout):
        if jtype == FREE:
            rate = rate.at[a : a + 3].set(qvel[d : d + 3])
            quat = qpos[a + 3 : a + 7]
            rate = rate.at[a + 3 : a + 7].set(
                0.5 * rot.multiply(quat, jnp.concatenate([jnp.zeros(1), qvel[d + 3 : d + 6]]))
            )
        elif jtype == BALL:
            quat = qpos[a : a + 4]
            rate = rate.at[a : a + 4].set(0.5 * rot.multiply(quat, jnp.concatenate([jnp.zeros(1), qvel[d : d + 3]])))
        else:
            rate = rate.at[a].set(qvel[d])
    return rate


def _from_mujoco(layout, qpos, qvel):
    q, q_dot = jax.jvp(lambda x: _from_qpos(layout, x)[0], (qpos,), (_qpos_rate(layout, qpos, qvel),))
    nb = q.shape[0] // 7
    qb, qb_dot = q.reshape(nb, 7), q_dot.reshape(nb, 7)
    w = 2.0 * rot.multiply(qb_dot[:, 3:], rot.conjugate(qb[:, 3:]))[:, 1:]  # dq/dt = (0, w) q / 2
    return q, jnp.concatenate([qb_dot[:, :3], w], -1).reshape(-1)


def _wrap(angle, centre):
    return centre + jnp.mod(angle - centre + jnp.pi, 2 * jnp.pi) - jnp.pi


def _to_qpos(layout, q):
    """MuJoCo's qpos of q: a free or ball joint, slides followed by at most one hinge, or two or three orthogonal
    hinges (the joints `load_mjcf` accepts), read off each body's pose relative to its parent's frame."""
    poses = {0: (jnp.zeros(3), jnp.array([1.0, 0.0, 0.0, 0.0]))}
    for i, xpos, xquat in layout.static_poses:
        poses[i] = (jnp.asarray(xpos), jnp.asarray(xquat))
    qpos = jnp.zeros(layout.nq, q.dtype)
    for i, k, parent, mark, pos, quat, ipos, joints in layout.bodies:
        if mark == STATIC:
            continue
        pp, pq = poses[parent]
        frame_pos, frame_quat = pp + _rotate(pq, jnp.asarray(pos)), rot.multiply(pq, jnp.asarray(quat))
        if mark == WELDED:
            poses[i] = (frame_pos, frame_quat)
            continue
        xquat = rot.normalize(q[7 * k + 3 : 7 * k + 7])
        xpos = q[7 * k : 7 * k + 3] - _rotate(xquat, jnp.asarray(ipos))
        poses[i] = (xpos, xquat)
        local = rot.multiply(rot.conjugate(frame_quat), xquat)
        (jtype, a, *_), pivot = joints[0], jnp.zeros(3)
        if jtype == FREE:
            qpos = qpos.at[a : a + 3].set(xpos).at[a + 3 : a + 7].set(xquat)
            continue
        if jtype == BALL:
            qpos = qpos.at[a : a + 4].set(local)
            continue
        if len(joints) > 1 and all(joint[0] == HINGE for joint in joints):
            for (_, a, _, _, _, qpos0, centre), angle in zip(joints, _hinge_angles(local, joints)):
                qpos = qpos.at[a].set(_wrap(angle + qpos0, centre))
            continue
        if joints[-1][0] == HINGE:
            _, a, _, pivot, jaxis, qpos0, centre = joints[-1]
            pivot = jnp.asarray(pivot)
            angle = 2.0 * jnp.arctan2(jnp.dot(local[1:], jnp.asarray(jaxis)), local[0])
            qpos = qpos.at[a].set(_wrap(angle + qpos0, centre))
        # The slides move the hinge's anchor (or the body) along their axes, fixed in the parent's frame.
        shift = xpos + _rotate(xquat, pivot) - frame_pos - _rotate(frame_quat, pivot)
        for jtype, a, _, _, jaxis, qpos0, _ in joints:
            if jtype == SLIDE:
                qpos = qpos.at[a].set(jnp.dot(_rotate(frame_quat, jnp.asarray(jaxis)), shift) + qpos0)
    return qpos


def _hinge_angles(local, joints):
    """The angles (from qpos0) of two or three orthogonal hinges whose rotations compose to the quaternion `local`,
    R(n_1, q_1) R(n_2, q_2) [R(n_3, q_3)], as `BodyModel` measures `add_hinges`: the first hinge turns the last axis
    about n_1, the last turns the first axis about n_last, and the middle one tilts the last axis out of the plane
    normal to n_1."""
    axes = [jnp.asarray(joint[4]) / jnp.linalg.norm(jnp.asarray(joint[4])) for joint in joints]
    first, last = axes[0], axes[-1]
    R = rot.to_matrix(local)
    e, f = R @ last, R.T @ first
    angles = [jnp.arctan2(e @ jnp.cross(first, last), e @ last)]
    if len(axes) == 3:
        s = jnp.sign(jnp.dot(first, jnp.cross(axes[1], last)))
        angles.append(jnp.arctan2(s * (first @ e), jnp.linalg.norm(jnp.cross(first, e))))
    return angles + [jnp.arctan2(-(f @ jnp.cross(last, first)), f @ first)]


def _to_qvel(layout, q, v):
    nb = q.shape[0] // 7
    qb, vb = q.reshape(nb, 7), v.reshape(nb, 6)
    quat_dot = 0.5 * rot.multiply(jnp.concatenate([jnp.zeros((nb, 1)), vb[:, 3:]], -1), qb[:, 3:])
    q_dot = jnp.concatenate([vb[:, :3], quat_dot], -1).reshape(-1)
    qpos, qpos_dot = jax.jvp(lambda x: _to_qpos(layout, x), (q,), (q_dot,))
    qvel = jnp.zeros(layout.nv, q.dtype)
    for jtype, a, d, *_ in _joints_of(layout):
        if jtype == FREE:
            spin = 2.0 * rot.multiply(rot.conjugate(qpos[a + 3 : a + 7]), qpos_dot[a + 3 : a + 7])[1:]
            qvel = qvel.at[d : d + 3].set(qpos_dot[a : a + 3]).at[d + 3 : d + 6].set(spin)
        elif jtype == BALL:
            qvel = qvel.at[d : d + 3].set(2.0 * rot.multiply(rot.conjugate(qpos[a : a + 4]), qpos_dot[a : a + 4])[1:])
        else:
            qvel = qvel.at[d].set(qpos_dot[a])
    return qvel


# Compiled once per layout (a hashable static argument); each map is a short chain of small ops.
_q_of_qpos = jax.jit(lambda layout, qpos: _from_qpos(layout, qpos)[0], static_argnums=0)
_qpos_of_q = jax.jit(_to_qpos, static_argnums=0)
_state_of_mujoco = jax.jit(_from_mujoco, static_argnums=0)
_qvel_of = jax.jit(_to_qvel, static_argnums=0)


def load_maximal(m, *, keyframe=None, directions=8, friction=None, broadphase=None, grad_smoothing=0.0):
    """The `MjcfScene` of the compiled MjModel m in maximal coordinates (`load_mjcf(coordinates="maximal")`).

    What is read, and how it maps:
    - bodies: mass and inertia as MuJoCo computed them (from `<inertial>` or its
      geoms); the jaxrbd body's origin is the centre of mass, its axes the MuJoCo
      body's. A body with one free, ball, hinge or slide joint moves; a body with no
      joint whose ancestors have none is static (its geoms are static shapes); a body
      with no joint under a moving one is welded to it (one rigid body: the weld
      group's mass, centre of mass and inertia, and all of its geoms).
    - joints: free (a free body), ball, hinge ("revolute") and slide, as jaxrbd's
      equality rows between the body and its parent (the world for static
      parents); `range` of a limited hinge or slide becomes the joint's stops. A
      body with two orthogonal slides and then a hinge normal to them (a planar
      robot's root) gets a "planar" joint and three coordinate joints
      (`add_joint(..., rows=False)`) with the MJCF joints' names, ranges and motors,
      and one with two orthogonal slides alone (a pusher's object, a reacher's
      target) a "translation" joint and two coordinate joints;
      a body with two or three hinges about one anchor with orthogonal axes (a
      humanoid's hip, shoulder or waist) gets `add_hinges`: a universal or ball
      joint and a coordinate joint per hinge. jaxrbd's joint coordinate is qpos
      minus its initial value.
    - geoms: plane (static only), sphere, capsule, box, and mesh as its convex hull
      (`ConvexMesh`, which is how MuJoCo collides meshes), posed in the body frame.
      Friction per pair is MuJoCo's: the sliding friction (`friction[0]`) of the
      geom with the higher `priority`, else the larger of the two geoms'; 0 when
      the pair's condim is 1. jaxrbd's friction is per body pair, so all geom
      pairs of two bodies must give the same mu.
    - collision filter: contype/conaffinity, `<exclude>`, no contacts within a body
      or between a jointed parent and child (MuJoCo's filterparent). Geoms that
      collide with nothing are left out, except on a moving body none of whose
      geoms collides: it carries its sphere, capsule, box and mesh geoms, with
      every contact pair excluded. Two bodies must collide with all or none of
      their geom pairs. A model none of whose geoms collides has no contact pairs.
    - gravity; the timestep as `scene.dt`; the initial state from qpos0 (zero
      velocity) or `keyframe` (a name or index: its qpos and qvel).
    - `<motor>` actuators on hinge, slide and ball joints, gear times gain: the controls u
      of `simulate(controls=...)`, in the actuators' order (`scene.motors`), with
      their `ctrlrange` and `forcerange` where limited (`SceneBuilder.add_motor`).
    - hinge and slide `stiffness`, `springref`, `damping` and `armature`, and ball
      `damping` and `armature`: the joint's spring, damper and armature
      (`SceneBuilder.set_joint_dynamics`; the damper implicit, as in MuJoCo's Euler
      integrator); a free joint's `damping`, on its body frame's origin and local spin
      (`SceneBuilder.set_body_damping`).

    Soft-contact and passive parameters that jaxrbd's rigid contact does not have
    (solref, solimp, margin, joint frictionloss, stiffness of ball joints, stiffness and armature of
    free joints), and tendons, sites, sensors, condim above 3 and fluid forces, are
    listed in one warning. Elements whose absence would silently change the motion
    raise NotImplementedError naming the element: cylinder, ellipsoid and
    height-field geoms that collide (ones that collide with nothing are left out and
    listed), equality constraints, explicit `<pair>` contacts, bodies with
    several joints other than a planar root, two orthogonal slides or orthogonal hinges about one anchor, limited ball
    joints, actuators other than motors on hinges, slides and ball joints, and flexes. Mocap bodies are static.

    Args:
        m: MuJoCo's compiled model.
        keyframe: None (MuJoCo's qpos0), or a `<key>` name or index.
        directions: as in `SceneBuilder`.
        friction: as in `SceneBuilder`.
        broadphase: as in `SceneBuilder`.

    Returns:
        an `MjcfScene` (unpacks to `(system, state)`), with `dt`, `motors`,
        `to_mujoco_qpos`, `from_mujoco_qpos`, `to_mujoco_qvel` and `from_mujoco`.
    """
    mujoco = _mujoco()
    obj = mujoco.mjtObj
    body_name = lambda i: _name(m, mujoco, obj.mjOBJ_BODY, i, "body")
    geom_name = lambda g: _name(m, mujoco, obj.mjOBJ_GEOM, g, "geom")
    joint_name = lambda j: _name(m, mujoco, obj.mjOBJ_JOINT, j, "joint")
    refuse_unsupported(m, mujoco)

    ignored = []

    def ignore(what, names):
        if len(names):
            ignored.append(f"{what} {list(names)}")

    ignore("tendons", [_name(m, mujoco, obj.mjOBJ_TENDON, i, "tendon") for i in range(m.ntendon)])
    ignore("sites", [_name(m, mujoco, obj.mjOBJ_SITE, i, "site") for i in range(m.nsite)])
    ignore(
        "mocap (held static at their initial pose) bodies",
        [body_name(i) for i in range(m.nbody) if m.body_mocapid[i] >= 0],
    )
    ignore("sensors", [_name(m, mujoco, obj.mjOBJ_SENSOR, i, "sensor") for i in range(m.nsensor)])
    qpos, qvel = _initial(m, mujoco, keyframe)
    data = mujoco.MjData(m)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(m, data)

    # Bodies: static (welded to the world), moving with exactly one joint, or welded to a moving body (one rigid
    # body with it, as MuJoCo's body_weldid says).
    static = {0}
    moving, welded, several = [], [], {}  # several: body -> "hinges", "planar" or "translation" (`_several_joints`)
    for i in range(1, m.nbody):
        n = m.body_jntnum[i]
        if n == 0:
            (static.add if m.body_parentid[i] in static else welded.append)(i)
        else:
            if n > 1:
                several[i] = _several_joints(
                    m, data, i, body_name(i), [joint_name(j) for j in range(m.body_jntadr[i], m.body_jntadr[i] + n)]
                )
            moving.append(i)
    excluded = {frozenset(((s >> 16), s & 0xFFFF)) for s in m.exclude_signature}
    filterparent = not (m.opt.disableflags & mujoco.mjtDisableBit.mjDSBL_FILTERPARENT)
    collide = lambda g1, g2: _collides(m, excluded, filterparent, g1, g2)
    live = [g for g in range(m.ngeom) if any(collide(g, h) for h in range(m.ngeom) if h != g)]
    ignore("geoms that collide with nothing", [geom_name(g) for g in range(m.ngeom) if g not in live])
    for g in live:  # a geom that collides with nothing only adds its mass, which MuJoCo has counted
        kind = GEOM_KINDS.get(int(m.geom_type[g]), str(m.geom_type[g]))
        if kind not in ("plane", "sphere", "capsule", "box", "mesh"):
            refuse(f"geom {geom_name(g)!r} is a {kind}, which jaxrbd does not support")
    ignore(
        "solref/solimp of geoms",
        [
            geom_name(g)
            for g in live
            if not (np.allclose(m.geom_solref[g], DEFAULT_SOLREF) and np.allclose(m.geom_solimp[g], DEFAULT_SOLIMP))
        ],
    )
    ignore("margin/gap of geoms", [geom_name(g) for g in live if m.geom_margin[g] or m.geom_gap[g]])
    ignore("condim > 3 (torsional, rolling friction) of geoms", [geom_name(g) for g in live if m.geom_condim[g] > 3])
    ignore(
        "the hollows of non-convex mesh geoms (collided as their convex hull, as MuJoCo does)",
        [geom_name(g) for g in live if m.geom_type[g] == 7 and _inner_vertices(_mesh_vertices(m, g))],
    )

    def dofs(j):
        return slice(m.jnt_dofadr[j], m.jnt_dofadr[j] + {FREE: 6, BALL: 3}.get(int(m.jnt_type[j]), 1))

    passive = [
        joint_name(j)
        for j in range(m.njnt)
        if np.any(m.dof_frictionloss[dofs(j)] != 0)
        or (m.jnt_type[j] == BALL and m.jnt_stiffness[j])
        or (m.jnt_type[j] == FREE and (m.jnt_stiffness[j] or np.any(m.dof_armature[dofs(j)] != 0)))
    ]
    ignore("frictionloss of joints, stiffness of ball joints, stiffness/armature of free joints", passive)
    if m.opt.density or m.opt.viscosity or np.any(m.opt.wind):
        ignored.append("fluid forces (density, viscosity, wind)")

    b = SceneBuilder(
        dim=3,
        gravity=tuple(float(x) for x in m.opt.gravity),
        directions=directions,
        cone=friction,
        broadphase=broadphase,
    )
    owner = {}  # geom -> jaxrbd name (a moving body, or the static geom itself)
    taken = {body_name(i) for i in moving}
    for i in sorted(static - {0}) + [0]:
        for g in live:
            if m.geom_bodyid[g] != i:
                continue
            name = geom_name(g)
            if name in taken:  # statics share the builder's namespace with the bodies
                name = f"{name} (geom {g})"
            pos, mat = np.array(data.geom_xpos[g]), np.array(data.geom_xmat[g]).reshape(3, 3)
            quat = np.zeros(4)
            mujoco.mju_mat2Quat(quat, mat.reshape(-1))
            shape = _shape(m, g, pos, quat, static=True, normal=mat[:, 2])
            b.add_static(name, shape)
            owner[g] = name

    layout_bodies, names = [], []
    inertial = {i: _welded_inertia(m, data, i, welded) for i in moving}  # (mass, inertia, centre of mass)
    for i in range(1, m.nbody):
        pose = (tuple(map(float, m.body_pos[i])), tuple(map(float, m.body_quat[i])))
        if i in static or i in welded:
            mark = STATIC if i in static else WELDED
            layout_bodies.append((i, -1, int(m.body_parentid[i]), mark, *pose, (0.0,) * 3, ()))
            continue
        joints = []
        for j in range(m.body_jntadr[i], m.body_jntadr[i] + m.body_jntnum[i]):
            jtype, a = int(m.jnt_type[j]), int(m.jnt_qposadr[j])
            qpos0 = float(m.qpos0[a]) if jtype in (HINGE, SLIDE) else 0.0
            lo, hi = (float(x) for x in m.jnt_range[j])
            centre = 0.5 * (lo + hi) if m.jnt_limited[j] else float(qpos[a]) if jtype == HINGE else 0.0
            jpos, jaxis = tuple(map(float, m.jnt_pos[j])), tuple(map(float, m.jnt_axis[j]))
            joints.append((jtype, a, int(m.jnt_dofadr[j]), jpos, jaxis, qpos0, centre))
        ipos = tuple(map(float, inertial[i][2]))
        layout_bodies.append((i, len(names), int(m.body_parentid[i]), MOVING, *pose, ipos, tuple(joints)))
        names.append(body_name(i))
    static_poses = tuple(
        (i, tuple(map(float, data.xpos[i])), tuple(map(float, data.xquat[i]))) for i in sorted(static - {0})
    )
    layout = MjcfLayout(int(m.nq), int(m.nv), tuple(layout_bodies), static_poses)
    state_q, state_v = _state_of_mujoco(layout, jnp.asarray(qpos), jnp.asarray(qvel))
    ghosts = []  # moving bodies none of whose geoms collide: they carry their geoms, and every pair is excluded
    root = lambda g: m.body_weldid[m.geom_bodyid[g]]  # the moving body (or the world) that carries geom g
    for k, i in enumerate(moving):
        geoms = [g for g in live if root(g) == i]
        if not geoms:
            own = [g for g in range(m.ngeom) if root(g) == i]
            geoms = [g for g in own if GEOM_KINDS.get(int(m.geom_type[g])) in ("sphere", "capsule", "box", "mesh")]
            if not geoms:
                refuse(
                    f"body {body_name(i)!r}: none of its geoms collides, and none is a sphere, capsule, box or mesh "
                    f"that it could carry ({[geom_name(g) for g in own]}); jaxrbd bodies need at least one shape"
                )
            ghosts.append(names[k])
        mass, inertia, ipos = inertial[i]
        shapes = []
        for g in geoms:
            if m.geom_type[g] == 0:
                refuse(f"geom {geom_name(g)!r}: a plane on a moving body (planes are static in jaxrbd)")
            if m.geom_bodyid[g] == i:
                pos, quat = np.array(m.geom_pos[g]), np.array(m.geom_quat[g])
            else:  # on a body welded to i: its pose in i's frame, from the kinematics at the initial qpos
                R = np.array(data.xmat[i]).reshape(3, 3)
                pos, quat = R.T @ (data.geom_xpos[g] - data.xpos[i]), np.zeros(4)
                mujoco.mju_mat2Quat(quat, (R.T @ np.array(data.geom_xmat[g]).reshape(3, 3)).reshape(-1))
            shapes.append(_shape(m, g, pos - ipos, quat))
            owner[g] = names[k]
        b.add_body(
            names[k],
            *shapes,
            mass=mass,
            inertia=inertia,
            position=state_q[7 * k : 7 * k + 3],
            orientation=state_q[7 * k + 3 : 7 * k + 7],
            velocity=state_v[6 * k : 6 * k + 3],
            angular_velocity=state_v[6 * k + 3 : 6 * k + 6],
        )
        free = [j for j in range(m.body_jntadr[i], m.body_jntadr[i] + m.body_jntnum[i]) if m.jnt_type[j] == FREE]
        if free and np.any(m.dof_damping[dofs(free[0])] != 0):  # on the body frame's origin and the local spin
            damping = m.dof_damping[dofs(free[0])]
            if np.ptp(damping) > 0:
                refuse(f"joint {joint_name(free[0])!r}: a free joint with damping {damping.tolist()} differing by dof")
            b.set_body_damping(names[k], float(damping[0]), origin=-ipos)
    joint_of = {}
    for i in moving:
        parent = m.body_weldid[m.body_parentid[i]]  # the moving body its parent is welded to, or the world
        other = None if parent in static else body_name(parent)
        first, count = m.body_jntadr[i], m.body_jntnum[i]
        last = first + count - 1
        if several.get(i) == "hinges":
            ids = range(first, last + 1)
            b.add_hinges(
                [joint_name(j) for j in ids],
                body_name(i),
                other,
                anchor=np.array(data.xanchor[first]),
                axes=[np.array(data.xaxis[j]) for j in ids],
                ranges=[
                    tuple(float(x - qpos[m.jnt_qposadr[j]]) for x in m.jnt_range[j]) if m.jnt_limited[j] else None
                    for j in ids
                ],
            )
            joint_of.update({j: joint_name(j) for j in ids})
            continue
        if several.get(i) in ("planar", "translation"):  # two slides (and a hinge normal to them): one joint's rows
            anchor, kind = np.array(data.xanchor[last]), several[i]
            axis = np.array(data.xaxis[last]) if kind == "planar" else np.cross(data.xaxis[first], data.xaxis[last])
            b.add_joint(f"{body_name(i)} ({kind})", kind, body_name(i), other, anchor=anchor, axis=axis)
        for j in range(first, last + 1):
            jtype = int(m.jnt_type[j])
            if jtype == FREE:
                continue
            if jtype == BALL and m.jnt_limited[j]:
                refuse(
                    f"joint {joint_name(j)!r}: a limited ball joint (maximal coordinates' ball joints have no range; "
                    "coordinates='joints' stops them on their rotation angle)"
                )
            a = m.jnt_qposadr[j]
            rng = None
            if jtype != BALL and m.jnt_limited[j]:
                rng = tuple(float(x - qpos[a]) for x in m.jnt_range[j])
            b.add_joint(
                joint_name(j),
                _KIND[jtype],
                body_name(i),
                other,
                anchor=np.array(data.xanchor[last]),  # a planar joint's slides measure its hinge's anchor
                axis=None if jtype == BALL else np.array(data.xaxis[j]),
                range=rng,
                rows=bool(count == 1),
            )
            joint_of[j] = joint_name(j)
        if other is not None and not filterparent:
            b.include(body_name(i), other)
    for ghost in ghosts:
        for other in sorted(set(owner.values()) - {ghost}):
            b.exclude(ghost, other)
    # Contacts: per jaxrbd pair, all of its geom pairs collide or none does.
    pairs = {}
    moves = {g: root(g) in moving for g in live}
    for g1 in live:
        for g2 in live:
            if g1 < g2 and owner[g1] != owner[g2] and (moves[g1] or moves[g2]):
                pairs.setdefault(frozenset((owner[g1], owner[g2])), []).append((g1, g2))
    set_pairs(b, m, pairs, collide, geom_name, refuse)
    for j, joint in joint_of.items():  # hinge and slide stiffness, springref, damping and armature; ball damping
        dof = m.jnt_dofadr[j]
        values = dict(stiffness=m.jnt_stiffness[j], damping=m.dof_damping[dof], armature=m.dof_armature[dof])
        if m.jnt_type[j] in (HINGE, SLIDE) and any(values.values()):
            a = m.jnt_qposadr[j]
            rest = float(m.qpos_spring[a] - qpos[a])
            b.set_joint_dynamics(joint, rest=rest, **{k: float(x) for k, x in values.items()})
        if m.jnt_type[j] == BALL and (values["damping"] or values["armature"]):
            for field in ("damping", "armature"):
                per_dof = getattr(m, f"dof_{field}")[dofs(j)]
                if np.ptp(per_dof) > 0:
                    refuse(f"joint {joint!r}: a ball joint with {field} {per_dof.tolist()} differing by axis")
            b.set_joint_dynamics(joint, damping=float(values["damping"]), armature=float(values["armature"]))
    motors = []
    for u in range(m.nu):
        name = _name(m, mujoco, obj.mjOBJ_ACTUATOR, u, "actuator")
        j = int(m.actuator_trnid[u, 0])
        is_motor = (
            m.actuator_trntype[u] == mujoco.mjtTrn.mjTRN_JOINT
            and m.actuator_dyntype[u] == mujoco.mjtDyn.mjDYN_NONE
            and m.actuator_gaintype[u] == mujoco.mjtGain.mjGAIN_FIXED
            and m.actuator_biastype[u] == mujoco.mjtBias.mjBIAS_NONE
        )
        if not is_motor or j not in joint_of or m.jnt_type[j] not in (HINGE, SLIDE, BALL):
            refuse(f"actuator {name!r}: only <motor> actuators on hinge, slide and ball joints are supported")
        # MuJoCo's actuator force gain ctrl, clipped to forcerange, acts through the gear: on a hinge or slide
        # jaxrbd's force gear gain ctrl is clipped to gear times forcerange; on a ball joint gain ctrl is, and
        # gear[:3] is the torque's direction in the child's frame (body a's).
        ball = m.jnt_type[j] == BALL
        scale = 1.0 if ball else float(m.actuator_gear[u, 0])  # from MuJoCo's actuator force to jaxrbd's gear u
        torque = np.array(m.actuator_gear[u, :3]) if ball else None
        gear = scale * float(m.actuator_gainprm[u, 0])
        ctrl_range = tuple(m.actuator_ctrlrange[u]) if m.actuator_ctrllimited[u] else None
        force_range = tuple(np.sort(scale * m.actuator_forcerange[u])) if m.actuator_forcelimited[u] else None
        b.add_motor(name, joint_of[j], torque=torque, gear=gear, ctrl_range=ctrl_range, force_range=force_range)
        motors.append(name)
    if ignored:
        warnings.warn("load_mjcf ignores these MJCF elements: " + "; ".join(ignored), stacklevel=3)
    scene = b.build()
    return MjcfScene(
        scene.system,
        scene.state,
        scene.bodies,
        dt=float(m.opt.timestep),
        layout=layout,
        motors=tuple(motors),
        grad_smoothing=grad_smoothing,
    )


def _several_joints(m, data, i, name, joints):
    """How body i's several joints map: "hinges" (two or three hinges about one anchor with orthogonal axes, as
    `SceneBuilder.add_hinges`), "planar" (two orthogonal slides, then a hinge normal to both: the root of a planar
    robot) or "translation" (two orthogonal slides: a puck or a target moving in a plane without turning); otherwise
    NotImplementedError naming the body and its joints. `data` holds the kinematics at the initial qpos."""
    ids = range(m.body_jntadr[i], m.body_jntadr[i] + m.body_jntnum[i])
    kinds = [int(m.jnt_type[j]) for j in ids]
    axes = [np.array(data.xaxis[j]) for j in ids]
    orthogonal = all(abs(axes[p] @ axes[q]) <= 1e-9 for p in range(len(axes)) for q in range(p))
    one_anchor = all(np.allclose(data.xanchor[j], data.xanchor[ids[0]], rtol=0.0, atol=1e-9) for j in ids)
    if orthogonal and one_anchor and kinds in ([HINGE] * 2, [HINGE] * 3):
        return "hinges"
    if orthogonal and kinds == [SLIDE, SLIDE, HINGE]:
        return "planar"
    if orthogonal and kinds == [SLIDE, SLIDE]:
        return "translation"
    raise NotImplementedError(
        f"load_mjcf: body {name!r} has {len(kinds)} joints {joints}; jaxrbd maps several joints on one body only as "
        "two or three hinges about one anchor with orthogonal axes, or as two orthogonal slides, alone (a translation "
        "joint) or followed by a hinge normal to them (a planar joint)"
    )


def _welded_inertia(m, data, i, welded):
    """(mass, (3, 3) inertia about the centre of mass in i's frame, (3,) centre of mass in i's frame) of moving body
    i with the bodies welded to it, from MuJoCo's masses and principal inertias posed by the kinematics in `data`."""
    group = [i] + [k for k in welded if m.body_weldid[k] == i]
    if len(group) == 1:  # MuJoCo's own numbers, without the round-off of the posed sum
        R = np.asarray(rot.to_matrix(jnp.asarray(m.body_iquat[i])))
        return float(m.body_mass[i]), R @ np.diag(m.body_inertia[i]) @ R.T, np.array(m.body_ipos[i])
    masses = np.array([m.body_mass[k] for k in group])
    centres = np.array([data.xipos[k] for k in group])
    mass = float(masses.sum())  # > 0: MuJoCo's compiler refuses a moving body without mass
    com = masses @ centres / mass
    inertia = np.zeros((3, 3))
    for k, mk, xk in zip(group, masses, centres):
        Rk, d = np.array(data.ximat[k]).reshape(3, 3), xk - com
        inertia += Rk @ np.diag(m.body_inertia[k]) @ Rk.T + mk * (d @ d * np.eye(3) - np.outer(d, d))
    R = np.array(data.xmat[i]).reshape(3, 3)
    return mass, R.T @ inertia @ R, R.T @ (com - data.xpos[i])
