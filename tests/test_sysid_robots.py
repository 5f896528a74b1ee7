"""Robots identified from logs that MuJoCo's C engine made: a model file's joint parameters fitted by name.

The arm (`foreign.arm_xml`) is a two-link hinged arm with motors, stepped by
MuJoCo's Euler integrator, which is jaxrbd's step in joint coordinates (the damper
implicit). MuJoCo's frictionloss is soft: where a joint sticks it creeps a little,
where jaxrbd's dry friction holds it exactly; that is the only difference between
the two models, and the fits below see it through the noise.
"""

import math
import warnings

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


@pytest.mark.slow
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


@pytest.mark.slow
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
