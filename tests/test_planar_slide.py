"""Slide joints in planar scenes: a prismatic joint in the x-y plane, 2 rows.

Exact references: a body on a frictionless inclined rail under gravity follows the
semi-implicit step's closed form s_n = h^2 g sin(alpha) n (n + 1) / 2; a range stop
holds it at the limit with the impulse h m g sin(alpha) per step; the rate row of
the slide's coordinate is its derivative; a motor against a spring-damper with armature
follows the step's exact recursion. A cart-pole (a cart on a rail, a pole on
a hinge) conserves its momentum along the rail exactly and follows MuJoCo stepping
the same system as MJCF, with the difference falling like h.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

jax.config.update("jax_enable_x64", True)

G = 9.81
ALPHA = math.radians(30.0)  # the rail's slope
DOWN = (math.cos(ALPHA), -math.sin(ALPHA))  # the rail's axis, down the slope
H = 0.01
STEPS = 50
LIMIT = 0.2  # m, the range (-inf, LIMIT] of the stopped rail
MASS = 2.0
EXACT_TOL = 1e-12  # the closed form, up to round-off
PENETRATION_TOL = 1e-9  # how far past its stop the slide may go
REST_RTOL = 1e-9  # the resting impulse against h m g sin(alpha)
ZERO_TOL = 1e-12  # the impulse of the stop before the block reaches it


def _rails():
    """Two blocks on frictionless rails down the slope: "free" without a stop, "stopped" with LIMIT."""
    b = rbd.SceneBuilder(dim=2)
    for name, y, rng in (("free", 0.0, None), ("stopped", 2.0, (-math.inf, LIMIT))):
        b.add_body(name, rbd.Sphere(0.05), mass=MASS, position=(0.0, y), angle=0.3)
        b.add_joint(f"{name} rail", "slide", name, anchor=(0.0, y), axis=DOWN, range=rng)
    return b.build()


@pytest.fixture(scope="module")
def rails():
    scene = _rails()
    traj = rbd.simulate(*scene, dt=H, steps=STEPS)
    coordinates = jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q)
    return scene, traj, np.asarray(coordinates)


def test_a_block_on_an_inclined_rail_follows_the_exact_discrete_motion(rails):
    _, traj, s = rails
    n = np.arange(STEPS + 1)
    np.testing.assert_allclose(s[:, 0], H**2 * G * math.sin(ALPHA) * n * (n + 1) / 2, rtol=0, atol=EXACT_TOL)
    q = np.asarray(traj.q).reshape(STEPS + 1, 2, 3)
    across = -q[:, 0, 0] * DOWN[1] + q[:, 0, 1] * DOWN[0]  # the distance from the rail's line
    np.testing.assert_allclose(across, 0.0, atol=EXACT_TOL)
    np.testing.assert_allclose(q[:, :, 2], 0.3, atol=EXACT_TOL)  # neither block turns
    assert bool(np.all(traj.stats.converged)) and float(np.max(traj.stats.residual)) <= 1e-8


def test_a_range_stop_holds_the_block_with_its_weight_along_the_rail(rails):
    scene, traj, s = rails
    assert s[:, 1].max() <= LIMIT + PENETRATION_TOL
    arrived = np.nonzero(s[:, 1] >= LIMIT - PENETRATION_TOL)[0]
    assert arrived.size and arrived[0] < STEPS - 10  # it reaches the stop and rests there
    np.testing.assert_allclose(s[arrived[0] :, 1], LIMIT, atol=PENETRATION_TOL)
    limit = np.asarray(traj.impulses.limit)[:, 0]
    resting = limit[arrived[0] + 1 :]  # after the arrival step's impact
    np.testing.assert_allclose(resting, H * MASS * G * math.sin(ALPHA), rtol=REST_RTOL)
    np.testing.assert_allclose(limit[: arrived[0] - 1], 0.0, atol=ZERO_TOL)
    assert scene.bodies.limit_rows()[0][:2] == ("stopped rail", "upper")


def test_the_rate_row_is_the_derivative_of_the_coordinate():
    """Between two moving bodies, in a turned pose: d value / dq . v = row . v (planar q' = v)."""
    b = rbd.SceneBuilder(dim=2, gravity=(0.0, 0.0, 0.0))
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.3, 0.2), angle=0.4)
    b.add_body("b", rbd.Sphere(0.1), mass=1.0, position=(-0.2, 0.1), angle=-0.7)
    b.add_joint("slide", "slide", "a", "b", anchor=(0.1, 0.25), axis=(0.6, 0.8))
    scene = b.build()
    q = scene.state.q + jnp.array([0.11, -0.07, 0.5, 0.02, 0.09, -0.3])
    value = lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0][0]
    row = scene.bodies.joint_coordinates(q, scene.system.params)[1][0]
    np.testing.assert_allclose(row, jax.grad(value)(q), rtol=1e-12, atol=1e-14)
    # the coordinate is zero at the built configuration
    assert abs(float(value(scene.state.q))) <= EXACT_TOL


def test_bad_planar_slides_are_named():
    b = rbd.SceneBuilder(dim=2)
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0))
    with pytest.raises(ValueError, match="slide joint in a planar scene needs its axis"):
        b.add_joint("s", "slide", "a", anchor=(0.0, 0.0))
    with pytest.raises(ValueError, match="axis of joint 's'"):
        b.add_joint("s", "slide", "a", anchor=(0.0, 0.0), axis=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="axis must be a nonzero vector"):
        b.add_joint("s", "slide", "a", anchor=(0.0, 0.0), axis=(0.0, 0.0))
    with pytest.raises(ValueError, match="axis applies only to slide joints"):
        b.add_joint("r", "revolute", "a", anchor=(0.0, 0.0), axis=(1.0, 0.0))
    with pytest.raises(ValueError, match="planar joints are supported in 3D scenes only"):
        b.add_joint("p", "planar", "a", anchor=(0.0, 0.0), axis=(1.0, 0.0))


# A cart-pole: the cart on a rail along x, the pole on a hinge at the cart's centre.
CART, POLE, LENGTH, POLE_INERTIA = 1.0, 0.2, 0.6, 0.006  # kg, kg, m (hinge to tip), kg m^2 about the centre
PHI0, SPEED = 1.0, 0.8  # rad, the pole's initial angle from hanging down (towards +x); m/s, the cart's speed
CARTPOLE = """<mujoco model="cart-pole">
  <option timestep="{h}" integrator="Euler" gravity="0 0 -9.81"/>
  <worldbody>
    <body name="cart">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.1 0.05 0.05" mass="{cart}" contype="0" conaffinity="0"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -{length}" size="0.02" contype="0" conaffinity="0"/>
        <inertial pos="0 0 -{half}" mass="{pole}" diaginertia="{inertia} {inertia} {inertia}"/>
      </body>
    </body>
  </worldbody>
  <keyframe><key name="start" qpos="0 {psi}" qvel="{speed} 0"/></keyframe>
</mujoco>
"""


def _cartpole_jaxrbd(h, seconds):
    """The planar cart-pole in the x-y plane (gravity -y): cart x and the pole's angle from hanging down, per step;
    and the trajectory."""
    b = rbd.SceneBuilder(dim=2)
    b.add_body("cart", rbd.Sphere(0.05), mass=CART, position=(0.0, 0.0), velocity=(SPEED, 0.0))
    tip = np.array([math.sin(PHI0), -math.cos(PHI0)])
    b.add_body(
        "pole",
        rbd.Sphere(0.02),
        mass=POLE,
        inertia=POLE_INERTIA,
        position=tip * LENGTH / 2,
        angle=PHI0 - math.pi / 2,
        velocity=(SPEED, 0.0),
    )
    b.add_joint("rail", "slide", "cart", anchor=(0.0, 0.0), axis=(1.0, 0.0))
    b.add_joint("hinge", "revolute", "pole", "cart", anchor=(0.0, 0.0))
    scene = b.build()
    traj = rbd.simulate(*scene, dt=h, steps=round(seconds / h))
    q = np.asarray(traj.q).reshape(-1, 2, 3)
    assert bool(np.all(traj.stats.converged)) and float(np.max(traj.stats.residual)) <= 1e-8
    return q[:, 0, 0], q[:, 1, 2] + math.pi / 2, traj


def _cartpole_mujoco(h, seconds):
    mujoco = pytest.importorskip("mujoco")
    xml = CARTPOLE.format(
        h=h, cart=CART, pole=POLE, length=LENGTH, half=LENGTH / 2, inertia=POLE_INERTIA, psi=-PHI0, speed=SPEED
    )
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("start").id)
    qpos = [d.qpos.copy()]
    for _ in range(round(seconds / h)):
        mujoco.mj_step(m, d)
        qpos.append(d.qpos.copy())
    qpos = np.array(qpos)
    return qpos[:, 0], -qpos[:, 1]  # MuJoCo's hinge turns about +y: the planar angle's opposite


@pytest.mark.slow
def test_a_planar_cart_pole_conserves_rail_momentum_and_follows_mujoco():
    """1 s of a swinging cart-pole: p_x exact; against MuJoCo (Euler) at h and h / 2, the gap halves."""
    seconds, gaps = 1.0, []
    for h in (2e-3, 1e-3):
        x, phi, traj = _cartpole_jaxrbd(h, seconds)
        mx, mphi = _cartpole_mujoco(h, seconds)
        gaps.append(max(np.abs(x - mx).max(), np.abs(phi - mphi).max()))
    v = np.asarray(traj.v).reshape(-1, 2, 3)
    momentum = CART * v[:, 0, 0] + POLE * v[:, 1, 0]
    np.testing.assert_allclose(momentum, (CART + POLE) * SPEED, rtol=0, atol=1e-12)
    assert np.ptp(phi) > 1.0  # the pole swings through the bottom
    print(f"\ncart-pole against MuJoCo: largest gap {gaps[0]:.3e} at h = 2e-3, {gaps[1]:.3e} at h = 1e-3")
    assert gaps[1] <= 1e-2
    assert 1.6 <= gaps[0] / gaps[1] <= 2.4  # first order: both steps are semi-implicit Euler


def test_a_planar_slide_carries_a_motor_a_spring_damper_and_armature():
    """A block on a level rail, pushed by a motor (constant u) against a spring-damper with armature: its
    coordinate follows the step's exact recursion v+ = ((m + a) v + h (gear u - k (x - rest))) / (m + a + h c),
    x+ = x + h v+ (the damper implicit, the spring at the step's start) to 1e-12."""
    k, c, a, rest, gear, u, steps = 40.0, 3.0, 0.5, 0.1, 2.0, 1.5, 100
    b = rbd.SceneBuilder(dim=2)
    b.add_body("block", rbd.Sphere(0.05), mass=MASS, position=(0.0, 0.0), velocity=(0.3, 0.0))
    b.add_joint("rail", "slide", "block", anchor=(0.0, 0.0), axis=(1.0, 0.0))
    b.set_joint_dynamics("rail", stiffness=k, damping=c, rest=rest, armature=a)
    b.add_motor("push", "rail", gear=gear)
    scene = b.build()
    traj = rbd.simulate(*scene, dt=H, steps=steps, controls=jnp.full((steps, 1), u))
    assert bool(np.all(traj.stats.converged)) and float(np.max(traj.stats.residual)) <= 1e-8
    x, v, exact = 0.0, 0.3, [0.0]
    for _ in range(steps):
        v = ((MASS + a) * v + H * (gear * u - k * (x - rest))) / (MASS + a + H * c)
        x += H * v
        exact.append(x)
    np.testing.assert_allclose(np.asarray(traj.q)[:, 0], exact, rtol=0, atol=EXACT_TOL)
    np.testing.assert_allclose(np.asarray(traj.q)[:, 1:], 0.0, atol=EXACT_TOL)  # on the rail, not turning
