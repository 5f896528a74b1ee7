"""MJCF import (`rbd.load_mjcf`): against hand-built scenes, MuJoCo's C engine and MuJoCo's kinematics."""

import sys
import warnings

import jax
import jax.numpy as jnp
import mujoco  # in the [test] extra: these tests compare with MuJoCo itself
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import _rotation as rot

# Same structure, same leaves up to MuJoCo's eigen-decomposition of the inertia (round-off).
SAME_TOL = 1e-12
# The trajectories of identical systems: round-off, amplified by a few contact steps.
TRAJ_TOL = 1e-9

BOX_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.3"/>
    <body name="box" pos="0.1 -0.2 0.4" quat="0.96 0.1 0.2 0.15">
      <freejoint/>
      <geom type="box" size="0.1 0.15 0.05" mass="2" friction="0.6"/>
    </body>
  </worldbody>
</mujoco>
"""


# One compiled rollout serves the box and the cube below: the same layout (a box named "box" over a
# plane named "floor"); sizes, masses, dt and the state are its inputs.
STEPS = 40
_rollout = jax.jit(lambda system, state, dt: rbd.simulate(system, state, dt=dt, steps=STEPS))


def test_box_on_plane_equals_the_hand_built_scene():
    scene = rbd.load_mjcf(BOX_XML, coordinates="maximal")
    b = rbd.SceneBuilder(mu=0.6)  # MuJoCo's rule: the larger of 0.3 and 0.6
    b.add_static("floor", rbd.Plane())
    quat = np.array([0.96, 0.1, 0.2, 0.15]) / np.linalg.norm([0.96, 0.1, 0.2, 0.15])
    b.add_body("box", rbd.Box((0.1, 0.15, 0.05)), mass=2.0, position=(0.1, -0.2, 0.4), orientation=quat)
    hand = b.build()
    assert scene.dt == 0.01
    assert scene.bodies.pair_names == hand.bodies.pair_names
    for got, want in [
        (scene.system.params.mass, hand.system.params.mass),
        (scene.system.params.inertia, hand.system.params.inertia),
        (scene.system.params.gravity, hand.system.params.gravity),
        (scene.system.mu, hand.system.mu),
        (scene.state.q, hand.state.q),
        (scene.state.v, hand.state.v),
    ]:
        np.testing.assert_allclose(got, want, rtol=0, atol=SAME_TOL)
    a, h = _rollout(*scene, scene.dt), _rollout(*hand, scene.dt)
    assert bool(jnp.all(a.stats.converged))
    assert float(a.q[-1, 2]) < 0.1  # it landed
    np.testing.assert_allclose(a.q, h.q, rtol=0, atol=TRAJ_TOL)
    np.testing.assert_allclose(a.v, h.v, rtol=0, atol=TRAJ_TOL)


CUBE_XML = """
<mujoco>
  <option timestep="0.01"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="box" pos="0 0 2">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1"/>
    </body>
  </worldbody>
  <keyframe><key name="thrown" qpos="0 0 2 1 0 0 0" qvel="1 0.5 2 3 -4 5"/></keyframe>
</mujoco>
"""


def test_free_flight_agrees_with_mujoco():
    """A spinning cube thrown up, 0.4 s of flight (it lands after about 1.1 s), against mj_step.

    Both engines integrate the translation by semi-implicit Euler (v+ = v + h g,
    x+ = x + h v+), so the centre agrees to round-off. A cube's inertia is
    isotropic, so it keeps its angular velocity w; MuJoCo turns it by h |w| per
    step, jaxrbd by the Cayley rotation, 2 atan(h |w| / 2): the angle differs by
    (h |w|)^3 / 12 per step (to leading order).
    """
    steps = STEPS
    scene = rbd.load_mjcf(CUBE_XML, keyframe="thrown", coordinates="maximal")
    traj = _rollout(*scene, scene.dt)
    m = mujoco.MjModel.from_xml_string(CUBE_XML)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    qpos = [d.qpos.copy()]
    for _ in range(steps):
        mujoco.mj_step(m, d)
        qpos.append(d.qpos.copy())
    qpos = np.array(qpos)
    ours = np.asarray(scene.to_mujoco_qpos(traj.q))
    assert d.ncon == 0
    np.testing.assert_allclose(ours[:, :3], qpos[:, :3], rtol=0, atol=1e-12)
    hw = m.opt.timestep * np.linalg.norm([3, -4, 5])
    bound = steps * hw**3 / 12
    angle = np.asarray(rot.rotation_angle(jnp.asarray(ours[-1, 3:]), jnp.asarray(qpos[-1, 3:])))
    assert angle <= 1.01 * bound + 1e-12, (angle, bound)
    # The spin is about w itself, so the local angular velocity is the same; 1e-10: round-off of the rates.
    np.testing.assert_allclose(scene.to_mujoco_qvel(traj.q[-1], traj.v[-1]), d.qvel, rtol=0, atol=1e-10)


PENDULUM_XML = """
<mujoco>
  <option timestep="{dt}" integrator="RK4"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1" pos="0 0 -3"/>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-90 90"/>
      <geom type="capsule" fromto="0 0 0 0 0 -1" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <keyframe><key name="start" qpos="0.6"/></keyframe>
</mujoco>
"""


def _pendulum_error(dt, duration=1.0):
    """max |theta_jaxrbd - theta_mujoco| over `duration` of a frictionless swing (amplitude 0.6 rad)."""
    xml = PENDULUM_XML.format(dt=dt)
    scene = rbd.load_mjcf(xml, keyframe="start", coordinates="maximal")
    steps = round(duration / dt)
    traj = rbd.simulate(*scene, dt=dt, steps=steps)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    theta = [d.qpos[0]]
    for _ in range(steps):
        mujoco.mj_step(m, d)
        theta.append(d.qpos[0])
    ours = np.asarray(scene.to_mujoco_qpos(traj.q))[:, 0]
    assert np.all(np.abs(ours) < np.pi / 2)  # the range is never reached: no contact, no stop
    return np.max(np.abs(ours - np.array(theta)))


@pytest.mark.slow
def test_pendulum_agrees_with_mujoco_and_converges():
    """A hinged capsule (joint rows, no contact) against MuJoCo's RK4 (error O(h^4): the reference).

    jaxrbd's step is first order, so the difference is O(h) (measured 2.1e-3 rad at
    h = 2e-3 over 1 s, about h times the swing's angular speed scale) and halves
    when h halves; a wrong inertia, anchor or gravity would not shrink with h.
    """
    e1 = _pendulum_error(0.002)
    e2 = _pendulum_error(0.001)
    assert e1 < 3e-3, e1
    assert 0.45 < e2 / e1 < 0.55, (e1, e2)


# Spheres that touch only the floor (contype 2 & conaffinity 1 = 0 between them): the builder compiles
# contact functions per kind pair and pair, and this test is about the maps.
CHAIN_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="base" pos="0.1 0.2 1" quat="0.9 0.1 0.2 0.3">
      <freejoint/>
      <geom contype="2" type="sphere" size="0.1" pos="0.05 0 0"/>
      <geom contype="2" type="sphere" size="0.05" pos="0 0 0.3"/>
    </body>
    <body name="arm" pos="0 0 2">
      <joint name="h" type="hinge" axis="0 1 0" range="-60 60" pos="0 0 0.3" ref="10"/>
      <geom contype="2" type="sphere" size="0.05" pos="0 0 -0.2"/>
      <body name="slider" pos="0 0 -0.7">
        <joint name="s" type="slide" axis="1 0 0"/>
        <geom contype="2" type="sphere" size="0.05"/>
        <body name="tip" pos="0 0 -0.3">
          <joint name="b" type="ball"/>
          <geom contype="2" type="sphere" size="0.05" pos="0.1 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator><motor name="drive" joint="h" gear="2"/></actuator>
  <keyframe>
    <key name="k" qpos="0 0 1 1 0 0 0 0.5 0.1 0.9 0.1 0.2 0.3" qvel="1 2 3 0.1 0.2 0.3 0.4 0.5 1 2 3"/>
  </keyframe>
</mujoco>
"""


@pytest.mark.slow
def test_state_maps_round_trip_and_match_mujoco_kinematics():
    m = mujoco.MjModel.from_xml_string(CHAIN_XML)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    mujoco.mj_forward(m, d)
    scene = rbd.load_mjcf(CHAIN_XML, keyframe="k", coordinates="maximal")
    q, v = scene.state.q, scene.state.v
    np.testing.assert_allclose(scene.bodies.positions(q), d.xipos[1:], atol=SAME_TOL)
    np.testing.assert_allclose(scene.bodies.orientations(q), d.xquat[1:], atol=SAME_TOL)
    for k in range(m.nbody - 1):  # MuJoCo's (angular, linear) velocity at the centre of mass, world frame
        res = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, k + 1, res, 0)
        np.testing.assert_allclose(v[6 * k : 6 * k + 6], np.concatenate([res[3:], res[:3]]), atol=SAME_TOL)
    np.testing.assert_allclose(scene.to_mujoco_qpos(q), d.qpos, atol=SAME_TOL)
    np.testing.assert_allclose(scene.to_mujoco_qvel(q, v), d.qvel, atol=SAME_TOL)
    np.testing.assert_allclose(scene.from_mujoco_qpos(d.qpos), q, atol=SAME_TOL)
    state = scene.from_mujoco(d.qpos, d.qvel)
    np.testing.assert_allclose(state.v, v, atol=SAME_TOL)
    batch = jnp.stack([q, q])  # leading axes
    assert scene.to_mujoco_qpos(batch).shape == (2, m.nq)
    # The hinge's range is in qpos units (ref = 10 degrees), its jaxrbd stops relative to the initial angle.
    lo, hi = np.deg2rad([-60, 60])
    np.testing.assert_allclose(scene.system.params.joints.lower[0], lo - 0.5, atol=SAME_TOL)
    np.testing.assert_allclose(scene.system.params.joints.upper[0], hi - 0.5, atol=SAME_TOL)
    assert scene.motors == ("drive",)
    np.testing.assert_allclose(scene.system.params.motors.gear, [2.0])


FILTER_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="ghost" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1" contype="2" conaffinity="2"/></body>
    <body name="a" pos="1 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
    <body name="b" pos="2 0 1"><freejoint/><geom type="box" size="0.1 0.1 0.1" contype="3" conaffinity="1"/></body>
    <body name="c" pos="3 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
  </worldbody>
  <contact><exclude body1="a" body2="c"/></contact>
</mujoco>
"""


def test_contype_conaffinity_and_exclude_are_respected():
    m = mujoco.MjModel.from_xml_string(FILTER_XML)
    d = mujoco.MjData(m)
    scene = rbd.load_mjcf(FILTER_XML, coordinates="maximal")
    pairs = {frozenset(p) for p in scene.bodies.pair_names}
    # What MuJoCo's filter says, pair by pair: ghost (2, 2) meets only b (3, 1), through 2 & 3; a and c excluded.
    expect = {
        frozenset(p) for p in [("a", "floor"), ("b", "floor"), ("c", "floor"), ("ghost", "b"), ("a", "b"), ("b", "c")]
    }
    assert pairs == expect
    # MuJoCo agrees: place every pair in contact and list what its collision finds.
    for g1 in range(m.ngeom):
        for g2 in range(g1 + 1, m.ngeom):
            names = frozenset("floor" if m.geom_bodyid[g] == 0 else m.body(m.geom_bodyid[g]).name for g in (g1, g2))
            if "floor" in names:
                continue
            mujoco.mj_resetData(m, d)
            b1, b2 = m.geom_bodyid[g1], m.geom_bodyid[g2]
            d.qpos[m.jnt_qposadr[m.body_jntadr[b1]] : m.jnt_qposadr[m.body_jntadr[b1]] + 3] = (0, 0, 1)
            d.qpos[m.jnt_qposadr[m.body_jntadr[b2]] : m.jnt_qposadr[m.body_jntadr[b2]] + 3] = (0.05, 0, 1)
            for other in set(range(1, m.nbody)) - {b1, b2}:
                d.qpos[m.jnt_qposadr[m.body_jntadr[other]] : m.jnt_qposadr[m.body_jntadr[other]] + 3] = (
                    5 * other,
                    5,
                    3,
                )
            mujoco.mj_forward(m, d)
            assert (d.ncon > 0) == (names in pairs), names


GHOST_XML = """
<mujoco>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="ball" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
    <body name="arm" pos="2 0 1">
      <joint type="hinge" axis="1 0 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.7" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_a_body_whose_geoms_collide_with_nothing_carries_them_without_contacts():
    m = mujoco.MjModel.from_xml_string(GHOST_XML)
    with pytest.warns(UserWarning, match="collide with nothing"):
        scene = rbd.load_mjcf(GHOST_XML, coordinates="maximal")
    assert scene.bodies.names == ("ball", "arm")
    assert all("arm" not in pair for pair in scene.bodies.pair_names)
    assert {frozenset(p) for p in scene.bodies.pair_names} == {frozenset(("ball", "floor"))}
    np.testing.assert_allclose(scene.system.params.mass, m.body_mass[1:], rtol=0, atol=SAME_TOL)


def test_missing_mujoco_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco", None)
    with pytest.raises(ImportError, match=r"pip install jaxrbd\[mjcf\]"):
        rbd.load_mjcf(BOX_XML, coordinates="maximal")


MESH_XML = """<mujoco><asset><mesh name="tet" vertex="0 0 0 1 0 0 0 1 0 0 0 1 0.2 0.2 0.2"/></asset><worldbody>
  <geom type="plane" size="1 1 0.1"/>
  <body name="rock" pos="0.3 0 1" quat="0.9 0.3 0.1 0.2"><freejoint/><geom name="rockgeom" type="mesh" mesh="tet"/></body>
</worldbody></mujoco>"""


def test_mesh_geom_is_its_convex_hull_where_mujoco_puts_it():
    """MuJoCo collides a mesh as its convex hull: a ConvexMesh with the same world vertices; a warning names the mesh."""
    with pytest.warns(UserWarning, match=r"non-convex mesh geoms .*\['rockgeom'\]"):
        scene = rbd.load_mjcf(MESH_XML, coordinates="maximal")
    m = mujoco.MjModel.from_xml_string(MESH_XML)
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    g = 1
    start, n = m.mesh_vertadr[0], m.mesh_vertnum[0]
    theirs = d.geom_xpos[g] + np.asarray(m.mesh_vert[start : start + n]) @ d.geom_xmat[g].reshape(3, 3).T
    mesh = scene.system.params.shapes["mesh"]
    p, R = scene.bodies.positions(scene.state.q)[0], rot.to_matrix(scene.bodies.orientations(scene.state.q)[0])
    Rs = rot.to_matrix(mesh["orientation"][0])
    ours = p + (mesh["position"][0] + mesh["vertices"][0] @ Rs.T) @ R.T
    hull = {tuple(np.round(x, 9)) for x in np.asarray(ours)}  # the hull drops the inner point (0.2, 0.2, 0.2)
    assert hull <= {tuple(np.round(x, 9)) for x in theirs} and len(hull) == 4
    np.testing.assert_allclose(scene.system.params.mass, m.body_mass[1:], rtol=0, atol=0)


def test_unsupported_geom_is_refused_by_name():
    xml = MESH_XML.replace('type="mesh" mesh="tet"', 'type="cylinder" size="0.1 0.2"')
    with pytest.raises(NotImplementedError, match="'rockgeom' is a cylinder"):
        rbd.load_mjcf(xml, coordinates="maximal")
    # A visual geom (colliding with nothing) only adds mass, which MuJoCo counts: it is listed, not refused.
    visual = xml.replace(
        'size="0.1 0.2"/>', 'size="0.1 0.2" contype="0" conaffinity="0"/><geom type="sphere" size="0.1"/>'
    )
    with pytest.warns(UserWarning, match=r"geoms that collide with nothing \['rockgeom'\]"):
        scene = rbd.load_mjcf(visual, coordinates="maximal")
    m = mujoco.MjModel.from_xml_string(visual)
    np.testing.assert_allclose(scene.system.params.mass, m.body_mass[1:], rtol=0, atol=0)


def test_unsupported_elements_are_listed_in_one_warning():
    xml = """<mujoco><worldbody><geom type="plane" size="1 1 0.1" solref="0.01 1"/>
      <body name="ball" pos="0 0 1"><freejoint/><geom name="g" type="sphere" size="0.1"/>
        <site name="marker"/><site name="tip" pos="0 0 0.1"/></body>
      <body name="target" mocap="true" pos="2 0 0.5"><geom type="box" size="0.1 0.1 0.1"/></body></worldbody>
      <sensor><framepos name="where" objtype="site" objname="marker"/></sensor></mujoco>"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rbd.load_mjcf(xml, coordinates="maximal")
    ours = [str(w.message) for w in caught if "load_mjcf ignores" in str(w.message)]
    assert len(ours) == 1
    for name in ("'marker'", "'tip'", "'where'", "solref", "'target'"):
        assert name in ours[0], ours[0]


def test_equality_constraint_is_refused():
    xml = """<mujoco><worldbody><geom type="plane" size="1 1 0.1"/>
      <body name="a" pos="0 0 1"><freejoint/><geom type="sphere" size="0.1"/></body>
      <body name="b" pos="1 0 1"><freejoint/><geom type="sphere" size="0.1"/></body></worldbody>
      <equality><weld name="glue" body1="a" body2="b"/></equality></mujoco>"""
    with pytest.raises(NotImplementedError, match="glue"):
        rbd.load_mjcf(xml, coordinates="maximal")


def test_bad_keyframe_missing_file_and_malformed_xml():
    with pytest.raises(ValueError, match=r"no keyframe named 'nope'; keyframes: \['thrown'\]"):
        rbd.load_mjcf(CUBE_XML, keyframe="nope", coordinates="maximal")
    with pytest.raises(FileNotFoundError, match="no_such.xml"):
        rbd.load_mjcf("/nonexistent/no_such.xml", coordinates="maximal")
    with pytest.raises(ValueError, match="could not compile"):
        rbd.load_mjcf("<mujoco><worldbody><body></mujoco>", coordinates="maximal")
