"""The hostile suite's long profile (`tests/test_hostile.py`, issue 20), run outside pytest.

LONG_EXAMPLES scenes per scheme from every structure (with gradients) and
LONG_RUN_EXAMPLES runs of LONG_RUN_STEPS steps per scheme, derandomized (the same
draws every time). Prints 'passed' or the first failing draw per scheme and
profile. The regression tests at the end of `tests/test_hostile.py` hold the
failures it found and were fixed, shrunk to minimal scenes; the functions
below, the ones still open.

    python benchmarks/hostile_findings.py
"""

import dataclasses
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))


def light_box_under_a_heavy_one():
    """Open: a 1 g box landing at 2.3 m/s with a 32 kg box and an 11 kg capsule stacked on it (Stewart-Trinkle).

    Found on `box_stack` (the long profile's draw below): step 18, where the stack
    lands, stops at residual 0.21 (reported, status SOLVER_FAILED) and the light
    box ends 1.7 mm inside the ground. The step's LCP has 220 rows and condition
    number 3e22 (mass ratio 3e4); Lemke ends on a secondary ray, scaled or not.
    """
    import numpy as np
    from test_hostile import Draw, run_forward, values

    d = Draw(
        structure="box_stack",
        sizes=(
            (0.195277497592861, 0.05000000000000001, 0.10144876454023333),
            (0.1657, 0.10603353289610594, 0.17838882322041744),
            (0.06518609563632333, 0.1350827606405263),
            (0.15354664186358963,),
        ),
        mass=[0.0010018969527103563, 31.622776601683793, 10.938023324387183, 0.0010126940548508025],
        mu=[
            0.7135623667318162,
            1e-10,
            0.27115613295614877,
            1e-05,
            0.8800996865991266,
            3.4414108968616742e-276,
            1.9999999999999998,
            1.1381718927970572,
            0.4221421316019033,
            1.1,
        ],
        e=1.401298464324817e-45,
        q=[
            0.0,
            0.0,
            0.32338839931117036,
            0.7071067811865476,
            0.7071067811865476,
            0.0,
            0.0,
            0.00125,
            2.225073858507203e-309,
            0.5517772225315878,
            1.0,
            0.0,
            0.0,
            0.0,
            0.05125,
            1e-15,
            1.207445763847238,
            1.0,
            0.0,
            0.0,
            0.0,
            1.0,
            0.0,
            0.15354664186358963,
            0.7071067811865476,
            0.7071067811865476,
            0.0,
            0.0,
        ],
        v=[
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.49143723718339816,
            -1.2198424362897382,
            -0.5481589979326251,
            0.0,
            0.0,
            0.0,
            -1.4633763008708573,
            -1.8778896323289633e-82,
            3.2758137780670176e-21,
            0.14854747675898583,
            -3.46981806983397,
            -4.208329116972664e-123,
            0.0,
            0.0,
            0.0,
            1.1125369292536007e-308,
            4.242674587417749,
            1.5,
        ],
    )
    d = dataclasses.replace(d, **{k: np.asarray(getattr(d, k)) for k in ("mass", "mu", "q", "v")})
    traj, _, gaps = run_forward(d.structure, "stewart_trinkle")(values(d))
    bad = np.flatnonzero(~np.asarray(traj.stats.converged))
    depth = -min(float(np.asarray(gaps).min()), 0.0)
    residual = float(np.asarray(traj.stats.residual).max())
    return f"steps not converged {bad.tolist()}, worst residual {residual:.3g}, deepest penetration {depth:.3g} m"


def long_profile():
    """The hostile suite's long profile, per scheme: 'passed' or the first failure with its draw."""
    from hypothesis import given, settings
    from test_hostile import LONG, LONG_RUN_EXAMPLES, SCHEMES, STRUCTURES, long_run_and_check, run_and_check, scenes

    for scheme in SCHEMES:
        for name, check, profile in (
            ("long", run_and_check, LONG),
            ("10^4 steps", long_run_and_check, settings(LONG, max_examples=LONG_RUN_EXAMPLES)),
        ):
            run = profile(given(d=scenes(tuple(STRUCTURES)))(lambda d: check(d, scheme)))
            try:
                run()
                print(f"{scheme}, {name}: passed")
            except AssertionError as err:
                print(f"{scheme}, {name}: FAILED {str(err)[:2000]}")


if __name__ == "__main__":
    print(f"light_box_under_a_heavy_one: {light_box_under_a_heavy_one()}")
    long_profile()
