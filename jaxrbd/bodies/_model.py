"""The static layout of a body scene (`BodyModel`) and its functions of (layout, q, params): dynamics, joints,
contacts. They are the same kind of thing as a kinematic tree's (`_tree`): a hashable layout, free functions
that read it, and `BodyModel.system` binding them to the layout as the `System`'s functions (`Bound`).

Spatial bodies (dim=3): q holds per body its centre of mass (3) then its unit
quaternion wxyz (4); v its linear then angular velocity, both in the world frame.
dq/dt = G(q) v with G = diag(I, E(quat)), M = diag(m I, R I_body R^T), and the
gyroscopic force -w x (R I_body R^T) w (000 §5). Planar bodies (dim=2): q = (x, y,
theta), v = (vx, vy, omega).
"""

import dataclasses
import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _rotation as rot
from .. import dynamics, geometry
from .._contacts import Contacts
from .._small import inv3, matmul, matvec
from .._validate import host_numpy
from ..model import System, check_bodies
from ._flight import free_rotation


class BodyParams(eqx.Module):
    """The array leaves of a body scene (`system.params`).

    Attributes:
        mass: (nb,) masses.
        inertia: (nb, 3, 3) inertia tensors about the centres of mass, body frame.
        gravity: (3,) gravitational acceleration.
        force: (nb, 3) constant applied force, world frame.
        torque: (nb, 3) constant applied torque, world frame.
        shapes: {kind: {name: stacked arrays}} the shapes' geometry.
        joints: the joints' `JointParams` (None without joints).
        motors: the motors' `MotorParams` (None without motors).
        control: (nu,) the control input of the motors (None without motors): zeros
            as built; `simulate(controls=...)` sets it in every step.
        body_damping, damping_origin: (nb,) and (nb, 3) the free-body dampers
            (`SceneBuilder.set_body_damping`; None without any): the damping and the
            damped point in each body's frame, relative to its centre of mass.

    Restitution and friction are per contact: `system.restitution` and `system.mu`.
    """

    mass: jax.Array
    inertia: jax.Array
    gravity: jax.Array
    force: jax.Array
    torque: jax.Array
    shapes: dict
    joints: Any = None
    motors: Any = None
    control: Any = None
    body_damping: Any = None
    damping_origin: Any = None


class JointParams(eqx.Module):
    """The array leaves of the joints, (nj, ...): anchors and axes in each body's frame.

    Attributes:
        anchor_a, anchor_b: (nj, 3) the joint point in the frames of bodies a and b
            (the world frame when b is the world).
        axis_b: (nj, 3) the hinge (or slide) axis in b's frame.
        perp_a: (nj, 2, 3) two unit vectors (u, n x u) in a's frame orthogonal to the axis.
        perp_b: (nj, 2, 3) the same two vectors in b's frame at the initial
            configuration: the reference of the hinge angle and the slide's locked
            rotation.
        lower, upper: (nj,) the joint range (radians for a hinge, metres for a
            slide); -inf / inf where there is no stop.
        centre: (nj,) the centre of the window (centre - pi, centre + pi] in which a
            3D hinge angle is measured.
        offset: (nj,) theta_a - theta_b at the initial configuration (planar hinges).
        restitution: (nj,) the restitution of the range's stops (impact laws).
        stiffness, damping, rest, armature: (nj,) the joint's spring, damper and
            armature (`SceneBuilder.set_joint_dynamics`): the generalized force
            -stiffness (coordinate - rest) - damping rate along its rate row, and
            the inertia armature of its coordinate; 0 without them.
    """

    anchor_a: jax.Array
    anchor_b: jax.Array
    axis_b: jax.Array
    perp_a: jax.Array
    perp_b: Any = None
    lower: Any = None
    upper: Any = None
    centre: Any = None
    offset: Any = None
    restitution: Any = None
    stiffness: Any = None
    damping: Any = None
    rest: Any = None
    armature: Any = None


class MotorParams(eqx.Module):
    """The array leaves of the motors, (nu, ...).

    Attributes:
        gear: (nu,) the force (or torque) per unit of control.
        direction: (nu, 3) the world direction of a body motor's force or torque,
            the torque's direction in body a's frame for a ball joint's motor (zero
            for the other joint motors).
        ctrl_range: (nu, 2) the bounds [lo, hi] of each control (+-inf: none).
        force_range: (nu, 2) the bounds [lo, hi] of each force gear u (+-inf: none).
    """

    gear: jax.Array
    direction: jax.Array
    ctrl_range: jax.Array
    force_range: jax.Array


# The kinds `SceneBuilder.add_joint` takes; "universal" joints come from `SceneBuilder.add_hinges`.
JOINT_KINDS = ("ball", "revolute", "slide", "planar", "translation")
AXIS_KINDS = JOINT_KINDS[1:]  # the kinds with an axis in 3D, whose two hinge rows keep it shared
COORDINATE = " coordinate"  # in a layout joint kind: it measures a coordinate and adds no rows
# How a hinge coordinate of `SceneBuilder.add_hinges` is measured, after COORDINATE in its kind: its axis fixed in a
# (the last hinge of a sequence), or the middle hinge of three (its axis fixed in neither body).
AXIS_ON_A, MIDDLE = " (axis on a)", " (middle)"


def base_kind(kind):
    """The kind of a layout joint without COORDINATE: "revolute coordinate (middle)" -> "revolute"."""
    return kind.split(COORDINATE)[0]


def is_coordinate(kind):
    """Whether a layout joint kind measures a coordinate only (no constraint rows)."""
    return COORDINATE in kind


MOTOR_KINDS = ("joint", "force", "torque")
JOINT_TOL = 1e-8  # an initial joint violation above it is reported (then projected)


@dataclasses.dataclass(frozen=True)
class BodyModel:
    """The static layout of a body scene (hashable): the functions of this module read it.

    As for a kinematic tree (`jaxrbd.bodies.Tree`), the traced functions of the step are
    free functions of (layout, q, params) in this module (`mass_matrix`, `contacts`,
    `constraints`, ...); `system` binds them to the layout as the `System`'s functions.
    The methods answer questions about the layout on the host (sizes, names, per-body
    views, where the joints and stops sit) and, for users, `contacts`, `poses`,
    `joint_coordinates` and `constraints` at a configuration.

    Attributes:
        dim: 3 (spatial) or 2 (planar).
        names: names of the moving bodies, in the order of q and v.
        statics: names of the static shapes.
        shape_bodies: ((kind, body index of each shape of that kind), ...); the
            index len(names) is the world (static geometry).
        groups: the `PairGroup`s, in the order of the contacts.
        pair_names: the (name a, name b) of each candidate contact of every shape
            pair (the order of `system.mu`; `Contacts.index` points into it).
        margin: contacts with a gap above it are inactive.
        joints: ((name, kind, body a, body b), ...) with body indices (nb: the world);
            a kind containing COORDINATE ("revolute coordinate", "slide coordinate",
            "revolute coordinate (middle)", ...) measures its coordinate (ranges,
            motors) and adds no constraint rows.
        overflow_distance: the broad phase's overflow distance (`BroadPhase.distance`).
        limits: ((joint index, side), ...) the stops of the joint ranges, side +1
            for the lower stop (gap = coordinate - lower) and -1 for the upper
            (gap = upper - coordinate); they follow the contacts in the record.
        motors: ((name, kind, index), ...) kind "joint" (index: the joint),
            "force" or "torque" (index: the body); the order of the controls u.
        joint_dynamics: whether some joint has a spring, damper or armature
            (`SceneBuilder.set_joint_dynamics`, even with zeros: their leaves can
            then be fitted).
        body_damping: whether some body has a free-body damper (`SceneBuilder.set_body_damping`).
    """

    dim: int
    names: tuple
    statics: tuple
    shape_bodies: tuple
    groups: tuple
    pair_names: tuple
    margin: float = math.inf
    joints: tuple = ()
    overflow_distance: float = 0.0
    limits: tuple = ()
    motors: tuple = ()
    joint_dynamics: bool = False
    body_damping: bool = False

    @property
    def nbodies(self):
        return len(self.names)

    @property
    def nq_body(self):
        return 7 if self.dim == 3 else 3

    @property
    def nv_body(self):
        return 6 if self.dim == 3 else 3

    def index(self, name):
        """The position of a moving body in q and v."""
        if name not in self.names:
            raise KeyError(f"no moving body named {name!r}; bodies: {list(self.names)}")
        return self.names.index(name)

    def check(self, params, q):
        """On the host: the masses, inertias and quaternions of state q, by body name (ValueError)."""
        check_bodies(self, params, q)

    def parameters_valid(self, params):
        """() bool, traceable: every mass positive and every inertia positive definite."""
        positive_definite = jnp.all(jnp.isfinite(jnp.linalg.cholesky(params.inertia)))
        return jnp.all(jnp.isfinite(params.mass) & (params.mass > 0)) & positive_definite

    def stop_restitution(self, params):
        """(nl,) the restitution of each joint-range stop (`limits`)."""
        return params.joints.restitution[np.array([j for j, _ in self.limits], int)]

    # Per-body views. They accept leading batch/time axes.

    def positions(self, q):
        """(..., nb, 3) centres of mass; planar: (..., nb, 2)."""
        qb = self._per_body(q, self.nq_body)
        return qb[..., :3] if self.dim == 3 else qb[..., :2]

    def orientations(self, q):
        """(..., nb, 4) unit quaternions wxyz; planar: (..., nb) angles theta."""
        qb = self._per_body(q, self.nq_body)
        return qb[..., 3:] if self.dim == 3 else qb[..., 2]

    def linear_velocities(self, v):
        """(..., nb, 3) world-frame linear velocities; planar: (..., nb, 2)."""
        vb = self._per_body(v, self.nv_body)
        return vb[..., :3] if self.dim == 3 else vb[..., :2]

    def angular_velocities(self, v):
        """(..., nb, 3) world-frame angular velocities; planar: (..., nb) omega."""
        vb = self._per_body(v, self.nv_body)
        return vb[..., 3:] if self.dim == 3 else vb[..., 2]

    def _per_body(self, x, size):
        return x.reshape(*x.shape[:-1], self.nbodies, size)

    @property
    def dynamic(self):
        """Whether a broad phase picks some of the contacts at each configuration."""
        return any(g.slots is not None for g in self.groups)

    @functools.cached_property
    def contact_bodies(self):
        """(nc,) and (nc,) the body indices of shapes a and b of each contact (nb: the world).

        Static layouts only; with a broad phase they depend on q (`Contacts.body_a`).
        """
        if self.dynamic:
            raise ValueError("with a broad phase the contacts' bodies depend on q: use contacts(q, params)")
        if not self.groups:  # no contact pairs
            return np.zeros(0, int), np.zeros(0, int)
        bodies = dict(self.shape_bodies)
        a = [np.repeat(np.array(bodies[g.kind_a])[np.array(g.index_a)], g.capacity) for g in self.groups]
        b = [np.repeat(np.array(bodies[g.kind_b])[np.array(g.index_b)], g.capacity) for g in self.groups]
        return np.concatenate(a), np.concatenate(b)

    def joint_rows(self):
        """((name, first row, number of rows), ...): where each joint sits in g(q)."""
        out, start = [], 0
        for name, kind, _, _ in self.joints:
            n = (
                0
                if is_coordinate(kind)
                else 2
                if self.dim == 2
                else {"ball": 3, "planar": 3, "universal": 4, "translation": 4}.get(kind, 5)
            )
            out.append((name, start, n))
            start += n
        return tuple(out)

    def stop_mechanisms(self):
        """(stops, ng) bool: the rows of g(q) of every joint in each stop's mechanism (the bodies joined by
        joints, the world aside)."""
        nb = self.nbodies
        root = list(range(nb + 1))

        def find(i):
            while root[i] != i:
                i = root[i]
            return i

        for _, _, a, b in self.joints:
            if a != nb and b != nb:
                root[find(a)] = find(b)
        rows = self.joint_rows()
        ng = sum(n for _, _, n in rows)
        owner = np.zeros((len(self.limits), ng), bool)
        for k, (j, _) in enumerate(self.limits):
            mechanism = find(self.joints[j][2])
            for (_, _, a, _), (_, start, n) in zip(self.joints, rows, strict=True):
                owner[k, start : start + n] |= find(a) == mechanism
        return owner

    def limit_rows(self):
        """((joint name, "lower" | "upper", record index), ...): where each stop sits in the contact record.

        The stops follow the contacts, so the last `len(limits)` entries of
        `traj.impulses.normal` (also `traj.impulses.limit`) and of
        `traj.stats.active` are theirs.
        """
        nc = sum((len(g.index_a) if g.slots is None else g.slots) * g.capacity for g in self.groups)
        return tuple(
            (self.joints[j][0], "lower" if side > 0 else "upper", nc + k) for k, (j, side) in enumerate(self.limits)
        )

    # For users: the functions of this module at a configuration.

    def poses(self, q):
        """(nb + 1, 3) positions and (nb + 1, 3, 3) rotations; the last is the world (numpy for concrete q)."""
        return poses(self, q)

    def contacts(self, q, params, mu=None, restitution=None):
        """The contact record (`jaxrbd.Contacts`) at q, the one the step reads (`contacts`)."""
        return contacts(self, q, params, mu, restitution)

    def joint_coordinates(self, q, params):
        """((nj,) values, (nj, nv) rate rows) of the joints at q (`joint_coordinates`)."""
        return joint_coordinates(self, q, params)

    def constraints(self, q, params):
        """(ng,) the joint constraints g(q) (`constraints`)."""
        return constraints(self, q, params)

    def system(self, params, mu, restitution, directions, friction=None):
        """The `System` of this layout with the given leaves.

        Its functions are this module's functions bound to the layout (`Bound`), which
        compare by the layout's value: two builds of one layout give equal static
        fields and share compiled code.
        """
        spatial = self.dim == 3
        fn = lambda f, keep=True: Bound(self, f) if keep else None
        return System(
            params=params,
            mu=mu,
            mass_matrix=fn(mass_matrix),
            potential=fn(potential),
            gaps=fn(gaps),
            tangents=fn(tangents),
            external_force=fn(external_force),
            kinematics=fn(kinematics, spatial),
            velocity_map=fn(velocity_map, spatial),
            directions=directions if spatial else 2,
            coriolis_force=fn(coriolis_force),
            free_flight=fn(free_flight, spatial),
            passive=fn(passive, self.joint_dynamics or self.body_damping),
            normalize=fn(normalize, spatial),
            contact_active=fn(active, self.margin != math.inf),
            collide=fn(contacts),
            restitution=restitution,
            constraints=fn(constraints, any(n for _, _, n in self.joint_rows())),
            torsions=fn(torsions, spatial),
            friction=friction,
            bodies=self,
        )


@dataclasses.dataclass(frozen=True)
class Bound:
    """f(layout, ...) as a `System` function that compares by the layout's value (a closure or a bound method
    compares by identity, and a rebuilt system would not share compiled code)."""

    layout: Any
    fn: Any

    def __call__(self, *args, **kwargs):
        return self.fn(self.layout, *args, **kwargs)


# --- The functions of (layout, q, params) -------------------------------------------------------


def poses(model, q):
    """(nb + 1, 3) positions and (nb + 1, 3, 3) rotations; the last is the world (numpy for concrete q)."""
    xp = host_numpy(q)
    qb = model._per_body(xp.asarray(q), model.nq_body)
    if model.dim == 3:
        p, R = qb[:, :3], rot.to_matrix(rot.normalize(qb[:, 3:]))
    else:
        p = xp.concatenate([qb[:, :2], xp.zeros_like(qb[:, :1])], -1)
        R = rot.rotation_z(qb[:, 2])
    p = xp.concatenate([p, xp.zeros_like(p[:1])])
    R = xp.concatenate([R, xp.eye(3, dtype=R.dtype)[None]])
    return p, R


def _collide(model, q, params):
    """The collision driver's arrays at q (`jaxrbd.geometry.collide`)."""
    p, R = poses(model, q)
    return geometry.collide(model.groups, model.shape_bodies, params.shapes, p, R, model.dim, model.overflow_distance)


def contacts(model, q, params, mu=None, restitution=None):
    """The contact record (`jaxrbd.Contacts`) at q: collision runs once.

    Args:
        q: (nq,) configuration.
        params: the `BodyParams`.
        mu, restitution: (ncandidates,) coefficients of every candidate contact
            (`system.mu`, `system.epsilon`); the record carries those of its
            slots. None: zeros.
    """
    record = contact_arrays(model, *poses(model, q), params, mu, restitution)
    if model.limits:
        record = _append_limits(model, record, q, params)
    return Contacts(
        **record,
        nv=model.nbodies * model.nv_body,
        tangents=2 if model.dim == 3 else 1,
        torsion=model.dim == 3,
        limits=len(model.limits),
    )


def contact_arrays(model, p, R, params, mu=None, restitution=None):
    """The arrays of the contact record (`Contacts` fields but the static sizes) at the body poses (p, R).

    Args:
        p: (nb + 1, 3) positions of the bodies' origins, R: (nb + 1, 3, 3) their
            rotations; the last is the world. The blocks are on each body's
            linear velocity at p and its angular velocity, in the world frame.
        params, mu, restitution: as in `collide`.
    """
    c = geometry.collide(model.groups, model.shape_bodies, params.shapes, p, R, model.dim, model.overflow_distance)
    n, t, o, x, gap = c.normal, c.tangent, c.bitangent, c.point, c.gap
    a, b, index = c.body_a, c.body_b, c.index  # numpy constants for a static layout
    nb, nc = model.nbodies, n.shape[0]
    if mu is None:
        mu = jnp.zeros((len(model.pair_names),), gap.dtype)
    if restitution is None:
        restitution = jnp.zeros_like(mu)
    zero = jnp.zeros_like(n)
    lin = jnp.stack([n, t, o, zero], 1)  # (nc, 4, 3): the rows (n, t, o, r)
    ang = jnp.stack([zero, zero, zero, n], 1)

    def block(k, sign):
        """(nc, 4, 6) the rows on body k's (linear, angular) velocity: d . (v_k + w_k x (x_k - p_k)) + s . w_k.

        x_k is body k's own witness point, x -/+ (gap / 2) n for a and b: the normal
        row is then the exact rate of the gap, and a separated contact has the
        moment arms of the body's own surface. (The midpoint x of a pair a metre
        apart gives a light body rows of scale |x - p|^2 / I ~ 1e7, which defeated
        both Newton and Lemke.) At touching the two points are x.
        """
        arm = (x + (0.5 * sign) * gap[:, None] * n - geometry.take(p, k))[:, None, :]
        rows = jnp.concatenate([lin, ang + jnp.cross(arm, lin)], -1)
        return jnp.where((k < nb)[:, None, None], sign * rows, 0.0)

    blocks = jnp.stack([block(a, -1.0), block(b, 1.0)], 1)
    rows = None
    if model.dim == 2:  # planar: (vx, vy, omega) per body, rows (n, t)
        planar = blocks[..., :2, :][..., jnp.array([0, 1, 5])]
        full = jnp.zeros((nc, 2, nb + 1, 3), gap.dtype)
        idx = np.arange(nc)
        full = full.at[idx, :, a].add(planar[:, 0]).at[idx, :, b].add(planar[:, 1])
        rows, blocks = full[:, :, :nb].reshape(nc, 2, nb * 3), None
    return dict(
        gap=gap,
        active=gap <= model.margin,
        mu=mu[index] if model.dynamic else mu,
        restitution=restitution[index] if model.dynamic else restitution,
        index=index,
        rows=rows,
        blocks=blocks,
        body_a=a,
        body_b=b,
        point=x,
        normal=n,
        tangent=t,
        bitangent=o,
        overflow=c.overflow,
    )


def _append_limits(model, record, q, params):
    """The record's arrays with the stops of the joint ranges appended as frictionless contacts.

    A stop's gap is the joint coordinate's distance to the limit (radians or
    metres) and its normal row is the coordinate's rate row (`joint_coordinates`)
    with the stop's sign, so every scheme, impact law and solver that reads the
    record treats it like a contact normal; its friction rows are zero and mu = 0.
    """
    value, row_a, row_b, frame = joint_kinematics(model, q, params)
    jp, nb = params.joints, model.nbodies
    j = np.array([i for i, _ in model.limits])
    side = jnp.asarray(np.array([s for _, s in model.limits], dtype=np.float64), value.dtype)
    gap = jnp.where(side > 0, value[j] - jp.lower[j], jp.upper[j] - value[j])
    nl, dtype = j.shape[0], value.dtype
    ia = np.array([model.joints[i][2] for i in j])
    ib = np.array([model.joints[i][3] for i in j])
    ra, rb = side[:, None] * row_a[j], side[:, None] * row_b[j]
    point, n, t, o = (f[j] for f in frame)
    if model.dim == 3:
        blocks = jnp.zeros((nl, 2, 4, 6), dtype).at[:, 0, 0].set(ra).at[:, 1, 0].set(rb)
        rows = None
    else:
        full = jnp.zeros((nl, nb + 1, 3), dtype)
        full = full.at[np.arange(nl), ia].add(ra).at[np.arange(nl), ib].add(rb)
        normal = full[:, :nb].reshape(nl, nb * 3)
        rows, blocks = jnp.stack([normal, jnp.zeros_like(normal)], 1), None
    cat = jnp.concatenate
    index = np.arange(len(model.pair_names), len(model.pair_names) + nl)
    join_index = lambda x, y: np.concatenate([x, y]) if isinstance(x, np.ndarray) else cat([x, jnp.asarray(y)])
    return dict(
        gap=cat([record["gap"], gap]),
        active=cat([record["active"], jnp.ones((nl,), bool)]),
        mu=cat([record["mu"], jnp.zeros((nl,), dtype)]),
        restitution=cat([record["restitution"], jp.restitution[j].astype(dtype)]),
        index=join_index(record["index"], index),
        rows=None if rows is None else cat([record["rows"], rows]),
        blocks=None if blocks is None else cat([record["blocks"], blocks]),
        body_a=join_index(record["body_a"], ia),
        body_b=join_index(record["body_b"], ib),
        point=cat([record["point"], point]),
        normal=cat([record["normal"], n]),
        tangent=cat([record["tangent"], t]),
        bitangent=cat([record["bitangent"], o]),
        overflow=record["overflow"],
        frictional=np.concatenate([np.ones(len(record["gap"]), bool), np.zeros(nl, bool)]),
    )


def joint_kinematics(model, q, params):
    """Each joint's coordinate and its rate rows: ((nj,) value, (nj, r) row_a, (nj, r) row_b, frame).

    The coordinate of a hinge is the rotation angle of a relative to b about the
    axis n, zero at the initial configuration; of a slide, the displacement
    (x_a - x_b) . n of a's anchor from b's along the axis. Ball joints have 0.
    row_a and row_b (r = 6 in 3D: linear then angular; r = 3 planar) are its
    rate on the velocities of a and b: d value / dt = row_a . v_a + row_b . v_b.
    b's row is zero when b is the world. frame: (nj, 3) the anchor point of a,
    the axis n and two unit vectors orthogonal to it.

    A 3D hinge angle is atan2 of the rotated reference vector of a in b's
    reference frame, measured in the window (centre - pi, centre + pi]; its rate
    row is the exact derivative, n . (w_a - w_b) while the hinge holds. The
    hinges of `SceneBuilder.add_hinges` (a's rotation relative to b is
    R(n_1, q_1) R(n_2, q_2) [R(n_3, q_3)], orthogonal axes) measure: the first,
    a's last axis (perp_a[0]) in b's frame about n_1; the last (AXIS_ON_A), b's
    first axis (perp_b[0]) in a's frame about n_last, negated; the middle of
    three (MIDDLE), q_2 = atan2(s n_1 . n_3, |n_1 x n_3|) with s n_1 fixed in b
    (perp_b[1]) and n_3 fixed in a (perp_a[0]), in [-pi/2, pi/2], singular
    at +-pi/2 (gimbal lock).
    """
    p, R = poses(model, q)
    jp, nb = params.joints, model.nbodies
    values, rows_a, rows_b, frames = [], [], [], []
    for j, (_, layout_kind, a, b) in enumerate(model.joints):
        kind = base_kind(layout_kind)
        r_a, r_b = R[a] @ jp.anchor_a[j], R[b] @ jp.anchor_b[j]
        x_a, x_b = p[a] + r_a, p[b] + r_b
        n = R[b] @ jp.axis_b[j]
        u, w = R[b] @ jp.perp_b[j, 0], R[b] @ jp.perp_b[j, 1]
        zero3 = jnp.zeros(3, q.dtype)
        if model.dim == 2 and kind == "slide":  # (vx, vy, omega): the 3D rows' x, y and z-spin entries
            d = x_a - x_b
            value = d @ n
            ra = jnp.concatenate([n[:2], jnp.cross(r_a, n)[2:]])
            rb = jnp.concatenate([-n[:2], (jnp.cross(n, d) - jnp.cross(r_b, n))[2:]])
        elif model.dim == 2:
            value = _relative_angle(model, q, params, j) if kind != "ball" else jnp.zeros((), q.dtype)
            ra, rb = jnp.array([0.0, 0.0, 1.0], q.dtype), jnp.array([0.0, 0.0, -1.0], q.dtype)
            if kind == "ball":
                ra, rb = jnp.zeros(3, q.dtype), jnp.zeros(3, q.dtype)
        elif kind == "revolute" and layout_kind.endswith(MIDDLE):
            first, e = R[b] @ jp.perp_b[j, 1], R[a] @ jp.perp_a[j, 0]
            normal = jnp.cross(e, first)
            cos = jnp.sqrt(jnp.maximum(normal @ normal, jnp.finfo(q.dtype).tiny))
            value, k = jnp.arctan2(first @ e, cos), normal / cos
            n, u, w = k, e, jnp.cross(k, e)
            ra, rb = jnp.concatenate([zero3, k]), jnp.concatenate([zero3, -k])
        elif kind == "revolute":
            if layout_kind.endswith(AXIS_ON_A):  # (u, w) turn with a, the reference with b
                f, u, w = R[b] @ jp.perp_b[j, 0], R[a] @ jp.perp_a[j, 0], R[a] @ jp.perp_a[j, 1]
                n = jnp.cross(u, w)
                x, y = f @ u, -(f @ w)
                k = jnp.cross(f, x * w + y * u) / (x * x + y * y)
            else:
                e = R[a] @ jp.perp_a[j, 0]
                x, y = e @ u, e @ w
                k = jnp.cross(e, x * w - y * u) / (x * x + y * y)
            c = jp.centre[j]
            value = c + jnp.arctan2(y * jnp.cos(c) - x * jnp.sin(c), x * jnp.cos(c) + y * jnp.sin(c))
            ra, rb = jnp.concatenate([zero3, k]), jnp.concatenate([zero3, -k])
        elif kind == "slide":
            d = x_a - x_b
            value = d @ n
            ra = jnp.concatenate([n, jnp.cross(r_a, n)])
            rb = jnp.concatenate([-n, jnp.cross(n, d) - jnp.cross(r_b, n)])
        else:
            value, ra, rb = jnp.zeros((), q.dtype), jnp.zeros(6, q.dtype), jnp.zeros(6, q.dtype)
        if b >= nb:
            rb = jnp.zeros_like(rb)
        values.append(value)
        rows_a.append(ra)
        rows_b.append(rb)
        frames.append((x_a, n, u, w))
    frame = tuple(jnp.stack([f[i] for f in frames]) for i in range(4))
    return jnp.stack(values), jnp.stack(rows_a), jnp.stack(rows_b), frame


def _relative_angle(model, q, params, j):
    """Planar joint j: theta_a - theta_b minus its initial value (unwrapped; b may be the world)."""
    _, _, a, b = model.joints[j]
    theta = model.orientations(q)
    theta_b = theta[b] if b < model.nbodies else jnp.zeros((), q.dtype)
    return theta[a] - theta_b - params.joints.offset[j]


def _place(model, row_a, row_b, ia, ib):
    """(m, nv) dense rows from per-body rows (m, r) on bodies ia and ib (nb: the world)."""
    m, r, nb = row_a.shape[0], row_a.shape[1], model.nbodies
    full = jnp.zeros((m, nb + 1, r), row_a.dtype)
    full = full.at[np.arange(m), np.asarray(ia)].add(row_a).at[np.arange(m), np.asarray(ib)].add(row_b)
    return full[:, :nb].reshape(m, nb * r)


def joint_coordinates(model, q, params):
    """((nj,) values, (nj, nv) rate rows): each joint's coordinate and its rate d value / dt = row . v.

    A hinge ("revolute") has its angle in radians, the rotation of body a
    relative to body b about the axis, zero at the initial configuration the
    scene was built from (3D: measured in the window (centre - pi, centre + pi]
    with centre the middle of a finite range, see `SceneBuilder.add_joint`;
    planar: theta_a - theta_b minus its initial value, unwrapped). A slide has
    (x_a - x_b) . n in metres, the displacement of a's anchor point from b's
    along the axis. A ball joint has 0 and a zero row.
    """
    value, row_a, row_b, _ = joint_kinematics(model, q, params)
    ia = [j[2] for j in model.joints]
    ib = [j[3] for j in model.joints]
    return value, _place(model, row_a, row_b, ia, ib)


def motor_force(model, q, params, u):
    """(nv,) the generalized force of the motors for the control u (nu,).

    A joint motor k adds gear_k u_k J_k^T, with J_k the rate row of its joint's
    coordinate (`joint_coordinates`): a torque gear u about a hinge axis on a
    and the opposite torque on b (a force along a slide's axis on a's and b's
    anchor points), whose power is gear u times the coordinate's rate. A body
    motor adds the world-frame force (or torque) gear u direction at its
    centre of mass (planar: its x, y or z component). A ball joint's motor adds
    the torque gear u R_a direction on a and its opposite on b. Here gear u stands for
    clip(gear clip(u, ctrl_range), force_range) (`MotorParams`).
    """
    mp, nvb = params.motors, model.nv_body
    F = jnp.zeros((model.nbodies, nvb), q.dtype)
    if any(kind == "joint" for _, kind, _ in model.motors):
        _, row_a, row_b, _ = joint_kinematics(model, q, params)
        R = poses(model, q)[1]
    for k, (_, kind, i) in enumerate(model.motors):
        f = jnp.clip(mp.gear[k] * jnp.clip(u[k], *mp.ctrl_range[k]), *mp.force_range[k])
        if kind == "joint":
            _, layout_kind, a, b = model.joints[i]
            if base_kind(layout_kind) == "ball":  # the torque f R_a direction on a, its opposite on b
                wrench = jnp.concatenate([jnp.zeros(3, q.dtype), f * R[a] @ mp.direction[k]])
                on_a, on_b = wrench, -wrench
            else:
                on_a, on_b = f * row_a[i], f * row_b[i]
            F = F.at[a].add(on_a)
            if b < model.nbodies:
                F = F.at[b].add(on_b)
            continue
        d = f * mp.direction[k]
        if model.dim == 2:
            d = jnp.stack([d[0], d[1], jnp.zeros_like(d[0])]) if kind == "force" else d[2] * jnp.eye(3)[2]
            F = F.at[i].add(d.astype(q.dtype))
        else:
            F = F.at[i, :3].add(d) if kind == "force" else F.at[i, 3:].add(d)
    return F.reshape(-1)


def gaps(model, q, params):
    if model.limits:
        return contacts(model, q, params).gap
    return _collide(model, q, params).gap


def tangents(model, q, params):
    return contacts(model, q, params).friction_rows(2 if model.dim == 3 else 1)


def torsions(model, q, params):
    return contacts(model, q, params).J_r


def active(model, q, params):
    return contacts(model, q, params).active


def _world_inertia(model, q, params):
    R = poses(model, q)[1][:-1]
    return matmul(matmul(R, params.inertia), jnp.swapaxes(R, -1, -2))


def mass_matrix(model, q, params):
    """M(q): the bodies' blocks, and with `joint_dynamics` the joints' armature R^T diag(armature) R."""
    M = _body_mass_matrix(model, q, params)
    if model.joint_dynamics:
        M = M + joint_passive(model, q, params)[0]
    return M


def _body_mass_matrix(model, q, params):
    nb = model.nbodies
    if model.dim == 2:
        return jnp.diag(jnp.stack([params.mass, params.mass, params.inertia[:, 2, 2]], -1).reshape(-1))
    blocks = jnp.zeros((nb, 6, 6), q.dtype)
    blocks = blocks.at[:, :3, :3].set(params.mass[:, None, None] * jnp.eye(3, dtype=q.dtype))
    blocks = blocks.at[:, 3:, 3:].set(_world_inertia(model, q, params))
    return _block_diagonal(blocks)


def inverse_mass_blocks(model, q, params):
    """(nb, 6, 6) the inverse of each body's block of M: diag(I / m, R I_body^-1 R^T) (3D scenes)."""
    R = poses(model, q)[1][:-1]
    eye = jnp.eye(3, dtype=q.dtype)
    blocks = jnp.zeros((model.nbodies, 6, 6), q.dtype)
    blocks = blocks.at[:, :3, :3].set(eye / params.mass[:, None, None])
    return blocks.at[:, 3:, 3:].set(matmul(matmul(R, inv3(params.inertia)), jnp.swapaxes(R, -1, -2)))


def velocity_map(model, q, v, params):
    """dq/dt = G(q) v per body (000 §5): O(nb) where the dense G is O(nb^2)."""
    if model.dim == 2:
        return v
    qb, vb = model._per_body(q, 7), model._per_body(v, 6)
    quat_rate = matvec(rot.rate_matrix(qb[:, 3:]), vb[:, 3:])
    return jnp.concatenate([vb[:, :3], quat_rate], -1).reshape(q.shape)


def kinematics(model, q, params):
    """G(q) = diag(I, E(quat)) per body (000 §5)."""
    nb = model.nbodies
    quat = model._per_body(q, 7)[:, 3:]
    blocks = jnp.zeros((nb, 7, 6), q.dtype)
    blocks = blocks.at[:, :3, :3].set(jnp.eye(3, dtype=q.dtype))
    blocks = blocks.at[:, 3:, 3:].set(rot.rate_matrix(quat))
    return _block_diagonal(blocks)


def free_flight(model, q, v, p, h, params):
    """Each body's motion over a step of length h from (q, v) after the impulse p, without contact (3D scenes).

    The translation is v + p / m. The rotation is the energy-momentum step of
    the rigid body: the implicit midpoint rule on Euler's equations in the body
    frame, with the orientation advanced by the Cayley rotation of the midpoint
    rate. From the body-frame momentum L = I w + R^T p_w it solves
    I W + (h/2) W x (I W) = L for the midpoint rate W (`_flight.midpoint_rate`); the body
    turns by cay(h W) and its momentum becomes L+ = 2 I W - L. Without a torque
    the world angular momentum R L and the kinetic energy L . I^-1 L / 2 are
    conserved exactly (to the solve's round-off), whatever h.

    The step integrates q+ = normalize(q0 + h G(q0) v+), a Cayley rotation
    about the end velocity w+ (`jaxrbd.dynamics.integrate`), so q0 is the
    orientation that this rotation by the free velocity takes to the
    energy-momentum orientation: without contact q+ is exactly that
    orientation; with contact the impulses act in the metric M(q0), in which
    the rotation about w+ keeps the kinetic energy.

    Args:
        q, v: (nq,) and (nv,) the state.
        p: (nv,) the impulse h F of the forces other than the gyroscopic one.
        h: the step length.
        params: the `BodyParams`.

    Returns:
        (v_free (nv,), q0 (nq,), shift (nv,), solved ()): the free velocity, the
        configuration the step integrates from, the displacement from q to q0 in
        velocity coordinates (q0 = normalize(q + G(q) shift)) and whether every
        body's rotation was solved (`_flight.free_rotation`).
    """
    qb, vb, pb = model._per_body(q, 7), model._per_body(v, 6), model._per_body(p, 6)
    h = jnp.asarray(h, q.dtype)
    w_next, quat0, turn, solved = free_rotation(qb[:, 3:], vb[:, 3:], pb[:, 3:], params.inertia, h)
    v_lin = vb[:, :3] + pb[:, :3] / params.mass[:, None]
    v_free = jnp.concatenate([v_lin, w_next], -1).reshape(v.shape)
    q0 = jnp.concatenate([qb[:, :3], quat0], -1).reshape(q.shape)
    shift = jnp.concatenate([jnp.zeros_like(turn), turn], -1).reshape(v.shape)
    return v_free, q0, shift, jnp.all(jax.lax.stop_gradient(solved))  # a custom_vjp's bool keeps a tangent


def coriolis_force(model, q, v, params):
    """The gyroscopic force -w x (I_world w) of each body (zero for planar bodies)."""
    if model.dim == 2:
        return jnp.zeros_like(v)
    w = model._per_body(v, 6)[:, 3:]
    Iw = matvec(_world_inertia(model, q, params), w)
    return jnp.concatenate([jnp.zeros_like(w), -jnp.cross(w, Iw)], -1).reshape(-1)


def potential(model, q, params):
    """Gravity: -sum_k m_k g . p_k."""
    p = poses(model, q)[0][:-1]
    return -jnp.sum(params.mass * (p @ params.gravity))


def external_force(model, t, q, v, params):
    """The applied forces and torques, and the motors' forces for `params.control` (`motor_force`)."""
    if model.dim == 3:
        F = jnp.concatenate([params.force, params.torque], -1).reshape(-1)
    else:
        F = jnp.stack([params.force[:, 0], params.force[:, 1], params.torque[:, 2]], -1).reshape(-1)
    if model.motors and params.control is not None:
        F = F + motor_force(model, q, params, params.control)
    if model.joint_dynamics:
        F = F + _joint_dynamics_force(model, q, v, params)
    return F


def _joint_dynamics_force(model, q, v, params):
    """The springs' force and the armature's velocity term: -R^T (k (value - rest) + a Rdot v).

    The armature adds a rotor's kinetic energy a (R v)^2 / 2 per joint coordinate
    (`mass_matrix`); as the rate row R turns with the bodies, its equation of
    motion R^T a (R dv/dt + Rdot v) carries the term Rdot v, zero for a joint to
    the world about a fixed axis.
    """
    jp = params.joints
    qdot = velocity_map(model, q, v, params) if model.dim == 3 else v
    (value, rows), (_, rows_dot) = jax.jvp(lambda q_: joint_coordinates(model, q_, params), (q,), (qdot,))
    return -rows.T @ (jp.stiffness * (value - jp.rest) + jp.armature * (rows_dot @ v))


def joint_passive(model, q, params):
    """(A, B), (nv, nv) each, R the joints' rate rows: A = R^T diag(armature) R, the armature's part of
    `mass_matrix`; B = R^T diag(damping) R, the dampers' force being -B v. A ball joint's R is the three
    rows of the relative angular velocity w_a - w_b (one in planar scenes), the same armature and damper
    about every axis, as MuJoCo's ball joint with one value per joint.

    The step treats the damper implicitly (`jaxrbd.dynamics.free_motion`), as
    MuJoCo's Euler integrator does, so a stiff damper on a light body stays stable.
    """
    _, rows = joint_coordinates(model, q, params)
    jp = params.joints
    A = rows.T @ (jp.armature[:, None] * rows)
    B = rows.T @ (jp.damping[:, None] * rows)
    balls = [j for j, joint in enumerate(model.joints) if base_kind(joint[1]) == "ball"]
    if balls:  # isotropic: a (w_a - w_b)^2 / 2 and -d (w_a - w_b), world-frame rows that do not turn
        S = _relative_rotation_rows(model, balls, q.dtype)
        per_row = np.repeat(np.asarray(balls), S.shape[0] // len(balls))
        A = A + S.T @ (jp.armature[per_row][:, None] * S)
        B = B + S.T @ (jp.damping[per_row][:, None] * S)
    return A, B


def passive(model, q, params):
    """(A, B): the joints' armature and dampers (`joint_passive`) and the free-body dampers' B
    (`free_body_damping`), for `System.passive`."""
    nv = model.nbodies * model.nv_body
    A = B = jnp.zeros((nv, nv), q.dtype)
    if model.joint_dynamics:
        A, B = joint_passive(model, q, params)
    if model.body_damping:
        B = B + free_body_damping(model, q, params)
    return A, B


def free_body_damping(model, q, params):
    """(nv, nv) block diagonal: damping T^T T per body, T = [[I, -[r]x], [0, R^T]] the map from (v, w) to
    MuJoCo's free-joint velocities (the world velocity of the point r = R origin, the body-frame spin)."""
    _, R = poses(model, q)
    R = R[:-1]
    r = jnp.einsum("bij,bj->bi", R, params.damping_origin)
    cross = rot.skew(r)  # [r]x, (nb, 3, 3)
    eye = jnp.broadcast_to(jnp.eye(3, dtype=q.dtype), R.shape)
    T = jnp.concatenate(
        [jnp.concatenate([eye, -cross], -1), jnp.concatenate([jnp.zeros_like(R), jnp.swapaxes(R, -1, -2)], -1)],
        -2,
    )
    blocks = params.body_damping[:, None, None] * jnp.einsum("bki,bkj->bij", T, T)
    return _block_diagonal(blocks)


def _relative_rotation_rows(model, joints, dtype):
    """(k m, nv) the rows of w_a - w_b of each joint in `joints` (m = 3 in 3D, 1 planar), constant."""
    r = model.nv_body
    angular = np.eye(r)[3:] if model.dim == 3 else np.eye(r)[2:]
    m = angular.shape[0]
    ia = [model.joints[j][2] for j in joints for _ in range(m)]
    ib = [model.joints[j][3] for j in joints for _ in range(m)]
    rows = jnp.asarray(np.tile(angular, (len(joints), 1)), dtype)
    return _place(model, rows, -rows, ia, ib)


def constraints(model, q, params):
    """(ng,) the joint constraints g(q).

    Per joint: ball and revolute, the anchor gap x_a - x_b (3, or 2 in planar
    scenes), then for revolute joints in 3D the two hinge rows
    (R_a u_a) . (R_b axis_b) = 0 and (R_a w_a) . (R_b axis_b) = 0. Slide (3D):
    the anchor gap across the axis, (x_a - x_b) . (R_b u_b) = 0 and
    (x_a - x_b) . (R_b w_b) = 0, the two hinge rows, and the locked spin
    (R_a u_a) . (R_b w_b) = 0; in planar scenes the anchor gap across the
    axis and the relative angle theta_a - theta_b minus its initial value.
    Planar (3D): the anchor gap along the normal,
    (x_a - x_b) . (R_b axis_b) = 0, and the two hinge rows. Translation (3D):
    the planar rows and the locked spin. Universal: the
    anchor gap and (R_a perp_a[0]) . (R_b axis_b) = 0 (the second hinge axis,
    fixed in a, stays normal to the first, fixed in b). Coordinate joints add
    none.
    """
    p, R = poses(model, q)
    jp = params.joints
    rows = []
    for j, (_, kind, a, b) in enumerate(model.joints):
        if is_coordinate(kind):
            continue
        x_a = p[a] + R[a] @ jp.anchor_a[j]
        x_b = p[b] + R[b] @ jp.anchor_b[j]
        if kind in ("planar", "translation"):
            rows.append(((x_a - x_b) @ (R[b] @ jp.axis_b[j]))[None])
        elif kind == "slide" and model.dim == 2:  # the gap across the axis, and the relative angle
            rows.append(jnp.stack([(x_a - x_b) @ (R[b] @ jp.perp_b[j, 0]), _relative_angle(model, q, params, j)]))
        elif kind == "slide":
            rows.append((R[b] @ jp.perp_b[j].T).T @ (x_a - x_b))
        else:
            rows.append((x_a - x_b)[: model.dim])
        if kind in AXIS_KINDS and model.dim == 3:
            rows.append((R[a] @ jp.perp_a[j].T).T @ (R[b] @ jp.axis_b[j]))
        if kind in ("slide", "translation") and model.dim == 3:
            rows.append(((R[a] @ jp.perp_a[j, 0]) @ (R[b] @ jp.perp_b[j, 1]))[None])
        if kind == "universal":
            rows.append(((R[a] @ jp.perp_a[j, 0]) @ (R[b] @ jp.axis_b[j]))[None])
    return jnp.concatenate(rows) if rows else jnp.zeros((0,), q.dtype)


def normalize(model, q):
    qb = model._per_body(q, 7)
    return jnp.concatenate([qb[:, :3], rot.normalize(qb[:, 3:])], -1).reshape(q.shape)


def _block_diagonal(blocks):
    """(nb * r, nb * c) block-diagonal matrix of (nb, r, c) blocks."""
    nb, r, c = blocks.shape
    eye = jnp.eye(nb, dtype=blocks.dtype)
    return jnp.einsum("ij,iab->iajb", eye, blocks).reshape(nb * r, nb * c)


class BodyMotion(eqx.Module):
    """The free motion per body, for the sparse solver of 3D body scenes.

    Attributes:
        Minv: (nb + 1, 6, 6) inverse mass blocks at q0; the last (the world) is zero.
        v_free: (nb + 1, 6) free velocities; the world's is zero.
        q0: (nq,) the configuration q+ is integrated from.
        shift: (nb + 1, 6) the displacement from q to q0 per body; the world's is zero.
        solved: () whether every body's rotation was solved.
    """

    Minv: jax.Array
    v_free: jax.Array
    q0: jax.Array
    shift: jax.Array
    solved: jax.Array


def free_body_motion(system, t, q, v, h):
    """The `BodyMotion` of a 3D body scene: the same free motion as `jaxrbd.dynamics.free_motion`, per body."""
    model = system.bodies
    nb, dtype = model.nbodies, q.dtype
    v_free, q0, shift, solved = dynamics.free_flight(system, t, q, v, h)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], dtype)])
    Minv = inverse_mass_blocks(model, q0, system.params)
    return BodyMotion(pad(Minv), pad(v_free.reshape(nb, 6)), q0, pad(shift.reshape(nb, 6)), solved)
