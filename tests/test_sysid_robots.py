"""Robots identified from logs that MuJoCo's C engine made: a model file's joint parameters fitted by name.

The arm (`foreign.arm_xml`) is a two-link hinged arm with motors, stepped by
MuJoCo's Euler integrator, which is jaxrbd's step in joint coordinates (the damper
implicit). MuJoCo's frictionloss is soft: where a joint sticks it creeps a little,
where jaxrbd's dry friction holds it exactly; that is the only difference between
the two models, and the fits below see it through the noise.
"""

import math
import warnings

import jax
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import foreign

pytest.importorskip("mujoco", reason="the robot identification tests need MuJoCo (pip install jaxrbd[test])")

TRUTH = {"j1.armature": 0.02, "j1.damping": 0.3, "j1.frictionloss": 0.15, "link2.mass": 0.6}
GUESS = foreign.arm_xml(j1={"armature": 0.03, "damping": 0.2, "frictionloss": 0.1}, link2_mass=0.5)
NOISE = 1e-3  # rad
STEPS = 200  # 2 s at 100 Hz
LOGS = 3
HANGING = np.array([math.pi / 2, 0.0])  # both links straight down


def _logs(amplitude, *, qpos0=None, still=()):
    """LOGS MuJoCo logs of the true arm under random excitations (the controls `still` held at zero)."""
    out = []
    for seed in range(LOGS):
        u = foreign.excitation(STEPS, 2, amplitude=amplitude, seed=seed)
        u[:, list(still)] = 0.0
        out.append(foreign.mujoco_log(foreign.arm_xml(), u, qpos0=qpos0, noise=NOISE, seed=10 + seed))
    return out


def _fit(named, logs):
    problem = named.replay(
        np.stack([log.observed for log in logs]),
        np.stack([log.controls for log in logs]),
        qpos0=np.stack([log.qpos0 for log in logs]),
        columns=("j1", "j2"),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _solve(named, problem)
    return result, [str(w.message) for w in caught]


def _solve(named, problem):
    return rbd.sysid.fit(
        problem,
        named.values,
        bounds=named.bounds,
        optimizer=rbd.sysid.LevenbergMarquardt(),
        noise=NOISE,
        steps=30,
        progress=False,
    )


@pytest.fixture(scope="module")
def named():
    return rbd.sysid.ModelParameters(rbd.load_mjcf(GUESS), list(TRUTH))


def test_named_parameters_read_the_file_and_set_what_the_file_would():
    """Each name reads the file's value; apply gives the parameters of the file written with the new values
    (a link's mass scales its inertia as a geom's mass= does)."""
    scene = rbd.load_mjcf(GUESS)
    names = ["j1.armature", "j1.damping", "j1.frictionloss", "j2.stiffness", "link2.mass", "u1.gear"]
    named = rbd.sysid.ModelParameters(scene, ",".join(names))
    assert named.values == {
        "j1.armature": 0.03,
        "j1.damping": 0.2,
        "j1.frictionloss": 0.1,
        "j2.stiffness": 0.0,
        "link2.mass": 0.5,
        "u1.gear": 1.0,
    }
    assert isinstance(named.bounds["j1.damping"], rbd.sysid.Positive)
    assert isinstance(named.bounds["j2.stiffness"], rbd.sysid.Free)
    system = named.apply(scene.system, TRUTH | {"u1.gear": 2.0})
    file = rbd.load_mjcf(foreign.arm_xml()).system.params
    for field in ("armature", "damping", "frictionloss", "mass", "inertia"):
        np.testing.assert_allclose(getattr(system.params, field), getattr(file, field), rtol=1e-12, atol=0)
    np.testing.assert_array_equal(system.params.actuators.gear, [2.0, 1.0])


def test_a_contact_pairs_friction_is_named_by_its_bodies():
    xml = """<mujoco><worldbody><geom name="floor" type="plane" size="1 1 0.1" friction="0.7"/>
      <body name="ball" pos="0 0 0.2"><freejoint/><geom type="sphere" size="0.1" friction="0.4"/></body>
      </worldbody></mujoco>"""
    scene = rbd.load_mjcf(xml)
    named = rbd.sysid.ModelParameters(scene, ["floor/ball.friction"])
    assert named.values == {"floor/ball.friction": 0.7}  # MuJoCo's rule: the larger of the two
    system = named.apply(scene.system, {"floor/ball.friction": 0.25})
    np.testing.assert_array_equal(system.mu, np.full_like(np.asarray(scene.system.mu), 0.25))
    with pytest.raises(ValueError, match="no contact between 'floor' and 'wall'"):
        rbd.sysid.ModelParameters(scene, ["floor/wall.friction"])


@pytest.mark.parametrize(
    "name, message",
    [
        ("j9.damping", "no joint 'j9'; its joints: \\['j1', 'j2'\\]"),
        ("j1.viscosity", "unknown attribute 'viscosity'"),
        ("link9.mass", "no body 'link9'"),
        ("u9.gear", "no actuator 'u9'"),
        ("j1damping", "expected ELEMENT.ATTRIBUTE"),
        ("j2.frictionloss", None),  # in the file: accepted
    ],
)
def test_bad_names_get_an_error_naming_them(name, message):
    scene = rbd.load_mjcf(GUESS)
    if message is None:
        rbd.sysid.ModelParameters(scene, [name])
        return
    with pytest.raises(ValueError, match=message):
        rbd.sysid.ModelParameters(scene, [name])


def test_parameters_the_loaded_model_has_no_row_for_are_refused_at_zero():
    scene = rbd.load_mjcf(foreign.arm_xml(j1={"frictionloss": 0.0, "damping": 0.0}, j2={"damping": 0.0}))
    with pytest.raises(ValueError, match="'j1.frictionloss': joint 'j1' has no frictionloss in the file"):
        rbd.sysid.ModelParameters(scene, ["j1.frictionloss"])
    with pytest.raises(ValueError, match="no damper"):
        rbd.sysid.ModelParameters(scene, ["j1.damping"])
    with pytest.raises(ValueError, match="columns: 'link1' is not a hinge or slide joint"):
        rbd.sysid.ModelParameters(scene, ["link2.mass"]).replay(
            np.zeros((1, 3, 1)), np.zeros((1, 2, 2)), columns=["link1"]
        )
    with pytest.raises(ValueError, match=r"controls must have shape \(1, 2, 2\)"):
        rbd.sysid.ModelParameters(scene, ["link2.mass"]).replay(np.zeros((1, 3, 2)), np.zeros((1, 3, 2)))


@pytest.mark.slow
def test_the_arms_joint_parameters_and_link_mass_come_back_from_mujoco_logs(named):
    """Three 2-second MuJoCo logs at 100 Hz with 1e-3 rad noise and random excitations: armature, damping and
    frictionloss of the shoulder and the forearm's mass each within 2% of MuJoCo's (measured: within 0.3%), each
    95% interval holding it, the RMS at the noise."""
    result, said = _fit(named, _logs(1.5))
    for k, value in TRUTH.items():
        fitted, (lo, hi) = float(result.params[k]), result.interval[k]
        assert fitted == pytest.approx(value, rel=0.02), k
        assert lo <= value <= hi, (k, lo, hi)
        assert bool(result.uncertainty.identified[k])
    assert result.uncertainty.rms == pytest.approx(NOISE, rel=0.15)
    assert not said


@pytest.mark.long  # test_sysid_uncertainty.py names unidentified parameters in the default set
def test_a_log_that_never_moves_the_shoulder_names_its_damping_as_not_identified(named):
    """The arm hanging, only the elbow driven gently: the shoulder's dry friction holds it (MuJoCo's creeps by
    1e-5 rad), so its damping and armature do not act and are named; its frictionloss gets the one-sided bound
    the holding torque gives; the forearm's mass is still identified."""
    result, said = _fit(named, _logs(0.2, qpos0=HANGING, still=(0,)))
    identified = result.uncertainty.identified
    assert not bool(identified["j1.damping"]) and not bool(identified["j1.armature"])
    assert not bool(identified["j1.frictionloss"])
    lo, hi = result.uncertainty.range["j1.frictionloss"]
    assert 0.0 < float(lo) < TRUTH["j1.frictionloss"] and float(hi) == np.inf
    assert bool(identified["link2.mass"]) and float(result.params["link2.mass"]) == pytest.approx(0.6, rel=0.02)
    assert any("not identified by the data" in s and "j1.damping" in s for s in said)


@pytest.mark.long  # 50 fits, about 5 minutes of one core; test_sysid_uncertainty.py checks the calibration on objects
def test_the_intervals_cover_the_truth_at_their_level_over_50_synthetic_logs(named, capsys):
    """50 logs that jaxrbd itself makes from the true arm (one 2-second excitation each, its own noise draw): the
    95% intervals of the 4 parameters hold the truth in 90-99% of the 200 cases (MuJoCo's soft friction aside,
    this is the calibration of the Gauss-Newton intervals)."""
    scene = named.scene
    truth = named.apply(scene.system, TRUTH)
    u = foreign.excitation(STEPS, 2, amplitude=1.5, seed=0)
    clean = np.asarray(rbd.simulate(truth, scene.state, dt=scene.dt, steps=STEPS, controls=u).q)
    rng = np.random.default_rng(7)
    held = []
    for _ in range(50):
        observed = clean + NOISE * rng.standard_normal(clean.shape)
        result = _solve(named, named.replay(observed[None], u[None]))
        held += [bool(result.interval[k][0] <= v <= result.interval[k][1]) for k, v in TRUTH.items()]
    coverage = np.mean(held)
    with capsys.disabled():
        print(f"\n95% intervals of the arm's 4 parameters over 50 synthetic logs: coverage {coverage:.3f}")
    assert 0.90 <= coverage <= 0.99, coverage


@pytest.mark.slow
def test_body_positions_by_name_are_mujocos_xpos():
    """Observed columns may be a body's world position: the replay of a MuJoCo log from its true start, at the
    true parameters, puts the forearm's frame where MuJoCo's `mj_kinematics` does, at every row (an arm without
    frictionloss, where the two models' steps are the same)."""
    import mujoco

    xml = foreign.arm_xml(j1={"frictionloss": 0.0}, j2={"frictionloss": 0.0})
    named = rbd.sysid.ModelParameters(rbd.load_mjcf(xml), ["link2.mass"])
    u = foreign.excitation(60, 2, amplitude=1.5, seed=3)
    log = foreign.mujoco_log(xml, u, qpos0=np.array([0.4, -0.3]), noise=0.0)
    m = mujoco.MjModel.from_xml_string(xml)
    d, body = mujoco.MjData(m), mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "link2")
    xpos = []
    for qpos in log.clean:
        d.qpos[:] = qpos
        mujoco.mj_kinematics(m, d)
        xpos.append(np.array(d.xpos[body]))
    observed = np.concatenate([log.clean, np.array(xpos)], axis=1)[None]
    problem = named.replay(observed, u[None], qpos0=log.qpos0[None], columns=("j1", "j2"), bodies=("link2",))
    inputs = jax.tree_util.tree_map(lambda x: x[0], problem.experiments.inputs)
    predicted = np.asarray(problem.predict(named.values, inputs))
    np.testing.assert_allclose(predicted, observed[0], rtol=0.0, atol=1e-9)


def test_bad_replay_arguments_get_an_error_naming_them(named):
    observed, controls = np.zeros((1, 5, 2)), np.zeros((1, 4, 2))
    with pytest.raises(ValueError, match="start must be one of"):
        named.replay(observed, controls, start="first")
    with pytest.raises(ValueError, match="segments must be an integer >= 1"):
        named.replay(observed, controls, start="fit", segments=0)
    with pytest.raises(ValueError, match="segments > 1 needs start='rows' or start='fit'"):
        named.replay(observed, controls, segments=2)
    with pytest.raises(ValueError, match="fewer than 2 steps each"):
        named.replay(observed, controls, start="fit", segments=3)
    with pytest.raises(ValueError, match="bodies: the model has no body 'hand'"):
        named.replay(np.zeros((1, 5, 5)), controls, columns=("j1", "j2"), bodies=("hand",))
    with pytest.raises(ValueError, match=r"observed must have shape \(logs, T, 5\) for 2 columns and 1 bodies"):
        named.replay(observed, controls, columns=("j1", "j2"), bodies=("link2",))
    with pytest.raises(ValueError, match="first three rows, which hold missing"):
        named.replay(np.full((1, 5, 2), np.nan), controls, start="fit")
    with pytest.raises(ValueError, match="need qpos columns"):
        named.replay(np.zeros((1, 5, 3)), controls, bodies=("link2",), start="rows")


def test_start_rows_read_the_first_rows_and_segments_cut_the_logs(named):
    """start='rows' takes the observed angles of the first row and their second-order difference; segments
    restart from their own first rows, and a row two segments share counts once."""
    t = np.arange(9) * 0.01
    observed = np.stack([0.1 + 2.0 * t + 3.0 * t**2, -0.2 + 0.5 * t], axis=1)[None]  # exact for a parabola
    controls = np.zeros((1, 8, 2))
    problem = named.replay(observed, controls, start="rows")
    np.testing.assert_allclose(problem.experiments.inputs["qpos0"], [[0.1, -0.2]], atol=1e-14)
    np.testing.assert_allclose(problem.experiments.inputs["qvel0"], [[2.0, 0.5]], atol=1e-12)
    problem = named.replay(observed, controls, start="fit", segments=2)
    assert problem.experiments.observed.shape == (2, 5, 2) and problem.per_experiment == ("start.qpos", "start.qvel")
    np.testing.assert_allclose(problem.experiments.inputs["qpos0"][1], observed[0, 4], atol=1e-14)
    np.testing.assert_allclose(problem.experiments.inputs["qvel0"][1, 0], 2.0 + 6.0 * 0.04, atol=1e-12)
    np.testing.assert_array_equal(problem.experiments.mask[:, -1, 0], [0.0, 1.0])
    assert float(np.sum(problem.experiments.mask)) == observed.size  # every row once
    start = named.initial(problem)
    assert start["start.qpos"].shape == (2, 2) and not np.any(start["start.qvel"])
    assert {k: start[k] for k in TRUTH} == named.values


@pytest.mark.long  # the arm's joint parameters and link mass (slow set) come back from the same logs
def test_the_start_state_is_fitted_from_the_logs_rows_and_long_logs_in_segments(named):
    """Three MuJoCo logs from start states the fit is not told (angles and speeds of 0.5-1.2 rad/s): with
    start='fit' the start of each log is fitted beside the parameters from its first rows' estimate, whose
    velocities are 0.1-0.3 rad/s off through the noise; with start='fit', segments=4, each 50-step segment of
    each log starts from its own fitted state (multiple shooting). Each parameter within 2%, its interval
    holding it, the RMS at the noise."""
    starts = [np.array([0.3, -0.2]), np.array([1.2, 0.4]), np.array([-0.5, 0.8])]
    logs = [
        foreign.mujoco_log(
            foreign.arm_xml(),
            foreign.excitation(STEPS, 2, amplitude=1.5, seed=s),
            qpos0=starts[s],
            qvel0=np.array([0.5, -1.0]),
            noise=NOISE,
            seed=10 + s,
        )
        for s in range(LOGS)
    ]
    observed, controls = np.stack([log.observed for log in logs]), np.stack([log.controls for log in logs])
    for segments in (1, 4):
        problem = named.replay(observed, controls, columns=("j1", "j2"), start="fit", segments=segments)
        result = rbd.sysid.fit(
            problem,
            named.initial(problem),
            bounds=named.bounds,
            optimizer=rbd.sysid.LevenbergMarquardt(),
            noise=NOISE,
            steps=30,
            progress=False,
        )
        for k, value in TRUTH.items():
            fitted, (lo, hi) = float(result.params[k]), result.interval[k]
            assert fitted == pytest.approx(value, rel=0.02), (segments, k)
            assert lo <= value <= hi, (segments, k, lo, hi)
        assert result.uncertainty.rms == pytest.approx(NOISE, rel=0.15)
        if segments == 1:
            v0 = np.asarray(problem.experiments.inputs["qvel0"] + result.params["start.qvel"])
            np.testing.assert_allclose(v0, np.stack([log.qvel0 for log in logs]), atol=0.05)


def test_a_bodys_moments_of_inertia_are_named_as_mujocos_fullinertia():
    """link2.iyy is the diagonal entry of MuJoCo's inertia about the centre of mass in the body frame (from the
    compiled body_inertia in its frame body_iquat); apply sets it as given, after a named mass has scaled the
    rest of the tensor."""
    import mujoco

    m = mujoco.MjModel.from_xml_string(GUESS)
    b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "link2")
    R = np.zeros(9)
    mujoco.mju_quat2Mat(R, m.body_iquat[b])
    R = R.reshape(3, 3)
    inertia = R @ np.diag(m.body_inertia[b]) @ R.T
    scene = rbd.load_mjcf(GUESS)
    named = rbd.sysid.ModelParameters(scene, ["link2.iyy", "link2.mass", "link2.izz"])
    assert named.values["link2.iyy"] == pytest.approx(inertia[1, 1], rel=1e-12)
    assert named.values["link2.izz"] == pytest.approx(inertia[2, 2], rel=1e-12)
    system = named.apply(scene.system, {"link2.iyy": 0.01, "link2.mass": 1.0})
    i = scene.bodies.names.index("link2")
    expected = np.asarray(scene.system.params.inertia[i]) * (1.0 / 0.5)
    expected[1, 1] = 0.01
    np.testing.assert_allclose(np.asarray(system.params.inertia[i]), expected, rtol=1e-12)
    assert float(system.params.mass[i]) == 1.0


@pytest.mark.long  # the arm's joint parameters and link mass from MuJoCo logs are in the slow set
def test_a_links_moment_of_inertia_is_fitted_beside_its_mass(named):
    """Synthetic logs of the true arm with link2's iyy raised by half: the fit of link2.iyy and link2.mass from
    a wrong start finds both within 2%, inside their intervals (the arm swings about y: iyy is the moment that
    acts)."""
    scene = rbd.load_mjcf(foreign.arm_xml())
    inertia = rbd.sysid.ModelParameters(scene, ["link2.iyy", "link2.mass"])
    truth = {"link2.iyy": 1.5 * inertia.values["link2.iyy"], "link2.mass": 0.6}
    system = inertia.apply(scene.system, truth)
    rng = np.random.default_rng(3)
    controls, observed = [], []
    for seed in range(2):
        u = foreign.excitation(STEPS, 2, amplitude=1.5, seed=seed)
        clean = np.asarray(rbd.simulate(system, scene.state, dt=scene.dt, steps=STEPS, controls=u).q)
        controls.append(u)
        observed.append(clean + NOISE * rng.standard_normal(clean.shape))
    problem = inertia.replay(np.stack(observed), np.stack(controls))
    start = {"link2.iyy": truth["link2.iyy"] * 0.6, "link2.mass": 0.5}
    result = rbd.sysid.fit(
        problem, start, bounds=inertia.bounds, optimizer=rbd.sysid.LevenbergMarquardt(), noise=NOISE, progress=False
    )
    for k, value in truth.items():
        lo, hi = result.interval[k]
        assert float(result.params[k]) == pytest.approx(value, rel=0.02), k
        assert lo <= value <= hi, (k, lo, hi)
