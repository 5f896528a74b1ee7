"""The scene builder: bodies and shapes compiled to a `System` (000 §2.4 and §5).

A scene is a set of moving bodies, each carrying primitive shapes
(`jaxrbd.geometry`), and static geometry. `SceneBuilder` declares it and `build()`
compiles it to the same `System` the steppers run. Every physical quantity
(masses, inertias, shape sizes and offsets, gravity, applied forces, mu,
restitution) is an array leaf of `system.params` or `system.mu`, so a scene can be
differentiated and vmapped; the layout (which body carries which shape, which
pairs can touch) is static.
"""

import dataclasses
import itertools
import math
import warnings
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import _rotation as rot
from .. import cones, geometry
from .._validate import as_float, check_inertia, check_shape, check_value, host_float, host_numpy, is_traced, renamed
from ..dynamics import project_to_joints
from ..geometry import BroadPhase, PairGroup
from ..model import Scene, State
from . import _overlap
from ._model import (
    AXIS_KINDS,
    AXIS_ON_A,
    COORDINATE,
    JOINT_KINDS,
    JOINT_TOL,
    MIDDLE,
    BodyModel,
    BodyParams,
    JointParams,
    MotorParams,
)

GRAVITY = 9.81
OVERLAP_TOL = 1e-9  # an initial gap below -OVERLAP_TOL is reported as an overlap
OVERLAPS_NAMED = 12  # up to this many overlapping pairs get a warning each; more get one warning


def _inertia_matrix(inertia, mass, shapes):
    """(3, 3) inertia about the centre of mass in the body frame from a scalar, (3,), (3, 3) or the shape."""
    if inertia is None:
        if len(shapes) != 1:
            raise ValueError(f"inertia is required for a body with {len(shapes)} shapes (it is derived for one)")
        s = shapes[0]
        Rs = rot.to_matrix(rot.normalize(host_float(s.orientation)))
        d = host_float(s.position) + Rs @ s.centroid()
        xp = host_numpy(mass, Rs, d)
        parallel = mass * (xp.dot(d, d) * xp.eye(3) - xp.outer(d, d))
        return Rs @ s.inertia(mass) @ Rs.T + parallel
    inertia = host_float(inertia)
    xp = host_numpy(inertia)
    if inertia.ndim == 0:
        return inertia * xp.eye(3)
    if inertia.shape == (3,):
        return xp.diag(inertia)
    if inertia.shape == (3, 3):
        return inertia
    raise ValueError(f"inertia must be a scalar, (3,) principal moments or a (3, 3) matrix, got shape {inertia.shape}")


def _bounds(name, value):
    """(2,) [lo, hi] of an interval, lo <= hi, infinite ends allowed; (-inf, inf) for None; ValueError naming it."""
    if value is None:
        return as_float([-np.inf, np.inf])
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ValueError(f"{name} must be a pair (lo, hi), got {value!r}")
    for end in value:
        check_value(name, end, shape=(), finite=False)
    if not is_traced(*value) and not float(value[0]) <= float(value[1]):
        raise ValueError(f"{name} must have lo <= hi (-inf or inf for no bound), got {value!r}")
    return jnp.stack([as_float(end) for end in value])


def _vector(name, value, size):
    x = host_float(value)
    check_value(name, x, shape=(size,))
    return x


class _Joint(NamedTuple):
    """A joint as added, read by `build`. measure: None, or the (mode, reference axis) of `add_hinges`."""

    name: str
    kind: str
    a: str
    b: str
    anchor: Any
    anchor_a: Any
    anchor_b: Any
    axis: Any
    limits: Any
    restitution: Any
    rows: bool
    measure: Any = None


@dataclasses.dataclass
class _Body:
    name: str
    shapes: tuple
    mass: Any
    inertia: Any
    q: Any
    v: Any
    force: Any
    torque: Any


class SceneBuilder:
    """Declare bodies, shapes and static geometry, then `build()` a `Scene`.

        b = SceneBuilder(dim=3, mu=0.4)
        b.add_static("table", Plane())
        b.add_body("ball", Sphere(0.1), mass=1.0, position=(0, 0, 1), velocity=(1.5, 0.1, 0))
        scene = b.build()

    Contacts: every moving body touches every static shape and, with
    `collide_bodies=True`, every other moving body; `exclude(a, b)` and
    `include(a, b)` edit that. Each shape pair contributes its kind pair's
    capacity of candidate contacts (`geometry.COLLIDERS`).

    Args:
        dim: 3 (spatial, quaternions) or 2 (planar, in the x-y plane).
        gravity: (3,) acceleration; default (0, 0, -9.81) in 3D, (0, -9.81, 0) in 2D.
        mu: friction coefficient of shapes that do not set one.
        restitution: restitution of shapes that do not set one (used by impact laws).
        directions: friction directions per contact in 3D (equally spaced, the
            first along the contact's t) of the default polyhedral cone.
        cone: the friction cone of every contact (`jaxrbd.cones`), for example
            `EllipticCone()` or `SoftFingerCone(1, 1, 0.4)`; its scales may be
            scalars or one per contact. None: `PolyhedralCone(directions)` in 3D,
            `PlanarCone()` in 2D.
        margin: contacts with a gap above it are masked out of the step.
        collide_bodies: whether moving bodies touch each other by default.
        broadphase: None (every shape pair is in every step), an integer k or a
            `BroadPhase(slots=k, distance=d)`: each kind pair (no plane) with more
            than k shape pairs keeps its k nearest pairs by bounding spheres in each
            step, so an all-pairs scene does not carry O(n^2) contact rows; pairs
            within d that get no slot are reported in `traj.stats.overflow`.
        friction: the deprecated name of `cone`.
    """

    def __init__(
        self,
        *,
        dim=3,
        gravity=None,
        mu=0.0,
        restitution=0.0,
        directions=8,
        cone=None,
        margin=math.inf,
        collide_bodies=True,
        broadphase=None,
        friction=None,
    ):
        friction = renamed("SceneBuilder", "friction", friction, "cone", cone)
        if dim not in (2, 3):
            raise ValueError(f"dim must be 2 or 3, got {dim!r}")
        if not isinstance(directions, int) or directions < 3:
            raise ValueError(f"directions must be an integer >= 3, got {directions!r}")
        check_value("mu", mu, shape=(), nonnegative=True)
        check_value("restitution", restitution, shape=(), unit_interval=True)
        check_value("margin", margin, shape=(), positive=True, finite=False)
        self.dim, self.directions, self.margin, self.friction = dim, directions, float(margin), None
        if friction is not None:
            self.friction = self._check_cone(friction)
        default = (0.0, 0.0, -GRAVITY) if dim == 3 else (0.0, -GRAVITY, 0.0)
        self.gravity = _vector("gravity", default if gravity is None else gravity, 3)
        self.mu, self.restitution, self.collide_bodies = mu, restitution, collide_bodies
        if isinstance(broadphase, int) and not isinstance(broadphase, bool):
            broadphase = BroadPhase(broadphase)
        if broadphase is not None and not isinstance(broadphase, BroadPhase):
            raise TypeError(f"broadphase must be None, an integer or a jaxrbd.BroadPhase, got {broadphase!r}")
        self.broadphase = broadphase
        self._bodies, self._statics = [], []
        self._pairs, self._excluded, self._included = {}, set(), set()
        self._joints, self._motors = [], []
        self._dynamics = {}  # joint name -> (stiffness, damping, rest, armature)
        self._body_damping = {}  # body name -> (damping, origin)

    def _names(self):
        return [b.name for b in self._bodies] + [name for name, _ in self._statics]

    def _new_name(self, name):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a body needs a non-empty string name, got {name!r}")
        if name in self._names():
            raise ValueError(f"the name {name!r} is already used")

    def _check_shape(self, owner, shape):
        if not isinstance(shape, geometry.Shape):
            raise TypeError(f"{owner}: shapes must be jaxrbd.geometry shapes, got {type(shape).__name__}")
        shape.check(f" of {owner!r}")

    def add_body(
        self,
        name,
        *shapes,
        mass,
        inertia=None,
        position,
        orientation=(1.0, 0.0, 0.0, 0.0),
        angle=0.0,
        velocity=None,
        angular_velocity=None,
        force=None,
        torque=None,
    ):
        """Add a moving body whose centre of mass is its origin; returns its name.

        Args:
            name: a unique name.
            *shapes: the shapes it carries (poses in its frame).
            mass: > 0.
            inertia: about the centre of mass in the body frame: scalar, (3,)
                principal moments or (3, 3); derived from the shape when it has one.
            position: (3,) centre, or (2,) in planar scenes.
            orientation: (4,) quaternion wxyz (normalized here); 3D only.
            angle: the orientation theta in planar scenes.
            velocity: (3,) or (2,) linear velocity; default 0.
            angular_velocity: (3,) world frame, or the scalar omega in planar scenes; default 0.
            force: (3,) constant applied force, world frame.
            torque: (3,) constant applied torque, world frame.
        """
        self._new_name(name)
        if not shapes:
            raise ValueError(f"body {name!r} needs at least one shape")
        for s in shapes:
            self._check_shape(name, s)
            if isinstance(s, geometry.Plane):
                raise ValueError(f"body {name!r}: a plane is static geometry, add it with add_static")
        check_value(f"mass of body {name!r}", mass, shape=(), positive=True)
        mass = host_float(mass)
        I = _inertia_matrix(inertia, mass, shapes)
        check_inertia(f"inertia of body {name!r}", I)
        d = self.dim
        x = _vector(f"position of body {name!r}", position, d)
        v = _vector(f"velocity of body {name!r}", np.zeros(d) if velocity is None else velocity, d)
        if d == 3:
            check_value(f"orientation of body {name!r}", orientation, shape=(4,), nonzero=True)
            quat = host_float(orientation)
            quat = quat / host_numpy(quat).linalg.norm(quat)
            w = _vector(
                f"angular_velocity of body {name!r}", np.zeros(3) if angular_velocity is None else angular_velocity, 3
            )
            xp = host_numpy(x, quat, v, w)
            q, v = xp.concatenate([x, quat]), xp.concatenate([v, w])
        else:
            theta = host_float(angle)
            omega = host_float(0.0 if angular_velocity is None else angular_velocity)
            check_value(f"angle of body {name!r}", theta, shape=())
            check_value(f"angular_velocity of body {name!r}", omega, shape=())
            xp = host_numpy(x, theta, v, omega)
            q, v = xp.concatenate([x, theta[None]]), xp.concatenate([v, omega[None]])
        force = _vector(f"force on body {name!r}", np.zeros(3) if force is None else force, 3)
        torque = _vector(f"torque on body {name!r}", np.zeros(3) if torque is None else torque, 3)
        self._bodies.append(_Body(name, shapes, mass, I, q, v, force, torque))
        return name

    def add_static(self, name, shape):
        """Add a static (world-fixed) shape, posed in the world frame; returns its name."""
        self._new_name(name)
        self._check_shape(name, shape)
        self._statics.append((name, shape))
        return name

    def _check_cone(self, friction):
        if not cones.is_cone(friction):
            raise TypeError(f"cone must be a jaxrbd.cones cone, got {friction!r}")
        allowed = (1,) if self.dim == 2 else (2, 3)
        if friction.dim not in allowed:
            raise ValueError(
                f"cone: a {self.dim}D scene needs a cone with {' or '.join(map(str, allowed))} friction "
                f"components, got {type(friction).__name__} with {friction.dim}"
            )
        return friction

    def _cone(self, pair_cones):
        """The scene's cone: one for all contacts, or a PerContactCone when pairs set their own."""
        if all(c is None for c in pair_cones):
            return self.friction
        default = self.friction
        if default is None:
            default = cones.PlanarCone() if self.dim == 2 else cones.PolyhedralCone(self.directions)
        chosen = [default]
        index = []
        for c in pair_cones:
            c = default if c is None else c
            if not any(c is x for x in chosen):
                chosen.append(c)
            index.append(next(i for i, x in enumerate(chosen) if x is c))
        return cones.PerContactCone(chosen, index)

    def _known(self, *names):
        for n in names:
            if n not in self._names():
                raise ValueError(f"no body or static shape named {n!r}; names: {self._names()}")
        return frozenset(names)

    def set_pair(self, a, b, *, mu=None, restitution=None, cone=None, friction=None):
        """Friction, restitution and the friction cone for the contacts between a and b.

        They override the shapes' and the scene's values. A cone given here makes
        the scene's cone a `jaxrbd.cones.PerContactCone`; `friction` is its
        deprecated name.
        """
        friction = renamed("SceneBuilder.set_pair", "friction", friction, "cone", cone)
        check_value(f"mu of the pair ({a!r}, {b!r})", mu, shape=(), nonnegative=True)
        check_value(f"restitution of the pair ({a!r}, {b!r})", restitution, shape=(), unit_interval=True)
        if friction is not None:
            self._check_cone(friction)
        self._pairs[self._known(a, b)] = (mu, restitution, friction)

    def exclude(self, a, b):
        """No contacts between a and b."""
        self._excluded.add(self._known(a, b))

    def include(self, a, b):
        """Contacts between moving bodies a and b even with collide_bodies=False."""
        self._included.add(self._known(a, b))

    def add_joint(
        self,
        name,
        kind,
        a,
        b=None,
        *,
        anchor=None,
        anchor_a=None,
        anchor_b=None,
        axis=None,
        range=None,
        restitution=0.0,
        rows=True,
    ):
        """Add a bilateral joint between moving body a and body b (None: the world); returns its name.

        The joint point is either `anchor`, a world point at the initial
        configuration, or given per body: `anchor_a` in a's frame and `anchor_b` in
        b's frame (the world frame for the world). With per-body anchors the
        initial state may violate the joint: `build()` warns with the violation and
        projects the state onto g(q) = 0. The two bodies do not collide with each
        other (`include` restores it).

        A range adds one unilateral row per finite limit, a frictionless stop that
        every scheme treats like a contact normal (gap = coordinate - lo >= 0 and
        hi - coordinate >= 0; `BodyModel.joint_coordinates`). The coordinate is
        zero at the initial configuration given here: a hinge's angle of a relative
        to b about the axis (right-handed), a slide's displacement of a's anchor
        from b's along the axis. A 3D hinge angle is measured in the window
        (c - pi, c + pi], c = (lo + hi) / 2 for a finite range and lo + pi/2 (or
        hi - pi/2) for a one-sided one: a 3D hinge must not turn past the far end
        of that window (planar angles are unwrapped).

        Args:
            name: a unique joint name.
            kind: "ball" (the points coincide: 3 rows; 2 in planar scenes),
                "revolute" (a hinge: in 3D also the axis is shared, 5 rows; in planar
                scenes the same as "ball"), "slide" (prismatic: the axis is shared,
                the relative rotation locked, translation free along the axis; 5
                rows, 2 in planar scenes), "planar" (3D only: a's anchor moves in b's plane
                through the anchor normal to the axis, and a turns about the axis
                only; 3 rows; no range) or "translation" (3D only: as "planar",
                without turning: two slides and no hinge; 4 rows; no range).
            a: a body name.
            b: a body name; None or "world" for the world.
            anchor: (dim,) world point; or anchor_a and anchor_b, (dim,) each.
            axis: (3,) the hinge or slide axis in the world frame at the initial
                configuration (revolute joints in 3D, slide joints; (2,) for a slide
                in a planar scene), or the plane's normal (planar and translation
                joints).
            range: (lo, hi) the joint's limits, radians (revolute) or metres
                (slide), lo < hi; -inf or inf for a one-sided range. None: no stops.
            restitution: in [0, 1], the restitution of the range's stops, used by the
                impact law given to `simulate` (`rbd.NewtonRestitution()`, `rbd.PoissonRestitution()`).
            rows: False for a revolute or slide joint (3D) that adds no constraint
                rows, only its coordinate (its range's stops, motors,
                `joint_coordinates`): a degree of freedom of a motion that other
                joints constrain, such as the two slides and the hinge of a
                "planar" joint, or the two slides of a "translation" joint (MJCF
                bodies with several joints).
        """
        if not isinstance(name, str) or not name or name in [j[0] for j in self._joints]:
            raise ValueError(f"a joint needs a new non-empty string name, got {name!r}")
        if kind not in JOINT_KINDS:
            raise ValueError(f"joint {name!r}: kind must be one of {JOINT_KINDS}, got {kind!r}")
        moving = [body.name for body in self._bodies]
        if a not in moving:
            raise ValueError(f"joint {name!r}: a must name a moving body, got {a!r}; moving bodies: {moving}")
        b = "world" if b is None else b
        if b != "world" and b not in moving:
            raise ValueError(
                f"joint {name!r}: b must name a moving body or 'world', got {b!r}; moving bodies: {moving}"
            )
        if a == b:
            raise ValueError(f"joint {name!r}: a and b are the same body {a!r}")
        d = self.dim
        per_body = anchor_a is not None and anchor_b is not None
        if (anchor is None) != per_body or (anchor is not None and (anchor_a, anchor_b) != (None, None)):
            raise ValueError(f"joint {name!r}: give either anchor, or both anchor_a and anchor_b")
        if anchor is not None:
            anchor = _vector(f"anchor of joint {name!r}", anchor, d)
        else:
            anchor_a = _vector(f"anchor_a of joint {name!r}", anchor_a, d)
            anchor_b = _vector(f"anchor_b of joint {name!r}", anchor_b, d)
        if kind in AXIS_KINDS[2:] and d == 2:  # all but the hinge and the slide
            raise ValueError(f"joint {name!r}: {kind} joints are supported in 3D scenes only")
        if (kind in AXIS_KINDS and d == 3) or (kind == "slide" and d == 2):
            if axis is None:
                raise ValueError(
                    f"joint {name!r}: a {kind} joint in {'3D' if d == 3 else 'a planar scene'} needs its axis"
                )
            axis = _vector(f"axis of joint {name!r}", axis, d)
            if not is_traced(axis) and not np.linalg.norm(np.asarray(axis)) > 1e-12:
                raise ValueError(f"joint {name!r}: axis must be a nonzero vector, got {axis}")
            if d == 2:
                axis = jnp.concatenate([axis, jnp.zeros(1, axis.dtype)])
        elif axis is not None:
            raise ValueError(
                f"joint {name!r}: axis applies only to slide joints, and in 3D scenes to revolute, slide, planar "
                "and translation joints"
            )
        if not isinstance(rows, bool):
            raise TypeError(f"joint {name!r}: rows must be True or False, got {rows!r}")
        if not rows and (kind not in ("revolute", "slide") or d != 3):
            raise ValueError(f"joint {name!r}: rows=False applies to revolute and slide joints in 3D scenes only")
        limits = self._check_range(name, kind, range)
        check_value(f"restitution of joint {name!r}", restitution, shape=(), unit_interval=True)
        self._joints.append(
            _Joint(name, kind, a, b, anchor, anchor_a, anchor_b, axis, limits, as_float(restitution), rows)
        )
        if b != "world":
            self._excluded.add(frozenset((a, b)))
        return name

    def add_hinges(self, names, a, b, anchor, axes, ranges=None, restitution=0.0):
        """Add two or three hinges in sequence about one anchor (an MJCF body with several hinge joints); returns names.

        At the initial configuration the hinges' angles are zero; after it, a's
        rotation relative to b is R(axes[0], q_0) R(axes[1], q_1) [R(axes[2], q_2)]:
        the first axis turns with b, the last with a (and a middle one with the
        first hinge). The axes must be orthogonal to each other. The rows are those
        of a universal joint (two hinges: the anchor gap and the last axis kept
        normal to the first; 4 rows) or of a ball joint (three; 3 rows), and each
        hinge is a coordinate joint named names[k] (no rows: its range's stops,
        motors on it and `joint_coordinates` read its angle, as MuJoCo's qpos).
        The first and the last angle are measured in the window of `add_joint`;
        the middle of three lies in [-pi/2, pi/2] and its rate is singular at
        +-pi/2 (gimbal lock), so its range's finite limits must lie inside (-pi/2, pi/2).

        Args:
            names: two or three new joint names, one per hinge, in order.
            a: the moving body's name.
            b: a moving body's name, "world" or None.
            anchor: (3,) the common world point of the hinges.
            axes: (2 or 3, 3) world-frame axes at the initial configuration.
            ranges: None, or one (lo, hi) or None per hinge (radians, as `add_joint`).
            restitution: in [0, 1], the restitution of the ranges' stops.
        """
        if self.dim != 3:
            raise ValueError("add_hinges: hinge sequences are supported in 3D scenes only")
        if isinstance(names, str) or not hasattr(names, "__len__") or len(names) not in (2, 3):
            raise ValueError(f"add_hinges: names must be two or three joint names, got {names!r}")
        axes = np.asarray(axes, float)
        norms = np.linalg.norm(axes, axis=-1)
        if axes.shape != (len(names), 3) or not (np.all(np.isfinite(axes)) and np.all(norms > 1e-12)):
            raise ValueError(
                f"add_hinges {list(names)}: axes must be {len(names)} finite nonzero (3,) vectors, got {axes}"
            )
        unit = axes / norms[:, None]
        gram = unit @ unit.T - np.eye(len(names))
        if not np.all(np.abs(gram) <= 1e-9):
            raise ValueError(f"add_hinges {list(names)}: the axes must be orthogonal to each other, got {unit}")
        ranges = [None] * len(names) if ranges is None else list(ranges)
        if len(ranges) != len(names):
            raise ValueError(f"add_hinges {list(names)}: ranges must hold one (lo, hi) or None per hinge, got {ranges}")
        if len(names) == 3 and ranges[1] is not None:
            limits = [float(np.asarray(x)) for x in ranges[1]]
            if not all(-math.pi / 2 < x < math.pi / 2 for x in limits if not math.isinf(x)):
                raise ValueError(
                    f"joint {names[1]!r}: the middle hinge's finite limits must lie inside (-pi/2, pi/2), got "
                    f"{ranges[1]!r}"
                )
        rows_name = f"{a} ({', '.join(names)})"
        if len(names) == 3:
            self.add_joint(rows_name, "ball", a, b, anchor=anchor)
        else:
            self.add_joint(rows_name, "revolute", a, b, anchor=anchor, axis=unit[0])
            # a revolute joint's checks; the rows are a universal joint's
            self._joints[-1] = self._joints[-1]._replace(kind="universal", measure=("", unit[1]))
        modes = [("", unit[-1])] + [(MIDDLE, unit[-1])] * (len(names) - 2) + [(AXIS_ON_A, unit[0])]
        for name, axis, rng, measure in zip(names, unit, ranges, modes):
            self.add_joint(
                name, "revolute", a, b, anchor=anchor, axis=axis, range=rng, restitution=restitution, rows=False
            )
            self._joints[-1] = self._joints[-1]._replace(measure=measure)
        return tuple(names)

    def _check_range(self, name, kind, range):
        """((lo, hi), (has lower stop, has upper stop)) of a joint range, or None; ValueError naming `range`."""
        if range is None:
            return None
        if kind not in ("revolute", "slide"):
            raise ValueError(f"joint {name!r}: range applies only to revolute and slide joints, got kind {kind!r}")
        if isinstance(range, (str, bytes)) or not hasattr(range, "__len__") or len(range) != 2:
            raise ValueError(f"joint {name!r}: range must be a pair (lo, hi), got {range!r}")
        lo, hi = range
        if is_traced(lo, hi):  # traced limits: both stops exist
            return (as_float(lo), as_float(hi)), (True, True)
        check_shape(f"range of joint {name!r}", lo, ())
        check_shape(f"range of joint {name!r}", hi, ())
        flo, fhi = float(np.asarray(lo)), float(np.asarray(hi))
        unit = "rad" if kind == "revolute" else "m"
        if math.isnan(flo) or math.isnan(fhi) or not flo < fhi:
            raise ValueError(
                f"joint {name!r}: range must have lo < hi (in {unit}, -inf or inf for no stop), got {range!r}"
            )
        if math.isinf(flo) and math.isinf(fhi):
            raise ValueError(f"joint {name!r}: range ({flo}, {fhi}) has no finite limit; leave range=None")
        if kind == "revolute" and self.dim == 3 and math.isfinite(fhi - flo) and not fhi - flo < 2 * math.pi:
            raise ValueError(
                f"joint {name!r}: a 3D hinge range must span less than one turn (hi - lo < 2 pi), got {range!r}"
            )
        if not flo <= 0.0 <= fhi:
            warnings.warn(
                f"joint {name!r} starts outside its range ({flo}, {fhi}) (its coordinate is 0 at the initial "
                "configuration): its stop pushes it inside within the first step, a sudden kick",
                stacklevel=3,
            )
        return (flo, fhi), (not math.isinf(flo), not math.isinf(fhi))

    def add_motor(
        self, name, joint=None, *, body=None, force=None, torque=None, gear=1.0, ctrl_range=None, force_range=None
    ):
        """Add a motor, one component of the control input u of `simulate(controls=...)`; returns its name.

        The motors' order of declaration is the order of u (nu = the number of
        motors). Either a joint motor: `joint` names a revolute or slide joint, and
        u_k gear is the torque about the hinge axis on body a, with the opposite
        torque on body b (a slide: the force along the axis on a's anchor, the
        opposite on b's), positive in the direction of the joint coordinate
        (`add_joint`'s range); or `joint` names a ball joint (3D) and `torque` a
        direction fixed in body a's frame: u_k gear times it is the torque on a,
        the opposite on b (MuJoCo's motor on a ball joint, gear[:3] in the child's
        frame). Or a body motor: `body` names a moving body and one
        of `force` or `torque` gives a world-frame direction (3,), and u_k gear
        times it is applied at the body's centre of mass (planar scenes use the x,
        y components of a force and the z component of a torque). The forces enter
        the free motion as the applied forces and gravity do (`external_force`).

        As MuJoCo's `ctrlrange` and `forcerange`: the control is clipped to
        `ctrl_range` before the gear, and the force (or torque) gear u to
        `force_range` after it: f = clip(gear clip(u, ctrl_range), force_range).

        Args:
            name: a unique motor name.
            joint: a joint name (from `add_joint`); or None with `body`.
            body: a moving body's name; or None with `joint`.
            force: (3,) the direction of a body motor's force (give force or torque, not both).
            torque: (3,) the direction of a body motor's torque, or of a ball joint's motor in a's frame.
            gear: the force or torque per unit of control (a scalar leaf).
            ctrl_range: (lo, hi), lo <= hi, the control's bounds (-inf or inf for
                none); None: unbounded.
            force_range: (lo, hi), lo <= hi, the bounds of gear u, in N (a force or
                slide) or N m (a torque or hinge); None: unbounded.
        """
        if not isinstance(name, str) or not name or name in [m[0] for m in self._motors]:
            raise ValueError(f"a motor needs a new non-empty string name, got {name!r}")
        check_value(f"gear of motor {name!r}", gear, shape=())
        bounds = jnp.stack(
            [
                _bounds(f"{arg} of motor {name!r}", r)
                for arg, r in (("ctrl_range", ctrl_range), ("force_range", force_range))
            ]
        )
        if (joint is None) == (body is None):
            raise ValueError(f"motor {name!r}: give either joint or body")
        if joint is not None:
            joints = {j[0]: j[1] for j in self._joints}
            if joint not in joints:
                raise ValueError(
                    f"motor {name!r}: joint must name a joint added with add_joint, got {joint!r}; "
                    f"joints: {list(joints)}"
                )
            ball = joints[joint] == "ball" and self.dim == 3
            if joints[joint] not in ("revolute", "slide") and not ball:
                raise ValueError(
                    f"motor {name!r}: joint {joint!r} is a {joints[joint]!r} joint; motors drive revolute and "
                    "slide joints, and ball joints in 3D"
                )
            if force is not None or (torque is not None) != ball:
                raise ValueError(
                    f"motor {name!r}: a motor on a ball joint needs a torque direction (in body a's frame), one on "
                    "a revolute or slide joint none; force applies only to body motors (body=...)"
                )
            direction = _vector(f"torque of motor {name!r}", torque, 3) if ball else jnp.zeros(3)
            self._motors.append((name, "joint", joint, direction, as_float(gear), bounds))
            return name
        moving = [b.name for b in self._bodies]
        if body not in moving:
            raise ValueError(f"motor {name!r}: body must name a moving body, got {body!r}; moving bodies: {moving}")
        if (force is None) == (torque is None):
            raise ValueError(f"motor {name!r}: a body motor needs exactly one of force or torque (a direction)")
        kind = "force" if force is not None else "torque"
        direction = _vector(f"{kind} of motor {name!r}", force if force is not None else torque, 3)
        self._motors.append((name, kind, body, direction, as_float(gear), bounds))
        return name

    def set_joint_dynamics(self, joint, *, stiffness=0.0, damping=0.0, rest=0.0, armature=0.0):
        """Give a revolute or slide joint's coordinate a linear spring, a damper and armature, or a ball joint a
        damper and armature; returns its name.

        The generalized force -stiffness (coordinate - rest) - damping rate acts
        along the coordinate's rate row (`BodyModel.joint_coordinates`), as a joint
        motor's does: about the hinge axis, or along the slide. Armature adds the
        inertia of a rotor turning with the coordinate, kinetic energy
        armature rate^2 / 2 (a motor's reflected inertia): M gains
        R^T armature R. The spring and the armature's velocity term are applied
        forces of the step; the damper is taken at the end of the step (implicit,
        as in MuJoCo's Euler integrator: `jaxrbd.dynamics.free_motion`), so a stiff
        damper stays stable. A ball joint's damper and armature act on the relative
        angular velocity w_a - w_b, the same about every axis: the torque
        -damping (w_a - w_b) on a and its opposite on b, and the kinetic energy
        armature |w_a - w_b|^2 / 2 (`jaxrbd.bodies._model.joint_passive`). MJCF joints'
        `stiffness`, `springref`, `damping` and `armature` map here (`load_mjcf`). All four are leaves of
        `system.params.joints`, so a fit can differentiate with respect to them.

        Args:
            joint: a revolute, slide or ball joint's name (`add_joint`, or a hinge
                of `add_hinges`).
            stiffness: >= 0, N m/rad (hinge) or N/m (slide); 0 for a ball joint.
            damping: >= 0, N m s/rad (hinge, ball) or N s/m (slide).
            rest: the coordinate where the spring is relaxed (rad or m; the
                coordinate is 0 at the initial configuration); 0 for a ball joint.
            armature: >= 0, kg m^2 (hinge, ball) or kg (slide).
        """
        kinds = {j.name: j.kind for j in self._joints}
        if joint not in kinds:
            raise ValueError(f"set_joint_dynamics: joint must name a joint, got {joint!r}; joints: {list(kinds)}")
        if kinds[joint] not in ("revolute", "slide", "ball"):
            raise ValueError(
                f"set_joint_dynamics: joint {joint!r} is a {kinds[joint]!r} joint; springs, dampers and armature "
                "act on revolute and slide joints, dampers and armature on ball joints"
            )
        if kinds[joint] == "ball" and (np.any(np.asarray(stiffness) != 0) or np.any(np.asarray(rest) != 0)):
            raise ValueError(
                f"set_joint_dynamics: joint {joint!r} is a ball joint: it takes damping and armature (the same "
                f"about every axis), not a spring; got stiffness={stiffness}, rest={rest}"
            )
        if joint in self._dynamics:
            raise ValueError(f"set_joint_dynamics: joint {joint!r} was given its dynamics already")
        for label, value in (("stiffness", stiffness), ("damping", damping), ("armature", armature)):
            check_value(f"{label} of joint {joint!r}", value, shape=(), nonnegative=True)
        check_value(f"rest of joint {joint!r}", rest, shape=())
        self._dynamics[joint] = tuple(as_float(x) for x in (stiffness, damping, rest, armature))
        return joint

    def set_body_damping(self, body, damping, *, origin=(0.0, 0.0, 0.0)):
        """Damp a free body as MuJoCo damps a free joint; returns the body's name.

        MuJoCo's free joint has six velocity coordinates: the world velocity u of
        the body frame's origin and the angular velocity w_local in the body
        frame. Its damper is the force -damping (u, w_local) on them. Here u is
        the velocity of the point `origin` (body frame, relative to the centre of
        mass): u = v + w x r with r = R origin, so the generalized force on
        (v, w) is -damping T^T T (v, w) with T = [[I, -[r]x], [0, R^T]]. The
        damper is taken at the end of the step (implicit, as in MuJoCo's Euler
        integrator and as a joint's damper, `set_joint_dynamics`).
        `system.params.body_damping` is a leaf, so a fit can differentiate with
        respect to it. `load_mjcf` maps a free joint's `damping` here. 3D scenes
        only; the dense step only (`ContactSweeps` refuses such a scene).

        Args:
            body: a moving body's name.
            damping: >= 0, in N s/m along the origin's velocity and N m s/rad about the spin.
            origin: (3,) the damped point in the body frame, relative to the centre of mass (m).
        """
        names = [b.name for b in self._bodies]
        if body not in names:
            raise ValueError(f"set_body_damping: body must name a moving body, got {body!r}; bodies: {names}")
        if self.dim != 3:
            raise ValueError("set_body_damping: free-body dampers are for 3D scenes; this scene is planar")
        if body in self._body_damping:
            raise ValueError(f"set_body_damping: body {body!r} was given its damper already")
        check_value(f"damping of body {body!r}", damping, shape=(), nonnegative=True)
        self._body_damping[body] = (as_float(damping), _vector(f"origin of body {body!r}", origin, 3))
        return body

    def _body_damping_params(self):
        """The `BodyParams` leaves of the free-body dampers: {} without any."""
        if not self._body_damping:
            return {}
        zero = (as_float(0.0), as_float(np.zeros(3)))
        damping, origin = zip(*(self._body_damping.get(b.name, zero) for b in self._bodies), strict=True)
        return {"body_damping": jnp.stack(damping), "damping_origin": jnp.stack(origin)}

    def _joint_params(self, q):
        """The static joint layout and its `JointParams`, from the initial configuration q."""
        if not self._joints:
            return (), None, ()
        index = {body.name: i for i, body in enumerate(self._bodies)}
        index["world"] = len(self._bodies)
        model = BodyModel(self.dim, tuple(index)[:-1], (), (), (), ())
        p, R = model.poses(q)

        def pad(x):  # planar anchors (x, y) -> (x, y, 0)
            return jnp.concatenate([x, jnp.zeros(3 - x.shape[0], x.dtype)])

        layout, leaves, limits = [], [], []
        for j, (name, kind, a, b, anchor, anchor_a, anchor_b, axis, rng, e, rows, measure) in enumerate(self._joints):
            ia, ib = index[a], index[b]
            if anchor is not None:
                x = pad(anchor)
                anchor_a, anchor_b = R[ia].T @ (x - p[ia]), R[ib].T @ (x - p[ib])
            else:
                anchor_a, anchor_b = pad(anchor_a), pad(anchor_b)
            n = jnp.array([0.0, 0.0, 1.0]) if axis is None else axis / jnp.linalg.norm(axis)
            n_a = R[ia].T @ n
            if self.dim == 2 and axis is not None:  # a planar slide: its axis's normal in the plane
                u = jnp.array([-n_a[1], n_a[0], 0.0])
            elif measure is None:  # any vector normal to the axis
                helper = jnp.where(jnp.abs(n_a[0]) < 0.9, jnp.array([1.0, 0.0, 0.0]), jnp.array([0.0, 1.0, 0.0]))
                u = jnp.cross(n_a, helper)
            else:  # add_hinges: the reference axis, normal to this one
                u = R[ia].T @ measure[1]
            u = u / jnp.linalg.norm(u)
            perp_a = jnp.stack([u, jnp.cross(n_a, u)])
            perp_b = (R[ib].T @ R[ia] @ perp_a.T).T  # the same world vectors in b's frame
            (lo, hi), stops = rng if rng is not None else ((-jnp.inf, jnp.inf), (False, False))
            lo, hi = as_float(lo), as_float(hi)
            centre = jnp.where(
                jnp.isfinite(lo) & jnp.isfinite(hi),
                0.5 * (lo + hi),
                jnp.where(jnp.isfinite(lo), lo + 0.5 * jnp.pi, jnp.where(jnp.isfinite(hi), hi - 0.5 * jnp.pi, 0.0)),
            )
            theta = model.orientations(q)
            offset = (theta[ia] - (theta[ib] if ib < len(self._bodies) else 0.0)) if self.dim == 2 else 0.0
            layout.append((name, kind if rows else kind + COORDINATE + (measure[0] if measure else ""), ia, ib))
            dynamics = self._dynamics.get(name, (0.0, 0.0, 0.0, 0.0))
            leaves.append((anchor_a, anchor_b, R[ib].T @ n, perp_a, perp_b, lo, hi, centre, offset, e, *dynamics))
            limits += [(j, side) for side, stop in zip((1, -1), stops) if stop]
        fields = ("anchor_a", "anchor_b", "axis_b", "perp_a", "perp_b", "lower", "upper", "centre", "offset")
        fields += ("restitution", "stiffness", "damping", "rest", "armature")
        stacked = {f: jnp.stack([as_float(x[i]) for x in leaves]) for i, f in enumerate(fields)}
        return tuple(layout), JointParams(**stacked), tuple(limits)

    def _motor_params(self, joint_layout):
        """The static motor layout and its `MotorParams` (None without motors)."""
        if not self._motors:
            return (), None
        joints = [j[0] for j in joint_layout]
        bodies = [b.name for b in self._bodies]
        layout = tuple(
            (name, kind, joints.index(target) if kind == "joint" else bodies.index(target))
            for name, kind, target, *_ in self._motors
        )
        bounds = jnp.stack([m[5] for m in self._motors])
        params = MotorParams(
            gear=jnp.stack([m[4] for m in self._motors]),
            direction=jnp.stack([m[3] for m in self._motors]),
            ctrl_range=bounds[:, 0],
            force_range=bounds[:, 1],
        )
        return layout, params

    def _body_pairs(self):
        moving = [b.name for b in self._bodies]
        pairs = [(m, s) for m in moving for s, _ in self._statics]
        for i, a in enumerate(moving):
            for b in moving[i + 1 :]:
                if self.collide_bodies or frozenset((a, b)) in self._included:
                    pairs.append((a, b))
        return [p for p in pairs if frozenset(p) not in self._excluded]

    def build(self):
        """Compile to a `Scene` (system, state, bodies); warns when initial bodies overlap."""
        model, params, mu, restitution, cone = self.build_model()
        system = model.system(params, mu, restitution, self.directions, cone)
        q0 = _project_initial_joints(model, system, as_float(_concatenate([b.q for b in self._bodies])))
        state = State(as_float(0.0), q0, as_float(_concatenate([b.v for b in self._bodies])))
        scene = Scene(system, state, model)
        if not is_traced(params, state.q) and self._may_overlap(model, state.q):
            _warn_overlaps(model, params, state.q)
        return scene

    def _may_overlap(self, model, q):
        """Whether a shape pair may start interpenetrating: `_overlap`'s separating axes, on the host."""
        p, R = model.poses(np.asarray(q))
        solids = {b.name: [_overlap.solid(s, p[i], R[i]) for s in b.shapes] for i, b in enumerate(self._bodies)}
        solids.update({name: [_overlap.solid(shape, np.zeros(3), np.eye(3))] for name, shape in self._statics})
        return any(
            _overlap.may_overlap(sa, sb, OVERLAP_TOL)
            for a, b in self._body_pairs()
            for sa, sb in itertools.product(solids[a], solids[b])
        )

    def build_model(self):
        """The static `BodyModel` and its leaves, on the host: (model, params, mu, restitution, cone).

        Nothing is compiled and the initial state is not checked (`build` does
        both); `jaxrbd.load_mjcf` uses it for the contact geometry of a tree.
        """
        if not self._bodies:
            raise ValueError("a scene needs at least one moving body")
        nb = len(self._bodies)
        owners = {b.name: (i, b.shapes) for i, b in enumerate(self._bodies)}
        owners.update({name: (nb, (shape,)) for name, shape in self._statics})
        # Stack the shapes per kind, remembering where each lands.
        stacks, slot = {}, {}
        for owner, (body, shapes) in owners.items():
            for k, s in enumerate(shapes):
                entries = stacks.setdefault(s.kind, [])
                slot[owner, k] = (s.kind, len(entries))
                entries.append((body, s))
        # Pair up shapes, canonical kind order, grouped by kind pair.
        order = geometry.KINDS.index
        groups, contact_info = {}, []
        leaves = {kind: [s.arrays() for _, s in entries] for kind, entries in stacks.items()}
        # The hull vertices the scene's meshes are padded to: a mesh-mesh pair's capacity depends on it.
        vertices = max((len(mesh["vertices"]) for mesh in leaves.get("mesh", ())), default=0)
        for a, b in self._body_pairs():
            for ka, sa in enumerate(owners[a][1]):
                for kb, sb in enumerate(owners[b][1]):
                    (na, ia, sha), (nb_, ib, shb) = (a, slot[a, ka], sa), (b, slot[b, kb], sb)
                    if order(sha.kind) > order(shb.kind):
                        (na, ia, sha), (nb_, ib, shb) = (nb_, ib, shb), (na, ia, sha)
                    try:
                        _, capacity = geometry.collider(sha.kind, shb.kind)
                    except ValueError as err:
                        raise ValueError(f"bodies {na!r} and {nb_!r}: {err}") from None
                    key = (sha.kind, shb.kind)
                    groups.setdefault(key, []).append((ia[1], ib[1], capacity(self.dim, vertices)))
                    contact_info.append((key, na, nb_, sha, shb, capacity(self.dim, vertices)))
        pair_groups = tuple(_group(kinds, entries, self.broadphase) for kinds, entries in groups.items())
        # Contacts are ordered by group; within a group, in pair order.
        q0 = _concatenate([b.q for b in self._bodies])
        joint_layout, joint_params, limits = self._joint_params(q0)
        motor_layout, motor_params = self._motor_params(joint_layout)
        mu, restitution, pair_names, pair_cones = [], [], [], []
        for kinds in groups:
            for key, na, nb_, sha, shb, capacity in contact_info:
                if key != kinds:
                    continue
                pair_mu, pair_e, pair_cone = self._pairs.get(frozenset((na, nb_)), (None, None, None))
                mu_ab = pair_mu if pair_mu is not None else 0.5 * (_or(sha.mu, self.mu) + _or(shb.mu, self.mu))
                e_ab = (
                    pair_e
                    if pair_e is not None
                    else 0.5 * (_or(sha.restitution, self.restitution) + _or(shb.restitution, self.restitution))
                )
                mu += [host_float(mu_ab)] * capacity
                restitution += [host_float(e_ab)] * capacity
                pair_names += [(na, nb_)] * capacity
                pair_cones += [pair_cone] * capacity
        model = BodyModel(
            dim=self.dim,
            names=tuple(b.name for b in self._bodies),
            statics=tuple(name for name, _ in self._statics),
            shape_bodies=tuple((kind, tuple(body for body, _ in entries)) for kind, entries in stacks.items()),
            groups=pair_groups,
            pair_names=tuple(pair_names),
            margin=self.margin,
            joints=joint_layout,
            overflow_distance=0.0 if self.broadphase is None else float(self.broadphase.distance),
            limits=limits,
            motors=motor_layout,
            joint_dynamics=bool(self._dynamics),
            body_damping=bool(self._body_damping),
        )
        pair_cones += [None] * len(limits)  # the stops of the joint ranges follow the contacts
        if model.dynamic and any(c is not None for c in pair_cones):
            raise ValueError("set_pair(cone=...) is not supported with a broad phase (broadphase=)")
        shapes = {kind: _stack_shapes(geometry.pad_meshes(arrays)) for kind, arrays in leaves.items()}
        params = BodyParams(
            mass=_stack([b.mass for b in self._bodies]),
            inertia=_stack([b.inertia for b in self._bodies]),
            gravity=self.gravity,
            force=_stack([b.force for b in self._bodies]),
            torque=_stack([b.torque for b in self._bodies]),
            shapes=shapes,
            joints=joint_params,
            motors=motor_params,
            control=None if motor_params is None else np.zeros(len(motor_layout), motor_params.gear.dtype),
            **self._body_damping_params(),
        )
        # Built with numpy where nothing is traced; the leaves are transferred once, which compiles nothing.
        params, mu, restitution = jax.device_put((params, _stack(mu, empty=(0,)), _stack(restitution, empty=(0,))))
        return model, params, mu, restitution, self._cone(pair_cones)


def _stack(xs, empty=None):
    """Stack the leaves xs as floats, on the host with numpy where none is traced; `empty`: the shape of no leaves."""
    if not xs and empty is not None:
        return np.zeros(empty, jnp.result_type(float))
    return host_numpy(*xs).stack([host_float(x) for x in xs])


def _stack_shapes(arrays):
    """The leaves of several shapes of one kind (`Shape.arrays`), stacked: floats (`_stack`), and a mesh's index
    tables (the keys `*_index`, host integers) as integers."""
    return {
        key: np.stack([np.asarray(a[key], np.int32) for a in arrays])
        if key.endswith("_index")
        else _stack([a[key] for a in arrays])
        for key in arrays[0]
    }


def _concatenate(xs):
    """The arrays xs joined, on the host with numpy where none is traced."""
    return host_numpy(*xs).concatenate(xs)


def _group(kinds, entries, broadphase):
    """The `PairGroup` of one kind pair from its [(index a, index b, capacity)]."""
    filtered = broadphase is not None and "plane" not in kinds and len(entries) > broadphase.slots
    return PairGroup(
        kind_a=kinds[0],
        kind_b=kinds[1],
        index_a=tuple(i for i, _, _ in entries),
        index_b=tuple(j for _, j, _ in entries),
        capacity=entries[0][2],
        slots=broadphase.slots if filtered else None,
    )


def _or(value, default):
    return default if value is None else value


def _project_initial_joints(model, system, q):
    """q projected onto the joints, with a warning naming each joint violated by more than JOINT_TOL."""
    if not model.joints:
        return q
    if not is_traced(system, q):
        g = np.abs(np.asarray(jax.jit(model.constraints)(q, system.params)))
        for name, start, n in model.joint_rows():
            worst = g[start : start + n].max(initial=0.0)
            if worst > JOINT_TOL:
                warnings.warn(
                    f"joint {name!r} is violated by {worst:.3g} in the initial state; "
                    "the state is projected onto the joints before the first step",
                    stacklevel=4,
                )
    return (project_to_joints if is_traced(system, q) else _project_compiled)(system, q)


# Compiled for an eager build (three Newton steps op by op took 11 s for three joints), cached across
# builds of the same structure.
_project_compiled = eqx.filter_jit(project_to_joints)


def _warn_overlaps(model, params, q):
    """Warn, naming the pair and the depth, when bodies start interpenetrating (beyond OVERLAP_TOL)."""
    contacts = jax.jit(model.contacts)(q, params)
    worst = {}
    for i, g in zip(np.asarray(contacts.index), np.asarray(contacts.gap)):
        if i >= len(model.pair_names):  # the stops of joint ranges
            continue
        a, b = model.pair_names[i]
        if g < -OVERLAP_TOL and g < worst.get((a, b), 0.0):
            worst[a, b] = g
    if len(worst) > OVERLAPS_NAMED:  # one warning, not one per pair (a file's packed grid of boxes)
        (a, b), g = min(worst.items(), key=lambda item: item[1])
        warnings.warn(
            f"{len(worst)} body pairs overlap in the initial state, the deepest {a!r} and {b!r} by {-g:.3g} m; "
            "the first step pushes them apart",
            stacklevel=3,
        )
        return
    for (a, b), g in worst.items():
        warnings.warn(
            f"{a!r} and {b!r} overlap by {-g:.3g} m in the initial state; the first step pushes them apart",
            stacklevel=3,
        )
