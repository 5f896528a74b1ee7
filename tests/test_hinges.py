"""Hinge sequences (`SceneBuilder.add_hinges`: MJCF bodies with two or three hinges, a humanoid's hips,
waist and shoulders).

Kinematics against the definition: a child turned by R(n_1, q_1) R(n_2, q_2) [R(n_3, q_3)] about the anchor
reads its angles back, keeps its rows at zero, and the coordinates' rate rows give dq/dt exactly. Dynamics
against exact solutions: a sphere whose centre is the anchor, turned by one motor torque tau, turns about that
hinge alone, its rate growing by tau h / I per step and its angle by the step's Cayley rotation 2 atan(h w / 2)
(an isotropic inertia has no gyroscopic term), and the middle hinge's range stops it at its limit.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import _rotation as rot

EXACT_TOL = 1e-12  # radians (and rad/s)
H, STEPS = 0.01, 40
MASS, RADIUS = 2.0, 0.1
INERTIA = 0.4 * MASS * RADIUS**2  # a solid sphere
TORQUE = 0.05
STOP, STOP_TOL = 0.2, 1e-9  # the middle hinge's upper limit (rad) and the overshoot allowed
TILTED = np.array([0.9, 0.1, -0.3, 0.2]) / np.linalg.norm([0.9, 0.1, -0.3, 0.2])
HIP = np.eye(3)[[0, 2, 1]]  # a humanoid's hip: x, then z, then y (a left-handed sequence)
SHOULDER = np.array([[2.0, 1.0, 1.0], [0.0, -1.0, 1.0]]) / np.array([[6**0.5], [2**0.5]])  # Gymnasium's humanoid


def _pair(axes):
    """A parent turned by TILTED and a child below it on `axes` about the parent's centre."""
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, 0.0))
    b.add_body("parent", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0, 1.0), orientation=tuple(TILTED))
    b.add_body("child", rbd.Sphere(0.1), mass=1.0, position=(0.1, 0.2, 0.5))
    names = b.add_hinges([f"h{k}" for k in range(len(axes))], "child", "parent", anchor=(0.0, 0.0, 1.0), axes=axes)
    return b.build(), names


@pytest.mark.parametrize("axes", [SHOULDER, HIP], ids=["universal", "three hinges"])
def test_hinge_angles_rows_and_rates_match_their_definition(axes):
    (system, state), names = _pair(axes)
    model, params, q0 = system.bodies, system.params, state.q
    n = len(axes)
    assert model.joints[0][1] == ("universal" if n == 2 else "ball")
    assert tuple(name for name, _, _, _ in model.joints[1:]) == names
    anchor = jnp.array([0.0, 0.0, 1.0])

    def config(angles):  # the parent stays; the child turns about the anchor by the hinge sequence
        turn = jnp.array([1.0, 0.0, 0.0, 0.0])
        for axis, angle in zip(axes, angles):
            turn = rot.multiply(turn, rot.from_axis_angle(jnp.asarray(axis), angle))
        centre = anchor + rot.to_matrix(turn) @ (q0[7:10] - anchor)
        return jnp.concatenate([q0[:7], centre, rot.multiply(turn, q0[10:14])])

    # Past a quarter turn on the first and last hinges; the middle one inside (-pi/2, pi/2).
    for angles in ([0.3, -0.7, 1.1], [-2.0, 1.2, -2.5], [3.0, -1.5, 0.1]):
        angles, rates = jnp.array(angles[:n]), jnp.array([0.7, -0.4, 0.9][:n])
        q, q_dot = jax.jvp(config, (angles,), (rates,))
        spin = 2.0 * rot.multiply(q_dot[10:14], rot.conjugate(q[10:14]))[1:]
        v = jnp.concatenate([jnp.zeros(6), q_dot[7:10], spin])
        values, rows = model.joint_coordinates(q, params)
        np.testing.assert_allclose(np.asarray(values[1:]), np.asarray(angles), rtol=0, atol=EXACT_TOL)
        np.testing.assert_allclose(np.asarray(rows[1:] @ v), np.asarray(rates), rtol=0, atol=EXACT_TOL)
        assert float(jnp.abs(model.constraints(q, params)).max()) <= EXACT_TOL
        # A turn the hinges cannot make (about the first axis's normal through the last) breaks a universal
        # joint's row; three hinges span every rotation.
        off = rot.multiply(rot.from_axis_angle(jnp.asarray(np.cross(axes[0], axes[-1])), 0.1), q[10:14])
        tilted = (
            q.at[10:14]
            .set(off)
            .at[7:10]
            .set(anchor + rot.to_matrix(off) @ rot.to_matrix(q[10:14]).T @ (q[7:10] - anchor))
        )
        assert (float(jnp.abs(model.constraints(tilted, params)).max()) > 1e-3) == (n == 2)


@pytest.mark.parametrize(
    ("axes", "ranges", "match"),
    [
        ([[1, 0, 0], [1, 1, 0]], None, "orthogonal"),
        ([[1, 0, 0]], None, "two or three"),
        ([[1, 0, 0], [0, 1, 0], [0, 0, 0]], None, "nonzero"),
        (HIP, [None, (-0.5, 1.7), None], r"finite limits must lie inside \(-pi/2, pi/2\)"),
        (HIP, [None, None], "one \\(lo, hi\\) or None per hinge"),
    ],
)
def test_add_hinges_names_what_is_wrong(axes, ranges, match):
    b = rbd.SceneBuilder(dim=3)
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0, 0.0))
    names = [f"h{k}" for k in range(len(axes))]
    with pytest.raises(ValueError, match=match):
        b.add_hinges(names, "a", None, anchor=(0.0, 0.0, 0.0), axes=axes, ranges=ranges)


def test_add_hinges_is_3d_only():
    b = rbd.SceneBuilder(dim=2)
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0))
    with pytest.raises(ValueError, match="3D scenes only"):
        b.add_hinges(["x", "y"], "a", None, anchor=(0.0, 0.0), axes=[[1, 0, 0], [0, 1, 0]])


@functools.cache
def _hip():
    """A sphere on three hinges (x, z, y) at its centre to the world, a motor on each, the middle hinge's range
    (-inf, STOP); compiled once for a batch of controls."""
    b = rbd.SceneBuilder(dim=3)  # gravity on: it acts at the anchor
    b.add_body("ball", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 0.0, 1.0))
    names = b.add_hinges(
        ["x", "z", "y"], "ball", None, anchor=(0.0, 0.0, 1.0), axes=HIP, ranges=[None, (-np.inf, STOP), None]
    )
    for name in names:
        b.add_motor(f"turn {name}", name)
    scene = b.build()

    @jax.jit
    @jax.vmap
    def run(u):
        traj = rbd.simulate(*scene, dt=H, steps=STEPS, controls=jnp.broadcast_to(u, (STEPS, 3)))
        coords = jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q)
        return traj, coords

    return scene, run


@pytest.mark.slow  # a vmapped rollout with three motors and a stop: a compile of its own
def test_one_motor_turns_its_hinge_alone_along_the_exact_discrete_parabola_and_the_middle_range_stops_it():
    scene, run = _hip()
    traj, coords = run(TORQUE * jnp.eye(3))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    # Step k ends at the rate w_k = (tau / I) h k and turns by the Cayley map's 2 atan(h w_k / 2).
    exact = np.concatenate([[0.0], np.cumsum(2 * np.arctan(TORQUE / INERTIA * H * H * np.arange(1, STEPS + 1) / 2))])
    coords = np.asarray(coords)[:, :, 1:]  # the coordinates x, z, y after the ball joint's 0
    assert exact[-1] > 2 * STOP  # the middle hinge reaches its stop
    for k in (0, 2):  # the first and the last hinge: exact parabolas, the others stay at 0
        np.testing.assert_allclose(coords[k, :, k], exact, rtol=0, atol=EXACT_TOL)
        np.testing.assert_allclose(np.delete(coords[k], k, axis=1), 0.0, rtol=0, atol=EXACT_TOL)
    middle = coords[1, :, 1]
    free = exact <= STOP
    np.testing.assert_allclose(middle[free], exact[free], rtol=0, atol=EXACT_TOL)
    assert middle.max() <= STOP + STOP_TOL and middle[-1] >= STOP - STOP_TOL
    np.testing.assert_allclose(np.delete(coords[1], 1, axis=1), 0.0, rtol=0, atol=EXACT_TOL)
    # The stop carries the motor's impulse once the hinge rests on it: tau h per step.
    (stop,) = [index for name, side, index in scene.bodies.limit_rows() if name == "z" and side == "upper"]
    np.testing.assert_allclose(np.asarray(traj.impulses.normal)[1, -1, stop], TORQUE * H, rtol=1e-9)
    # The centre stays at the anchor.
    np.testing.assert_allclose(np.asarray(traj.q)[:, -1, :3], np.tile([0.0, 0.0, 1.0], (3, 1)), rtol=0, atol=EXACT_TOL)
