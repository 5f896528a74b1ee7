"""The hostile suite's long profile (`tests/test_hostile.py`, issue 20), run outside pytest.

LONG_EXAMPLES scenes per scheme from every structure (with gradients) and
LONG_RUN_EXAMPLES runs of LONG_RUN_STEPS steps per scheme, derandomized (the same
draws every time). Prints 'passed' or the first failing draw per scheme and
profile. `tests/test_hostile_regressions.py` holds the failures it found and
were fixed, shrunk to minimal scenes.

    python benchmarks/hostile_findings.py
"""

import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))


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
    long_profile()
