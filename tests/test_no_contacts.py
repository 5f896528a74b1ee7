"""Scenes with no contact pairs: free flight, joints and stops alone, and an MJCF model whose geoms
collide with nothing.

Exact references: the semi-implicit step in free flight gives the discrete parabola
v_n = v_0 + n h g, x_n = x_0 + n h v_0 + h^2 g n (n + 1) / 2 (so d z_n / d vz_0 = n h); a
pendulum resting against its stop takes the impulse h m g L sin(phi) per step. MuJoCo's C
engine steps the same MJCF double pendulum in joint coordinates; both are first-order
integrators, so they agree to O(h).
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
STEPS = 20
EXACT_TOL = 1e-12  # metres: the discrete parabola (sums of 20 terms of order 1)
X0, V0 = np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.5, 2.0])
SCHEMES = {"anitescu_potra": rbd.AnitescuPotra(), "stewart_trinkle": rbd.StewartTrinkle()}

# The pendulum against its stop (as in test_joint_limits.py, without the floor).
STOP_H, STOP_STEPS = 2.5e-3, 300
LENGTH, MASS, PHI0, LIMIT = 1.0, 1.0, 0.8, 0.5
PENETRATION_TOL = 1e-9  # rad
REST_RTOL = 1e-9

# The MJCF double pendulum: geoms with contype = conaffinity = 0, so no contact pair at all.
MJCF_STEPS = 250  # 0.5 s at MuJoCo's timestep 0.002
MJCF_TOL = 0.01  # metres: the bound on body positions against MuJoCo before any contact
DOUBLE_PENDULUM = """
<mujoco model="double pendulum">
  <option timestep="0.002"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="upper" pos="0 0 2">
      <joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.04" mass="1"/>
      <body name="lower" pos="0.5 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.4 0 0.1" size="0.03" mass="0.5"/>
      </body>
    </body>
  </worldbody>
  <keyframe><key name="swing" qpos="0.3 -0.5" qvel="1.0 0"/></keyframe>
</mujoco>
"""


def _thrown(dim):
    b = rbd.SceneBuilder(dim=dim)  # gravity -9.81 along z (planar: along y, the second coordinate)
    if dim == 3:
        b.add_body("ball", rbd.Sphere(0.1), mass=2.0, position=X0, velocity=V0, angular_velocity=(0.0, 3.0, 0.0))
    else:
        b.add_body("ball", rbd.Sphere(0.1), mass=2.0, position=X0[[0, 2]], velocity=V0[[0, 2]])
    return b.build()


@functools.cache
def _final_height(scheme):
    """(vz0) -> the final height of the thrown ball, compiled once per scheme (for the gradient)."""
    system, state = _thrown(3)

    def run(vz0):
        traj = rbd.simulate(
            system, rbd.State(state.t, state.q, state.v.at[2].set(vz0)), dt=H, steps=STEPS, scheme=scheme
        )
        return traj.q[-1, 2]

    return jax.jit(jax.value_and_grad(run))


@pytest.mark.parametrize("dim", [3, 2])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_free_flight_without_contact_pairs_is_the_exact_discrete_parabola(dim, scheme):
    system, state = _thrown(dim)
    assert system.bodies.pair_names == ()
    traj = rbd.simulate(system, state, dt=H, steps=STEPS, scheme=SCHEMES[scheme])
    assert traj.impulses.normal.shape == (STEPS, 0)
    assert bool(traj.stats.converged.all())
    n = np.arange(1, STEPS + 1)
    axes = [0, 1, 2] if dim == 3 else [0, 2]
    g = np.zeros(3)
    g[2] = -G
    exact = X0[axes] + np.outer(n * H, V0[axes]) + np.outer(H * H * n * (n + 1) / 2, g[axes])
    positions = np.asarray(traj.q[1:, :3] if dim == 3 else traj.q[1:, :2])
    np.testing.assert_allclose(positions, exact, rtol=0, atol=EXACT_TOL)
    if dim == 3:  # a sphere keeps its spin: the quaternion turns about y at 3 rad/s, with unit norm
        np.testing.assert_allclose(np.asarray(traj.v[:, 3:]), np.tile([0.0, 3.0, 0.0], (STEPS + 1, 1)), atol=1e-15)
        np.testing.assert_allclose(np.linalg.norm(np.asarray(traj.q[:, 3:7]), axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize(
    "scheme", ["anitescu_potra", pytest.param("stewart_trinkle", marks=pytest.mark.slow)]
)  # a second gradient program is a second compile: the slow set
def test_the_gradient_of_free_flight_is_n_h(scheme):
    height, slope = _final_height(SCHEMES[scheme])(jnp.asarray(V0[2]))
    assert abs(float(height) - (X0[2] + STEPS * H * V0[2] - G * H * H * STEPS * (STEPS + 1) / 2)) <= EXACT_TOL
    np.testing.assert_allclose(float(slope), STEPS * H, rtol=1e-14)


@pytest.mark.slow
def test_a_pendulum_against_its_stop_needs_no_contact_pair():
    """A hinge's stops are the only rows of the contact record: the pendulum stops at the limit and rests there
    with the exact impulse h m g L sin(phi)."""
    b = rbd.SceneBuilder(dim=3, gravity=(0.0, 0.0, -G))
    pivot = np.array([0.0, 0.0, 2.0])
    bob = pivot + LENGTH * np.array([math.sin(PHI0), 0.0, -math.cos(PHI0)])
    b.add_body("bob", rbd.Sphere(0.05), mass=MASS, position=bob)
    b.add_joint("hinge", "revolute", "bob", anchor=pivot, axis=(0, 1, 0), range=(-LIMIT, LIMIT))
    scene = b.build()
    traj = rbd.simulate(*scene, dt=STOP_H, steps=STOP_STEPS)
    assert traj.impulses.normal.shape == (STOP_STEPS, 2)  # the lower and the upper stop
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    angle = np.asarray(jax.vmap(lambda q: scene.bodies.joint_coordinates(q, scene.system.params)[0][0])(traj.q))
    assert angle.max() - LIMIT <= PENETRATION_TOL
    exact = STOP_H * MASS * G * LENGTH * math.sin(PHI0 - LIMIT)
    np.testing.assert_allclose(np.asarray(traj.impulses.limit[-50:, 1]), exact, rtol=REST_RTOL)
    assert np.abs(np.asarray(traj.impulses.limit[:, 0])).max() <= 1e-12  # the lower stop is never touched


def test_contact_sweeps_names_why_it_cannot_run_a_scene_without_contacts():
    with pytest.raises(ValueError, match="no contact pairs"):
        rbd.simulate(*_thrown(3), dt=H, steps=2, step_solver=rbd.ContactSweeps())


def test_an_empty_lcp_is_solved():
    sol = rbd.solve_lcp(jnp.zeros((0, 0)), jnp.zeros((0,)))
    assert sol.z.shape == (0,) and bool(sol.converged) and int(sol.status) == int(rbd.Status.SUCCESS)


def _mujoco_positions(xml, steps, dt=None):
    """(steps + 1, nbody - 1, 3) the centres of mass MuJoCo's C engine steps from the model's first keyframe."""
    mujoco = pytest.importorskip("mujoco")
    m = mujoco.MjModel.from_xml_string(xml)
    if dt is not None:
        m.opt.timestep = dt
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    out = []
    for _ in range(steps + 1):
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        out.append(np.array(d.xipos[1:]))
        mujoco.mj_step(m, d)
    return np.array(out)


def _mjcf_error(dt, steps):
    """The largest distance (m) of a body's centre from MuJoCo's over the run, at time step dt."""
    with pytest.warns(UserWarning, match="geoms that collide with nothing"):
        scene = rbd.load_mjcf(DOUBLE_PENDULUM, keyframe="swing", coordinates="maximal")
    assert scene.bodies.pair_names == ()
    traj = rbd.simulate(*scene, dt=dt, steps=steps)
    assert bool(traj.stats.converged.all())
    ours = np.asarray(traj.q).reshape(steps + 1, 2, 7)[:, :, :3]
    return float(np.abs(ours - _mujoco_positions(DOUBLE_PENDULUM, steps, dt)).max())


@pytest.mark.long  # test_mjcf.py's pendulum beside MuJoCo is in the slow set
def test_an_mjcf_double_pendulum_whose_geoms_never_collide_follows_mujoco_at_first_order():
    """Within 1 cm of MuJoCo over 0.5 s at MuJoCo's own step; both integrators are first order, so at a quarter of
    the step the two trajectories are closer by about 4."""
    coarse, fine = _mjcf_error(0.002, MJCF_STEPS), _mjcf_error(0.0005, 4 * MJCF_STEPS)
    print(f"largest distance from MuJoCo over 0.5 s: h = 0.002 {coarse:.2e} m, h = 0.0005 {fine:.2e} m")
    assert coarse <= MJCF_TOL and fine <= coarse / 2
