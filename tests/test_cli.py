"""The `jaxrbd fit` command: a fit from a trajectory file, and clear errors for bad files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.cli import main
from jaxrbd.cli.fit import TrajectoryFileError, load_trajectory, sliding_block_factory
from jaxrbd.foreign import rigid_bounces

E_TRUE = 0.7


@pytest.fixture(scope="module")
def ball_csv(tmp_path_factory):
    """Exact heights of a rigid ball (radius 0.1) dropped from z = 0.6 with e = 0.7, at dt = 4 ms, 1 mm noise."""
    t = np.arange(301) * 4e-3
    z = rigid_bounces(t, E_TRUE, 0.6, 0.0, radius=0.1, gravity=9.81)
    z = z + 1e-3 * np.random.default_rng(4).standard_normal(z.shape)
    path = tmp_path_factory.mktemp("data") / "ball.csv"
    np.savetxt(path, np.c_[t, z], delimiter=",", header="t,z", comments="")
    return path, z


def sliding_xy(t, *, mu, v0, start, g):
    """Exact centre of a box sliding on level ground from `start` at velocity v0 under Coulomb friction: it
    decelerates at mu g along its heading until it stops (the reference problems)."""
    speed = np.linalg.norm(v0)
    s = np.minimum(t, speed / (mu * g))
    return np.asarray(start) + np.outer(speed * s - 0.5 * mu * g * s * s, np.asarray(v0) / speed)


def test_trajectory_file_errors(ball_csv, tmp_path):
    path, z = ball_csv
    t = np.arange(len(z)) * 4e-3
    np.savez(tmp_path / "cols.npz", t=t, x=z)
    with pytest.raises(TrajectoryFileError, match=r"missing column\(s\) \['z'\]"):
        load_trajectory(str(tmp_path / "cols.npz"), "bouncing_ball", 4e-3)
    bad = z.copy()
    bad[7] = np.nan
    np.savetxt(tmp_path / "nan.csv", np.c_[t, bad], delimiter=",", header="t,z", comments="")
    with pytest.raises(TrajectoryFileError, match=r"column 'z' has NaN or inf in row\(s\) \[7\]"):
        load_trajectory(str(tmp_path / "nan.csv"), "bouncing_ball", 4e-3)
    with pytest.raises(TrajectoryFileError, match="the time step must be --dt = 0.005"):
        load_trajectory(str(path), "bouncing_ball", 5e-3)
    with pytest.raises(TrajectoryFileError, match=r"missing column\(s\) \['x', 'y'\]"):
        load_trajectory(str(path), "sliding_block", 4e-3)
    (tmp_path / "data.dat").write_text("t,z\n")
    with pytest.raises(TrajectoryFileError, match=r"must end in .csv, .tsv, .txt or .npz"):
        load_trajectory(str(tmp_path / "data.dat"), "bouncing_ball", 4e-3)
    # The command line turns these into exit status 2 with the message.
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", str(tmp_path / "nan.csv"), "--scene", "bouncing_ball", "--dt", "0.004", "--out", str(tmp_path)])
    assert exit_info.value.code == 2


def test_trajectory_files_with_a_numpy_header_tabs_or_spaces_are_read(tmp_path):
    """numpy's `savetxt(header="t,z")` writes '# t,z'; tab- and space-separated files have their own lines."""
    t, z = np.arange(5) * 4e-3, np.linspace(0.5, 0.4, 5)
    np.savetxt(tmp_path / "hash.csv", np.c_[t, z], delimiter=",", header="t,z")
    np.savetxt(tmp_path / "tabs.tsv", np.c_[t, z], delimiter="\t", header="t\tz", comments="")
    np.savetxt(tmp_path / "spaces.txt", np.c_[t, z], header="t z")
    for name in ("hash.csv", "tabs.tsv", "spaces.txt"):
        data = load_trajectory(str(tmp_path / name), "bouncing_ball", 4e-3)
        np.testing.assert_allclose(data["t"], t, rtol=0, atol=1e-15)
        np.testing.assert_allclose(data["z"], z, rtol=0, atol=1e-15)


def test_fit_does_not_overwrite_without_force(ball_csv, tmp_path, capsys):
    path, _ = ball_csv
    (tmp_path / "fit.json").write_text("{}")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", str(path), "--scene", "bouncing_ball", "--dt", "0.004", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "fit.json").read_text() == "{}"


def test_uneven_times_are_an_error_or_resampled(tmp_path):
    """Times off the --dt grid: an error that names --resample, or with it the columns on the grid."""
    t = np.array([0.0, 0.011, 0.019, 0.032, 0.04, 0.0495])
    np.savetxt(tmp_path / "uneven.csv", np.c_[t, 2.0 + 3.0 * t], delimiter=",", header="t,z", comments="")
    with pytest.raises(TrajectoryFileError, match=r"rows 2 and 3 are 0.013 apart \(pass --resample"):
        load_trajectory(str(tmp_path / "uneven.csv"), "bouncing_ball", 0.01)
    data = load_trajectory(str(tmp_path / "uneven.csv"), "bouncing_ball", 0.01, resample=True)
    np.testing.assert_allclose(data["t"], [0.0, 0.01, 0.02, 0.03, 0.04], rtol=0, atol=1e-15)
    np.testing.assert_allclose(data["z"], 2.0 + 3.0 * data["t"], rtol=0, atol=1e-14)  # linear data: exact
    np.savetxt(tmp_path / "back.csv", np.c_[t[::-1], t], delimiter=",", header="t,z", comments="")
    with pytest.raises(TrajectoryFileError, match="--resample needs increasing times"):
        load_trajectory(str(tmp_path / "back.csv"), "bouncing_ball", 0.01, resample=True)


def test_shortcut_options_are_checked_and_kept_to_their_scenes(ball_csv, tmp_path, capsys):
    path, _ = ball_csv

    def error(*args):
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", str(path), "--dt", "0.004", "--out", str(tmp_path), *args])
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert "--radius: only for the shortcut scenes" in error("--scene", "jaxrbd.scenes:bouncing_ball", "--radius", "1")
    assert "--param, --fit: not for the shortcut scene" in error(
        "--scene", "bouncing_ball", "--param", "e=1", "--fit", "e"
    )
    assert "--mass must be > 0, got -1.0" in error("--scene", "bouncing_ball", "--mass", "-1")
    assert "--gravity must be > 0" in error("--scene", "bouncing_ball", "--gravity", "0")
    assert "start height z = 0.05 must exceed the ball's radius 0.1" in error(
        "--scene", "bouncing_ball", "--start", "0.05"
    )
    assert "--substeps must be an integer >= 1, got 0" in error("--scene", "bouncing_ball", "--substeps", "0")
    np.savetxt(
        tmp_path / "xy.csv",
        np.c_[np.arange(5) * 4e-3, np.zeros(5), np.zeros(5)],
        delimiter=",",
        header="t,x,y",
        comments="",
    )
    common = [str(tmp_path / "xy.csv"), "--dt", "0.004", "--out", str(tmp_path), "--scene", "sliding_block"]
    with pytest.raises(SystemExit):
        main(["fit", *common, "--half-extents", "0.1,0.1"])
    assert "--half-extents takes three lengths HX,HY,HZ" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fit", *common, "--start", "1"])
    assert "--start for sliding_block takes the position X,Y" in capsys.readouterr().err


@pytest.mark.slow  # the command line's shortcut checks stay in the default set
def test_the_sliding_block_factory_is_differentiable_at_rest():
    """The shortcut sets the velocity on the state, not as a speed and heading: finite gradients from rest."""
    factory = sliding_block_factory(half_extents=(0.05, 0.1, 0.02), mass=2.0, gravity=5.0)

    def x_end(v):
        return rbd.simulate(*factory(0.3, v[0], v[1], 0.1, -0.2), dt=0.01, steps=3).q[-1, :2]

    jac = jax.jacobian(x_end)(jnp.zeros(2))
    assert np.all(np.isfinite(jac))
    np.testing.assert_allclose(x_end(jnp.zeros(2)), [0.1, -0.2], rtol=0, atol=1e-12)  # at rest it stays


@pytest.mark.long  # the command's fits of friction and a start velocity (test_cli_fit.py) stay slow
def test_fit_command_recovers_restitution(ball_csv, tmp_path):
    """The ball shortcut with its defaults (start height fitted, located bounce) on exact rigid bounces."""
    path, _ = ball_csv
    main(["fit", str(path), "--scene", "bouncing_ball", "--dt", "0.004", "--noise", "1e-3", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "fit.json").read_text())
    lo, hi = result["interval"]["e"]
    assert abs(result["params"]["e"] / E_TRUE - 1) <= 1e-3 and lo < E_TRUE < hi
    z_lo, z_hi = result["interval"]["z"]
    print(f"\nbouncing_ball: e = {result['params']['e']:.6f} [{lo:.6f}, {hi:.6f}], z = [{z_lo:.6f}, {z_hi:.6f}]")
    assert z_lo < 0.6 < z_hi  # the drop height, fitted from the first noisy sample
    assert (tmp_path / "fit.png").stat().st_size > 0


@pytest.mark.slow
def test_fit_command_takes_the_blocks_geometry_mass_gravity_and_resamples(tmp_path):
    """The block shortcut with every option: a 0.1 x 0.2 x 0.06 box of 2 kg under g = 5, times jittered by up to
    2 ms off the 10 ms grid (--resample), 2 steps per sample, 1 mm noise; exact Coulomb sliding."""
    rng = np.random.default_rng(7)
    t = np.arange(81) * 0.01 + np.r_[0.0, rng.uniform(-2e-3, 2e-3, 80)]
    xy = sliding_xy(t, mu=0.4, v0=(0.6, -0.8), start=(0.2, 0.1), g=5.0) + 1e-3 * rng.standard_normal((81, 2))
    np.savetxt(tmp_path / "block.tsv", np.c_[t, xy], delimiter="\t", header="t\tx\ty")
    args = ["--scene", "sliding_block", "--dt", "1/100", "--half-extents", "0.05,0.1,0.03", "--mass", "2"]
    args += ["--gravity", "5", "--substeps", "2", "--resample", "--noise", "1e-3", "--out", str(tmp_path)]
    main(["fit", str(tmp_path / "block.tsv"), *args])
    result = json.loads((tmp_path / "fit.json").read_text())
    lo, hi = result["interval"]["mu"]
    print(f"\nsliding_block: mu = {result['params']['mu']:.6f} [{lo:.6f}, {hi:.6f}], {result['seconds']:.1f} s")
    assert abs(result["params"]["mu"] / 0.4 - 1) <= 0.02 and lo < 0.4 < hi
    assert result["substeps"] == 2 and set(result["params"]) == {"mu", "vx", "vy", "x", "y"}


@pytest.mark.slow
def test_reproduce_painleve_and_spinning_sphere(tmp_path):
    """`jaxrbd reproduce`: P5 steps through Painleve's paradox; P3 writes its figure."""
    from jaxrbd.cli.reproduce import run_reproduce

    report = run_reproduce("painleve", out=str(tmp_path))["painleve"]
    assert report["margin"] < 0 and report["finite"]
    assert report["first_friction_impulse"] > 10 * report["bounded_force_impulse"]
    assert report["max_energy_increase"] <= 1e-12 and report["residual"] <= 1e-8
    rows = run_reproduce("spinning_sphere", out=str(tmp_path))["spinning_sphere"]
    assert [r["cone"] for r in rows] == ["exact", "eq5", "eq6"]
    assert (tmp_path / "spinning_sphere.png").stat().st_size > 0
    with pytest.raises(ValueError, match="NAME must be one of"):
        run_reproduce("rolling", out=str(tmp_path))


@pytest.mark.long
def test_bench_prints_and_writes_the_scene_table(tmp_path):
    """`jaxrbd bench` on one small scene; without the [bench] extra it says so and reports jaxrbd alone."""
    import importlib.util
    import subprocess
    import sys

    # In its own process: float32 cannot be switched on beside this session's float64 (constants traced
    # under one setting meet arrays of the other).
    out = tmp_path / "bench.json"
    args = ["--float32", "bench", "--scenes", "incline", "--batches", "2", "--repeats", "1", "--no-scaling"]
    run = subprocess.run(
        [sys.executable, "-m", "jaxrbd.cli", *args, "--out", str(out), "--plot", str(tmp_path / "scaling.png")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    printed = run.stdout
    if importlib.util.find_spec("mujoco") is None:
        assert "mujoco / mujoco-mjx are not installed" in printed
    assert "cube on incline" in printed
    rows = json.loads(out.read_text())["rows"]
    ours = next(r for r in rows if r["simulator"] == "jaxrbd")
    assert ours["dtype"] == "float32" and ours["steps_per_s"] > 0 and ours["batches"]["2"] > 0
    assert ours["solver"] and ours["solver"] in printed  # the step solver `simulate` chose, in its column
    assert ours["worst_residual"] <= 1e-5  # the float32 tolerance, over the whole 1 s rollout
    assert abs(ours["answer"]) < 1e-6  # mu > tan(theta): the cube stays put
    assert ours["grad_over_forward"] > 0


def test_bench_and_simulate_choose_the_step_solver_by_the_same_rule():
    """The benchmark has no rule of its own: each scene runs the solver `rbd.choose_solver` names."""
    from jaxrbd.cli.bench_scenes import CASES, _jaxrbd_scene

    names = {}
    for key, make in CASES.items():
        case = make()
        system, state, solver = _jaxrbd_scene(case, jnp.float64)
        names[key] = solver.name
        assert solver == rbd.choose_solver(*case.scene())
    assert names["sphere_grid"] == "ContactSweeps"  # 640 rows: the sparse solver
    assert names["four_balls"] == names["incline"] == names["falling_rod"] == "dense SemismoothNewton"


def test_warnings_print_as_one_line_and_steps_names_its_successor(tmp_path):
    """A warning of the command line is one line with its category, no source line; --steps still works and
    points to --iterations."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "jaxrbd.cli", "fit", str(tmp_path / "missing.csv"), "--scene", "bouncing_ball"]
        + ["--dt", "0.01", "--steps", "5", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "jaxrbd: FutureWarning: --steps is deprecated: use --iterations (the optimizer's budget)"
    assert lines[1].startswith("jaxrbd fit: error: ") and "no such file" in lines[1]
    assert len(lines) == 2 and ".py:" not in done.stderr


def test_progress_where_stderr_is_not_a_terminal_is_a_line_every_few_seconds():
    """The line progress of the command line prints while the main thread is busy (a compilation), then the
    count, the postfix and the elapsed time."""
    import io
    import time

    from jaxrbd._progress import LineProgress, log_lines, tqdm

    out = io.StringIO()
    bar = LineProgress(total=3, desc="fit mu", every=0.05, file=out)
    time.sleep(0.3)  # one long call: the lines go on
    bar.update()
    bar.set_postfix(loss="1.0e-03")
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "fit mu: 0/3 it, 0 s, started" and len(lines) >= 4
    assert lines[-1].startswith("fit mu: 1/3 it, loss 1.0e-03, ") and lines[-1].endswith("done")
    log_lines()
    try:
        bar = tqdm(total=2, disable=None, desc="x", file=io.StringIO())
        assert isinstance(bar, LineProgress)  # pytest captures stderr: not a terminal
        bar.close()
    finally:
        log_lines(False)


def test_fit_png_labels_each_curve_by_its_column_and_has_axis_labels():
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from jaxrbd.cli.fit import fit_figure

    t = np.linspace(0, 1, 11)
    data = np.stack([t, 2 * t], axis=1)
    fig = fit_figure(t, data, data, [("box_x", "q", 0), ("box_vx", "v", 0)], SimpleNamespace(loss_history=[1, 0.1]))
    trajectory, loss = fig.axes
    labels = [text.get_text() for text in trajectory.get_legend().get_texts()]
    assert labels == ["box_x: fit (q0)", "box_x: file", "box_vx: fit (v0)", "box_vx: file"]
    assert trajectory.get_xlabel() == "t (s)" and trajectory.get_ylabel()
    assert loss.get_xlabel() == "optimizer iteration" and loss.get_ylabel().startswith("loss")
    plt.close(fig)
