"""Where `simulate` should switch from the dense step to `ContactSweeps`: both solvers on the same scenes.

For each scene, the dense LCP's size and, for each solver, the wall time per step
of a jitted rollout after compilation, the steps left unsolved, the largest
displacement of any body from its start (every scene starts exactly at rest,
so the exact motion is none) and the largest step residual; then the solver
`choose_solver` picks. Stewart-Trinkle (the default scheme), float64, h = 0.01.

- `box_stack(n)`: contacts share bodies (coupled); `AUTO_SIZE_COUPLED` is the
  switch for such scenes.
- `sphere_grid(n)`: one contact per ball, no two sharing a body (one sweep is
  exact); `AUTO_SIZE` is the switch there.

    python benchmarks/bench_auto_size.py [--steps 200] [--stacks 5 10 14] [--grids 25 36 64]
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import numpy as np

import jaxrbd as rbd

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached


def measure(scene, solver, steps):
    """(ms per step, unsolved steps, drift in m, max residual) of a rollout from the scene's state."""
    run = jax.jit(lambda state: rbd.simulate(scene.system, state, dt=0.01, steps=steps, step_solver=solver))
    jax.block_until_ready(run(scene.state))  # compile
    start = time.perf_counter()
    traj = jax.block_until_ready(run(scene.state))
    wall = time.perf_counter() - start
    x = np.asarray(scene.bodies.positions(traj.q))
    unsolved = int(np.sum(~np.asarray(traj.stats.converged)))
    return 1e3 * wall / steps, unsolved, float(np.abs(x - x[0]).max()), float(np.max(traj.stats.residual))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--stacks", type=int, nargs="*", default=[5, 10, 14])
    parser.add_argument("--grids", type=int, nargs="*", default=[25, 36, 64])
    args = parser.parse_args()
    cases = [(f"box_stack({n})", lambda n=n: rbd.scenes.box_stack(n)) for n in args.stacks]
    cases += [(f"sphere_grid({n})", lambda n=n: rbd.scenes.sphere_grid(n, height=0.1)) for n in args.grids]
    print(
        f"{'scene':16s} {'rows':>5s}  {'solver':24s} {'ms/step':>8s} {'unsolved':>8s} {'drift m':>9s} {'max res':>8s}"
    )
    for name, make in cases:
        scene = make()
        cone = rbd.stepping.default_cone(scene.system, jax.eval_shape(scene.system.contacts, scene.state.q))
        rows = cone.size(scene.system.ncontacts(scene.state.q), 0)
        for solver in (rbd.DenseStep(), rbd.ContactSweeps()):
            ms, unsolved, drift, residual = measure(scene, solver, args.steps)
            print(
                f"{name:16s} {rows:5d}  {solver.name:24s} {ms:8.2f} {unsolved:8d} {drift:9.1e} {residual:8.1e}",
                flush=True,
            )
        print(f"{name:16s} {rows:5d}  picked: {rbd.choose_solver(*scene).name}", flush=True)


if __name__ == "__main__":
    main()
