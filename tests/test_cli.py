"""The `jaxrbd fit` command: a fit from a trajectory file, and clear errors for bad files (issue 7)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.cli import main
from jaxrbd.cli.fit import TrajectoryFileError, load_trajectory


@pytest.fixture(scope="module")
def ball_csv(tmp_path_factory):
    """Heights of a ball bouncing with e = 0.7 at dt = 4 ms, with 1 mm noise."""
    scene = rbd.scenes.bouncing_ball(0.7, height=0.5)
    z = np.asarray(rbd.simulate(*scene, dt=4e-3, steps=300, restitution=rbd.Newton()).q[:, 2])
    z = z + 1e-3 * np.asarray(jax.random.normal(jax.random.PRNGKey(4), z.shape))
    path = tmp_path_factory.mktemp("data") / "ball.csv"
    np.savetxt(path, np.c_[np.arange(301) * 4e-3, z], delimiter=",", header="t,z", comments="")
    return path, z


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


@pytest.mark.slow
def test_fit_command_recovers_restitution(ball_csv, tmp_path):
    path, _ = ball_csv
    main(["fit", str(path), "--scene", "bouncing_ball", "--dt", "0.004", "--out", str(tmp_path)])
    result = json.loads((tmp_path / "fit.json").read_text())
    assert abs(result["params"]["e"] / 0.7 - 1) <= 0.01
    assert (tmp_path / "fit.png").stat().st_size > 0


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
def test_bench_prints_and_writes_the_scene_table(tmp_path, capsys):
    """`jaxrbd bench` on one small scene; without the [bench] extra it says so and reports jaxrbd alone."""
    import importlib.util

    out = tmp_path / "bench.json"
    args = ["--float32", "bench", "--scenes", "incline", "--batches", "2", "--repeats", "1", "--no-scaling"]
    try:
        main([*args, "--out", str(out)])
    finally:
        jax.config.update("jax_enable_x64", True)
    printed = capsys.readouterr().out
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
