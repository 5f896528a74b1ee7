"""The planar joint and coordinate joints without rows (MJCF bodies with several joints).

A box on a "planar" joint to the world (plane normal y through its centre) with three coordinate joints
(`rows=False`): slides along x and z and a hinge about y, each with a motor. Under gravity, a constant
push and a constant torque about a principal axis, the semi-implicit step gives the discrete parabolas
x_n = x_0 + a h^2 n (n + 1) / 2 exactly (a = F / m, -g, tau / I_yy), the box never leaves the plane nor
turns about another axis, and the coordinates read the displacement and the angle. A stop on the x slide
holds the box at its limit.

The "translation" joint (two slides, no hinge: MJCF's pusher object or reacher target) holds the same box in
the plane without turning, whatever the torque on it; an MJCF body with two orthogonal slides loads as one.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

G = 9.81
H = 0.01
STEPS = 30
MASS, HALF = 2.0, (0.2, 0.1, 0.05)
I_YY = MASS * (HALF[0] ** 2 + HALF[2] ** 2) / 3.0  # a solid box about its y axis
FORCE, TORQUE = 3.0, 0.5
EXACT_TOL = 1e-12  # metres and radians
STOP = 0.05  # m, the x slide's upper limit in the stop test
STOP_TOL = 1e-9


def _scene(x_range=None):
    b = rbd.SceneBuilder(dim=3)
    b.add_body("box", rbd.Box(HALF), mass=MASS, position=(0.0, 0.0, 1.0))
    b.add_joint("plane", "planar", "box", anchor=(0.0, 0.0, 1.0), axis=(0, 1, 0))
    b.add_joint("x", "slide", "box", anchor=(0.0, 0.0, 1.0), axis=(1, 0, 0), rows=False, range=x_range)
    b.add_joint("z", "slide", "box", anchor=(0.0, 0.0, 1.0), axis=(0, 0, 1), rows=False)
    b.add_joint("pitch", "revolute", "box", anchor=(0.0, 0.0, 1.0), axis=(0, 1, 0), rows=False)
    b.add_motor("push", "x")
    b.add_motor("turn", "pitch")
    return b.build()


@functools.cache
def _run(x_range=None):
    scene = _scene(x_range)

    @jax.jit
    def run(u):
        traj = rbd.simulate(*scene, dt=H, steps=STEPS, controls=jnp.broadcast_to(u, (STEPS, 2)))
        coords = jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q)
        return traj, coords

    return scene, run


@pytest.mark.slow  # a rollout with four joints and two motors: a compile of its own
def test_a_box_on_a_planar_joint_follows_the_exact_discrete_motion():
    scene, run = _run()
    assert [(name, n) for name, _, n in scene.bodies.joint_rows()] == [("plane", 3), ("x", 0), ("z", 0), ("pitch", 0)]
    traj, coords = run(jnp.array([FORCE, TORQUE]))
    assert bool(traj.stats.converged.all())
    n = np.arange(STEPS + 1)
    ramp = H * H * n * (n + 1) / 2
    q = np.asarray(traj.q)
    np.testing.assert_allclose(q[:, 0], FORCE / MASS * ramp, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(q[:, 1], 0.0, rtol=0, atol=EXACT_TOL)  # never leaves the plane y = 0
    np.testing.assert_allclose(q[:, 2], 1.0 - G * ramp, rtol=0, atol=EXACT_TOL)
    # The rotation turns by the Cayley map's 2 atan(h w / 2) per step, w = (tau / I_yy) h k after k steps.
    angle = np.concatenate([[0.0], np.cumsum(2 * np.arctan(TORQUE / I_YY * H * H * n[1:] / 2))])
    np.testing.assert_allclose(
        q[:, 3:7], np.stack([np.cos(angle / 2), 0 * angle, np.sin(angle / 2), 0 * angle], 1), atol=1e-12
    )
    # The coordinate joints (after "plane", which has none) read the same motion: x, z from the start, the angle.
    c = np.asarray(coords)
    np.testing.assert_allclose(c[:, 0], 0.0, rtol=0, atol=0)
    np.testing.assert_allclose(c[:, 1], q[:, 0], rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(c[:, 2], q[:, 2] - 1.0, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(c[:, 3], angle, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_a_stop_on_a_coordinate_slide_holds_the_pushed_box_at_its_limit():
    _, run = _run((-math.inf, STOP))
    traj, coords = run(jnp.array([FORCE, 0.0]))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    x = np.asarray(coords[:, 1])
    assert x.max() <= STOP + STOP_TOL and x[-1] >= STOP - STOP_TOL
    # Resting on the stop (from two steps after the impact on) its impulse is the push's, h F, in every step.
    np.testing.assert_allclose(np.asarray(traj.impulses.limit[-3:, 0]), H * FORCE, rtol=1e-9)


@pytest.mark.slow  # a rollout of its own
def test_a_box_on_a_translation_joint_moves_in_its_plane_without_turning():
    """A torque about each axis and a push along x: the box follows the discrete parabolas in x and z, stays in
    the plane y = 0 and never turns or spins. (The joint's impulse cancels the spin of the step's free flight:
    h tau with the energy-momentum rotation's gyroscopic term of that spin, 0.4% here.)"""
    torque = np.array([0.3, -0.7, 0.4])
    b = rbd.SceneBuilder(dim=3)
    b.add_body("box", rbd.Box(HALF), mass=MASS, position=(0.0, 0.0, 1.0), torque=torque)
    b.add_joint("plane", "translation", "box", anchor=(0.0, 0.0, 1.0), axis=(0, 1, 0))
    b.add_joint("x", "slide", "box", anchor=(0.0, 0.0, 1.0), axis=(1, 0, 0), rows=False)
    b.add_joint("z", "slide", "box", anchor=(0.0, 0.0, 1.0), axis=(0, 0, 1), rows=False)
    b.add_motor("push", "x")
    scene = b.build()
    assert [(name, n) for name, _, n in scene.bodies.joint_rows()] == [("plane", 4), ("x", 0), ("z", 0)]
    traj = rbd.simulate(*scene, dt=H, steps=STEPS, controls=jnp.full((STEPS, 1), FORCE))
    assert bool(traj.stats.converged.all())
    n = np.arange(STEPS + 1)
    ramp = H * H * n * (n + 1) / 2
    q = np.asarray(traj.q)
    np.testing.assert_allclose(q[:, 0], FORCE / MASS * ramp, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(q[:, 1], 0.0, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(q[:, 2], 1.0 - G * ramp, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(q[:, 3:7], np.tile([1.0, 0.0, 0.0, 0.0], (STEPS + 1, 1)), rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(np.asarray(traj.v)[:, 3:], 0.0, rtol=0, atol=EXACT_TOL)  # no spin either


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"kind": "ball", "rows": False}, ValueError, "rows=False applies"),
        ({"kind": "planar", "axis": (0, 1, 0), "rows": False}, ValueError, "rows=False applies"),
        ({"kind": "slide", "axis": (1, 0, 0), "rows": 1}, TypeError, "rows must be True or False"),
        ({"kind": "planar", "axis": (0, 1, 0), "range": (-1.0, 1.0)}, ValueError, "range applies only"),
        ({"kind": "planar"}, ValueError, "needs its axis"),
        ({"kind": "translation"}, ValueError, "needs its axis"),
        ({"kind": "translation", "axis": (0, 1, 0), "range": (-1.0, 1.0)}, ValueError, "range applies only"),
        ({"kind": "translation", "axis": (0, 1, 0), "rows": False}, ValueError, "rows=False applies"),
    ],
)
def test_bad_planar_and_coordinate_joints_are_rejected_naming_the_argument(kwargs, error, match):
    b = rbd.SceneBuilder(dim=3)
    b.add_body("box", rbd.Box(HALF), mass=MASS, position=(0.0, 0.0, 1.0))
    with pytest.raises(error, match=match):
        b.add_joint(
            "j", kwargs["kind"], "box", anchor=(0.0, 0.0, 1.0), **{k: v for k, v in kwargs.items() if k != "kind"}
        )


@pytest.mark.parametrize("kind", ["planar", "translation"])
def test_planar_and_translation_joints_need_a_3d_scene(kind):
    b = rbd.SceneBuilder(dim=2)
    b.add_body("disc", rbd.Sphere(0.1), mass=1.0, position=(0.0, 1.0))
    with pytest.raises(ValueError, match=f"{kind} joints are supported in 3D scenes only"):
        b.add_joint("j", kind, "disc", anchor=(0.0, 1.0))


PUCK = """<mujoco><worldbody><geom type="plane" size="5 5 0.1"/>
  <body name="puck" pos="0.3 -0.2 0.05" euler="0 0 30">
    <joint name="px" type="slide" axis="1 0 0"/><joint name="py" type="slide" axis="0 1 0"/>
    <geom type="box" size="0.05 0.05 0.05" mass="1"/>
  </body></worldbody></mujoco>"""


def test_an_mjcf_body_with_two_slides_loads_as_a_translation_joint():
    """Two orthogonal slides, no hinge (a pusher's object): a translation joint normal to both and the two slides as
    coordinate joints; qpos maps to q and back."""
    mujoco = pytest.importorskip("mujoco")
    scene = rbd.load_mjcf(PUCK, coordinates="maximal")
    joints = [(name, kind) for name, kind, _, _ in scene.bodies.joints]
    assert joints == [("puck (translation)", "translation"), ("px", "slide coordinate"), ("py", "slide coordinate")]
    assert [n for _, _, n in scene.bodies.joint_rows()] == [4, 0, 0]
    m = mujoco.MjModel.from_xml_string(PUCK)
    d = mujoco.MjData(m)
    d.qpos[:] = [0.25, -0.4]
    mujoco.mj_kinematics(m, d)
    q = np.asarray(scene.from_mujoco_qpos(d.qpos))
    np.testing.assert_allclose(q[:3], d.xipos[1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(scene.to_mujoco_qpos(q)), d.qpos, rtol=0, atol=1e-12)
    coordinates = np.asarray(scene.bodies.joint_coordinates(q, scene.system.params)[0])
    np.testing.assert_allclose(coordinates, [0.0, *d.qpos], rtol=0, atol=1e-12)
