"""MJCF import: a MuJoCo model file as a jaxrbd `Scene`, parsed by MuJoCo's own compiler.

    scene = rbd.load_mjcf("hopper.xml")                   # or an XML string
    traj = rbd.simulate(*scene, dt=scene.dt, steps=500, controls=u)
    traj.q                                                # (501, nq): MuJoCo's qpos

Two body models read the same file:

- joint coordinates (`coordinates="joints"`, the default; `jaxrbd.bodies.Tree`):
  the state is MuJoCo's qpos and qvel, and kinematic trees hold their joints by
  construction;
- maximal coordinates (`coordinates="maximal"`): every moving body has its own
  centre of mass and quaternion, and the joints are equality rows of the step
  (`SceneBuilder.add_joint`); `scene.to_mujoco_qpos` maps back.

Needs the optional `mujoco` package (`pip install jaxrbd[mjcf]`).
"""

import os

from .._validate import check_value, renamed
from ..cones import Cone
from ..geometry import BroadPhase
from ._common import _mujoco as _mujoco
from ._common import _parse
from ._maximal import MjcfLayout as MjcfLayout
from ._maximal import MjcfScene as MjcfScene
from ._maximal import load_maximal
from ._tree import load_tree

COORDINATES = ("joints", "maximal")


def load_mjcf(
    source: str | os.PathLike,
    *,
    keyframe: str | int | None = None,
    directions: int | None = None,
    cone: Cone | None = None,
    broadphase: int | BroadPhase | None = None,
    coordinates: str = "joints",
    friction: Cone | None = None,
    grad_smoothing: float = 0.0,
) -> MjcfScene:
    """Load an MJCF model (a path or an XML string) as an `MjcfScene`, with MuJoCo's parser and compiler.

    Args:
        source: a path to an .xml file, or the XML itself as a string.
        keyframe: None (MuJoCo's qpos0), or a `<key>` name or index: its qpos and qvel.
        cone: the friction cone, as in `SceneBuilder`.
        broadphase: as in `SceneBuilder`.
        directions: as in `SceneBuilder`. directions defaults
            to 8 in maximal coordinates and to 4 in joint coordinates (the edges of
            MuJoCo's default pyramidal cone), where the default cone also has no
            friction unknowns on the range stops and on pairs of condim 1. In joint
            coordinates a model with more than 16 self-collision body
            pairs gets a broad phase by default; pass one to override it.
        coordinates: "joints" (the default) or "maximal".
        friction: the deprecated name of `cone`.
        grad_smoothing: eps >= 0, the default of `scene.simulate`'s backward pass
            (see below and `jaxrbd.simulate`).

    In joint coordinates (`jaxrbd.bodies.Tree`):
    - bodies, their offsets, masses, centres of mass and inertias are MuJoCo's;
      joints (free, ball, hinge, slide, several per body in sequence) are the
      coordinates: q = qpos, v = qvel, `to_mujoco_qpos` and `from_mujoco_qpos` are
      identities;
    - armature (in M), damping (implicit, as MuJoCo's Euler integrator), hinge and
      slide springs about `springref`, `frictionloss` as dry friction on each dof
      (a friction row bounded by frictionloss h, `scene.bodies.friction_rows()`),
      and `range` of limited hinges and slides as frictionless unilateral stops on
      the coordinate, of limited ball joints as one stop on the rotation angle
      (bounded by the larger range value, as MuJoCo does) (their impulses at the end
      of `traj.impulses.normal`, `scene.bodies.limit_rows()`);
    - actuators with a joint transmission on hinges and slides, without activation
      dynamics, with a fixed gain and an affine bias (motors, position and velocity
      servos): force = gain clip(ctrl) + bias . (1, gear q, gear v), clipped to
      forcerange, acting with gear on the joint; the controls in `scene.motors` order;
    - contacts: geoms filtered as MuJoCo does (contype/conaffinity, `<exclude>`,
      same body or welded, parent and child) and explicit `<pair>` elements (their
      own friction and condim); friction per body pair by MuJoCo's rule; plane,
      sphere, capsule, box and mesh (as its convex hull) geoms.
    Refused by name: equality constraints, other actuators, flexes, cylinder, ellipsoid and height-field geoms
    that collide. Listed in one warning: tendons, sensors, stiffness of ball and
    free joints, solref/solimp, margins, condim > 3 and fluid forces.

    In maximal coordinates, see `jaxrbd.mjcf._maximal.load_maximal` for the mapping.

    Gradients on range stops and contacts. A joint pressed against its rigid range
    stop does not move when its motor's control changes a little, so the exact
    gradient with respect to that control is zero for every step it rests there,
    and a fit or a controller optimised by gradient stalls. With `grad_smoothing=eps`
    (here, or on `simulate`) the forward rollout is unchanged and the backward pass
    differentiates each step through the smoothed complementarity residual, which
    blends the two sides of each switch over a width eps of that row's impulse (N s
    or N m s); a stop that pushes back with an impulse much larger than eps still
    passes no gradient. Use an eps of the order of the impulses that hold the joint
    (for the hopper's thigh on its stop, about 0.1 N m s), only where the exact
    gradient stalls; off the switches the gradient is then no longer exact.

    Returns:
        an `MjcfScene` (unpacks to `(system, state)`), with `dt`, `motors`,
        `to_mujoco_qpos`, `from_mujoco_qpos`, `to_mujoco_qvel` and `from_mujoco`.
    """
    friction = renamed("load_mjcf", "friction", friction, "cone", cone)
    if coordinates not in COORDINATES:
        raise ValueError(f"load_mjcf: coordinates must be one of {COORDINATES}, got {coordinates!r}")
    mujoco = _mujoco()
    m = _parse(mujoco, source)
    check_value("grad_smoothing", grad_smoothing, shape=(), nonnegative=True)
    options = dict(keyframe=keyframe, friction=friction, broadphase=broadphase)
    if coordinates == "maximal":
        directions = 8 if directions is None else directions
        return load_maximal(m, directions=directions, grad_smoothing=float(grad_smoothing), **options)
    options["directions"] = 4 if directions is None else directions
    system, state, tree, motors = load_tree(m, mujoco, **options)
    return MjcfScene(
        system, state, tree, dt=float(m.opt.timestep), layout=None, motors=motors, grad_smoothing=float(grad_smoothing)
    )
