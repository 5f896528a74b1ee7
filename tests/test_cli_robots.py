"""`jaxrbd fit MODEL.xml`: a robot's parameters by name from logs that MuJoCo's C engine made, controls replayed
from columns, several logs in one fit (the arm and its logs of `tests/test_sysid_robots.py`)."""

import json
import re

import numpy as np
import pytest

from jaxrbd.cli import main

pytest.importorskip("mujoco", reason="the robot identification tests need MuJoCo (pip install jaxrbd[test])")

from test_sysid_robots import GUESS, LOGS, NOISE, TRUTH, _logs  # noqa: E402

CLI_FIT = "j1.damping,j1.armature,j1.frictionloss,link2.mass"


@pytest.fixture(scope="module")
def arm_files(tmp_path_factory):
    """The guessed model file and the MuJoCo logs as CSVs: t, the joint angles, the two controls."""
    folder = tmp_path_factory.mktemp("arm")
    (folder / "arm.xml").write_text(GUESS)
    for i, log in enumerate(_logs(1.5)):
        u = np.vstack([log.controls, np.zeros((1, 2))])  # the last row's controls act on no step
        np.savetxt(
            folder / f"log{i}.csv",
            np.c_[log.t, log.observed, u],
            delimiter=",",
            header="t,shoulder,elbow,u_shoulder,u_elbow",
            comments="",
        )
    return folder


def _cli(arm_files, *extra, out, logs=1):
    files = [str(arm_files / f"log{i}.csv") for i in range(logs)]
    args = ["fit", *files, "--scene", str(arm_files / "arm.xml"), "--dt", "0.01"]
    main(args + list(extra) + ["--out", str(out)])


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--fit", "j9.damping", "--controls", "u_shoulder,u_elbow"], "no joint 'j9'"),
        (["--fit", "j1.viscosity", "--controls", "u_shoulder,u_elbow"], "unknown attribute 'viscosity'"),
        (["--fit", "j1.damping", "--controls", "u_shoulder,u_wrist"], r"missing column\(s\) \['u_wrist'\]"),
        (["--fit", "j1.damping", "--controls", "u_shoulder"], "the model has 2 actuators \\['u1', 'u2'\\]"),
    ],
)
def test_the_command_line_names_a_bad_parameter_or_control_column(arm_files, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        _cli(arm_files, *extra, "--columns", "shoulder=q0,elbow=q1", out=tmp_path)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.long
def test_the_command_line_fits_the_arm_from_mujoco_logs(arm_files, tmp_path):
    """`jaxrbd fit log0.csv log1.csv log2.csv --scene arm.xml --fit ... --controls ...`: the three 2-second logs
    of the API's fit; each parameter within 2% of MuJoCo's and inside its 95% interval in fit.json."""
    _cli(
        arm_files,
        *("--fit", CLI_FIT, "--controls", "u_shoulder,u_elbow", "--columns", "shoulder=q0,elbow=q1"),
        *("--noise", str(NOISE)),
        out=tmp_path,
        logs=LOGS,
    )
    result = json.loads((tmp_path / "fit.json").read_text())
    assert not result["failed"] and (tmp_path / "fit.png").exists()
    for k, value in TRUTH.items():
        lo, hi = result["interval"][k]
        assert result["params"][k] == pytest.approx(value, rel=0.02), k
        assert lo <= value <= hi and result["identified"][k], (k, lo, hi)
