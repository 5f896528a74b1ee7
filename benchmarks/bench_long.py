"""Long runs of resting scenes (issue 20 item 4): drift, energy change and quaternion error, with timings.

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
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
from tqdm import tqdm

import jaxrbd as rbd

H = 0.01
MU = 0.5
RADIUS = 0.1


def resting_box():
    """A 0.2 m cube of 1 kg resting on a face, its centre at its half height."""
    b = rbd.SceneBuilder(dim=3, mu=MU)
    b.add_static("ground", rbd.Plane())
    b.add_body("box", rbd.Box((0.1, 0.1, 0.1)), mass=1.0, position=(0.0, 0.0, 0.1))
    return b.build()


def sphere_tower(n=3, mu=0.0):
    """n balls of radius RADIUS and 1 kg, each resting on the one below, the lowest on the ground; frictionless.

    The tower is an unstable equilibrium (an inverted pendulum: a perturbation grows
    like exp(t sqrt(g / r)) roughly). Without friction every impulse is along the
    exactly vertical normals and it stays; with friction the solver's tangential
    impulses at rest, ~1e-17 N s from the round-off of the polyhedral directions,
    seed the unstable mode and the tower falls after about 5 s (500 steps).
    """
    b = rbd.SceneBuilder(dim=3, mu=mu)
    b.add_static("ground", rbd.Plane())
    for k in range(n):
        b.add_body(f"ball{k}", rbd.Sphere(RADIUS), mass=1.0, position=(0.0, 0.0, RADIUS * (2 * k + 1)))
    return b.build()


def resting_grid():
    """`sphere_grid(64)` with the balls on the table instead of 0.5 m above it."""
    return rbd.scenes.sphere_grid(64, radius=RADIUS, height=RADIUS)


SCENES = {
    "box": resting_box,
    "sphere_tower": sphere_tower,
    "sphere_grid_64": resting_grid,
    "tower_mu_0.5": lambda: sphere_tower(mu=MU),  # falls: shows the instability (not in the default list)
}
DEFAULT_SCENES = ["box", "sphere_tower", "sphere_grid_64"]


def long_run(name, steps, chunk):
    """The row of one scene: drift, energy change, quaternion error, unconverged steps, timings."""
    scene = SCENES[name]()
    system, state = scene
    model = scene.bodies
    run = jax.jit(lambda s: rbd.simulate(system, s, dt=H, steps=chunk))
    p0 = np.asarray(model.positions(state.q))
    energy0 = float(system.energy(state.q, state.v))
    drift = quat_error = 0.0
    unconverged, times = 0, []
    for _ in tqdm(range(steps // chunk), desc=name, unit="chunk", leave=False):
        start = time.perf_counter()
        traj = jax.block_until_ready(run(state))
        times.append(time.perf_counter() - start)
        drift = max(drift, float(np.abs(np.asarray(model.positions(traj.q)) - p0).max()))
        norms = np.linalg.norm(np.asarray(model.orientations(traj.q)), axis=-1)
        quat_error = max(quat_error, float(np.abs(norms - 1).max()))
        unconverged += int(np.sum(~np.asarray(traj.stats.converged)))
        state = rbd.State(traj.t[-1], traj.q[-1], traj.v[-1])
    later = float(np.median(times[1:])) if len(times) > 1 else times[0]
    return dict(
        scene=name,
        bodies=model.nbodies,
        solver=rbd.choose_solver(system, state).name,
        steps=len(times) * chunk,
        drift=drift,
        energy_change=float(system.energy(state.q, state.v)) - energy0,
        energy0=energy0,
        quaternion_error=quat_error,
        unconverged=unconverged,
        compile_s=times[0] - later,
        per_1e4_s=later * 1e4 / chunk,
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
