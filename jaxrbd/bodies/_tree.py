"""Kinematic trees in joint coordinates: MuJoCo's qpos and qvel are the state.

A tree is a set of bodies, each attached to its parent (or the world) by a fixed
offset followed by zero or more joints in sequence, from MuJoCo's joint set:

- free: q holds the body frame's world position and unit quaternion wxyz, v the
  origin's world velocity and the angular velocity in the body frame;
- ball: q a unit quaternion, v the angular velocity in the child's frame;
- hinge (an angle) and slide (a displacement), one coordinate each, measured from
  MuJoCo's qpos0.

So dq/dt = G(q) v, with the quaternion rate (quat * (0, w)) / 2 of the local
angular velocity. Tree joints hold by construction: there are no equality rows
for them and nothing drifts. This is the generalized-coordinate setting of the
papers (000 §2, 003 §2): the mass matrix M(q), the bias forces and the contact
rows J(q), here the body Jacobians applied to the contact record's rows.

How it is computed, as free functions of (tree, q, params):

- forward kinematics level by level: one vectorised composition for all the
  bodies at one depth, so compile time grows with the tree's depth, not with its
  number of bodies;
- each degree of freedom's motion axis S_i = (w_i, u_i) is a spatial vector
  referred to the world origin (the velocity of a point x is u + w x x); body
  velocities, composite inertias (the composite-rigid-body mass matrix) and the
  two sweeps of recursive Newton-Euler (accelerations down, forces up) are then
  products with static ancestor masks. For a robot's tens of bodies one small
  dense mask product replaces a scatter per level, in both directions;
- the index sets (levels, joint types, a body's joints) are static: read as
  slices and written as updates of slices wherever they are runs of rows, and the
  3 x 3 and 6 x 6 stacks multiplied elementwise (`jaxrbd._small`), so that a step
  and its reverse pass are a few fused loops rather than a gather or scatter per
  index set.
"""

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _rotation as rot
from .. import _small as small
from .._contacts import Contacts
from .._validate import check_value, is_traced
from ..model import System
from ._model import Bound, contact_arrays

FREE, BALL, SLIDE, HINGE = 0, 1, 2, 3  # MuJoCo's mjtJoint
JOINT_DOFS = {FREE: 6, BALL: 3, SLIDE: 1, HINGE: 1}


class ActuatorParams(eqx.Module):
    """MuJoCo's actuators on hinge, slide and ball joints, (nu, ...): force = gain ctrl + bias . (1, length, velocity).

    Attributes:
        gear: (nu,) the transmission: length = gear q, velocity = gear v, and the
            joint force is gear times the actuator force. On a ball joint it is the
            size of MuJoCo's gear[:3] and acts about `axis`: length = gear axis . r,
            r the joint's rotation vector (MuJoCo's `mju_quat2Vel`), velocity =
            gear axis . w, and the joint torque gear force axis (in the body frame). A
            position servo there (gain = -bias[1]) takes the setpoint nearest its
            length modulo 2 pi gear, as MuJoCo does.
        gain: (nu,) the force per unit of control (MuJoCo's `gainprm[0]`).
        bias: (nu, 3) the affine bias (MuJoCo's `biasprm[:3]`; a position servo has
            (0, -kp, 0), a velocity servo (0, 0, -kv), a motor zeros).
        ctrl_range, force_range: (nu, 2) bounds of the control and of the force
            (+-inf where MuJoCo's are not limited).
        axis: (nu, 3) a ball joint actuator's unit axis in its body's frame
            (MuJoCo's gear[:3] / |gear[:3]|); zeros for hinges and slides.
    """

    gear: jax.Array
    gain: jax.Array
    bias: jax.Array
    ctrl_range: jax.Array
    force_range: jax.Array
    axis: jax.Array


class TreeParams(eqx.Module):
    """The array leaves of a tree (`system.params`); every one may be fitted or swept.

    Attributes:
        body_pos, body_quat: (nb, 3), (nb, 4) each body's frame in its parent's.
        mass: (nb,) masses (0 for a massless frame).
        inertia: (nb, 3, 3) inertia about the centre of mass, in the body frame.
        com: (nb, 3) the centre of mass in the body frame.
        gravity: (3,) gravitational acceleration.
        joint_pos, joint_axis: (nj, 3) each joint's anchor and unit axis in its
            body's frame (before the joint moves it).
        qpos0: (nq,) the coordinates at which hinges and slides read zero.
        armature, damping: (nv,) per degree of freedom; the damper is implicit, as
            in MuJoCo's Euler integrator.
        stiffness: (nj,) hinge and slide springs, about `springref` (nq,).
        lower, upper: (nj,) joint ranges (+-inf without a stop).
        stop_restitution: (nj,) the restitution of a joint's range stops.
        frictionloss: (nv,) each degree of freedom's dry friction (MuJoCo's
            frictionloss, a force or torque), on the dofs of `Tree.frictionloss`.
        actuators: the `ActuatorParams`, or None without actuators.
        control: (nu,) the controls (zeros as built; `simulate(controls=...)` sets
            them in every step), or None.
        shapes: the contact geometry's shapes (`BodyParams.shapes`).
    """

    body_pos: jax.Array
    body_quat: jax.Array
    mass: jax.Array
    inertia: jax.Array
    com: jax.Array
    gravity: jax.Array
    joint_pos: jax.Array
    joint_axis: jax.Array
    qpos0: jax.Array
    armature: jax.Array
    damping: jax.Array
    stiffness: jax.Array
    springref: jax.Array
    lower: jax.Array
    upper: jax.Array
    stop_restitution: jax.Array
    frictionloss: Any = None
    actuators: Any = None
    control: Any = None
    shapes: Any = None


@dataclasses.dataclass(frozen=True)
class Tree:
    """The static layout of a kinematic tree (hashable): the functions of this module read it.

    Attributes:
        names: body names, in tree order (every parent before its children).
        parent: (nb,) each body's parent index, -1 for the world.
        joints: ((name, type, body, qpos address, dof address), ...) in MuJoCo's
            order (a body's joints in sequence, bodies in tree order).
        nq, nv: sizes of q and v.
        geometry: the `BodyModel` of the contact geometry, whose moving bodies are
            the tree bodies `geometry_bodies`; None without contact pairs.
        geometry_bodies: the tree body of each of the geometry's bodies.
        limits: ((joint index, side), ...): the range stops, side +1 for the lower
            stop (gap = coordinate - lower) and -1 for the upper of a hinge or slide,
            0 for a ball joint's cone (gap = upper - its rotation angle, MuJoCo's ball
            limit); they follow the contacts in the record, as for `BodyModel`.
        actuators: ((name, joint index), ...): the order of the controls u.
        damped: whether some degree of freedom has a damper (`system.passive`).
        frictionless: the geometry's candidate contacts without friction (MuJoCo's
            condim 1): no friction rows in the step (`Contacts.frictional`).
        frictionloss: the degrees of freedom with dry friction: each is an entry of
            the contact record after the geometry's (`Contacts.dry`), its friction
            impulse bounded by frictionloss h, the rigid form of MuJoCo's frictionloss.
    """

    names: tuple
    parent: tuple
    joints: tuple
    nq: int
    nv: int
    geometry: Any = None
    geometry_bodies: tuple = ()
    limits: tuple = ()
    actuators: tuple = ()
    damped: bool = False
    frictionless: tuple = ()
    frictionloss: tuple = ()

    # What the rest of jaxrbd asks of a body model.
    dim = 3
    shapes_by_construction = True  # its functions' shapes follow from the layout: `check_system` traces none

    @property
    def nbodies(self):
        return len(self.names)

    @property
    def motors(self):
        """((name, joint index), ...): the actuators, in the order of the controls."""
        return self.actuators

    def contacts(self, q, params, mu=None, restitution=None):
        """The contact record (`jaxrbd.Contacts`) at q, the one the step reads (`contacts`)."""
        return contacts(self, q, params, mu, restitution)

    def index(self, name):
        """The index of a body by name."""
        if name not in self.names:
            raise KeyError(f"no body named {name!r}; bodies: {list(self.names)}")
        return self.names.index(name)

    def check(self, params, q):
        """On the host: masses, inertias and the quaternions of q (ValueError naming the body or joint)."""
        check_value("system.params.mass", params.mass, shape=(self.nbodies,), nonnegative=True)
        if not is_traced(params.inertia):
            eig = np.linalg.eigvalsh(np.asarray(params.inertia))
            for name, e in zip(self.names, eig):
                if not np.all(np.isfinite(e)) or e.min() < -1e-12 * max(1.0, abs(e).max()):
                    raise ValueError(
                        f"system.params.inertia of body {name!r} must be symmetric positive semidefinite, "
                        f"got eigenvalues {e.tolist()}"
                    )
        if not is_traced(q):
            for name, jtype, _, a, _ in self.joints:
                if jtype in (FREE, BALL):
                    s = a + 3 if jtype == FREE else a
                    check_value(f"the quaternion of joint {name!r} in state.q", np.asarray(q)[s : s + 4], nonzero=True)

    def parameters_valid(self, params):
        """() bool, traceable: masses non-negative and every leaf of the inertias finite."""
        return jnp.all(jnp.isfinite(params.mass) & (params.mass >= 0)) & jnp.all(jnp.isfinite(params.inertia))

    def stop_restitution(self, params):
        """(nl,) the restitution of each range stop (`limits`)."""
        return params.stop_restitution[np.array([j for j, _ in self.limits], int)]

    @property
    def geometry_size(self):
        """The number of the contact record's entries from the geometry (a broad phase's slots, or every candidate)."""
        if self.geometry is None:
            return 0
        return sum((len(g.index_a) if g.slots is None else g.slots) * g.capacity for g in self.geometry.groups)

    def friction_rows(self):
        """((joint name, dof, record index), ...): where each dry-friction entry sits in the contact record (its
        friction impulse is `traj.impulses.friction[..., index, 0]`)."""
        joint = {}
        for name, jtype, _, _, d in self.joints:
            joint.update({i: name for i in range(d, d + JOINT_DOFS[jtype])})
        nc = self.geometry_size
        return tuple((joint[d], d, nc + k) for k, d in enumerate(self.frictionloss))

    def limit_rows(self):
        """((joint name, "lower" | "upper", record index), ...): where each stop sits in the contact record."""
        nc = self.geometry_size + len(self.frictionloss)
        return tuple(
            (self.joints[j][0], "lower" if side > 0 else "upper", nc + k) for k, (j, side) in enumerate(self.limits)
        )

    # Static structure, derived once.

    @functools.cached_property
    def _parent(self):
        """(nb,) parent indices with the world as nb."""
        nb = self.nbodies
        return np.array([nb if p < 0 else p for p in self.parent], int)

    @functools.cached_property
    def levels(self):
        """The bodies grouped by depth (numpy index arrays), the world's children first."""
        depth = []
        for p in self.parent:
            depth.append(0 if p < 0 else depth[p] + 1)
        depth = np.array(depth, int)
        return tuple(np.flatnonzero(depth == d) for d in range(depth.max(initial=-1) + 1))

    @functools.cached_property
    def ancestors(self):
        """(nb, nb) bool: A[a, b] = body a is body b or one of its ancestors."""
        nb = self.nbodies
        A = np.eye(nb, dtype=bool)
        for b in range(nb):
            p = self.parent[b]
            while p >= 0:
                A[p, b] = True
                p = self.parent[p]
        return A

    @functools.cached_property
    def slots(self):
        """(nb, K) each body's joints in sequence, padded with nj (the identity)."""
        nj = len(self.joints)
        per_body = [[j for j, joint in enumerate(self.joints) if joint[2] == b] for b in range(self.nbodies)]
        K = max((len(s) for s in per_body), default=0)
        return np.array([s + [nj] * (K - len(s)) for s in per_body], int).reshape(self.nbodies, K)

    @functools.cached_property
    def joint_slot(self):
        """(nj,) the place of each joint in its body's sequence."""
        out = np.zeros(len(self.joints), int)
        for b, row in enumerate(self.slots):
            for k, j in enumerate(row):
                if j < len(self.joints):
                    out[j] = k
        return out

    @functools.cached_property
    def free_bodies(self):
        """(nb,) bool: bodies moved by a free joint (their offset from the world is the joint's)."""
        out = np.zeros(self.nbodies, bool)
        for _, jtype, b, _, _ in self.joints:
            out[b] |= jtype == FREE
        return out

    @functools.cached_property
    def by_type(self):
        """{joint type: (joint indices, qpos addresses, dof addresses)}, numpy arrays, for the types present."""
        out = {}
        for jtype in (FREE, BALL, SLIDE, HINGE):
            ids = [j for j, joint in enumerate(self.joints) if joint[1] == jtype]
            if ids:
                out[jtype] = tuple(
                    np.array(x, int) for x in zip(*[(j, self.joints[j][3], self.joints[j][4]) for j in ids])
                )
        return out

    @functools.cached_property
    def dof_body(self):
        """(nv,) the body each degree of freedom moves."""
        out = np.zeros(self.nv, int)
        for _, jtype, b, _, d in self.joints:
            out[d : d + JOINT_DOFS[jtype]] = b
        return out

    @functools.cached_property
    def dof_masks(self):
        """(D, P, C): D (nb, nv) dof i moves body b; P (nv, nv) dof k moves the frame dof i's axis is fixed in
        (an earlier joint on the chain: a free joint's translation moves its rotation's axes, a joint's own dofs
        do not count); C (nv, nv) dofs i and j move a common body, i's body an ancestor of j's or j's of i's."""
        A, body = self.ancestors, self.dof_body
        unit = np.zeros(self.nv, int)  # the joint unit of each dof, in chain order
        u = 0
        for _, jtype, _, _, d in self.joints:
            if jtype == FREE:
                unit[d : d + 3], unit[d + 3 : d + 6], u = u, u + 1, u + 2
            else:
                unit[d : d + JOINT_DOFS[jtype]], u = u, u + 1
        D = A[body].T
        same = body[:, None] == body[None, :]
        P = A[body][:, body].T & (~same | (unit[None, :] < unit[:, None]))
        return D, P, A[body][:, body]

    @functools.cached_property
    def scalar_joints(self):
        """(qpos addresses, dof addresses, joint indices) of the hinges and slides, numpy arrays."""
        ids = [j for j, joint in enumerate(self.joints) if joint[1] in (HINGE, SLIDE)]
        return (
            np.array([self.joints[j][3] for j in ids], int),
            np.array([self.joints[j][4] for j in ids], int),
            np.array(ids, int),
        )

    def system(self, params, mu, restitution, directions, friction=None):
        """The `System` of this tree with the given leaves (its functions compare by the tree's value)."""
        fn = lambda f: Bound(self, f)
        return System(
            params=params,
            mu=mu,
            mass_matrix=fn(mass_matrix),
            potential=fn(potential),
            gaps=fn(_gaps),
            tangents=fn(_tangents),
            external_force=fn(external_force),
            kinematics=fn(_kinematics_matrix),
            velocity_map=fn(velocity_map),
            directions=directions,
            passive=fn(passive) if self.damped else None,
            normalize=fn(normalize),
            collide=fn(contacts),
            restitution=restitution,
            torsions=fn(_torsions),
            friction=friction,
            bodies=self,
            bias_force=fn(bias_force),
            advance=fn(advance),
        )


# --- Kinematics -------------------------------------------------------------------------------


# --- Static indexing --------------------------------------------------------------------------
# The tree's index sets are numpy arrays known at trace time. Where one is a run of
# consecutive or evenly spaced rows (a chain's levels, a robot's hinges, the ant's
# legs), reading it is a slice and writing it an update of a slice: XLA fuses both
# with their neighbours, and their transposes are pads and slices. A gather is a
# thunk of its own on the CPU, and its transpose a scatter-add, a thunk of its own in
# every step of a reverse pass.


def _progression(idx):
    """(start, stop, step) of a static 1-D index that is an increasing arithmetic progression, else None."""
    idx = np.asarray(idx)
    if idx.ndim != 1 or idx.size == 0:
        return None
    step = int(idx[1] - idx[0]) if idx.size > 1 else 1
    if step < 1 or not np.array_equal(idx, idx[0] + step * np.arange(idx.size)):
        return None
    return int(idx[0]), int(idx[-1]) + 1, step


def _take(x, idx):
    """x[idx] along the first axis for a static integer index of any shape: a slice where the flattened index is
    an arithmetic progression, else one gather."""
    idx = np.asarray(idx, int)
    flat = idx.reshape(-1)
    run = _progression(flat)
    if run is None:
        out = x[flat]
    elif run == (0, x.shape[0], 1):
        out = x
    else:
        out = jax.lax.slice_in_dim(x, *run)
    return out.reshape(idx.shape + x.shape[1:])


def _put(x, idx, value, add=False):
    """x with the rows idx (static, any shape) set to (or, with add, increased by) value: an update of a slice
    where the flattened index is a run of consecutive rows, else one scatter."""
    idx = np.asarray(idx, int)
    flat = idx.reshape(-1)
    value = jnp.broadcast_to(value, idx.shape + x.shape[1:]).reshape(flat.shape + x.shape[1:])
    run = _progression(flat)
    if run is None or run[2] != 1:
        return x.at[flat].add(value) if add else x.at[flat].set(value)
    if add:
        value = jax.lax.slice_in_dim(x, run[0], run[1]) + value
    if run[:2] == (0, x.shape[0]):
        return value.astype(x.dtype)
    return jax.lax.dynamic_update_slice_in_dim(x, value.astype(x.dtype), run[0], 0)


def _assemble(pieces):
    """The array whose rows idx are value, for pieces [(idx, value), ...] whose indices (static, any shape)
    together cover 0..n-1 once: the values concatenated in order, then one gather unless already in place."""
    flat = np.concatenate([np.asarray(idx, int).reshape(-1) for idx, _ in pieces])
    values = [jnp.reshape(v, (-1,) + v.shape[np.asarray(idx).ndim :]) for idx, v in pieces]
    return _take(jnp.concatenate(values), np.argsort(flat, kind="stable"))


def _axis_angle(axis, angle):
    """(..., 3, 3) the rotation by `angle` about the unit `axis` (Rodrigues)."""
    K = rot.skew(axis)
    s, c = jnp.sin(angle)[..., None, None], jnp.cos(angle)[..., None, None]
    return jnp.eye(3, dtype=axis.dtype) + s * K + (1.0 - c) * small.matmul(K, K)


def _quaternions(q, start):
    """(n, 4) the quaternions q[start + (0..3)], normalized."""
    return rot.normalize(_take(q, start[:, None] + np.arange(4)))


def joint_transforms(tree, q, params):
    """(nj + 1, 3), (nj + 1, 3, 3): each joint's displacement (p, R) of its body's frame, the last the identity.

    A point x of the frame after the joint is p + R x before it: a hinge or ball
    turns about its anchor c (p = c - R c), a slide moves along its axis by
    q - qpos0, a free joint places the frame at (position, quaternion).
    """
    nj, dtype = len(tree.joints), q.dtype
    eye = jnp.eye(3, dtype=dtype)
    p, R = [], []
    for jtype, (ids, a, _) in tree.by_type.items():
        c, axis = _take(params.joint_pos, ids), _take(params.joint_axis, ids)
        if jtype == HINGE:
            Rj = _axis_angle(axis, _take(q, a) - _take(params.qpos0, a))
            pj = c - small.matvec(Rj, c)
        elif jtype == SLIDE:
            Rj = jnp.broadcast_to(eye, (len(ids), 3, 3))
            pj = axis * (_take(q, a) - _take(params.qpos0, a))[:, None]
        elif jtype == BALL:
            Rj = rot.to_matrix(_quaternions(q, a))
            pj = c - small.matvec(Rj, c)
        else:
            Rj = rot.to_matrix(_quaternions(q, a + 3))
            pj = _take(q, a[:, None] + np.arange(3))
        p.append((ids, pj))
        R.append((ids, Rj))
    p.append((np.array([nj]), jnp.zeros((1, 3), dtype)))
    R.append((np.array([nj]), eye[None]))
    return _assemble(p), _assemble(R)


class Frames(eqx.Module):
    """The tree's kinematics at one configuration.

    Attributes:
        x, R: (nb + 1, 3), (nb + 1, 3, 3) body frames in the world; the last is the world.
        anchor: (nj, 3) each joint's anchor in the world.
        before: (nj, 3, 3) the rotation of the frame each joint acts in (its body's
            frame before the joint moves it), in the world.
        joint_R: (nj + 1, 3, 3) each joint's own rotation (`joint_transforms`).
        S: (nv, 6) every degree of freedom's motion axis (w, u) referred to the
            world origin: the velocity of a point x it moves is (u + w x x) v_i.
    """

    x: jax.Array
    R: jax.Array
    anchor: jax.Array
    before: jax.Array
    joint_R: jax.Array
    S: jax.Array


def frames(tree, q, params):
    """The `Frames` at q: forward kinematics level by level, then the motion axes (MuJoCo's mj_kinematics, cdof)."""
    nb, dtype = tree.nbodies, q.dtype
    eye = jnp.eye(3, dtype=dtype)
    pj, Rj = joint_transforms(tree, q, params)
    free = tree.free_bodies[:, None]
    lp = jnp.where(free, 0.0, params.body_pos)
    lR = jnp.where(free[..., None], eye, rot.to_matrix(rot.normalize(params.body_quat)))
    pre_p, pre_R = [], []  # each slot's frame in the parent's frame, before its joint
    for k in range(tree.slots.shape[1]):
        pre_p.append(lp)
        pre_R.append(lR)
        moved = np.flatnonzero(tree.slots[:, k] < len(tree.joints))  # the bodies with a k-th joint
        j = tree.slots[moved, k]
        lRk = _take(lR, moved)
        lp = _put(lp, moved, _take(lp, moved) + small.matvec(lRk, _take(pj, j)))
        lR = _put(lR, moved, small.matmul(lRk, _take(Rj, j)))
    # Down the tree a level at a time; every parent of a level is in the level above.
    parent = tree._parent
    xs, Rs = [], []
    for k, level in enumerate(tree.levels):
        if k == 0:
            xp, Rp = jnp.zeros((len(level), 3), dtype), jnp.broadcast_to(eye, (len(level), 3, 3))
        else:
            above = np.searchsorted(tree.levels[k - 1], parent[level])
            xp, Rp = _take(xs[-1], above), _take(Rs[-1], above)
        xs.append(xp + small.matvec(Rp, _take(lp, level)))
        Rs.append(small.matmul(Rp, _take(lR, level)))
    rows = np.append(np.argsort(np.concatenate(tree.levels + (np.zeros(0, int),))), nb)  # body order, the world last
    x = _take(jnp.concatenate(xs + [jnp.zeros((1, 3), dtype)]), rows)
    R = _take(jnp.concatenate(Rs + [eye[None]]), rows)
    nj = len(tree.joints)
    if nj == 0:
        return Frames(x, R, jnp.zeros((0, 3), dtype), jnp.zeros((0, 3, 3), dtype), Rj, jnp.zeros((0, 6), dtype))
    body = np.array([joint[2] for joint in tree.joints], int)
    slot = tree.joint_slot
    par = parent[body]
    by_slot = lambda pre: _assemble([(np.flatnonzero(slot == k), _take(p, body[slot == k])) for k, p in enumerate(pre)])
    pre_p, pre_R = by_slot(pre_p), by_slot(pre_R)  # each joint's frame before it, in its body's parent's frame
    Rpar = _take(R, par)
    before = small.matmul(Rpar, pre_R)
    origin = _take(x, par) + small.matvec(Rpar, pre_p)
    anchor = origin + small.matvec(before, params.joint_pos)
    return Frames(x, R, anchor, before, Rj, _motion_axes(tree, params, x, anchor, before, Rj))


def _motion_axes(tree, params, x, anchor, before, Rj):
    """(nv, 6) the motion axes (w, u) of every degree of freedom (see `Frames.S`)."""
    pieces = []
    for jtype, (ids, _, d) in tree.by_type.items():
        if jtype in (HINGE, SLIDE):
            axis = small.matvec(_take(before, ids), _take(params.joint_axis, ids))
            if jtype == HINGE:
                pieces.append((d, jnp.concatenate([axis, jnp.cross(_take(anchor, ids), axis)], -1)))
            else:
                pieces.append((d, jnp.concatenate([jnp.zeros_like(axis), axis], -1)))
            continue
        # Ball and free rotations: the axes of the frame after the joint (MuJoCo's qvel is the local spin).
        after = small.matmul(_take(before, ids), _take(Rj, ids))  # (n, 3, 3); its columns are the axes
        w = jnp.swapaxes(after, -1, -2)  # (n, 3 axes, 3)
        centre = _take(anchor, ids) if jtype == BALL else _take(x, np.array([tree.joints[j][2] for j in ids], int))
        spin = jnp.concatenate([w, jnp.cross(centre[:, None, :], w)], -1)  # (n, 3, 6)
        if jtype == BALL:
            pieces.append((d[:, None] + np.arange(3), spin))
        else:
            shift = jnp.broadcast_to(
                jnp.concatenate([jnp.zeros((3, 3), x.dtype), jnp.eye(3, dtype=x.dtype)], -1), spin.shape
            )
            pieces.append((d[:, None] + np.arange(6), jnp.concatenate([shift, spin], 1)))
    return _assemble(pieces)


def velocity_map(tree, q, v, params):
    """(nq,) dq/dt = G(q) v: hinges and slides their rate, quaternions (quat * (0, w)) / 2 of the local spin w."""
    del params
    qdot = jnp.zeros(tree.nq, v.dtype)
    a, d, _ = tree.scalar_joints
    qdot = _put(qdot, a, _take(v, d))
    for jtype in (BALL, FREE):
        if jtype not in tree.by_type:
            continue
        _, a, d = tree.by_type[jtype]
        s, w = (a, d) if jtype == BALL else (a + 3, d + 3)
        if jtype == FREE:
            qdot = _put(qdot, a[:, None] + np.arange(3), _take(v, d[:, None] + np.arange(3)))
        quat, spin = _take(q, s[:, None] + np.arange(4)), _take(v, w[:, None] + np.arange(3))
        rate = 0.5 * rot.multiply(quat, jnp.concatenate([jnp.zeros_like(spin[:, :1]), spin], -1))
        qdot = _put(qdot, s[:, None] + np.arange(4), rate)
    return qdot


def _rotation_quaternion(theta):
    """(n, 4) the unit quaternions of the rotations by the vectors theta (n, 3): (cos |t| / 2, sin(|t| / 2) t / |t|),
    with the series at |t| = 0 (finite gradients there)."""
    t2 = jnp.sum(theta * theta, -1)
    small = t2 < 1e-12
    t = jnp.sqrt(jnp.where(small, 1.0, t2))
    c = jnp.where(small, 1.0 - t2 / 8.0, jnp.cos(0.5 * t))
    s = jnp.where(small, 0.5 - t2 / 48.0, jnp.sin(0.5 * t) / t)
    return jnp.concatenate([c[:, None], s[:, None] * theta], -1)


def _rotation_vector(quat):
    """(n, 3) the rotation vectors theta a of the unit quaternions quat (n, 4) (`_cone_stop`: angle in [0, pi],
    so the vector's angle is in (-pi, pi], MuJoCo's `mju_quat2Vel`); the series 2 v / w near the identity,
    where a is not differentiable (finite gradients there)."""
    w, vec = quat[:, 0], quat[:, 1:]
    theta, axis = _cone_stop(quat)
    small = (jnp.sum(vec * vec, -1) < 1e-24)[:, None]
    return jnp.where(small, 2.0 * vec / jnp.where(small, w[:, None], 1.0), theta[:, None] * axis)


def advance(tree, q, v, h, params):
    """q after moving at v for h, as MuJoCo's `mj_integratePos`: hinges, slides and a free joint's position by
    h v, quaternions by the exact rotation, quat * exp(h w / 2) with w the local spin, then normalized."""
    del params
    q_next = q
    a, d, _ = tree.scalar_joints
    q_next = _put(q_next, a, h * _take(v, d), add=True)
    for jtype in (BALL, FREE):
        if jtype not in tree.by_type:
            continue
        _, a, d = tree.by_type[jtype]
        s, w = (a, d) if jtype == BALL else (a + 3, d + 3)
        if jtype == FREE:
            q_next = _put(q_next, a[:, None] + np.arange(3), h * _take(v, d[:, None] + np.arange(3)), add=True)
        idx = s[:, None] + np.arange(4)
        turn = _rotation_quaternion(h * _take(v, w[:, None] + np.arange(3)))
        q_next = _put(q_next, idx, rot.normalize(rot.multiply(_take(q, idx), turn)))
    return q_next


def _kinematics_matrix(tree, q, params):
    """(nq, nv) G(q) of `velocity_map`."""
    return jax.jacfwd(lambda v: velocity_map(tree, q, v, params))(jnp.zeros(tree.nv, q.dtype))


def normalize(tree, q):
    """q with the quaternions of free and ball joints normalized."""
    for jtype in (BALL, FREE):
        if jtype in tree.by_type:
            a = tree.by_type[jtype][1] + (3 if jtype == FREE else 0)
            idx = a[:, None] + np.arange(4)
            q = _put(q, idx, rot.normalize(_take(q, idx)))
    return q


def body_jacobians(tree, f, bodies, x):
    """(n, 6, nv) the Jacobians of the bodies (n,) at the points x (n, 3) of theirs, from the `Frames` f:
    J v = (the point's linear velocity, the body's angular velocity), both in the world frame."""
    D = jnp.asarray(tree.dof_masks[0][bodies], f.S.dtype)  # (n, nv)
    w, u = f.S[:, :3].T, f.S[:, 3:].T  # (3, nv)
    lin = u[None] + jnp.cross(w.T[None, :, :], x[:, None, :]).swapaxes(-1, -2)  # (n, 3, nv): u + w x x
    return jnp.concatenate([lin, jnp.broadcast_to(w, lin.shape)], 1) * D[:, None, :]


# --- Dynamics ---------------------------------------------------------------------------------


def _spatial_inertia(tree, f, params):
    """(nb, 6, 6) each body's spatial inertia referred to the world origin, on (w, u), and its centre of mass."""
    R = f.R[:-1]
    c = f.x[:-1] + small.matvec(R, params.com)
    Ic = small.matmul(small.matmul(R, params.inertia), jnp.swapaxes(R, -1, -2))
    C = rot.skew(c)
    m = params.mass[:, None, None]
    top = jnp.concatenate([Ic + m * small.matmul(C, jnp.swapaxes(C, -1, -2)), m * C], -1)
    bottom = jnp.concatenate([m * jnp.swapaxes(C, -1, -2), m * jnp.eye(3, dtype=c.dtype)], -1)
    return jnp.concatenate([top, bottom], -2)


def mass_matrix(tree, q, params, f=None):
    """M(q) by composite rigid bodies: M_ij = S_i . I_c[body j] S_j where body i is body j or an ancestor of it,
    I_c a body's subtree inertia; plus the armature on the diagonal (MuJoCo's qM)."""
    f = frames(tree, q, params) if f is None else f
    C = tree.dof_masks[2]
    I = _spatial_inertia(tree, f, params)
    Ic = jnp.einsum("ab,bij->aij", jnp.asarray(tree.ancestors, I.dtype), I)  # subtree sums, one product
    F = small.matvec(_take(Ic, tree.dof_body), f.S)  # (nv, 6)
    M1 = f.S @ F.T  # M1[i, j] = S_i . I_c[body j] S_j
    M = jnp.where(C, M1, 0.0)
    M = jnp.where(C.T & ~C, M1.T, M)
    return M + jnp.diag(params.armature)


def _cross_motion(a, b):
    """(..., 6) the spatial cross product a x b of motion vectors (w, u)."""
    wa, ua, wb, ub = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return jnp.concatenate([jnp.cross(wa, wb), jnp.cross(wa, ub) + jnp.cross(ua, wb)], -1)


def _cross_force(a, b):
    """(..., 6) the spatial cross product a x* b of a motion vector a (w, u) and a force b (moment, force)."""
    wa, ua, nb, fb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return jnp.concatenate([jnp.cross(wa, nb) + jnp.cross(ua, fb), jnp.cross(wa, fb)], -1)


def bias_force(tree, q, v, params, f=None):
    """(nv,) -(C(q, v) v + g(q)): the Coriolis, centrifugal and gravity force, by recursive Newton-Euler.

    Accelerations down the tree (each body's a_b = sum over its chain of dS_i/dt v_i,
    dS_i/dt = V x S_i with V the velocity of the frame axis i is fixed in, and the
    world accelerating at -g), forces up (f_b = I_b a_b + V_b x* I_b V_b, summed over
    subtrees), projected on the axes: tau_i = S_i . F[body i]. Each sweep is one
    product with a static ancestor mask.
    """
    f = frames(tree, q, params) if f is None else f
    D, P, _ = tree.dof_masks
    dtype = v.dtype
    Sv = f.S * v[:, None]
    V = jnp.asarray(D, dtype) @ Sv  # (nb, 6) body velocities
    Sdot = _cross_motion(jnp.asarray(P, dtype) @ Sv, f.S)
    a = jnp.asarray(D, dtype) @ (Sdot * v[:, None]) + jnp.concatenate([jnp.zeros(3, dtype), -params.gravity])
    I = _spatial_inertia(tree, f, params)
    body = small.matvec(I, a) + _cross_force(V, small.matvec(I, V))
    F = jnp.asarray(tree.ancestors, dtype) @ body  # subtree sums
    return -jnp.sum(f.S * _take(F, tree.dof_body), -1)


def potential(tree, q, params):
    """Gravity's potential energy -sum_b m_b g . c_b."""
    f = frames(tree, q, params)
    c = f.x[:-1] + small.matvec(f.R[:-1], params.com)
    return -jnp.sum(params.mass * (c @ params.gravity))


def actuator_force(tree, q, v, params, u):
    """(nv,) the actuators' joint forces for the controls u (nu,): gear clip(gain clip(u) + bias . (1, length,
    velocity), force range), as MuJoCo's joint transmission (`ActuatorParams`)."""
    ap = params.actuators
    joints = np.array([j for _, j in tree.actuators], int)
    a = np.array([tree.joints[j][3] for j in joints], int)
    d = np.array([tree.joints[j][4] for j in joints], int)
    balls = np.flatnonzero([tree.joints[j][1] == BALL for j in joints])
    scalars = np.setdiff1d(np.arange(len(joints)), balls)
    coordinate, rate = _take(q, a), _take(v, d)  # a hinge's or slide's own coordinate and rate
    if balls.size:  # a ball joint's rotation vector and angular velocity along the actuator's axis
        axis = ap.axis[balls]
        coordinate = coordinate.at[balls].set(jnp.sum(axis * _rotation_vector(_quaternions(q, a[balls])), -1))
        rate = rate.at[balls].set(jnp.sum(axis * v[d[balls][:, None] + np.arange(3)], -1))
    ctrl = jnp.clip(u, ap.ctrl_range[:, 0], ap.ctrl_range[:, 1])
    if balls.size:  # a position servo's setpoint: the one nearest the length modulo a turn, as MuJoCo takes it
        period, length = 2.0 * jnp.pi * ap.gear[balls], ap.gear[balls] * coordinate[balls]
        turns = jnp.round((ctrl[balls] - length) / jnp.where(period > 0, period, 1.0))
        servo = (ap.gain[balls] == -ap.bias[balls, 1]) & (period > 0)
        ctrl = ctrl.at[balls].add(jnp.where(servo, -period * turns, 0.0))
    force = ap.gain * ctrl + ap.bias[:, 0] + ap.gear * (ap.bias[:, 1] * coordinate + ap.bias[:, 2] * rate)
    torque = ap.gear * jnp.clip(force, ap.force_range[:, 0], ap.force_range[:, 1])
    F = _put(jnp.zeros(tree.nv, v.dtype), d[scalars], _take(torque, scalars), add=True)
    if balls.size:
        F = F.at[d[balls][:, None] + np.arange(3)].add(torque[balls, None] * axis)
    return F


def external_force(tree, t, q, v, params):
    """(nv,) the actuators' forces for `params.control` and the hinge and slide springs (the dampers are in
    `passive`, implicit); they do not depend on the time t."""
    del t
    a, d, j = tree.scalar_joints
    F = _put(jnp.zeros(tree.nv, v.dtype), d, -_take(params.stiffness, j) * (_take(q, a) - _take(params.springref, a)))
    if tree.actuators and params.control is not None:
        F = F + actuator_force(tree, q, v, params, params.control)
    return F


def passive(tree, q, params):
    """(A, B) for `System.passive`: no armature outside M (it is in `mass_matrix`), the dampers diag(damping)."""
    del q
    return jnp.zeros((tree.nv, tree.nv), params.damping.dtype), jnp.diag(params.damping)


# --- Contacts ---------------------------------------------------------------------------------


def contacts(tree, q, params, mu=None, restitution=None):
    """The contact record at q: the geometry's rows on the bodies mapped through the body Jacobians, then the
    range stops (frictionless rows on their coordinate)."""
    dtype = q.dtype
    f = frames(tree, q, params)
    nl = len(tree.limits)
    if tree.geometry is not None:
        g = tree.geometry
        idx = np.array(tree.geometry_bodies, int)
        x = jnp.concatenate([_take(f.x, idx), jnp.zeros((1, 3), dtype)])
        R = jnp.concatenate([_take(f.R, idx), jnp.eye(3, dtype=dtype)[None]])
        geo = contact_arrays(g, x, R, params, mu, restitution)
        J = body_jacobians(tree, f, idx, _take(f.x, idx))  # (ng, 6, nv) at the bodies' origins
        J = jnp.concatenate([J, jnp.zeros((1,) + J.shape[1:], dtype)])
        blocks = geo.pop("blocks")
        geo["rows"] = jnp.einsum("crk,ckv->crv", blocks[:, 0], J[geo["body_a"]]) + jnp.einsum(
            "crk,ckv->crv", blocks[:, 1], J[geo["body_b"]]
        )
        table = np.ones(len(g.pair_names), bool)
        table[list(tree.frictionless)] = False
        geo["frictional"] = jnp.asarray(table)[geo["index"]] if g.dynamic else table[geo["index"]]
    else:
        geo = _no_contacts(dtype, tree.nv)
    if tree.frictionloss:
        geo = _append_dry(tree, geo, params)
    if nl:
        geo = _append_stops(tree, geo, q, params)
    return Contacts(**geo, nv=tree.nv, tangents=2, torsion=True, limits=nl)


def _append_dry(tree, record, params):
    """The record with the dry-friction entries appended: no normal row (`Contacts.dry`), the friction row t the
    dof's rate, o and the torsion zero, the bound params.frictionloss of the dof."""
    d = np.array(tree.frictionloss, int)
    rows = np.zeros((d.shape[0], 4, tree.nv))
    rows[np.arange(d.shape[0]), 1, d] = 1.0
    gap = jnp.ones(d.shape, record["gap"].dtype)  # unread: the entries have no normal row
    return _append(tree, record, gap, rows, _take(params.frictionloss, d), frictional=True, dry=True)


def _no_contacts(dtype, nv):
    zeros = lambda *s: jnp.zeros(s, dtype)
    return dict(
        gap=zeros(0),
        active=jnp.zeros(0, bool),
        mu=zeros(0),
        restitution=zeros(0),
        index=np.zeros(0, int),
        rows=zeros(0, 4, nv),
        body_a=np.zeros(0, int),
        body_b=np.zeros(0, int),
        point=zeros(0, 3),
        normal=zeros(0, 3),
        tangent=zeros(0, 3),
        bitangent=zeros(0, 3),
        overflow=jnp.zeros((), jnp.int32),
        frictional=np.zeros(0, bool),
    )


def _append_stops(tree, record, q, params):
    """The record with the range stops appended: gap = q - lower (side +1) or upper - q, normal row side e_dof,
    and for a ball joint's cone (side 0) gap = upper - theta, normal row -a on its three dofs (`_cone_stop`)."""
    j = np.array([i for i, _ in tree.limits], int)
    side = np.array([s for _, s in tree.limits], float)
    a = np.array([tree.joints[i][3] for i in j], int)
    d = np.array([tree.joints[i][4] for i in j], int)
    qa = _take(q, a)
    gap = jnp.where(side > 0, qa - _take(params.lower, j), _take(params.upper, j) - qa)
    rows = np.zeros((j.shape[0], 4, tree.nv))
    rows[np.arange(j.shape[0]), 0, d] = side
    rows = jnp.asarray(rows, q.dtype)
    cones = np.flatnonzero(side == 0)
    if cones.size:  # every ball joint's cone at once: one gather of the quaternions, one scatter of the rows
        angle, axis = _cone_stop(q[a[cones][:, None] + np.arange(4)])
        gap = gap.at[cones].set(params.upper[j[cones]] - angle)
        rows = rows.at[cones[:, None], 0, d[cones][:, None] + np.arange(3)].set(-axis)
    return _append(tree, record, gap, rows, _take(params.stop_restitution, j), frictional=False, dry=False)


def _cone_stop(quat):
    """(theta, a): the rotation angles in [0, pi] of ball joints' quaternions (..., 4) and their unit axes in the
    child's frame.

    theta = 2 atan2(|v|, |w|) and a = sign(w) v / |v|, so that d(theta)/dt = a . omega for the joint's angular
    velocity omega (its qvel, in the child's frame: the other terms of the rotation vector's rate are normal to
    it); MuJoCo's ball limit measures the same angle (`mju_quat2Vel`). At theta = 0, a = 0.
    """
    w, v = quat[..., 0], quat[..., 1:]
    s2 = jnp.sum(v * v, -1)
    safe = jnp.where(s2 > 0, s2, 1.0)
    sin = jnp.where(s2 > 0, jnp.sqrt(safe), 0.0)
    sign = jnp.where(w < 0, -1.0, 1.0)
    return 2.0 * jnp.arctan2(sin, jnp.abs(w)), jnp.where(s2 > 0, sign / jnp.sqrt(safe), 0.0)[..., None] * v


def _append(tree, record, gap, rows, value, *, frictional, dry):
    """The record with n entries of the world appended (dry friction or range stops): their gaps (n,), rows
    (n, 4, nv) and per-entry values (n,), the dry-friction bounds (dry) or the stops' restitution; mu 0."""
    dtype, n, nc = gap.dtype, gap.shape[0], record["gap"].shape[0]
    world = 0 if tree.geometry is None else tree.geometry.nbodies
    candidates = 0 if tree.geometry is None else len(tree.geometry.pair_names)  # the entries' index goes on from them
    cat = jnp.concatenate
    join = lambda x, y: np.concatenate([x, y]) if isinstance(x, np.ndarray) else cat([x, jnp.asarray(y)])
    zeros, zeros3 = jnp.zeros((n,), dtype), jnp.zeros((n, 3), dtype)
    value = jnp.asarray(value, dtype)
    out = dict(
        gap=cat([record["gap"], gap]),
        active=cat([record["active"], jnp.ones((n,), bool)]),
        mu=cat([record["mu"], zeros]),
        restitution=cat([record["restitution"], zeros if dry else value]),
        index=join(record["index"], np.arange(n) + candidates + nc - tree.geometry_size),
        rows=cat([record["rows"], jnp.asarray(rows, dtype)]),
        body_a=join(record["body_a"], np.full(n, world)),
        body_b=join(record["body_b"], np.full(n, world)),
        point=cat([record["point"], zeros3]),
        normal=cat([record["normal"], zeros3]),
        tangent=cat([record["tangent"], zeros3]),
        bitangent=cat([record["bitangent"], zeros3]),
        overflow=record["overflow"],
        frictional=join(record["frictional"], np.full(n, frictional)),
    )
    if dry or record.get("dry") is not None:
        out["dry"] = np.concatenate(
            [np.zeros(nc, bool) if record.get("dry") is None else record["dry"], np.full(n, dry)]
        )
        before = jnp.zeros((nc,), dtype) if record.get("dry") is None else record["dry_friction"]
        out["dry_friction"] = cat([before, value if dry else zeros])
    return out


def _gaps(tree, q, params):
    return contacts(tree, q, params).gap


def _tangents(tree, q, params):
    return contacts(tree, q, params).friction_rows(2)


def _torsions(tree, q, params):
    return contacts(tree, q, params).J_r
