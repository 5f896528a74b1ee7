"""`jaxrbd fit --scene module:function`: any scene factory, columns by coordinate, intervals."""

import json
import sys
import textwrap

import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.cli import main
from jaxrbd.cli.fit import TrajectoryFileError, model_file_factory

DT = 0.01
STEPS = 40
MU_TRUE = 0.3
NOISE = 1e-4  # m, on x
MU_RTOL = 5e-3

FACTORY = '''
import jaxrbd as rbd


def planar_block(mu=0.5, speed=1.5, angle=0.0):
    """A planar box launched at `speed` on a line (q = x, z, theta)."""
    return rbd.scenes.block_on_incline(angle=angle, mu=mu, speed=speed, dim=2)
'''


@pytest.fixture(scope="module")
def factory_module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("factories")
    (folder / "cli_fit_scenes.py").write_text(textwrap.dedent(FACTORY))
    sys.path.insert(0, str(folder))
    yield "cli_fit_scenes"
    sys.path.remove(str(folder))
    sys.modules.pop("cli_fit_scenes", None)


def sliding_x(mu, speed=1.5, g=9.81, steps=STEPS):
    """x of a block sliding on a level line (the planar block, the thrown box) under the scheme's own update (exact):
    v_{k+1} = max(v_k - mu g h, 0), x_{k+1} = x_k + h v_{k+1}."""
    v = np.maximum(speed - mu * g * DT * np.arange(1, steps + 1), 0.0)
    return np.concatenate([[0.0], np.cumsum(DT * v)])


@pytest.fixture(scope="module")
def block_csv(tmp_path_factory):
    """x of the planar block sliding to rest with mu = 0.3; 0.1 mm noise."""
    x = sliding_x(MU_TRUE) + NOISE * np.random.default_rng(3).standard_normal(STEPS + 1)
    path = tmp_path_factory.mktemp("data") / "block.csv"
    np.savetxt(path, np.c_[np.arange(STEPS + 1) * DT, x], delimiter=",", header="t,box_x", comments="")
    return path


@pytest.mark.slow
def test_the_analytic_data_are_the_simulators():
    traj = rbd.simulate(*rbd.scenes.block_on_incline(angle=0.0, mu=MU_TRUE, speed=1.5, dim=2), dt=DT, steps=STEPS)
    np.testing.assert_allclose(np.asarray(traj.q[:, 0]), sliding_x(MU_TRUE), atol=1e-12)


def run(args, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args, "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.slow
def test_fit_any_scene_writes_the_fit_its_interval_and_a_plot(factory_module, block_csv, tmp_path, capsys):
    main(
        [
            "fit",
            str(block_csv),
            "--scene",
            f"{factory_module}:planar_block",
            "--param",
            "mu=0.6",
            "--param",
            "speed=1.5",
            "--fit",
            "mu",
            "--columns",
            "box_x=q0",
            "--dt",
            "1/100",
            "--noise",
            str(NOISE),
            "--out",
            str(tmp_path),
        ]
    )
    result = json.loads((tmp_path / "fit.json").read_text())
    mu = result["params"]["mu"]
    lo, hi = result["interval"]["mu"]
    with capsys.disabled():
        print(f"\ncli fit: mu = {mu:.6f} (true {MU_TRUE}), 95% [{lo:.6f}, {hi:.6f}], {result['seconds']:.1f} s")
    assert abs(mu / MU_TRUE - 1) < MU_RTOL
    assert lo < MU_TRUE < hi and result["identified"]["mu"]
    assert result["fixed"] == {"speed": 1.5} and result["columns"] == {"box_x": "q0"}
    assert (tmp_path / "fit.png").stat().st_size > 0
    assert "mu = " in capsys.readouterr().out


def test_bad_scene_is_named(block_csv, tmp_path, capsys):
    common = [str(block_csv), "--dt", "0.01", "--fit", "mu", "--param", "mu=0.5", "--columns", "box_x=q0"]
    assert "no_such_module_xyz" in run([*common, "--scene", "no_such_module_xyz:f"], tmp_path, capsys)
    assert "module:function" in run([*common, "--scene", "planar_block"], tmp_path, capsys)
    assert "has no 'nope'" in run([*common, "--scene", "jaxrbd.scenes:nope"], tmp_path, capsys)


def test_unknown_param_is_named(factory_module, block_csv, tmp_path, capsys):
    err = run(
        [str(block_csv), "--scene", f"{factory_module}:planar_block", "--dt", "0.01", "--fit", "mu"]
        + ["--param", "mu=0.5", "--param", "friction_coef=0.2", "--columns", "box_x=q0"],
        tmp_path,
        capsys,
    )
    assert "friction_coef" in err and "takes no parameter" in err
    err = run(
        [str(block_csv), "--scene", f"{factory_module}:planar_block", "--dt", "0.01", "--fit", "speed"]
        + ["--param", "mu=0.5", "--columns", "box_x=q0"],
        tmp_path,
        capsys,
    )
    assert "speed" in err and "starting value" in err


def test_unknown_column_is_named(factory_module, block_csv, tmp_path, capsys):
    common = [str(block_csv), "--scene", f"{factory_module}:planar_block", "--dt", "0.01", "--fit", "mu"]
    err = run([*common, "--param", "mu=0.5", "--columns", "box_y=q1"], tmp_path, capsys)
    assert "box_y" in err and "missing column" in err and "box_x" in err
    err = run([*common, "--param", "mu=0.5", "--columns", "box_x=q7"], tmp_path, capsys)
    assert "q7" in err and "3 q coordinates" in err
    err = run([*common, "--param", "mu=0.5", "--columns", "box_x=x"], tmp_path, capsys)
    assert "COLUMN=qI" in err


def box_model(gravity="0 0 -9.81", keyframes=""):
    """An MJCF file: a 0.2 m box of 1 kg resting on a plane (mu 0.5 in both geoms), with these keyframes."""
    return f"""
<mujoco>
  <option timestep="0.01" gravity="{gravity}"/>
  <worldbody>
    <geom type="plane" size="0 0 1" friction="0.5"/>
    <body pos="0 0 0.1">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" friction="0.5"/>
    </body>
  </worldbody>
  <keyframe>{keyframes}</keyframe>
</mujoco>
"""


MODEL = box_model(gravity="3 0 -9.81")


def pushed_x(mu, push=3.0, g=9.81, steps=STEPS):
    """x of a box released on a level plane under a horizontal gravity `push` (mu g < push), the scheme's own
    update: v_{k+1} = v_k + h (push - mu g), x_{k+1} = x_k + h v_{k+1}."""
    v = (push - mu * g) * DT * np.arange(1, steps + 1)
    return np.concatenate([[0.0], np.cumsum(DT * v)])


@pytest.mark.slow
def test_fit_the_friction_of_an_mjcf_model_file(tmp_path, capsys):
    """--scene model.xml: the file's box slides under a tilted gravity; mu of every contact is fitted."""
    model = tmp_path / "pushed_box.xml"
    model.write_text(MODEL)
    mu_true = 0.2
    traj = rbd.simulate(*model_file_factory(str(model))(mu=mu_true), dt=DT, steps=STEPS)
    np.testing.assert_allclose(np.asarray(traj.q[:, 0]), pushed_x(mu_true), atol=1e-12)
    x = pushed_x(mu_true) + NOISE * np.random.default_rng(4).standard_normal(STEPS + 1)
    data = tmp_path / "pushed.csv"
    np.savetxt(data, np.c_[np.arange(STEPS + 1) * DT, x], delimiter=",", header="t,box_x", comments="")
    out = tmp_path / "out"
    main(
        ["fit", str(data), "--scene", str(model), "--param", "mu=0.25", "--fit", "mu", "--columns", "box_x=q0"]
        + ["--dt", "0.01", "--noise", str(NOISE), "--out", str(out)]
    )
    result = json.loads((out / "fit.json").read_text())
    mu, (lo, hi) = result["params"]["mu"], result["interval"]["mu"]
    with capsys.disabled():
        print(f"\ncli fit of an MJCF file: mu = {mu:.6f} (true {mu_true}), 95% [{lo:.6f}, {hi:.6f}]")
    assert abs(mu / mu_true - 1) < MU_RTOL and lo < mu_true < hi


def test_a_missing_model_file_is_named(block_csv, tmp_path, capsys):
    common = [str(block_csv), "--dt", "0.01", "--fit", "mu", "--param", "mu=0.5", "--columns", "box_x=q0"]
    assert "no_such_model.xml" in run([*common, "--scene", str(tmp_path / "no_such_model.xml")], tmp_path, capsys)
    bad = tmp_path / "bad.xml"
    bad.write_text("<mujoco><worldbody><body></mujoco>")
    assert "bad.xml" in run([*common, "--scene", str(bad)], tmp_path, capsys)


THROWN = box_model(
    keyframes='<key name="thrown" qpos="0 0 0.1 1 0 0 0" qvel="2 0 0 0 0 0"/>'
    '<key name="slower" qpos="0 0 0.1 1 0 0 0" qvel="1.8 0 0 0 0 0"/>'
)


@pytest.fixture(scope="module")
def thrown(tmp_path_factory):
    """The model file and x of its box thrown at 2 m/s (the key "thrown") with mu = 0.3, 0.1 mm noise."""
    folder = tmp_path_factory.mktemp("thrown")
    model = folder / "thrown_box.xml"
    model.write_text(THROWN)
    x = sliding_x(MU_TRUE, speed=2.0) + NOISE * np.random.default_rng(5).standard_normal(STEPS + 1)
    data = folder / "thrown.csv"
    np.savetxt(data, np.c_[np.arange(STEPS + 1) * DT, x], delimiter=",", header="t,box_x", comments="")
    return model, data


def test_a_model_files_keyframe_is_its_start_state(thrown):
    model, _ = thrown
    _, state = model_file_factory(str(model), keyframe="thrown")()
    np.testing.assert_array_equal(np.asarray(state.v), [2.0, 0, 0, 0, 0, 0])
    _, state = model_file_factory(str(model), keyframe=1)(v0=1.5)
    np.testing.assert_array_equal(np.asarray(state.v), [1.5, 0, 0, 0, 0, 0])
    _, state = model_file_factory(str(model))()
    np.testing.assert_array_equal(np.asarray(state.v), np.zeros(6))
    with pytest.raises(TrajectoryFileError, match="v0..v5"):
        model_file_factory(str(model))(v9=1.0)


def test_a_missing_keyframe_and_keyframe_without_a_model_file_are_named(thrown, block_csv, tmp_path, capsys):
    model, data = thrown
    common = ["--dt", "0.01", "--fit", "mu", "--param", "mu=0.5", "--columns", "box_x=q0"]
    err = run([str(data), "--scene", str(model), "--keyframe", "no_such_key", *common], tmp_path, capsys)
    assert "no_such_key" in err
    err = run([str(block_csv), "--scene", "sliding_block", "--dt", "0.01", "--keyframe", "thrown"], tmp_path, capsys)
    assert "--keyframe" in err and "model file" in err


@pytest.mark.long  # about 2 minutes; the command's fits of a model file's friction and start velocity stay slow
def test_fit_honours_the_keyframe_and_a_fit_the_data_do_not_determine_exits_non_zero(thrown, tmp_path, capsys):
    """From the key "thrown" mu is recovered; from the file's qpos0 (at rest) the box never moves, the loss's
    gradient is exactly zero, and the command says so and exits 1 (fit.json records the reasons)."""
    model, data = thrown
    common = ["fit", str(data), "--scene", str(model), "--param", "mu=0.5", "--fit", "mu", "--columns", "box_x=q0"]
    common += ["--dt", "0.01", "--noise", str(NOISE), "--iterations", "30"]
    main([*common, "--keyframe", "thrown", "--out", str(tmp_path / "key")])
    result = json.loads((tmp_path / "key" / "fit.json").read_text())
    mu, std = result["params"]["mu"], result["std"]["mu"]
    # within three standard deviations (a 95% interval misses the truth on one noise draw in twenty)
    assert abs(mu / MU_TRUE - 1) < MU_RTOL and abs(mu - MU_TRUE) < 3 * std and result["failed"] == []
    with pytest.raises(SystemExit) as failed:
        main([*common, "--out", str(tmp_path / "rest")])
    assert failed.value.code == 1
    err = capsys.readouterr().err
    assert "the fit failed" in err and "gradient is exactly zero" in err
    assert json.loads((tmp_path / "rest" / "fit.json").read_text())["failed"]


@pytest.mark.long  # the friction fit of a model file runs in the slow set
def test_fit_the_start_velocity_of_a_model_file(thrown, tmp_path):
    """--fit mu,v0 from the key "slower" (1.8 m/s): the throw's 2 m/s and mu are both recovered."""
    model, data = thrown
    main(
        ["fit", str(data), "--scene", str(model), "--keyframe", "slower", "--param", "mu=0.5", "--fit", "mu,v0"]
        + ["--columns", "box_x=q0", "--dt", "0.01", "--noise", str(NOISE), "--out", str(tmp_path)]
    )
    result = json.loads((tmp_path / "fit.json").read_text())
    assert abs(result["params"]["mu"] / MU_TRUE - 1) < MU_RTOL
    assert abs(result["params"]["v0"] / 2.0 - 1) < MU_RTOL
    lo, hi = result["interval"]["v0"]
    assert lo < 2.0 < hi
