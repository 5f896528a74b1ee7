"""The hostile suite's long profile (`tests/test_hostile.py`), run outside pytest.

LONG_EXAMPLES scenes per scheme from every structure (with gradients) and
LONG_RUN_EXAMPLES runs of LONG_RUN_STEPS steps per scheme, derandomized (the same
draws every time). Prints 'passed' or the first failing draw per scheme and
profile. `tests/test_hostile_regressions.py` holds the failures it found and
were fixed, shrunk to minimal scenes.

    python benchmarks/hostile_findings.py
    python benchmarks/hostile_findings.py --examples 20 --schemes stewart_trinkle --no-long-runs
"""

import argparse
import pathlib
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))


def long_profile(examples=None, schemes=None, long_runs=True):
    """The hostile suite's long profile, per scheme: 'passed' or the first failure with its draw."""
    from hypothesis import given, settings
    from test_hostile import LONG, LONG_RUN_EXAMPLES, SCHEMES, STRUCTURES, long_run_and_check, run_and_check, scenes

    profile = LONG if examples is None else settings(LONG, max_examples=examples)
    for scheme in schemes or SCHEMES:
        runs = [("long", run_and_check, profile)]
        if long_runs:
            runs.append(("10^4 steps", long_run_and_check, settings(LONG, max_examples=LONG_RUN_EXAMPLES)))
        for name, check, chosen in runs:
            run = chosen(given(d=scenes(tuple(STRUCTURES)))(lambda d: check(d, scheme)))
            start = time.perf_counter()
            try:
                run()
                print(f"{scheme}, {name}: passed ({time.perf_counter() - start:.0f} s)", flush=True)
            except AssertionError as err:
                print(f"{scheme}, {name}: FAILED {str(err)[:2000]}", flush=True)
            jax.clear_caches()  # one process keeping every scheme's programs aborts in XLA (vm.max_map_count)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=None, help="scenes per scheme (default LONG_EXAMPLES)")
    parser.add_argument("--schemes", nargs="+", default=None, help="anitescu_potra, poisson, stewart_trinkle")
    parser.add_argument("--no-long-runs", action="store_true", help="skip the LONG_RUN_STEPS-step runs")
    args = parser.parse_args()
    long_profile(args.examples, args.schemes, not args.no_long_runs)
