"""Benchmark a scene of many bodies: `sphere_grid(n)`.

Compile time, steps per second for one environment, environment-steps per second
for vmapped batches, and the gradient cost relative to the rollout.

python benchmarks/bench_bodies.py [--n 64] [--steps 20] [--batches 64 512] [--float32] [--out bench_bodies.json]
"""

import argparse
import json

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--float32", action="store_true", help="time in float32 (default: float64)")
parser.add_argument("--n", type=int, default=64, help="number of spheres")
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batches", type=int, nargs="*", default=[64, 512])
parser.add_argument("--repeats", type=int, default=1)
parser.add_argument("--no-grad", action="store_true", help="skip the gradient timing")
parser.add_argument("--out", default="bench_bodies.json", help="where to write the numbers as JSON")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import jaxrbd  # noqa: E402
from jaxrbd.cli.bench_solvers import format_grid, grid_benchmark

jaxrbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

result = grid_benchmark(
    n=args.n, steps=args.steps, batches=args.batches, repeats=args.repeats, gradient=not args.no_grad
)
print(format_grid(result))
with open(args.out, "w") as f:
    json.dump(result, f, indent=2)
