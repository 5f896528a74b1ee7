"""Joint springs, dampers and armature (`SceneBuilder.set_joint_dynamics`), against the exact discrete and
continuous oscillator, and against MuJoCo.

A sphere (I = 2/5 m r^2 about every axis) on a hinge at its centre about z, with a spring of stiffness K about the
angle REST, a damper C and armature ARM, spun at W0: gravity acts at the anchor, so the angle obeys
(I + ARM) theta'' = -K (theta - REST) - C theta'. The step takes the spring at the start and the damper at the end
of the step (MuJoCo's Euler integrator), and turns the sphere by the Cayley rotation of the step, so its angle
follows exactly

    (I + ARM + h C) w+ = (I + ARM) w - h K (theta - REST),    theta+ = theta + 2 atan(h w+ / 2),

and the continuous solution to first order in h.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from test_no_contacts import _mujoco_positions

import jaxrbd as rbd
from jaxrbd.bodies import _model as body_fns

RADIUS, MASS, H, STEPS = 0.1, 2.0, 1e-3, 2000
INERTIA = 0.4 * MASS * RADIUS**2
K, C, REST, ARM, W0 = 0.5, 0.01, 0.3, 0.004, 4.0
EXACT_TOL = 1e-12


@functools.cache
def _oscillator():
    """The scene and a compiled map (stiffness, damping, armature) -> the hinge angle at every step, and the
    rollout."""
    b = rbd.SceneBuilder(dim=3)
    b.add_body("ball", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 0.0, 1.0), angular_velocity=(0.0, 0.0, W0))
    b.add_joint("spin", "revolute", "ball", None, anchor=(0.0, 0.0, 1.0), axis=(0.0, 0.0, 1.0))
    b.set_joint_dynamics("spin", stiffness=K, damping=C, rest=REST, armature=ARM)
    scene = b.build()

    @jax.jit
    def run(stiffness, damping, armature, rest=REST):
        jp = lambda s: (
            s.params.joints.stiffness,
            s.params.joints.damping,
            s.params.joints.armature,
            s.params.joints.rest,
        )
        values = tuple(jnp.reshape(x, (1,)) for x in (stiffness, damping, armature, rest))
        system = eqx.tree_at(jp, scene.system, values)
        traj = rbd.simulate(system, scene.state, dt=H, steps=STEPS)
        angle = jax.vmap(lambda q: scene.bodies.joint_coordinates(q, system.params)[0][0])(traj.q)
        return angle, traj

    return scene, run


def _discrete(stiffness, damping, armature, rest=REST):
    theta, w, out, inertia = 0.0, W0, [0.0], INERTIA + armature
    for _ in range(STEPS):
        w = (inertia * w - H * stiffness * (theta - rest)) / (inertia + H * damping)
        theta += 2 * np.arctan(H * w / 2)
        out.append(theta)
    return np.array(out)


def test_a_hinge_with_spring_damper_and_armature_follows_the_exact_discrete_and_continuous_damped_oscillator():
    _, run = _oscillator()
    angle, traj = run(K, C, ARM)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    angle = np.asarray(angle)
    np.testing.assert_allclose(angle, _discrete(K, C, ARM), rtol=0, atol=EXACT_TOL)
    # The continuous solution, underdamped (zeta = 0.065), to first order in h: within wn h of its amplitude.
    t = H * np.arange(STEPS + 1)
    inertia = INERTIA + ARM
    wn, zeta = np.sqrt(K / inertia), C / (2 * np.sqrt(K * inertia))
    wd, x0 = wn * np.sqrt(1 - zeta**2), -REST
    x = REST + np.exp(-zeta * wn * t) * (x0 * np.cos(wd * t) + (W0 + zeta * wn * x0) / wd * np.sin(wd * t))
    amplitude = np.abs(x - REST).max()
    assert np.abs(angle - x).max() <= wn * H * amplitude
    # it decays: by exp(-zeta wn 1.5 s) = 0.53 from the first quarter of the run to the last
    assert np.abs(angle[-STEPS // 4 :] - REST).max() < 0.6 * np.abs(angle[: STEPS // 4] - REST).max()


@settings(max_examples=12, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(
    stiffness=st.floats(10.0, 1e3),
    damping=st.floats(0.0, 1e3),
    armature=st.floats(0.0, 0.1),
    rest=st.floats(-1.0, 1.0),
)
def test_any_spring_damper_and_armature_keep_the_exact_discrete_oscillator(stiffness, damping, armature, rest):
    """Property (hypothesis): for any stiffness, damping and armature (up to 12 times the sphere's inertia) and
    any rest angle, every step converges, nothing is NaN and the angle follows the exact discrete recursion to
    1e-9 rad. The ranges keep the swing inside the hinge angle's window (-pi, pi] (a 3D hinge must not turn past
    it: `SceneBuilder.add_joint`), within 2 |rest| + W0 sqrt((I + armature) / stiffness) < 2.5 rad."""
    _, run = _oscillator()
    angle, traj = run(stiffness, damping, armature, rest)
    assert bool(traj.stats.converged.all()) and bool(np.isfinite(np.asarray(traj.q)).all())
    exact = _discrete(stiffness, damping, armature, rest)
    assert np.abs(exact).max() < 2.5
    np.testing.assert_allclose(np.asarray(angle), exact, rtol=0, atol=1e-9)


@pytest.mark.long  # the gradient compiles the rollout's adjoint; the exact damped oscillators run by default
def test_a_stiff_damper_on_a_light_body_stays_stable_and_gradients_match_finite_differences():
    _, run = _oscillator()
    # h C / I = 12.5: an explicit damper would reverse and grow the spin every step; the implicit one slows it.
    stiff = 100.0
    angle, traj = run(0.0, stiff, 0.0)
    w = np.asarray(traj.v)[:51, 5]  # then it is below 1e-50 rad/s, and soon denormal
    np.testing.assert_allclose(w[1:], W0 * (INERTIA / (INERTIA + H * stiff)) ** np.arange(1, 51), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(angle), _discrete(0.0, stiff, 0.0), rtol=0, atol=EXACT_TOL)
    # d(final angle) / d(stiffness, damping, armature) against central differences (float64), of the rollout and
    # of the exact discrete map.
    final = lambda k, c, a: run(k, c, a)[0][-1]
    grad = jax.grad(final, argnums=(0, 1, 2))(K, C, ARM)
    for i, g in enumerate(grad):
        eps = 1e-6 * (K, C, ARM)[i]
        plus, minus = [K, C, ARM], [K, C, ARM]
        plus[i] += eps
        minus[i] -= eps
        fd = (float(final(*plus)) - float(final(*minus))) / (2 * eps)
        np.testing.assert_allclose(float(g), fd, rtol=1e-6)
        np.testing.assert_allclose(float(g), (_discrete(*plus)[-1] - _discrete(*minus)[-1]) / (2 * eps), rtol=1e-5)


def test_joint_dynamics_refuse_bad_input_naming_it():
    b = rbd.SceneBuilder(dim=3)
    b.add_body("a", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0, 1.0))
    b.add_body("c", rbd.Sphere(0.1), mass=1.0, position=(1.0, 0.0, 1.0))
    b.add_joint("hinge", "revolute", "a", None, anchor=(0.0, 0.0, 1.0), axis=(0.0, 0.0, 1.0))
    b.add_joint("socket", "ball", "c", None, anchor=(1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="damping of joint 'hinge' must be >= 0"):
        b.set_joint_dynamics("hinge", damping=-1.0)
    with pytest.raises(ValueError, match="armature of joint 'hinge' must be >= 0"):
        b.set_joint_dynamics("hinge", armature=-0.1)
    with pytest.raises(ValueError, match="stiffness of joint 'hinge' must be finite"):
        b.set_joint_dynamics("hinge", stiffness=float("inf"))
    with pytest.raises(ValueError, match="joint 'socket' is a ball joint: it takes damping and armature"):
        b.set_joint_dynamics("socket", stiffness=1.0)
    b.add_joint("track", "planar", "c", None, anchor=(1.0, 0.0, 1.0), axis=(0.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="joint 'track' is a 'planar' joint"):
        b.set_joint_dynamics("track", damping=1.0)
    with pytest.raises(ValueError, match="joint must name a joint, got 'elbow'"):
        b.set_joint_dynamics("elbow", damping=1.0)
    b.set_joint_dynamics("hinge", damping=1.0)
    with pytest.raises(ValueError, match="was given its dynamics already"):
        b.set_joint_dynamics("hinge", stiffness=1.0)


def test_a_ball_joints_damper_and_armature_decay_a_spin_exactly():
    """A sphere on a ball joint at its centre, spun about a tilted axis W: with damping C and armature ARM its
    angular velocity keeps its direction and decays by the implicit damper's exact factor each step,
    (I + ARM + h C) w+ = (I + ARM) w, for any axis (the ball joint's damper and armature are isotropic). A second
    sphere on a hinge beside it keeps its own spin: the rows of one joint do not reach the other body."""
    spin = np.array([1.0, -2.0, 0.5])
    b = rbd.SceneBuilder(dim=3)
    b.add_body("ball", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 0.0, 1.0), angular_velocity=spin)
    b.add_body("wheel", rbd.Sphere(RADIUS), mass=MASS, position=(1.0, 0.0, 1.0), angular_velocity=(0.0, 0.0, W0))
    b.add_joint("socket", "ball", "ball", None, anchor=(0.0, 0.0, 1.0))
    b.add_joint("spin", "revolute", "wheel", None, anchor=(1.0, 0.0, 1.0), axis=(0.0, 0.0, 1.0))
    b.set_joint_dynamics("socket", damping=C, armature=ARM)
    scene = b.build()
    steps = 50
    traj = rbd.simulate(*scene, dt=H, steps=steps)
    assert bool(traj.stats.converged.all())
    w = np.asarray(scene.bodies.angular_velocities(traj.v))
    factor = ((INERTIA + ARM) / (INERTIA + ARM + H * C)) ** np.arange(steps + 1)
    np.testing.assert_allclose(w[:, 0], factor[:, None] * spin, rtol=EXACT_TOL, atol=EXACT_TOL)
    np.testing.assert_allclose(w[:, 1], np.tile([0.0, 0.0, W0], (steps + 1, 1)), rtol=0, atol=EXACT_TOL)
    A, B = body_fns.joint_passive(scene.bodies, scene.state.q, scene.system.params)
    nv = scene.state.v.shape[0]
    expect = np.zeros((nv, nv))
    expect[3:6, 3:6] = np.eye(3)  # the ball's angular velocity rows only
    np.testing.assert_allclose(np.asarray(A), ARM * expect, rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(B), C * expect, rtol=0, atol=1e-15)


BALL_PENDULUM = """<mujoco model="ball pendulum">
  <option timestep="{h}"/>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="socket" type="ball" damping="{d}" armature="{a}"/>
      <geom type="capsule" fromto="0 0 0 0.3 0.1 -0.4" size="0.05" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <keyframe><key name="spin" qvel="3 -4 2"/></keyframe>
</mujoco>"""


def _ball_pendulum_centres(xml, steps):
    """(jaxrbd's, MuJoCo's) centre of mass of the link at every step from the keyframe, each at the file's step."""
    with pytest.warns(UserWarning, match="geoms that collide with nothing"):
        scene = rbd.load_mjcf(xml, keyframe="spin", coordinates="maximal")
    traj = rbd.simulate(*scene, dt=scene.dt, steps=steps)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    return np.asarray(traj.q)[:, :3], _mujoco_positions(xml, steps)[:, 0]


@pytest.mark.long  # a ball joint's damper and armature decay a spin exactly in the default set
def test_mjcf_ball_joint_damping_and_armature_move_like_mujoco():
    """A capsule hanging from a ball joint with damping 0.3 and armature 0.02, spun at (3, -4, 2) rad/s, beside
    MuJoCo's Euler over 0.5 s: the damper and armature move MuJoCo's link by 7 cm (against the same file
    without them); jaxrbd's stays within 1% of that, and within half as far at a quarter of the step (both
    first order)."""
    errors = []
    for h in (2e-3, 5e-4):
        steps = round(0.5 / h)
        ours, theirs = _ball_pendulum_centres(BALL_PENDULUM.format(h=h, d=0.3, a=0.02), steps)
        errors.append(float(np.abs(ours - theirs).max()))
        if len(errors) == 1:
            _, bare = _ball_pendulum_centres(BALL_PENDULUM.format(h=h, d=0, a=0), steps)
            effect = float(np.abs(bare - theirs).max())
    print(f"\nball pendulum: largest distance from MuJoCo {errors} m; the damper and armature's effect {effect} m")
    assert effect > 0.05 and errors[0] <= 0.01 * effect and errors[1] <= 0.5 * errors[0]


def _beside_mujoco(xml, steps, keyframe=None, controls=None):
    """(jaxrbd's joint coordinates, MuJoCo's qpos) at every step of `steps` from qpos0 or the keyframe, each at the
    file's timestep, driven by the controls (steps, nu) if given; asserts that every step of jaxrbd's converged."""
    scene = rbd.load_mjcf(xml, keyframe=keyframe, coordinates="maximal")
    traj = rbd.simulate(*scene, dt=scene.dt, steps=steps, controls=controls)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    ours = np.asarray(jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0])(traj.q))
    return ours, _mujoco_qpos(xml, steps, keyframe, controls)


def _mujoco_qpos(xml, steps, keyframe=None, controls=None):
    """MuJoCo's qpos at every step of `steps` (its own timestep) from qpos0 or the keyframe, with d.ctrl = controls[k]
    in step k if given."""
    mujoco = pytest.importorskip("mujoco")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    if keyframe is not None:
        mujoco.mj_resetDataKeyframe(m, d, m.key(keyframe).id)
    qpos = [d.qpos.copy()]
    for k in range(steps):
        if controls is not None:
            d.ctrl[:] = controls[k]
        mujoco.mj_step(m, d)
        qpos.append(d.qpos.copy())
    return np.array(qpos)


PENDULUM = """<mujoco model="spring pendulum">
  <option timestep="0.001"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" stiffness="4" springref="30" damping="0.2" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
    </body>
    <body name="cart" pos="0 1 1">
      <joint name="slide" type="slide" axis="1 0 0" stiffness="50" springref="0.1" damping="2" armature="0.2"/>
      <geom type="box" size="0.05 0.05 0.05" mass="0.5"/>
    </body>
  </worldbody>
</mujoco>"""


@pytest.mark.slow  # MuJoCo beside a rollout of its own
def test_mjcf_stiffness_springref_damping_and_armature_move_like_mujoco():
    """A pendulum on a hinge (stiffness 4 N m/rad about springref 30 degrees, damping 0.2, armature 0.01) and a box
    on a slide (50 N/m about 0.1 m, damping 2, armature 0.2), from rest at qpos0, beside MuJoCo's Euler
    integrator (implicit in the damping too) at the same step over 1 s. The slide's equations are the same discrete ones, and agree to round-off; the
    hinge's angle agrees to first order, within h = 1e-3 of its swing (its rotation is integrated differently)."""
    jp = rbd.load_mjcf(PENDULUM, coordinates="maximal").system.params.joints
    np.testing.assert_allclose(np.asarray(jp.rest), [np.radians(30.0), 0.1], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jp.armature), [0.01, 0.2], rtol=1e-12)
    ours, theirs = _beside_mujoco(PENDULUM, 1000)
    swing = np.abs(theirs - theirs[0]).max(axis=0)
    error = np.abs(ours - theirs).max(axis=0)
    print(f"\nspring pendulum: swing {swing}, largest difference from MuJoCo {error}")
    assert np.all(swing > 0.1) and error[0] <= 1e-3 * swing[0] and error[1] <= 1e-12


TURNING_ARM = """<mujoco model="turning arm">
  <option timestep="{h}"/>
  <worldbody>
    <body name="base" pos="0 0 1">
      <joint name="yaw" type="hinge" axis="0 0 1" armature="{yaw}" damping="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="1"/>
      <body name="arm" pos="0.2 0 0">
        <joint name="pitch" type="hinge" axis="1 0 0" armature="{pitch}" damping="0.01"/>
        <geom type="capsule" fromto="0 0 0 0 0.3 0" size="0.02" mass="0.5"/>
        <body name="slider" pos="0 0.3 0">
          <joint name="reach" type="slide" axis="0 1 0" armature="{reach}" damping="0.1" stiffness="20"/>
          <geom type="box" size="0.03 0.03 0.03" mass="0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
  <keyframe><key name="spin" qvel="5 2 0.5"/></keyframe>
</mujoco>"""


@pytest.mark.long
def test_armature_on_joints_carried_by_turning_bodies_moves_like_mujoco():
    """A yaw hinge carries a pitch hinge, which carries a slide along the arm (with a spring), all with armature
    and damping, spun at 5 and 2 rad/s and 0.5 m/s, beside MuJoCo's Euler over 1 s. The armature's momentum
    a R v changes as the axes turn (the term a Rdot v: without it the slide and the yaw end as far from MuJoCo
    as MuJoCo without armature is). The coordinates agree to first order: at h = 1e-3 within 2% of how far the
    armature moves them (MuJoCo without armature), and half as far at h / 2."""
    errors = []
    # jaxrbd's 3D hinge angles lie in (-pi, pi]; the slide is in metres
    apart = lambda x, y: np.abs(np.concatenate([np.angle(np.exp(1j * (x - y)))[:, :2], (x - y)[:, 2:]], 1)).max(0)
    for h in (1e-3, 5e-4):
        xml, bare = (TURNING_ARM.format(h=h, yaw=a, pitch=b, reach=c) for a, b, c in ((0.05, 0.02, 0.5), (0, 0, 0)))
        ours, theirs = _beside_mujoco(xml, round(1.0 / h), keyframe="spin")
        errors.append(apart(ours, theirs))
        if len(errors) == 1:
            effect = apart(_mujoco_qpos(bare, round(1.0 / h), keyframe="spin"), theirs)
    print(f"\nturning arm: largest difference from MuJoCo {errors} (rad, rad, m); armature's effect {effect}")
    assert np.all(errors[0] <= 0.02 * effect) and np.all(errors[1] <= 0.55 * errors[0])


TILTED_ARM = """<mujoco model="tilted arm">
  <option timestep="{h}"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="yaw" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0.3" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator><motor joint="yaw" gear="1"/></actuator>
</mujoco>"""


@pytest.mark.slow  # MuJoCo beside two rollouts of their own
def test_a_driven_arm_turns_like_mujoco_at_second_order():
    """A capsule tilted off its vertical hinge, its centre 0.25 m from the axis, turned by 1 N m from rest for 1 s
    (to about 11 rad/s), beside MuJoCo's Euler, whose generalized coordinates keep the rotation exact. jaxrbd's
    maximal coordinates hold the hinge by rows; with their curvature offsets (`jaxrbd.dynamics.joint_curvature`)
    the angle agrees to second order: within 1e-3 rad at h = 1e-3, and at h / 2 within 0.3 of that (a
    quarter). (Rows J v+ = 0 alone lose a fraction (h w)^2 of the arm's kinetic energy per step: they ended
    2.5e-2 rad behind at h = 1e-3, and 1.2e-2 at h / 2.)"""
    errors = []
    for h in (1e-3, 5e-4):
        steps = round(1.0 / h)
        ours, theirs = _beside_mujoco(TILTED_ARM.format(h=h), steps, controls=np.ones((steps, 1)))
        errors.append(float(np.abs(np.angle(np.exp(1j * (ours[-1, 0] - theirs[-1, 0]))))))
        turned = theirs[-1, 0]
    print(f"\ntilted arm: turned {turned:.4f} rad; final angle from MuJoCo's {errors} rad")
    assert turned > 5.0 and errors[0] <= 1e-3 and errors[1] <= 0.3 * errors[0]


DRIVEN = """<mujoco model="driven pendulum and cart">
  <option timestep="0.001"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 0 1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="20"/>
    </body>
    <body name="cart" pos="0 1 1">
      <joint name="slide" type="slide" axis="1 0 0" stiffness="50" damping="2"/>
      <geom type="box" size="0.05 0.05 0.05" mass="0.5"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="swing" joint="hinge" gear="2" {limits}/>
    <motor name="pull" joint="slide" gear="3" {limits}/>
  </actuator>
</mujoco>"""


@pytest.mark.slow  # MuJoCo beside two rollouts of their own
def test_mjcf_motor_ctrlrange_and_forcerange_clip_like_mujoco():
    """Two motors (gear 2 on a vertical hinge, 3 on a slide with a spring and damper) with ctrlrange [-1, 1] and forcerange
    [-0.6, 0.8], driven by 2 sin(6 pi t) and 1.5 cos(4 pi t) for 1 s, so that each range binds in turn, beside MuJoCo's
    Euler at the same step. The slide's equations are MuJoCo's own discrete ones and agree to round-off; the hinge
    agrees to first order (its rotation is integrated differently: in maximal coordinates each step's joint rows
    take out a fraction of order (h omega)^2 of the arm's kinetic energy, so the arm is heavy and turns slowly). Without the ranges MuJoCo's motion differs by
    far more, so the clipping is what is compared."""
    limits = 'ctrllimited="true" ctrlrange="-1 1" forcelimited="true" forcerange="-0.6 0.8"'
    xml = DRIVEN.format(limits=limits)
    mp = rbd.load_mjcf(xml, coordinates="maximal").system.params.motors
    np.testing.assert_allclose(np.asarray(mp.ctrl_range), [[-1, 1], [-1, 1]], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(mp.force_range), [[-1.2, 1.6], [-1.8, 2.4]], rtol=1e-12)
    t = 1e-3 * np.arange(1000)
    controls = np.stack([2 * np.sin(6 * np.pi * t), 1.5 * np.cos(4 * np.pi * t)], axis=-1)
    ours, theirs = _beside_mujoco(xml, 1000, controls=jnp.asarray(controls))
    unclipped = _mujoco_qpos(DRIVEN.format(limits=""), 1000, controls=controls)
    swing = np.abs(theirs - theirs[0]).max(axis=0)
    difference = ours - theirs
    difference[:, 0] = np.angle(np.exp(1j * difference[:, 0]))  # jaxrbd's hinge angle without a range is in (-pi, pi]
    error = np.abs(difference).max(axis=0)
    effect = np.abs(unclipped - theirs).max(axis=0)
    print(
        f"\ndriven pendulum and cart: swing {swing}, largest difference from MuJoCo {error}, the ranges' effect {effect}"
    )
    assert np.all(effect > 0.1 * swing) and error[0] <= 1e-3 * swing[0] and error[1] <= 1e-12


TWISTED = """<mujoco model="twisted ball pendulum">
  <option timestep="{h}"/>
  <worldbody>
    <body name="link" pos="0 0 1" quat="0.9 0.3 -0.2 0.25">
      <joint name="socket" type="ball"/>
      <geom type="capsule" fromto="0 0 0 0.3 0.1 -0.4" size="0.05" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="twist" joint="socket" gear="0.3 -0.2 0.5 0 0 0" {limits}/>
  </actuator>
</mujoco>"""


def _twisted_centres(h, driven):
    """(jaxrbd's, MuJoCo's) centre of the TWISTED link over 0.5 s at step h, its motor driven by 2 sin(5 pi t)
    (or not at all: only MuJoCo's)."""
    limits = 'ctrllimited="true" ctrlrange="-1 1" forcelimited="true" forcerange="-0.8 0.6"'
    xml = TWISTED.format(h=h, limits=limits)
    steps = round(0.5 / h)
    controls = driven * 2 * np.sin(5 * np.pi * h * np.arange(steps))[:, None]
    mujoco = pytest.importorskip("mujoco")
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    theirs = []
    for k in range(steps + 1):
        mujoco.mj_kinematics(m, d)
        theirs.append(np.array(d.xipos[1]))
        if k < steps:
            d.ctrl[:] = controls[k]
            mujoco.mj_step(m, d)
    if not driven:
        return None, np.array(theirs)
    with pytest.warns(UserWarning, match="geoms that collide with nothing"):
        scene = rbd.load_mjcf(xml, coordinates="maximal")
    mp = scene.system.params.motors
    np.testing.assert_allclose(np.asarray(mp.direction), [[0.3, -0.2, 0.5]], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(mp.force_range), [[-0.8, 0.6]], rtol=1e-12)
    traj = rbd.simulate(*scene, dt=scene.dt, steps=steps, controls=jnp.asarray(controls))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    return np.asarray(traj.q)[:, :3], np.array(theirs)


@pytest.mark.slow  # MuJoCo beside two rollouts of their own
def test_mjcf_motor_on_a_ball_joint_moves_like_mujoco():
    """A capsule hanging tilted from a ball joint, twisted by a motor whose gear (0.3, -0.2, 0.5) is the torque's
    direction in the link's frame, with ctrlrange [-1, 1] and forcerange [-0.8, 0.6], driven by 2 sin(5 pi t) for
    0.5 s, beside MuJoCo's Euler. The two integrators differ at first order: at h = 1e-3 the link's centre is
    4.6 mm from MuJoCo's, where the motor moves MuJoCo's by 1.8 cm, and at a quarter of the step the distance
    falls to a quarter (1.1 mm). The torque taken in the world frame (the parent's here) instead is 3.7 cm from
    MuJoCo's at h = 1e-3 (scratch)."""
    errors = []
    for h in (1e-3, 2.5e-4):
        ours, theirs = _twisted_centres(h, driven=True)
        errors.append(float(np.abs(ours - theirs).max()))
        if len(errors) == 1:
            effect = float(np.abs(_twisted_centres(h, driven=False)[1] - theirs).max())
    print(f"\nball joint motor: largest distance from MuJoCo {errors} m; the motor's effect {effect} m")
    assert effect > 0.015 and errors[0] <= 0.3 * effect and errors[1] <= 0.3 * errors[0]


def _damped_sphere(damping, origin=(0.0, 0.0, 0.0), steps=50):
    """A sphere in free flight (no gravity) with a free-body damper, thrown at V and spun at W."""
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, 0.0))
    b.add_body("ball", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 0.0, 1.0), velocity=V, angular_velocity=W)
    b.set_body_damping("ball", damping, origin=origin)
    scene = b.build()
    return scene, rbd.simulate(*scene, dt=H, steps=steps)


V, W = np.array([1.0, -0.5, 2.0]), np.array([1.0, -2.0, 0.5])


@pytest.mark.slow  # the ball joint's damper and armature stay in the default set
def test_a_free_body_damper_slows_a_sphere_by_the_implicit_factors_and_acts_on_its_origin():
    """MuJoCo's free-joint damper (`set_body_damping`) on a sphere in free flight, damped at its centre: each step
    takes the damper at its end, so the velocity falls by m / (m + h c) and the spin by I / (I + h c), exactly. With
    the damped point off the centre (r = R origin), a turn about that point (v = -w x r, the point at rest) meets
    only the spin's damper: B (v, w) = (0, c w). d(final speed)/d(damping) matches central differences."""
    steps = 50
    scene, traj = _damped_sphere(C, steps=steps)
    assert bool(traj.stats.converged.all())
    k = np.arange(steps + 1)[:, None]
    v, w = (
        np.asarray(scene.bodies.linear_velocities(traj.v))[:, 0],
        np.asarray(scene.bodies.angular_velocities(traj.v))[:, 0],
    )
    np.testing.assert_allclose(v, (MASS / (MASS + H * C)) ** k * V, rtol=EXACT_TOL, atol=EXACT_TOL)
    np.testing.assert_allclose(w, (INERTIA / (INERTIA + H * C)) ** k * W, rtol=EXACT_TOL, atol=EXACT_TOL)
    origin = np.array([0.03, -0.02, 0.05])
    offset, _ = _damped_sphere(C, origin=origin, steps=1)
    quat = jnp.array([np.cos(0.4), np.sin(0.4) * 0.6, 0.0, np.sin(0.4) * 0.8])
    q = offset.state.q.at[3:7].set(quat)
    r = np.asarray(rbd._rotation.to_matrix(quat)) @ origin
    B = np.asarray(body_fns.passive(offset.bodies, q, offset.system.params)[1])
    np.testing.assert_allclose(
        B @ np.concatenate([-np.cross(W, r), W]), np.concatenate([np.zeros(3), C * W]), atol=1e-15
    )
    np.testing.assert_allclose(B, B.T, atol=1e-15)

    def speed(damping):
        system = eqx.tree_at(lambda s: s.params.body_damping, scene.system, jnp.asarray([damping]))
        return jnp.linalg.norm(rbd.simulate(system, scene.state, dt=H, steps=20).v[-1, :3])

    eps = 1e-6
    fd = (speed(C + eps) - speed(C - eps)) / (2 * eps)
    np.testing.assert_allclose(float(jax.grad(speed)(C)), float(fd), rtol=1e-7)


@functools.cache
def _damped_box():
    """A box in free flight (no gravity) with a free-body damper, and a jitted 40-step rollout of it for any
    damping, damped point, velocity and spin (compiled once)."""
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, 0.0))
    b.add_body("box", rbd.Box((0.3, 0.1, 0.05)), mass=MASS, position=(0.0, 0.0, 1.0))
    b.set_body_damping("box", 1.0)
    scene = b.build()

    @jax.jit
    def run(damping, origin, v, w):
        system = eqx.tree_at(
            lambda s: (s.params.body_damping, s.params.damping_origin), scene.system, (damping[None], origin[None])
        )
        state = eqx.tree_at(lambda s: s.v, scene.state, jnp.concatenate([v, w]))
        traj = rbd.simulate(system, state, dt=0.01, steps=40)
        return traj, jax.vmap(system.energy)(traj.q, traj.v)

    return run


vectors = lambda bound: st.tuples(*[st.floats(-bound, bound)] * 3).map(np.array)


@settings(max_examples=12, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(damping=st.floats(0.0, 100.0), origin=vectors(0.3), v=vectors(5.0), w=vectors(20.0))
def test_any_free_body_damper_only_takes_energy_away(damping, origin, v, w):
    """Property (hypothesis): a tumbling box (principal moments 1 : 7.4 : 8) with any damping up to 100,
    damped at any point within 0.3 m of its centre, thrown and spun at any velocity: every step converges,
    nothing is NaN, and the kinetic energy never rises (the torque-free step keeps it; the implicit damper
    removes c |T v+|^2 h and more), to round-off."""
    traj, energy = _damped_box()(*(jnp.asarray(x, float) for x in (damping, origin, v, w)))
    energy = np.asarray(energy)
    assert bool(traj.stats.converged.all()) and bool(np.isfinite(np.asarray(traj.q)).all())
    assert np.all(np.diff(energy) <= 1e-12 * energy[0] + 1e-15)


def test_free_body_dampers_refuse_bad_input_naming_it():
    b = rbd.SceneBuilder(dim=3)
    b.add_body("ball", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 0.0, 1.0))
    b.add_static("floor", rbd.Plane())
    with pytest.raises(ValueError, match="body must name a moving body, got 'floor'"):
        b.set_body_damping("floor", 1.0)
    with pytest.raises(ValueError, match="damping of body 'ball' must be >= 0"):
        b.set_body_damping("ball", -1.0)
    with pytest.raises(ValueError, match="origin of body 'ball'"):
        b.set_body_damping("ball", 1.0, origin=(0.0, 0.0))
    b.set_body_damping("ball", 1.0)
    with pytest.raises(ValueError, match="was given its damper already"):
        b.set_body_damping("ball", 2.0)
    with pytest.raises(ValueError, match="does not support free-body dampers"):
        rbd.simulate(*b.build(), dt=H, steps=1, step_solver=rbd.ContactSweeps())
    planar = rbd.SceneBuilder(dim=2)
    planar.add_body("disk", rbd.Sphere(RADIUS), mass=MASS, position=(0.0, 1.0))
    with pytest.raises(ValueError, match="free-body dampers are for 3D scenes"):
        planar.set_body_damping("disk", 1.0)


FREE_BOX = """<mujoco model="damped free box">
  <option timestep="{h}"/>
  <worldbody>
    <body name="box" pos="0 0 2">
      <joint name="free" type="free" damping="{d}"/>
      <geom type="box" size="0.1 0.05 0.2" pos="0.15 0.05 -0.1" mass="1" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <keyframe><key name="throw" qpos="0 0 2 1 0 0 0" qvel="1 0 2 3 -4 2"/></keyframe>
</mujoco>"""


@pytest.mark.slow  # MuJoCo beside four rollouts of their own
def test_mjcf_free_joint_damping_moves_like_mujoco():
    """A box thrown and spun on a free joint with damping 2, its body frame's origin 19 cm from its centre of
    mass (MuJoCo damps that point's velocity and the local spin), beside MuJoCo's Euler over 0.5 s. The damper's
    effect (the centre's path with it minus the path without it, in each simulator) is 23 cm in MuJoCo; jaxrbd's
    effect matches it to 1% of that, and to a third as much at a quarter of the step (first order). The paths
    themselves differ by the free flight's own discretization (MuJoCo's Euler rotation against jaxrbd's
    energy-momentum step, 2.1 mm without the damper at h = 2e-3)."""
    mismatch = []
    for h in (2e-3, 5e-4):
        steps = round(0.5 / h)
        xml = FREE_BOX.format(h=h, d=2.0)
        with pytest.warns(UserWarning, match="geoms that collide with nothing"):
            scene = rbd.load_mjcf(xml, keyframe="throw", coordinates="maximal")
        assert float(scene.system.params.body_damping[0]) == 2.0
        traj = rbd.simulate(*scene, dt=scene.dt, steps=steps)
        bare = eqx.tree_at(lambda s: s.params.body_damping, scene.system, jnp.zeros(1))
        traj_bare = rbd.simulate(bare, scene.state, dt=scene.dt, steps=steps)
        assert bool(traj.stats.converged.all()) and bool(traj_bare.stats.converged.all())
        ours = np.asarray(traj.q)[:, :3] - np.asarray(traj_bare.q)[:, :3]
        theirs = _mujoco_positions(xml, steps)[:, 0] - _mujoco_positions(FREE_BOX.format(h=h, d=0), steps)[:, 0]
        mismatch.append(float(np.abs(ours - theirs).max()))
        effect = float(np.abs(theirs).max())
    print(f"\nfree box: the damper's effect {effect} m in MuJoCo; jaxrbd's differs from it by {mismatch} m")
    assert effect > 0.1 and mismatch[0] <= 0.01 * effect and mismatch[1] <= 0.3 * mismatch[0]
