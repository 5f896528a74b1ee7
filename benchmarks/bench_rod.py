"""Benchmark the falling-rod rollout (P1): compile time, steps/s, batched env-steps/s, gradient cost.

python benchmarks/bench_rod.py [--float32] [--batch 256] [--out bench_rod.json]
"""

import argparse
import json

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--float32", action="store_true", help="time in float32 (default: float64)")
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--out", default="bench_rod.json", help="where to write the numbers as JSON")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import jaxrbd  # noqa: E402
from jaxrbd.cli.bench_solvers import format_rod, rod_benchmark

jaxrbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

result = rod_benchmark(batch=args.batch, repeats=args.repeats)
print(format_rod(result))
with open(args.out, "w") as f:
    json.dump(result, f, indent=2)
