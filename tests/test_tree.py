"""Kinematic trees in joint coordinates (`load_mjcf(..., coordinates="joints")`) against MuJoCo's C engine.

The kinematics, the mass matrix and the bias forces are compared with MuJoCo's own (`mj_forward`) on
Gymnasium's four models and on trees that hypothesis generates; rollouts without contact are compared with
MuJoCo's Euler integrator stepping the same file, which is the same semi-implicit Euler step (the damper
implicit) as jaxrbd's: hinge and slide chains agree to round-off.
"""

import pathlib
import re
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxrbd as rbd
from jaxrbd.bodies import _tree as tree_fns

mujoco = pytest.importorskip("mujoco")

DATA = pathlib.Path(__file__).parent / "data" / "gymnasium"
MODELS = ("inverted_double_pendulum", "hopper", "ant", "humanoid")
DYNAMICS_RTOL = 1e-11  # relative to the largest entry: M, the bias forces and the poses are MuJoCo's to round-off
EULER_TOL = 1e-8  # q against MuJoCo's Euler steps without contact (round-off accumulates far below it)
FD_RTOL = 1e-6  # gradient entries against central differences
FD_EPS = 1e-6
STEPS = 100


def _load(source, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rbd.load_mjcf(source, coordinates="joints", **kwargs)


def _euler(xml):
    m = mujoco.MjModel.from_xml_string(xml) if xml.lstrip().startswith("<") else mujoco.MjModel.from_xml_path(xml)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_EULER
    return m, mujoco.MjData(m)


def _random_state(m, rng):
    """A configuration (quaternions random, hinges and slides displaced) and a velocity, for MuJoCo's model m."""
    qpos, qvel = m.qpos0.copy(), rng.normal(size=m.nv)
    for j in range(m.njnt):
        a, kind = m.jnt_qposadr[j], m.jnt_type[j]
        if kind in (2, 3):
            qpos[a] += rng.normal(scale=0.5)
        else:
            s = a + 3 if kind == 0 else a
            quat = rng.normal(size=4)
            qpos[s : s + 4] = quat / np.linalg.norm(quat)
            if kind == 0:
                qpos[a : a + 3] += rng.normal(size=3)
    return qpos, qvel


@jax.jit
def _dynamics(system, q, v):
    f = tree_fns.frames(system.bodies, q, system.params)
    return (
        f.x[:-1],
        f.R[:-1],
        tree_fns.mass_matrix(system.bodies, q, system.params, f),
        tree_fns.bias_force(system.bodies, q, v, system.params, f),
        tree_fns.velocity_map(system.bodies, q, v, system.params),
    )


def _check_dynamics(source, rng, states=3):
    """Poses, M, the bias forces and dq/dt = G v at random states equal MuJoCo's."""
    scene = _load(source)
    m, d = _euler(source)
    for _ in range(states):
        qpos, qvel = _random_state(m, rng)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        x, R, M, bias, qdot = (np.asarray(a) for a in _dynamics(scene.system, jnp.asarray(qpos), jnp.asarray(qvel)))
        M_mj = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, d, M_mj)
        scale = lambda a: DYNAMICS_RTOL * max(1.0, np.abs(a).max())
        np.testing.assert_allclose(x, d.xpos[1:], rtol=0, atol=scale(d.xpos))
        np.testing.assert_allclose(R.reshape(-1, 9), d.xmat[1:], rtol=0, atol=DYNAMICS_RTOL)
        np.testing.assert_allclose(M, M_mj, rtol=0, atol=scale(M_mj))
        np.testing.assert_allclose(-bias, d.qfrc_bias, rtol=0, atol=scale(d.qfrc_bias))
        # dq/dt against MuJoCo's own position integration over a tiny step
        eps = 1e-7
        moved = qpos.copy()
        mujoco.mj_integratePos(m, moved, qvel, eps)
        np.testing.assert_allclose(qdot, (moved - qpos) / eps, rtol=0, atol=1e-5 * max(1.0, np.abs(qvel).max()))


@pytest.mark.parametrize("name", MODELS)
def test_the_gymnasium_trees_have_mujocos_kinematics_mass_matrix_and_bias_forces(name):
    _check_dynamics(str(DATA / f"{name}.xml"), np.random.default_rng(0))


# --- Generated trees ------------------------------------------------------------------------------

_JOINTS = st.lists(st.sampled_from(["hinge", "slide", "ball"]), min_size=0, max_size=3)


@st.composite
def _trees(draw, driven=False):
    """The MJCF of a random tree: 1-5 bodies, each under a random earlier one, with 0-3 joints in sequence (a
    free joint at the first root, sometimes; a ball joint last), random offsets, axes (the k-th of a body's
    about the k-th coordinate axis), anchors, masses and inertias.

    driven: also, on some hinges, slides and ball joints, a range about qpos0 (a ball's cone), a damper and an
    actuator (a motor, a position or a velocity servo; random gears, a ball's a random axis; some with a
    ctrlrange and a forcerange)."""
    n = draw(st.integers(1, 5))
    actuators = []

    def drive(name, kind):
        """The joint's range and damper attributes; its actuator, if any, appended to `actuators`."""
        if not driven:
            return ""
        extra = f' damping="{draw(st.floats(0.0, 0.5)):.3f}"'
        if draw(st.booleans()):
            lo, hi = draw(st.floats(0.2, 1.5)), draw(st.floats(0.2, 1.5))
            extra += f' limited="true" range="{"0" if kind == "ball" else f"{-lo:.3f}"} {hi:.3f}"'
        if draw(st.booleans()):
            gear = f"{vec(-1.5, 1.5)} 0 0 0" if kind == "ball" else f"{draw(st.floats(0.3, 2.0)):.3f}"
            servo = draw(st.sampled_from(["motor", "position", "velocity"]))
            gain = {"motor": "", "position": f' kp="{draw(st.floats(0.1, 5.0)):.3f}"'}.get(servo, "")
            gain = gain or ("" if servo == "motor" else f' kv="{draw(st.floats(0.05, 1.0)):.3f}"')
            ctrl = ' ctrllimited="true" ctrlrange="-1 1"' if draw(st.booleans()) else ""
            force = ' forcelimited="true" forcerange="-2 2"' if draw(st.booleans()) else ""
            actuators.append(f'<{servo} name="a_{name}" joint="{name}" gear="{gear}"{gain}{ctrl}{force}/>')
        return extra

    vec = lambda lo=-0.5, hi=0.5: " ".join(f"{draw(st.floats(lo, hi)):.3f}" for _ in range(3))
    parent = [-1] + [draw(st.integers(-1, i - 1)) for i in range(1, n)]
    free = draw(st.booleans())

    def axis(k):  # about the k-th coordinate axis, so that a body's joints never share one (a singular M)
        tilt = [draw(st.floats(-0.3, 0.3)) for _ in range(3)]
        return " ".join(f"{(1.0 if j == k else 0.0) + tilt[j]:.3f}" for j in range(3))

    bodies = []
    for i in range(n):
        kinds = ["free"] if (i == 0 and free) else draw(_JOINTS)
        if "ball" in kinds:  # MuJoCo allows no rotation after a ball joint on one body
            kinds = [k for k in kinds if k != "ball"] + ["ball"]
        joints = "".join(
            f'<joint name="j{i}_{k}" type="{kind}" pos="{vec(-0.2, 0.2)}" axis="{axis(k)}"{drive(f"j{i}_{k}", kind)}/>'
            if kind in ("hinge", "slide")
            else f'<joint name="j{i}_{k}" type="{kind}"'
            + ("" if kind == "free" else f' pos="{vec(-0.2, 0.2)}"{drive(f"j{i}_{k}", kind)}')
            + "/>"
            for k, kind in enumerate(kinds)
        )
        mass = draw(st.floats(0.1, 3.0))
        moments = sorted(draw(st.floats(0.01, 0.2)) for _ in range(3))
        moments[2] = min(moments[2], 0.9 * (moments[0] + moments[1]))  # a rigid body's triangle inequality
        inertial = (
            f'<inertial pos="{vec(-0.1, 0.1)}" quat="{vec(-1, 1)} 1" mass="{mass:.3f}" '
            f'diaginertia="{" ".join(f"{x:.4f}" for x in moments)}"/>'
        )
        bodies.append((parent[i], f'<body name="b{i}" pos="{vec()}" quat="1 {vec(-1, 1)}">{inertial}{joints}'))

    def xml(i):
        children = "".join(xml(k) for k in range(n) if parent[k] == i)
        return bodies[i][1] + children + "</body>"

    roots = "".join(xml(i) for i in range(n) if parent[i] < 0)
    actuated = f"<actuator>{''.join(actuators)}</actuator>" if actuators else ""
    return (
        '<mujoco><compiler angle="radian"/><option gravity="0.3 -1 -9.81"/>'
        f"<worldbody>{roots}</worldbody>{actuated}</mujoco>"
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(xml=_trees(), seed=st.integers(0, 2**31 - 1))
def test_generated_trees_have_mujocos_kinematics_mass_matrix_and_bias_forces(xml, seed):
    m = mujoco.MjModel.from_xml_string(xml)
    if m.nv == 0:
        return
    _check_dynamics(xml, np.random.default_rng(seed), states=2)


# --- Rollouts without contact ---------------------------------------------------------------------


def _with_key(name, qpos):
    xml = (DATA / f"{name}.xml").read_text()
    key = " ".join(map(repr, qpos))
    return xml.replace("</mujoco>", f'<keyframe><key name="start" qpos="{key}"/></keyframe></mujoco>')


def _mujoco_rollout(xml, controls, keyframe=True):
    """MuJoCo's qpos (steps + 1, nq) under Euler, and whether any constraint (contact or limit) was active."""
    m, d = _euler(xml)
    if keyframe:
        mujoco.mj_resetDataKeyframe(m, d, 0)
    qs, constrained = [d.qpos.copy()], False
    for u in controls:
        d.ctrl[:] = u
        mujoco.mj_step(m, d)
        constrained |= d.nefc > 0
        qs.append(d.qpos.copy())
    return np.array(qs), constrained


@st.composite
def _index_sets(draw):
    """A row count and a static index: a run, an evenly spaced run or a random choice of rows, in any shape."""
    n = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(["run", "strided", "random"]))
    if kind == "random":
        idx = np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=2 * n)), int)
    else:
        step = 1 if kind == "run" else draw(st.integers(1, 4))
        start = draw(st.integers(0, n - 1))
        idx = np.arange(start, n, step)[: draw(st.integers(1, n))]
    if idx.size % 2 == 0 and draw(st.booleans()):
        idx = idx.reshape(-1, 2)
    return n, idx


@settings(max_examples=60, deadline=None)
@given(case=_index_sets(), add=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_the_trees_static_indexing_reads_writes_and_transposes_as_numpy_does(case, add, seed):
    """`_take`, `_put` and `_assemble` (slices where the index is a run) against numpy's indexing, values and
    reverse-mode gradients."""
    n, idx = case
    rng = np.random.default_rng(seed)
    x, value = rng.normal(size=(n, 3)), rng.normal(size=idx.shape + (3,))
    np.testing.assert_array_equal(tree_fns._take(jnp.asarray(x), idx), x[idx])
    # the gradient of sum(w * x[idx]) is the weights summed into the rows they read
    w = rng.normal(size=idx.shape + (3,))
    expected = np.zeros_like(x)
    np.add.at(expected, idx.reshape(-1), w.reshape(-1, 3))
    grad = jax.grad(lambda x: jnp.sum(w * tree_fns._take(x, idx)))(jnp.asarray(x))
    np.testing.assert_allclose(grad, expected, rtol=0, atol=1e-14)
    flat = idx.reshape(-1)
    if np.unique(flat).size == flat.size:  # a write names each row once
        put = x.copy()
        put[flat] = put[flat] + value.reshape(-1, 3) if add else value.reshape(-1, 3)
        np.testing.assert_allclose(tree_fns._put(jnp.asarray(x), idx, jnp.asarray(value), add=add), put, atol=1e-15)
        rest = np.setdiff1d(np.arange(n), flat)
        whole = tree_fns._assemble([(rest, jnp.asarray(x[rest])), (idx, jnp.asarray(value))])
        expected = x.copy()
        expected[flat] = value.reshape(-1, 3)
        np.testing.assert_array_equal(whole, expected)


@pytest.fixture(scope="module")
def pendulum():
    """Gymnasium's cart with a double pendulum, released off upright, and its jitted rollout of the controls."""
    xml = _with_key("inverted_double_pendulum", [0.1, 0.3, -0.2])
    scene = _load(xml, keyframe="start")
    run = jax.jit(lambda system, u: rbd.simulate(system, scene.state, dt=scene.dt, steps=STEPS, controls=u))
    return xml, scene, run


def test_the_double_pendulum_steps_as_mujocos_euler_integrator(pendulum):
    """Random controls, 100 steps, no limit reached: q equals MuJoCo's qpos to 1e-8; every step converged."""
    xml, scene, run = pendulum
    u = np.random.default_rng(1).uniform(-0.3, 0.3, size=(STEPS, 1))
    traj = run(scene.system, jnp.asarray(u))
    theirs, constrained = _mujoco_rollout(xml, u)
    assert not constrained
    assert bool(traj.stats.converged.all())
    np.testing.assert_allclose(np.asarray(traj.q), theirs, rtol=0, atol=EULER_TOL)
    assert scene.to_mujoco_qpos(traj.q) is not None and np.array_equal(scene.to_mujoco_qpos(traj.q), traj.q)
    assert scene.system.constraints is None  # tree joints are coordinates, not equality rows


def test_the_double_pendulums_control_gradient_equals_central_differences(pendulum):
    """d (final cart and pole angles) / d controls at three steps, against central differences."""
    _, scene, run = pendulum
    u0 = jnp.asarray(np.random.default_rng(2).uniform(-0.3, 0.3, size=(STEPS, 1)))
    weights = jnp.array([1.0, 0.5, -0.7])
    loss = lambda u: weights @ run(scene.system, u).q[-1]
    grad = jax.jit(jax.grad(loss))(u0)
    for k in (0, STEPS // 2, STEPS - 5):
        e = jnp.zeros_like(u0).at[k, 0].set(FD_EPS)
        fd = (loss(u0 + e) - loss(u0 - e)) / (2 * FD_EPS)
        np.testing.assert_allclose(float(grad[k, 0]), float(fd), rtol=FD_RTOL, atol=1e-12)
    assert np.all(np.isfinite(np.asarray(grad)))


def test_the_cart_stops_rigidly_at_its_range(pendulum):
    """The slider pushed against its upper stop (range +-1 m) by a constant force comes to rest on it: the stop's
    impulse carries the push, and the cart never passes the stop."""
    _, scene, run = pendulum
    traj = run(scene.system, jnp.ones((STEPS, 1)))
    x = np.asarray(traj.q[:, 0])
    (upper,) = [k for name, side, k in scene.bodies.limit_rows() if name == "slider" and side == "upper"]
    hits = np.flatnonzero(np.asarray(traj.impulses.normal)[:, upper] > 0)
    assert hits.size and x.max() <= 1.0 + 1e-9
    np.testing.assert_allclose(x[hits[0] + 2 :], 1.0, rtol=0, atol=1e-9)
    assert bool(traj.stats.converged.all())


def test_the_hopper_lifted_clear_of_the_floor_steps_as_mujocos_euler_integrator():
    """The hopper 2 m up, its hinges mid-range, small random controls: no contact and no stop in MuJoCo, and
    q equals MuJoCo's qpos to 1e-8 after 100 steps."""
    xml = _with_key("hopper", [0.0, 3.25, 0.1, -1.2, -1.0, 0.2])
    scene = _load(xml, keyframe="start")
    u = np.random.default_rng(3).uniform(-0.05, 0.05, size=(STEPS, 3))
    traj = jax.jit(lambda u: rbd.simulate(*scene, dt=scene.dt, steps=STEPS, controls=u))(jnp.asarray(u))
    theirs, constrained = _mujoco_rollout(xml, u)
    assert not constrained
    assert bool(traj.stats.converged.all())
    np.testing.assert_allclose(np.asarray(traj.q), theirs, rtol=0, atol=EULER_TOL)


def test_the_ant_in_free_fall_steps_as_mujocos_euler_integrator():
    """The ant 3 m up, tumbling (|w| = 2.7 rad/s), hinges mid-range, small random controls, 50 steps of 0.01 s:
    q equals MuJoCo's qpos to 1e-8, the free joint's quaternion turned by the exact rotation as MuJoCo's is."""
    start = [0.0, 0.0, 3.0, 0.9, 0.1, -0.2, 0.3, 0.1, 0.9, -0.1, -0.9, 0.2, -0.9, -0.1, 0.9]
    spin = [0.1, -0.2, 0.3, 1.5, -2.0, 1.0] + [0.0] * 8
    xml = (
        (DATA / "ant.xml")
        .read_text()
        .replace(
            "</mujoco>",
            f'<keyframe><key name="start" qpos="{" ".join(map(repr, start))}" qvel="{" ".join(map(repr, spin))}"/>'
            "</keyframe></mujoco>",
        )
    )
    scene = _load(xml, keyframe="start")
    steps = 50
    u = np.random.default_rng(4).uniform(-0.05, 0.05, size=(steps, 8))
    traj = jax.jit(lambda u: rbd.simulate(*scene, dt=scene.dt, steps=steps, controls=u))(jnp.asarray(u))
    theirs, constrained = _mujoco_rollout(xml, u)
    assert not constrained and bool(traj.stats.converged.all())
    np.testing.assert_allclose(np.asarray(traj.q), theirs, rtol=0, atol=EULER_TOL)


def test_a_ball_joints_step_is_finite_and_differentiable_at_rest():
    """The exact quaternion turn at zero spin: the step's q and its gradient with respect to v stay finite."""
    xml = """<mujoco><worldbody><body><joint type="ball"/><geom type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/>
             </body></worldbody></mujoco>"""
    scene = _load(xml)
    q1 = lambda v: tree_fns.advance(scene.bodies, scene.state.q, v, 0.01, scene.system.params)
    assert np.all(np.isfinite(np.asarray(jax.jacfwd(q1)(jnp.zeros(3)))))
    np.testing.assert_allclose(np.asarray(jax.jacfwd(q1)(jnp.zeros(3)))[1:], 0.005 * np.eye(3), rtol=0, atol=1e-15)


FRICTIONLOSS_XML = """
<mujoco><option timestep="0.01" gravity="0 0 0"/><worldbody><body>
  <joint name="h" type="hinge" axis="0 0 1" frictionloss="2.0"/>
  <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05" mass="1"/>
</body></worldbody><actuator><motor joint="h" gear="1"/></actuator></mujoco>"""


@pytest.mark.slow  # the sweep over frictionloss (hold and slip) stays in the default set
def test_a_hinges_frictionloss_holds_below_its_bound_and_subtracts_above_it():
    """A hinge with frictionloss f = 2 N m driven by a constant torque for 0.5 s: at 1.5 N m it does not move (to
    1e-12; MuJoCo's regularized friction lets it creep); at 3 N m it accelerates at (tau - f) / I and follows
    MuJoCo's Euler steps to 1e-8. The final rate's gradient with respect to f is -t / I."""
    scene = _load(FRICTIONLOSS_XML)
    assert scene.bodies.frictionloss == (0,) and scene.bodies.friction_rows() == (("h", 0, 0),)
    steps = 50
    run = jax.jit(lambda system, tau: rbd.simulate(system, scene.state, dt=scene.dt, steps=steps, controls=tau))
    I = float(tree_fns.mass_matrix(scene.bodies, scene.state.q, scene.system.params)[0, 0])
    held = run(scene.system, jnp.full((steps, 1), 1.5))
    assert bool(held.stats.converged.all()) and np.abs(np.asarray(held.q)).max() <= 1e-12
    np.testing.assert_allclose(np.asarray(held.impulses.friction)[:, 0, 0], -1.5 * scene.dt, rtol=1e-12)
    u = jnp.full((steps, 1), 3.0)
    slipping = run(scene.system, u)
    t = steps * scene.dt
    np.testing.assert_allclose(float(slipping.v[-1, 0]), (3.0 - 2.0) / I * t, rtol=1e-12)
    theirs, _ = _mujoco_rollout(FRICTIONLOSS_XML, np.asarray(u), keyframe=False)
    np.testing.assert_allclose(np.asarray(slipping.q), theirs, rtol=0, atol=EULER_TOL)

    def final_rate(f):
        system = eqx.tree_at(lambda s: s.params.frictionloss, scene.system, jnp.array([f]))
        return run(system, u).v[-1, 0]

    np.testing.assert_allclose(float(jax.grad(final_rate)(2.0)), -t / I, rtol=1e-8)


def test_a_sweep_over_frictionloss_holds_the_lanes_below_it_and_slips_the_others():
    """`rbd.sweep` over f = 1, 2.5, 4 N m with a 3 N m drive: the lanes above the drive hold, the one below
    accelerates at (tau - f) / I, every lane converged."""
    scene = _load(FRICTIONLOSS_XML)
    steps, tau = 20, 3.0
    I = float(tree_fns.mass_matrix(scene.bodies, scene.state.q, scene.system.params)[0, 0])

    def final_rate(f):
        system = eqx.tree_at(lambda s: s.params.frictionloss, scene.system, f[None])
        traj = rbd.simulate(system, scene.state, dt=scene.dt, steps=steps, controls=jnp.full((steps, 1), tau))
        return traj.v[-1, 0], traj.stats.converged.all()

    f = jnp.array([1.0, 2.5, 4.0])
    rate, converged = rbd.sweep(final_rate, f)
    assert bool(converged.all())
    expected = np.maximum(tau - np.asarray(f), 0.0) / I * steps * scene.dt
    np.testing.assert_allclose(np.asarray(rate), expected, rtol=1e-12, atol=1e-12)


IMPULSE_FLOOR = 1e-9  # N s: a contact impulse above it counts as a contact in jaxrbd's step


@pytest.mark.slow
def test_the_hopper_dropped_lands_on_its_foot_like_mujoco():
    """The hopper dropped 0.3 m, tilted 0.1 rad, with the file's integrator (RK4) in MuJoCo: from MuJoCo's first
    contact to 0.5 s, jaxrbd's foot (and nothing else) is on the floor at every step, where MuJoCo's foot is;
    MuJoCo's soft foot sinks into the floor until its leg touches too, which the rigid foot does not."""
    xml = _with_key("hopper", [0.0, 1.55, 0.1, 0.0, 0.0, 0.0])
    scene = _load(xml, keyframe="start")
    steps = round(0.5 / scene.dt)
    traj = jax.jit(lambda: rbd.simulate(*scene, dt=scene.dt, steps=steps))()
    assert bool(traj.stats.converged.all()) and float(traj.stats.residual.max()) <= 1e-8
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    theirs, force = [], np.zeros(6)
    for _ in range(steps):
        mujoco.mj_step(m, d)
        bodies = set()
        for i, c in enumerate(d.contact[: d.ncon]):
            mujoco.mj_contactForce(m, d, i, force)
            if force[0] > 0:
                bodies |= {mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, m.geom_bodyid[g]) for g in (c.geom1, c.geom2)}
        theirs.append(bodies - {"world"})
    pairs = scene.bodies.geometry.pair_names
    index = np.asarray(jax.vmap(lambda q: scene.system.contacts(q).index)(traj.q[:-1]))
    impulses = np.asarray(traj.impulses.normal)
    ours = [
        {b for i, p in zip(index[k], impulses[k]) if i < len(pairs) and p > IMPULSE_FLOOR for b in pairs[i]}
        for k in range(steps)
    ]
    statics = set(scene.bodies.geometry.statics)
    first = next(k for k, bodies in enumerate(theirs) if bodies)
    assert first > 0 and not any(ours[: first - 1])
    for k in range(first + 1, steps):
        assert ours[k] - statics == {"foot"} and "foot" in theirs[k], (k, ours[k], theirs[k])


# --- Loading --------------------------------------------------------------------------------------


def test_loading_the_gymnasium_models_compiles_nothing(compilations):
    counts = compilations(*(f"rbd.load_mjcf({str(DATA / f'{name}.xml')!r})" for name in MODELS))
    for load, (count, first) in counts.items():
        assert count == 0, f"{load}: {count} compilations while loading, the first {first}"


def test_a_tree_loads_with_mujocos_state_and_names_what_it_refuses():
    scene = _load(str(DATA / "ant.xml"))
    m = mujoco.MjModel.from_xml_path(str(DATA / "ant.xml"))
    assert isinstance(scene.bodies, rbd.bodies.Tree) and scene.joint_coordinates
    np.testing.assert_array_equal(np.asarray(scene.state.q), m.qpos0)
    assert scene.state.v.shape == (m.nv,) and len(scene.motors) == m.nu
    assert np.array_equal(scene.from_mujoco_qpos(m.qpos0), m.qpos0)
    with pytest.raises(ValueError, match="coordinates must be one of"):
        rbd.load_mjcf(str(DATA / "ant.xml"), coordinates="joint")
    closed = re.sub(
        r"</worldbody>",
        "</worldbody><equality><connect body1='torso' body2='world' anchor='0 0 0'/></equality>",
        (DATA / "ant.xml").read_text(),
    )
    with pytest.raises(NotImplementedError, match="equality constraints"):
        _load(closed)
    free_motor = """<mujoco><worldbody><body><freejoint name="f"/><geom type="sphere" size="0.1"/></body>
                    </worldbody><actuator><motor name="m" joint="f" gear="1 0 0 0 0 0"/></actuator></mujoco>"""
    with pytest.raises(NotImplementedError, match="actuator 'm'.*hinge, slide and ball joints"):
        _load(free_motor)


BALL_ARM_XML = """<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <body name="upper" pos="0 0 2">
      <joint name="shoulder" type="ball" damping="0.02" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.1 0 -0.4" size="0.06" contype="0" conaffinity="0"/>
      <body name="lower" pos="0.1 0 -0.4">
        <joint name="elbow" type="ball" armature="0.005"/>
        <geom type="capsule" fromto="0 0 0 0 0.05 -0.35" size="0.05" contype="0" conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="twist" joint="shoulder" gear="0.6 0.5 0.1 0 0 0" ctrlrange="-0.5 0.5" ctrllimited="true"/>
    <position name="bend" joint="elbow" gear="1 0.5 0 0 0 0" kp="0.4" forcerange="-0.5 0.5" forcelimited="true"/>
    <velocity name="brake" joint="shoulder" gear="1 0 1 0 0 0" kv="0.05"/>
  </actuator>
</mujoco>"""


@pytest.fixture(scope="module")
def ball_arm():
    """Two capsules on ball joints driven by a motor, a position servo and a velocity servo about tilted axes,
    and its jitted rollout of the controls from a state."""
    scene = _load(BALL_ARM_XML)
    run = jax.jit(
        lambda q, v, u: rbd.simulate(scene.system, rbd.State(scene.state.t, q, v), dt=scene.dt, steps=STEPS, controls=u)
    )
    return scene, run


def check_actuator_forces(scene, xml, rng, states, ctrl_scale):
    """At `states` random states and controls (uniform within +-ctrl_scale), the actuators' joint forces of the
    loaded `scene` equal MuJoCo's qfrc_actuator for the same file to round-off."""
    m, d = _euler(xml)
    force = jax.jit(lambda q, v, u: tree_fns.actuator_force(scene.bodies, q, v, scene.system.params, u))
    for _ in range(states):
        qpos, qvel = _random_state(m, rng)
        ctrl = rng.uniform(-ctrl_scale, ctrl_scale, size=m.nu)
        d.qpos[:], d.qvel[:], d.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(m, d)
        ours = np.asarray(force(jnp.asarray(qpos), jnp.asarray(qvel), jnp.asarray(ctrl)))
        scale = DYNAMICS_RTOL * max(1.0, np.abs(d.qfrc_actuator).max())
        np.testing.assert_allclose(ours, d.qfrc_actuator, rtol=0, atol=scale)


def test_ball_joint_actuators_apply_mujocos_forces(ball_arm):
    """At random states and controls (quaternions of both signs, rotations past pi included), the actuators'
    joint forces equal MuJoCo's qfrc_actuator to round-off."""
    check_actuator_forces(ball_arm[0], BALL_ARM_XML, np.random.default_rng(5), states=6, ctrl_scale=2.0)


def test_ball_joint_actuators_step_as_mujocos_euler_integrator(ball_arm):
    """From a tilted, spinning start under random controls, 100 steps without contact or limit: q equals
    MuJoCo's qpos to 1e-8 (the quaternions turned by the exact rotation as MuJoCo's)."""
    scene, run = ball_arm
    m, d = _euler(BALL_ARM_XML)
    rng = np.random.default_rng(6)
    qpos, qvel = _random_state(m, rng)
    qvel *= 0.5
    u = rng.uniform(-1.0, 1.0, size=(STEPS, m.nu))
    traj = run(jnp.asarray(qpos), jnp.asarray(qvel), jnp.asarray(u))
    d.qpos[:], d.qvel[:] = qpos, qvel
    theirs = [qpos.copy()]
    for ctrl in u:
        d.ctrl[:] = ctrl
        mujoco.mj_step(m, d)
        assert d.nefc == 0
        theirs.append(d.qpos.copy())
    assert bool(traj.stats.converged.all())
    np.testing.assert_allclose(np.asarray(traj.q), np.array(theirs), rtol=0, atol=EULER_TOL)


def test_ball_joint_actuators_gradient_is_finite_at_the_identity_and_equals_central_differences(ball_arm):
    """From rest at the identity (the rotation vector's series), d (final q) / d controls equals central
    differences at three steps, and every entry is finite."""
    scene, run = ball_arm
    u0 = jnp.asarray(np.random.default_rng(7).uniform(-0.3, 0.3, size=(STEPS, 3)))
    weights = jnp.asarray(np.random.default_rng(8).normal(size=scene.state.q.shape[0]))
    loss = lambda u: weights @ run(scene.state.q, scene.state.v, u).q[-1]
    grad = jax.jit(jax.grad(loss))(u0)
    assert np.all(np.isfinite(np.asarray(grad)))
    # The entries are 1e-4 to 1e-2 of a loss of size 1 whose 100 steps carry about 1e-15 of round-off: a step of
    # 1e-5 leaves 1.4e-10 of it in the smallest entry (2e-6 relative), 1e-4 ten times less, and its truncation
    # error is below that (a step of 1e-3 agrees with the gradient to 1e-8).
    eps = 1e-4
    for k, i in ((0, 1), (STEPS // 2, 0), (STEPS - 5, 2)):
        e = jnp.zeros_like(u0).at[k, i].set(eps)
        fd = (loss(u0 + e) - loss(u0 - e)) / (2 * eps)
        np.testing.assert_allclose(float(grad[k, i]), float(fd), rtol=FD_RTOL, atol=1e-12)


PAIR_XML = """<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.9"/>
    <body name="box" pos="0 0 0.1">
      <freejoint/>
      <geom name="box" type="box" size="0.1 0.1 0.1" mass="1" contype="0" conaffinity="0" friction="0.9"/>
    </body>
    <body name="ball" pos="1 0 0.05">
      <freejoint/>
      <geom name="ball" type="sphere" size="0.05" mass="0.2" friction="0.9"/>
    </body>
  </worldbody>
  <contact>{pairs}</contact>
  <keyframe><key name="slide" qpos="0 0 0.1 1 0 0 0 1 0 0.05 1 0 0 0" qvel="1 0 0 0 0 0 0 0 0 0 0 0"/></keyframe>
</mujoco>"""


def test_an_explicit_pair_collides_geoms_the_filters_leave_apart_with_its_own_friction():
    """The box has contype 0: only its <pair> with the floor makes it collide, with the pair's friction 0.3 in
    place of the geoms' 0.9. Launched at 1 m/s it slides at the exact deceleration mu g = 2.943 m/s^2 on the
    same four corner contacts as MuJoCo's; without the pair it falls through the floor in both engines."""
    pair = '<pair geom1="box" geom2="floor" friction="0.3 0.3 0.005 0.0001 0.0001"/>'
    scene = _load(PAIR_XML.format(pairs=pair), keyframe="slide")
    names = scene.bodies.geometry.pair_names
    box = [i for i, p in enumerate(names) if "box" in p]
    assert len(box) == 4 and set(names[box[0]]) == {"floor (geom 0)", "box"}
    np.testing.assert_array_equal(np.asarray(scene.system.mu)[box], 0.3)
    assert not any("ball" in p and "box" in p for p in names)  # the box's filters still keep the ball apart
    traj = scene.simulate(100)
    assert bool(traj.stats.converged.all())
    v = np.asarray(traj.v[:, 0])
    np.testing.assert_allclose((v[10] - v[60]) / (50 * 0.002), 0.3 * 9.81, rtol=1e-9)
    assert abs(float(traj.q[-1, 2]) - 0.1) < 1e-6

    m = mujoco.MjModel.from_xml_string(PAIR_XML.format(pairs=pair))
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    for _ in range(10):
        mujoco.mj_step(m, d)
    box_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "box")
    on_box = [i for i in range(d.ncon) if box_geom in (d.contact.geom1[i], d.contact.geom2[i])]
    assert len(on_box) == 4 and np.allclose(d.contact.friction[on_box, 0], 0.3)

    loose = _load(PAIR_XML.format(pairs=""), keyframe="slide")
    assert not any("box" in p for p in loose.bodies.geometry.pair_names)


@pytest.mark.slow
def test_an_explicit_pair_of_condim_1_is_frictionless_and_its_soft_settings_are_listed():
    pair = '<pair geom1="box" geom2="floor" condim="1" margin="0.01"/>'
    with pytest.warns(UserWarning, match="of <pair> elements \\['floor/box'\\]"):
        scene = rbd.load_mjcf(PAIR_XML.format(pairs=pair), keyframe="slide")
    box = [i for i, p in enumerate(scene.bodies.geometry.pair_names) if "box" in p]
    np.testing.assert_array_equal(np.asarray(scene.system.mu)[box], 0.0)
    traj = scene.simulate(50)
    np.testing.assert_allclose(np.asarray(traj.v[:, 0]), 1.0, rtol=0, atol=1e-12)  # slides without friction
    with pytest.raises(NotImplementedError, match="<pair> elements are not supported in maximal coordinates"):
        rbd.load_mjcf(PAIR_XML.format(pairs=pair), coordinates="maximal")
