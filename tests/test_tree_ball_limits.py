"""A limited ball joint in joint coordinates: one stop on its rotation angle, MuJoCo's ball limit."""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

mujoco = pytest.importorskip("mujoco")

LIMIT_DEG = 30.0
TILT_DEG = 45.0  # the body frame's tilt from the vertical: the capsule hangs at 45 deg where q is the identity
DT = 0.005
MASS, HALF = 1.0, 0.2  # the capsule's mass and half-length: its centre hangs HALF below the pivot
GRAVITY = 9.81

XML = f"""<mujoco>
  <option timestep="{DT}" gravity="0 0 -{GRAVITY}"/>
  <worldbody>
    <body name="link" pos="0 0 1" euler="0 {TILT_DEG} 0">
      <joint name="socket" type="ball" range="0 {LIMIT_DEG}" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0 0 -{2 * HALF}" size="0.02" mass="{MASS}"/>
    </body>
  </worldbody>
</mujoco>"""


def _load():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rbd.load_mjcf(XML, coordinates="joints")


def _integrate(quat, omega, t):
    """quat (x) exp(omega t / 2): the quaternion turned at the body-frame rate omega for time t."""
    angle = np.linalg.norm(omega) * t
    axis = omega / np.linalg.norm(omega)
    dq = np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])
    w1, v1, w2, v2 = quat[0], quat[1:], dq[0], dq[1:]
    return np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])


def test_the_cone_stop_is_the_rotation_angle_and_its_row_is_the_angles_rate():
    """The stop's gap is limit - theta, theta the rotation angle of q (either sign of the quaternion), and its
    normal row J_n v equals d(gap)/dt along q's motion at the body-frame rate v (central differences, 1e-8)."""
    scene = _load()
    system = scene.system
    rng = np.random.default_rng(0)
    for _ in range(5):
        axis = rng.normal(size=3)
        axis /= np.linalg.norm(axis)
        theta = rng.uniform(0.05, 3.0)
        quat = np.concatenate([[math.cos(theta / 2)], math.sin(theta / 2) * axis])
        omega = rng.normal(size=3)
        for sign in (1.0, -1.0):
            q = jnp.asarray(sign * quat)
            record = system.contacts(q)
            gap = float(record.gap[-1])
            assert gap == pytest.approx(math.radians(LIMIT_DEG) - theta, abs=1e-12)
            eps = 1e-6
            plus = float(system.contacts(jnp.asarray(_integrate(sign * quat, omega, eps))).gap[-1])
            minus = float(system.contacts(jnp.asarray(_integrate(sign * quat, omega, -eps))).gap[-1])
            rate = float(record.J_n[-1] @ jnp.asarray(omega))
            assert rate == pytest.approx((plus - minus) / (2 * eps), abs=1e-8)


def _rollout(scene, steps):
    run = jax.jit(lambda: rbd.simulate(scene.system, scene.state, dt=DT, steps=steps))
    return run()


def test_a_capsule_swings_onto_its_cone_and_rests_on_it_beside_mujoco():
    """The capsule starts at the identity (45 deg from the vertical) and swings toward the vertical, which lies
    outside its 30 deg cone: it stops on the cone and rests there, 15 deg from the vertical.

    Against physics: the angle never passes the limit by more than 1e-6 rad, and at rest the stop's impulse
    balances gravity's torque, c_n / h = m g d sin(15 deg) to 1e-6. Against MuJoCo stepping the same file: the
    same motion until the stop is reached (q to 1e-8 over the first steps, MuJoCo's Euler integrator); MuJoCo's
    soft limit rests past the cone, by less as its solver parameters stiffen it, toward jaxrbd's rigid stop.
    """
    scene = _load()
    steps = 400
    traj = _rollout(scene, steps)
    assert bool(np.all(traj.stats.converged))
    q = np.asarray(traj.q)
    theta = _angle(q)
    limit = math.radians(LIMIT_DEG)
    assert theta.max() <= limit + 1e-6
    assert theta[-1] == pytest.approx(limit, abs=1e-6)
    stop = np.asarray(traj.impulses.limit)[-1, 0]
    tilt = math.radians(TILT_DEG - LIMIT_DEG)
    assert stop / DT == pytest.approx(MASS * GRAVITY * HALF * math.sin(tilt), rel=1e-6)

    mj_q = _mujoco_rollout(XML, steps)
    mj_theta = _angle(mj_q)
    free = int(np.argmax(mj_theta > limit - 0.05))  # the steps before either engine is near its stop
    assert free > 10
    np.testing.assert_allclose(q[1 : free + 1], mj_q[:free], atol=1e-8)
    # MuJoCo's limit is soft: its capsule rests past the cone by a sag that its solver parameters set (0.93 deg
    # with the defaults, 0.049 deg with the stiffest below). Stiffened, MuJoCo's rest goes to jaxrbd's.
    sags = []
    for soft in ("", 'solreflimit="0.01 1"', 'solreflimit="0.01 1" solimplimit="0.99 0.99 0.001"'):
        sags.append(_angle(_mujoco_rollout(XML.replace('damping="0.05"', f'damping="0.05" {soft}'), steps))[-1] - limit)
    print(f"\nball cone rest past the limit: jaxrbd {theta[-1] - limit:.2e} rad, MuJoCo {np.round(sags, 6)} rad")
    assert 0 < sags[2] < sags[1] < sags[0] < math.radians(1.0)
    assert sags[2] < math.radians(0.1)


def _angle(q):
    return 2 * np.arctan2(np.linalg.norm(q[:, 1:], axis=1), np.abs(q[:, 0]))


def _mujoco_rollout(xml, steps):
    """MuJoCo's qpos after each of `steps` Euler steps of the file."""
    m = mujoco.MjModel.from_xml_string(xml)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    d = mujoco.MjData(m)
    out = []
    for _ in range(steps):
        mujoco.mj_step(m, d)
        out.append(d.qpos.copy())
    return np.asarray(out)


@pytest.mark.slow
def test_gradients_through_the_cone_stop_equal_central_differences_and_are_finite_at_the_identity():
    """Launched with an out-of-plane spin, the capsule strikes the cone and slides around its rim: d q(T) / d v0
    equals central differences (rtol 1e-6). From rest at the identity, where the stop's axis is undefined
    (theta = 0), the gradient is finite."""
    scene = _load()
    system, state = scene.system, scene.state
    rollout = lambda v0: rbd.simulate(system, rbd.State(state.t, state.q, v0), dt=DT, steps=60)
    final = jax.jit(lambda v0: rollout(v0).q[-1])
    v0 = jnp.array([1.5, -2.0, 0.5])
    assert np.sum(np.asarray(rollout(v0).impulses.limit) > 0) >= 30  # on the rim from step 28 on
    jac = np.asarray(jax.jacrev(final)(v0))
    eps = 1e-6
    for k in range(3):
        e = jnp.zeros(3).at[k].set(eps)
        fd = (np.asarray(final(v0 + e)) - np.asarray(final(v0 - e))) / (2 * eps)
        np.testing.assert_allclose(jac[:, k], fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())
    assert np.all(np.isfinite(np.asarray(jax.jacrev(final)(jnp.zeros(3)))))
