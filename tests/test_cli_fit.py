"""`jaxrbd fit --scene module:function`: any scene factory, columns by coordinate, intervals."""

import json
import sys
import textwrap

import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.cli import main
from jaxrbd.cli.fit import model_file_factory

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
    """x of the planar block on a level line under the scheme's own update (exact, BENCHMARKS.md):
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


MODEL = """
<mujoco>
  <option timestep="0.01" gravity="3 0 -9.81"/>
  <worldbody>
    <geom type="plane" size="0 0 1" friction="0.5"/>
    <body pos="0 0 0.1">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.1" mass="1" friction="0.5"/>
    </body>
  </worldbody>
</mujoco>
"""


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
