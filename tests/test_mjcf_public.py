"""MJCF files written by others: Gymnasium's MuJoCo models and MuJoCo's own convex-mesh test file,
loaded and stepped beside MuJoCo's C engine.

The files in tests/data/gymnasium are Gymnasium 1.4.0's (MIT licence, in that folder), unchanged; those in
tests/data/mujoco are MJX's `convex.xml` and its three STL meshes, from the mujoco 4.0.0 wheel's
`mujoco/mjx/test_data`, and `stacked_boxes.xml`, from MuJoCo's repository
(test/engine/testdata/collision_convex, commit 1913a02b), all under the Apache 2.0 licence (in that folder) and
unchanged. A test may
add a keyframe (the drop height) or, where it says so, zero the joints' damping, stiffness and armature (hinge
and slide damping, stiffness and armature are jaxrbd's joint dynamics, `set_joint_dynamics`). MuJoCo integrates these
files with RK4 at 0.01 s; jaxrbd steps at STEP, so its first-order error in free fall, g STEP t / 2, stays
below the issue's 1 cm.
"""

import pathlib
import re
import warnings

import jax
import numpy as np
import pytest

import jaxrbd as rbd

mujoco = pytest.importorskip("mujoco")

DATA = pathlib.Path(__file__).parent / "data" / "gymnasium"
CONVEX = pathlib.Path(__file__).parent / "data" / "mujoco" / "convex.xml"
STACK = pathlib.Path(__file__).parent / "data" / "mujoco" / "stacked_boxes.xml"
STACK_DURATION = 0.12  # s: the landing (0.1 s) and ten steps after it
STEP = 0.002  # jaxrbd's time step (s)
DURATION = 0.5  # s
POSITION_TOL = 0.01  # metres: the bound on body positions before any contact
IMPULSE_FLOOR = 1e-9  # N s: a contact impulse above it counts as a contact in jaxrbd's step
RESIDUAL_TOL = 1e-8
SOFT_REBOUND = 0.005  # metres: a body of MuJoCo's this deep in another may carry no force (its contact springs back)
LEG_CLEARANCE = 0.02  # metres: the hopper's leg capsule (radius 0.04) ends on the axis of its foot (radius 0.06)


def _model(name, keyframe=None, passive=True):
    """The XML of a Gymnasium model, with a keyframe "start" (qpos) added and, unless passive, the joints'
    damping, stiffness and armature set to 0."""
    xml = (DATA / f"{name}.xml").read_text()
    if not passive:
        xml = re.sub(r'(armature|damping|stiffness)="[^"]*"', r'\1="0"', xml)
    if keyframe is not None:
        qpos = " ".join(map(repr, keyframe))
        xml = xml.replace("</mujoco>", f'<keyframe><key name="start" qpos="{qpos}"/></keyframe></mujoco>')
    return xml


def _load(xml, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scene = rbd.load_mjcf(xml, **kwargs, coordinates="maximal")
    return scene, " ".join(str(w.message) for w in caught)


def _mujoco_run(source, scene, duration=DURATION):
    """MuJoCo's C engine on the XML or file `source` from its first keyframe (or qpos0) over `duration`: per step
    of its own timestep, the centres of mass of jaxrbd's bodies (in jaxrbd's q, via `from_mujoco_qpos`), the
    bodies in contact (normal force > 0), the deepest contact distance (negative: MuJoCo's soft contacts let
    bodies sink into each other) and whether any contact touches the world's geoms."""
    if isinstance(source, pathlib.Path):
        m = mujoco.MjModel.from_xml_path(str(source))
    else:
        m = mujoco.MjModel.from_xml_string(source)
    d = mujoco.MjData(m)
    if m.nkey:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    steps = round(duration / m.opt.timestep)
    positions, touching, deepest, grounded = [], [], [], []
    force = np.zeros(6)
    for k in range(steps + 1):
        mujoco.mj_forward(m, d)
        positions.append(np.asarray(scene.from_mujoco_qpos(d.qpos)).reshape(-1, 7)[:, :3])
        bodies = set()
        for i, contact in enumerate(d.contact[: d.ncon]):
            mujoco.mj_contactForce(m, d, i, force)
            if force[0] > 0:
                for geom in (contact.geom1, contact.geom2):
                    body = m.body_weldid[m.geom_bodyid[geom]]
                    if body:
                        bodies.add(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, body) or f"body{body}")
        touching.append(bodies)
        deepest.append(min((c.dist for c in d.contact[: d.ncon]), default=np.inf))
        grounded.append(
            any(m.body_weldid[m.geom_bodyid[g]] == 0 for c in d.contact[: d.ncon] for g in (c.geom1, c.geom2))
        )
        if k < steps:
            mujoco.mj_step(m, d)
    return m.opt.timestep, np.array(positions), touching, np.array(deepest), grounded


def _our_touching(scene, traj, stride):
    """Per MuJoCo step (every `stride` of jaxrbd's), jaxrbd's moving bodies with a contact impulse above
    IMPULSE_FLOOR in the steps since the previous one; each contact slot named by its pair at the step's start
    (`Contacts.index`: with a broad phase the slots' pairs change from step to step)."""
    index = np.asarray(jax.jit(jax.vmap(lambda q: scene.bodies.contacts(q, scene.system.params).index))(traj.q[:-1]))
    impulses, pairs, statics = np.asarray(traj.impulses.normal), scene.bodies.pair_names, set(scene.bodies.statics)
    touching = [
        {body for i, p in zip(index[k], impulses[k]) if i < len(pairs) and p > IMPULSE_FLOOR for body in pairs[i]}
        for k in range(len(impulses))
    ]
    return [set()] + [
        set().union(*touching[k - stride : k]) - statics for k in range(stride, len(touching) + 1, stride)
    ]


@pytest.mark.slow  # the MJCF loader's own checks (tests/test_mjcf.py) stay in the default set
def test_public_models_load_and_name_what_they_ignore_or_refuse():
    ant, said = _load(_model("ant"))
    # The legs hang on bodies with no joint welded to the torso: one rigid body with it.
    assert ant.bodies.names[0] == "torso" and len(ant.bodies.names) == 9 and len(ant.bodies.joints) == 8
    assert "margin/gap" in said and np.asarray(ant.system.params.joints.armature).tolist() == [1.0] * 8
    pendulum, _ = _load(_model("inverted_double_pendulum"))
    assert len(pendulum.bodies.joints) == 3 and pendulum.bodies.pair_names == ()  # its geoms collide with nothing
    # The hopper's torso has slides x and z and a hinge about y: one planar joint and three coordinate joints.
    hopper, _ = _load(_model("hopper"))
    assert [kind for _, kind, _, _ in hopper.bodies.joints[:4]] == [
        "planar",
        "slide coordinate",
        "slide coordinate",
        "revolute coordinate",
    ]
    assert hopper.motors == ("actuator0", "actuator1", "actuator2")  # on the thigh, leg and foot hinges
    # The humanoid's waist and shoulders have two hinges, its hips three: universal and ball joints with a
    # coordinate joint per hinge (`add_hinges`), whose motors and ranges they carry.
    humanoid, said = _load(_model("humanoid"))
    kinds = {name: kind for name, kind, _, _ in humanoid.bodies.joints}
    assert (
        kinds["lwaist (abdomen_z, abdomen_y)"] == "universal"
        and kinds["abdomen_y"] == "revolute coordinate (axis on a)"
    )
    assert kinds["right_thigh (right_hip_x, right_hip_z, right_hip_y)"] == "ball"
    assert kinds["right_hip_z"] == "revolute coordinate (middle)" and kinds["right_knee"] == "revolute"
    assert len(humanoid.motors) == 17 and "tendons ['left_hipknee', 'right_hipknee']" in said
    # Hinge stiffness, damping (the knee's from the file's default class) and armature are its joints' dynamics.
    names = [name for name, _, _, _ in humanoid.bodies.joints]
    jp = humanoid.system.params.joints
    for joint, *values in (
        ("abdomen_z", 20.0, 5.0, 0.02),
        ("right_hip_y", 20.0, 5.0, 0.008),
        ("left_knee", 1, 1, 0.006),
    ):
        k = names.index(joint)
        assert [float(x[k]) for x in (jp.stiffness, jp.damping, jp.armature, jp.rest)] == [*values, 0.0]
    assert "frictionloss" not in said and "armature" not in said
    # Two hinges that are not orthogonal: refused, naming the body.
    skew = """<mujoco><worldbody><body name="arm"><joint name="j1" type="hinge" axis="1 0 0"/>
        <joint name="j2" type="hinge" axis="1 1 0"/><geom type="sphere" size="0.1"/></body></worldbody></mujoco>"""
    with pytest.raises(NotImplementedError, match="body 'arm' has 2 joints"):
        rbd.load_mjcf(skew, coordinates="maximal")


@pytest.mark.slow  # the humanoid's state maps compile
def test_the_humanoids_hinge_sequences_read_mujocos_qpos_and_qvel():
    """The humanoid at a random pose and velocity (hinges within their ranges): MuJoCo's qpos -> jaxrbd's q ->
    qpos again; q against MuJoCo's kinematics (centres of mass `xipos` of the bodies that carry no welded body);
    the joints' rows hold; each hinge's coordinate is its qpos minus qpos0, and its rate row times jaxrbd's v
    is MuJoCo's qvel."""
    xml = _model("humanoid")
    humanoid, _ = _load(xml)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    rng = np.random.default_rng(7)
    lo, hi = m.jnt_range[1:].T
    qpos = m.qpos0.copy()
    qpos[:3] += rng.normal(size=3)
    qpos[3:7] = rng.normal(size=4) / 2 + [1.0, 0.0, 0.0, 0.0]
    qpos[3:7] /= np.linalg.norm(qpos[3:7])
    qpos[7:] = lo + rng.uniform(0.05, 0.95, m.nq - 7) * (hi - lo)
    qvel = rng.normal(size=m.nv)
    np.testing.assert_allclose(
        np.asarray(humanoid.to_mujoco_qpos(humanoid.from_mujoco_qpos(qpos))), qpos, rtol=0, atol=1e-12
    )
    state = humanoid.from_mujoco(qpos, qvel)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(m, d)
    ids = [m.body(name).id for name in humanoid.bodies.names]
    alone = [k for k, i in enumerate(ids) if not any(m.body_weldid[b] == i for b in range(m.nbody) if b != i)]
    assert len(alone) == 9  # the shins carry the feet
    q = np.asarray(state.q).reshape(-1, 7)
    np.testing.assert_allclose(q[alone, :3], d.xipos[np.array(ids)[alone]], rtol=0, atol=1e-12)
    params = humanoid.system.params
    assert float(np.abs(np.asarray(humanoid.bodies.constraints(state.q, params))).max()) <= 1e-12
    values, rows = humanoid.bodies.joint_coordinates(state.q, params)
    names = [name for name, _, _, _ in humanoid.bodies.joints]
    for j in range(1, m.njnt):  # every hinge (joint 0 is the free root)
        k = names.index(m.joint(j).name)
        a, dof = m.jnt_qposadr[j], m.jnt_dofadr[j]
        assert abs(float(values[k]) - (qpos[a] - m.qpos0[a])) <= 1e-12, m.joint(j).name
        assert abs(float(rows[k] @ state.v) - qvel[dof]) <= 1e-12, m.joint(j).name


@pytest.mark.slow  # the hopper's state maps compile again
def test_the_planar_roots_state_maps_invert_each_other():
    """MuJoCo's qpos -> jaxrbd's q -> qpos through the hopper's planar root (slides x, z and hinge y), and
    jaxrbd's q against MuJoCo's own kinematics (the centres of mass `xipos`)."""
    xml = _model("hopper")
    hopper, _ = _load(xml)
    qpos = np.array([0.3, 1.1, -0.4, -0.6, -0.3, 0.2])
    q = np.asarray(hopper.from_mujoco_qpos(qpos)).reshape(-1, 7)
    np.testing.assert_allclose(np.asarray(hopper.to_mujoco_qpos(q.reshape(-1))), qpos, rtol=0, atol=1e-12)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    d.qpos[:] = qpos
    mujoco.mj_kinematics(m, d)
    np.testing.assert_allclose(q[:, :3], d.xipos[1:], rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.abs(np.sum(q[:, 3:] * d.xquat[1:], axis=1)), 1.0, rtol=0, atol=1e-12)


@pytest.mark.slow  # the ant's state maps compile again
def test_welded_bodies_add_up_to_mujocos_composite_mass_and_inertia():
    """The ant's torso carries four leg roots welded to it: its mass, centre of mass and inertia are the weld
    group's, taken independently from MuJoCo's `cinert` (each body's inertia about the tree root's centre of
    mass, world axes), shifted to the group's centre of mass and turned into the torso's axes."""
    xml = _model("ant")
    ant, _ = _load(xml)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    group = [k for k in range(1, m.nbody) if m.body_weldid[k] == 1]
    assert len(group) == 5  # the torso and the four leg roots
    c = d.cinert[group].sum(0)  # (Ixx, Iyy, Izz, Ixy, Ixz, Iyz, m r, m) about the tree root's centre of mass
    mass, r = c[9], c[6:9] / c[9]
    com = d.subtree_com[m.body_rootid[1]] + r
    inertia = np.array([[c[0], c[3], c[4]], [c[3], c[1], c[5]], [c[4], c[5], c[2]]])
    inertia -= mass * (r @ r * np.eye(3) - np.outer(r, r))
    R = d.xmat[1].reshape(3, 3)
    np.testing.assert_allclose(float(ant.system.params.mass[0]), mass, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(ant.state.q[:3]), com, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.asarray(ant.system.params.inertia[0]), R.T @ inertia @ R, rtol=0, atol=1e-14)
    # The state maps pass through the welded leg roots: MuJoCo's qpos -> jaxrbd's q -> qpos again.
    tilt = np.array([0.9, 0.3, -0.2, 0.25])
    qpos = np.concatenate([[0.1, -0.2, 0.8], tilt / np.linalg.norm(tilt), [0.2, 0.9, -0.1, -1.1, 0.3, -0.8, -0.4, 1.2]])
    np.testing.assert_allclose(np.asarray(ant.to_mujoco_qpos(ant.from_mujoco_qpos(qpos))), qpos, rtol=0, atol=1e-12)


def _drop(source, step=STEP, **load):
    """The XML or file `source` stepped by jaxrbd (every step converged) and by MuJoCo; asserts the 1 cm until
    MuJoCo's first contact. Returns, per MuJoCo step: jaxrbd's centres of mass, MuJoCo's bodies in contact and
    jaxrbd's (a contact impulse above IMPULSE_FLOOR in the steps since MuJoCo's previous one), MuJoCo's deepest
    contact distance; and the first step with a MuJoCo contact, MuJoCo's timestep and jaxrbd's rollout."""
    scene, _ = _load(source, **load)
    stride = round(scene.dt / step)
    assert abs(stride * step - scene.dt) <= 1e-12  # jaxrbd's steps end on MuJoCo's
    traj = rbd.simulate(*scene, dt=step, steps=stride * round(DURATION / scene.dt))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= RESIDUAL_TOL
    dt, theirs, touching, deepest, _ = _mujoco_run(source, scene)
    ours = np.asarray(traj.q[::stride]).reshape(len(theirs), -1, 7)[:, :, :3]
    first = next(k for k, bodies in enumerate(touching) if bodies)
    error = np.abs(ours - theirs).max(axis=(1, 2))
    label = source.name if isinstance(source, pathlib.Path) else re.search(r'<mujoco model="([^"]+)"', source)[1]
    print(
        f"\n{label}: MuJoCo's first contact at t = {first * dt:.3f} s; largest distance before it {error[:first].max():.2e} m"
    )
    assert 0 < first and error[:first].max() <= POSITION_TOL
    return ours, touching, _our_touching(scene, traj, stride), deepest, first, dt, (scene, traj)


@pytest.mark.long
def test_the_ant_falls_onto_the_floor_like_mujoco():
    """Gymnasium's ant, dropped from 1 m (its own start pose, lifted 0.45 m), its hips and ankles with the file's
    damping and armature (1 each): within 1 cm of MuJoCo until MuJoCo's first contact, then the same bodies (its
    four feet) in contact at every one of MuJoCo's steps."""
    start = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 0.0, -1.0, 0.0, 1.0]  # Gymnasium's init_qpos
    _, touching, ours_touching, _, first, dt, _ = _drop(_model("ant", start), keyframe="start")
    for k in range(first, len(touching)):
        assert ours_touching[k] == touching[k], (k * dt, sorted(ours_touching[k]), sorted(touching[k]))
    assert touching[-1] == {"body4", "body7", "body10", "body13"}  # the four lower legs


@pytest.mark.slow
def test_the_hopper_falls_onto_the_floor_like_mujoco():
    """Gymnasium's hopper (a planar root: slides x and z, hinge y), dropped 0.3 m and tilted 0.1 rad, its thigh,
    leg and foot hinges with the file's damping and armature (1 each): within 1 cm of MuJoCo until its first contact, then its foot on the floor at every one of
    MuJoCo's steps to 0.5 s; every body stays in the plane y = 0. MuJoCo's contacts here are soft (the file's
    solimp 0.8): its foot sinks up to 3.5 cm into the floor, and while it is deeper than LEG_CLEARANCE the end
    of the leg touches the floor too; jaxrbd's rigid foot does not sink, so its leg never touches."""
    hopper = _model("hopper", [0.0, 1.55, 0.1, 0.0, 0.0, 0.0])
    ours, touching, ours_touching, deepest, first, dt, _ = _drop(hopper, keyframe="start")
    assert np.abs(ours[:, :, 1]).max() <= 1e-9  # every body stays in the plane y = 0
    for k in range(first, len(touching)):
        assert ours_touching[k] == {"foot"} and "foot" in touching[k], (k * dt, sorted(touching[k]))
        if touching[k] != {"foot"}:
            assert touching[k] == {"foot", "leg"} and deepest[k] < -LEG_CLEARANCE, (k * dt, deepest[k])


@pytest.mark.long
def test_the_inverted_double_pendulum_falls_like_mujoco():
    """Gymnasium's cart with a double pendulum, released 0.1 rad from upright, with the file's joint damping
    (0.05, its joints' dampers): within 1 cm of MuJoCo over 0.5 s, and closer to MuJoCo than MuJoCo without
    the damping is, by a factor of 5."""
    xml = _model("inverted_double_pendulum", keyframe=[0.0, 0.1, 0.0])
    scene, _ = _load(xml, keyframe="start")
    assert np.asarray(scene.system.params.joints.damping).tolist() == [0.05, 0.05, 0.05]
    traj = rbd.simulate(*scene, dt=STEP, steps=round(DURATION / STEP))
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= RESIDUAL_TOL
    dt, theirs, *_ = _mujoco_run(xml, scene)
    undamped = _mujoco_run(_model("inverted_double_pendulum", keyframe=[0.0, 0.1, 0.0], passive=False), scene)[1]
    ours = np.asarray(traj.q[:: round(dt / STEP)]).reshape(len(theirs), -1, 7)[:, :, :3]
    error, damping = float(np.abs(ours - theirs).max()), float(np.abs(undamped - theirs).max())
    print(
        f"\ninverted double pendulum: largest distance from MuJoCo over {DURATION} s {error:.2e} m (MuJoCo without "
        f"damping: {damping:.2e} m)"
    )
    assert error <= POSITION_TOL and error <= 0.2 * damping
    assert float(np.abs(ours[-1] - ours[0]).max()) > 0.1  # it did fall


@pytest.mark.slow
def test_convex_meshes_fall_onto_the_floor_and_each_other_like_mujoco():
    """MJX's convex.xml: a tetrahedron, a dodecahedron and a pyramid (STL meshes) and a box, released in a column
    from 0.8 to 3.0 m, land on the floor and on each other within 0.5 s. Within 1 cm of MuJoCo until its first
    contact; then the same bodies in contact at every one of MuJoCo's steps, except while a contact of MuJoCo's
    is deeper than SOFT_REBOUND: its soft dodecahedron sinks 1.8 cm into the tetrahedron, so there its box lands
    4 ms later and springs off for 26 ms, where jaxrbd's rigid box stays. All four are in contact at the end in
    both, and no gap of jaxrbd's is ever negative. (Before `_edge_wins`, the pyramid, landing slightly tilted
    face down on the box, got the single point of an edge pair, turned 9.8 mm into the box in a step and sprang
    off it at 3.7 m/s.)"""
    _, touching, ours_touching, deepest, first, dt, (scene, traj) = _drop(CONVEX)
    differ = [k for k in range(first, len(touching)) if ours_touching[k] != touching[k]]
    print(f"convex: different bodies in contact at {len(differ)} of MuJoCo's {len(touching) - first} steps")
    for k in differ:
        assert deepest[k] < -SOFT_REBOUND, (k * dt, sorted(ours_touching[k]), sorted(touching[k]), deepest[k])
    assert ours_touching[-1] == touching[-1] == {"tetrahedron", "dodecahedron", "box", "pyramid"}
    gaps = jax.jit(jax.vmap(scene.system.gap))(traj.q)
    assert float(gaps.min()) >= 0.0


@pytest.mark.long  # about 5 minutes: 11 bodies, 190 candidate pairs (16 slots per shape kind pair)
def test_the_humanoid_falls_onto_the_floor_like_mujoco():
    """Gymnasium's humanoid (universal joints at its waist and shoulders, three hinges at each hip), lifted 0.2 m,
    its knees bent to the middle of their range (at qpos0 they lie outside it, which MuJoCo's soft limits
    push back gently and a rigid stop in one step), every hinge with the file's damping and armature (1 each):
    within 1 cm of MuJoCo until MuJoCo's first contact (its left shin), then the same bodies in contact at every
    one of MuJoCo's steps to 0.5 s, both shins from the second's touchdown on. (With the damping and armature
    set to 0, MuJoCo's soft contact sprang the shins back off the floor's force after 20 steps.)"""
    m = mujoco.MjModel.from_xml_path(str(DATA / "humanoid.xml"))
    start = [float(x) for x in m.qpos0]
    start[2] += 0.2
    for j in range(1, m.njnt):
        lo, hi = m.jnt_range[j]
        if not lo <= start[m.jnt_qposadr[j]] <= hi:
            start[m.jnt_qposadr[j]] = float(0.5 * (lo + hi))
    _, touching, ours_touching, _, first, dt, _ = _drop(
        _model("humanoid", start), step=0.0015, keyframe="start", broadphase=rbd.BroadPhase(slots=16, distance=0.005)
    )
    for k in range(first, len(touching)):
        assert ours_touching[k] == touching[k], (k * dt, sorted(ours_touching[k]), sorted(touching[k]))
    both = next(k for k in range(first, len(touching)) if len(touching[k]) == 2)
    assert touching[first] == {"left_shin"} and all(
        touching[k] == {"left_shin", "right_shin"} for k in range(both, len(touching))
    )
    print(f"humanoid: the left shin in contact from {first * dt:.3f} s, both shins from {both * dt:.3f} s on")


STACK_BODIES = {f"body{i}" for i in range(1, 19)}


def _stack_run(duration):
    """stacked_boxes.xml over `duration` in jaxrbd and in MuJoCo: (traj, MuJoCo's run, jaxrbd's bodies in
    contact per MuJoCo step, the largest position difference per step, MuJoCo's landing step)."""
    scene, said = _load(STACK, broadphase=rbd.BroadPhase(slots=56))
    assert said.startswith("56 body pairs overlap in the initial state, the deepest") and "by 1.49e-09 m" in said
    # Ten sweeps a round: the packed layers converge within them from the previous step's impulses, where the
    # default hundred cost ten times as much; the landing takes about 1,100 sweeps, above the default 1,000.
    # Over the whole 0.5 s the cap stays at the default 1,000: the resting pile's steps stall at it (see the
    # long test), and 5,000 would make each of them five times as long.
    solver = rbd.ContactSweeps(sweeps=10, max_sweeps=5000 if duration <= STACK_DURATION else 1000)
    steps = round(duration / scene.dt)
    traj = rbd.simulate(*scene, dt=scene.dt, steps=steps, step_solver=solver)
    assert float(jax.jit(jax.vmap(scene.system.gap))(traj.q).min()) >= -1e-6
    mujoco_run = _mujoco_run(STACK, scene, duration)
    dt, theirs, _, _, grounded = mujoco_run
    assert dt == scene.dt
    landing = grounded.index(True)
    error = np.abs(np.asarray(traj.q).reshape(steps + 1, -1, 7)[:, :, :3] - np.array(theirs)).max(axis=(1, 2))
    print(f"\nstacked boxes: landing at {landing * dt:.3f} s; largest distance before it {error[:landing].max():.2e} m")
    assert 0 < landing < steps - 5 and error[:landing].max() <= POSITION_TOL
    return traj, mujoco_run, _our_touching(scene, traj, 1), error, landing


@pytest.mark.long
def test_a_packed_stack_of_mesh_boxes_lands_like_mujoco():
    """MuJoCo's stacked_boxes.xml (its multi-CCD test file): 18 cube meshes of 10 cm, two layers of 3 x 3 packed
    face to face, released 5 cm above a box floor, with gravity (-4, 4, -10) tilted towards two box walls 5 cm away
    and friction 0.4. With a broad phase of 56 slots (the 54 box-mesh pairs and the nearest mesh pairs, the 33
    face-to-face ones first), over its first STACK_DURATION:
    - every step converged, residual <= 1e-8, no gap below -1e-6 m;
    - within 1 cm of MuJoCo until the landing (MuJoCo's first contact with the floor);
    - then all 18 boxes in contact at every one of MuJoCo's steps in both, from the step after the landing
      (in the landing step jaxrbd's rigid contacts stop both layers, MuJoCo's soft ones the lower layer only).
    The packed layers touch face to face, edge to edge and corner to corner from the start: MuJoCo stores mesh
    vertices in float32, so the load warns once that 56 pairs overlap by the vertices' round-off (1.5e-9 m).
    The whole 0.5 s is `test_a_packed_stack_of_mesh_boxes_settles_in_the_corner_like_mujoco` (long)."""
    traj, (dt, _, touching, _, _), ours_touching, _, landing = _stack_run(STACK_DURATION)
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= RESIDUAL_TOL
    for k in range(landing + 1, len(touching)):
        assert ours_touching[k] == touching[k] == STACK_BODIES, (k * dt, sorted(ours_touching[k] ^ touching[k]))


@pytest.mark.long  # about 10 minutes of one core: 250 steps of 440 contacts, half of them 1,000 sweeps
def test_a_packed_stack_of_mesh_boxes_settles_in_the_corner_like_mujoco():
    """stacked_boxes.xml over the issue's whole 0.5 s (MuJoCo's 250 steps of 2 ms), sweeps capped at 1,000:
    - within 1 cm of MuJoCo until the landing, no gap below -1e-6 m (as in the first 0.12 s);
    - after the landing, every body MuJoCo has in contact is in contact in jaxrbd, at every step, and all 18
      of jaxrbd's are;
    - MuJoCo's soft contacts throw its stack: it leaves the floor (no contact with the world) for some steps
      after the landing, where jaxrbd's rigid stack rests. From the step from which all 18 of MuJoCo's boxes
      stay in contact (its stack settled, before 0.25 s) to the end, the same 18 in both;
    - both end at rest in the corner, within 3 times MuJoCo's deepest contact of each other (its soft contacts
      let each of the three boxes in a row sink that much towards a wall);
    - every step reports its residual; the free fall converges. The resting pile does not: from 0.25 s the
      sweeps stall near 1e-5 (block Gauss-Seidel on the packed, redundant contacts), and those steps are
      reported as not converged, never as converged above the tolerance."""
    traj, (dt, _, touching, deepest, grounded), ours_touching, error, landing = _stack_run(DURATION)
    converged, residual = np.asarray(traj.stats.converged), np.asarray(traj.stats.residual)
    assert (
        converged[: landing - 1].all() and np.isfinite(residual).all() and (residual[converged] <= RESIDUAL_TOL).all()
    )
    steps = len(touching) - 1
    for k in range(landing + 1, steps + 1):
        assert touching[k] <= ours_touching[k] == STACK_BODIES, (k * dt, sorted(touching[k] - ours_touching[k]))
    assert not all(grounded[landing:])  # MuJoCo's rebound
    settled = next(k for k in range(landing, steps + 1) if all(t == STACK_BODIES for t in touching[k:]))
    assert settled * dt < 0.25
    assert error[-1] <= 3 * abs(deepest[-1])
    print(
        f"MuJoCo's stack off the floor at {sum(not g for g in grounded[landing:])} steps, settled from "
        f"{settled * dt:.3f} s; at 0.5 s {error[-1]:.2e} m apart (MuJoCo's deepest contact {-deepest[-1]:.2e} m); "
        f"{int((~converged).sum())} of {steps} steps not converged, largest residual {residual.max():.2e}"
    )
