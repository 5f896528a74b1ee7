"""Benchmark the friction cones on the four-balls scene (P2).

For each cone: compile time, milliseconds per step of a jitted rollout (one
environment), the largest complementarity residual over the run with the
solver's default iteration count, and whether every step converged.

python benchmarks/bench_cones.py [--steps 100] [--dt 0.01] [--repeats 3] [--float32] [--out bench_cones.json]
"""

import argparse
import json
import time

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--float32", action="store_true", help="time in float32 (default: float64)")
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--dt", type=float, default=0.01)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--out", default="bench_cones.json", help="where to write the numbers as JSON")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import equinox as eqx
import numpy as np

import jaxrbd as rbd

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

CONES = {
    "PolyhedralCone(8)": rbd.PolyhedralCone(8),
    "EllipticCone()": rbd.EllipticCone(),
    "SoftFingerCone(1, 1, 0.01)": rbd.SoftFingerCone(1.0, 1.0, 0.01),
    "SoftFinger eq. (5), 20 dirs": rbd.SoftFingerCone(
        1.0, 1.0, 0.01, directions=rbd.cones.soft_finger_directions("eq5")
    ),
}


@eqx.filter_jit
def rollout(cone):
    scene = rbd.scenes.four_balls(cone=cone)
    traj = rbd.simulate(*scene, dt=args.dt, steps=args.steps)
    return traj.q[-1], traj.stats.residual, traj.stats.converged


rows = []
for name, cone in CONES.items():
    start = time.perf_counter()
    jax.block_until_ready(rollout(cone))
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        q, residual, converged = jax.block_until_ready(rollout(cone))
        times.append(time.perf_counter() - start)
    ms = 1e3 * float(np.median(times)) / args.steps
    rows.append(
        dict(
            cone=name,
            compile_s=compile_s,
            ms_per_step=ms,
            max_residual=float(residual.max()),
            all_converged=bool(converged.all()),
            final_x=[float(x) for x in np.asarray(q).reshape(4, 7)[:, 0]],
        )
    )

dtype = "float32" if args.float32 else "float64"
print(f"four balls (P2), {args.steps} steps of h = {args.dt}, {dtype}, {jax.devices()[0].device_kind}")
print(f"{'cone':>28} {'compile s':>10} {'ms/step':>9} {'max residual':>13} {'converged':>10}  final x of the balls")
for r in rows:
    xs = " ".join(f"{x:.3f}" for x in r["final_x"])
    print(
        f"{r['cone']:>28} {r['compile_s']:>10.1f} {r['ms_per_step']:>9.2f} {r['max_residual']:>13.1e}"
        f" {str(r['all_converged']):>10}  {xs}"
    )
with open(args.out, "w") as f:
    json.dump(dict(dtype=dtype, steps=args.steps, dt=args.dt, rows=rows), f, indent=2)
