"""Long runs of resting scenes: drift, energy change and quaternion error, with timings.

Each scene starts in exact resting contact with zero velocity (no settling), so the
exact motion is none: the table shows max over bodies and steps of |p(t) - p(0)|,
the final minus the initial energy, max | |quaternion| - 1 |, the steps that did not
converge, the first chunk's compile time and the time per 10^4 steps. The run is
`simulate` with its defaults in float64, in chunks of --chunk steps that feed the
final state into the next call (one compiled function). tests/test_long_runs.py
asserts the same invariants.

python benchmarks/bench_long.py [--steps 100000] [--chunk 10000] [--scenes box sphere_tower sphere_grid_64 tower_mu_0.5]
"""

import argparse
import functools
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

from tqdm import tqdm  # noqa: E402

import jaxrbd as rbd  # noqa: E402

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from test_long_runs import MU, sphere_tower  # noqa: E402
from test_long_runs import SCENES as TESTED
from test_long_runs import long_run as run_chunks

SCENES = {**TESTED, "tower_mu_0.5": lambda: sphere_tower(mu=MU)}  # the last falls: it shows the instability
DEFAULT_SCENES = list(TESTED)


def long_run(name, steps, chunk):
    """The row of one scene: drift, energy change, quaternion error, unconverged steps, timings."""
    scene = SCENES[name]()
    bar = functools.partial(tqdm, desc=name, unit="chunk", leave=False)
    r = run_chunks(scene, steps, chunk, progress=bar)
    energy0, energy = r["energy"]
    return dict(
        scene=name,
        bodies=scene.bodies.nbodies,
        solver=rbd.choose_solver(*scene).name,
        steps=steps // chunk * chunk,
        drift=r["drift"],
        energy_change=energy - energy0,
        energy0=energy0,
        quaternion_error=r["quaternion_error"],
        unconverged=r["unconverged"],
        compile_s=r["compile_s"],
        per_1e4_s=r["seconds_per_chunk"] * 1e4 / chunk,
    )


def format_table(rows):
    head = (
        f"{'scene':<16}{'bodies':>7}  {'solver':<24}{'steps':>8}{'drift (m)':>12}{'dE (J)':>12}{'dE/E':>11}"
        f"{'|quat|-1':>11}{'unconv.':>8}{'compile s':>11}{'s/1e4 steps':>13}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['scene']:<16}{r['bodies']:>7}  {r['solver']:<24}{r['steps']:>8}{r['drift']:>12.2e}"
            f"{r['energy_change']:>12.2e}{r['energy_change'] / abs(r['energy0']):>11.1e}{r['quaternion_error']:>11.1e}"
            f"{r['unconverged']:>8}{r['compile_s']:>11.1f}{r['per_1e4_s']:>13.1f}"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="steps per scene (a multiple of --chunk)")
    parser.add_argument("--chunk", type=int, default=10_000, help="steps per simulate call")
    parser.add_argument("--scenes", nargs="*", choices=list(SCENES), default=DEFAULT_SCENES)
    args = parser.parse_args()
    if args.steps < args.chunk or args.steps % args.chunk:
        parser.error(f"--steps must be a positive multiple of --chunk ({args.chunk})")
    rows = [long_run(name, args.steps, args.chunk) for name in args.scenes]
    print(format_table(rows))


if __name__ == "__main__":
    main()
