"""The scene benchmark: jaxrbd beside MuJoCo MJX (default and fast settings) and MuJoCo C.

Scenes: sphere_grid(64), four_balls, the falling rod, a cube on an incline. Prints one
table and writes it as JSON, then fits the cost per step against the number of
spheres (8, 64, 512) and plots it. Same as `jaxrbd bench`.

python benchmarks/bench_scenes.py [--scenes sphere_grid incline] [--batches 64 512 4096] [--out bench.json]
"""

import os
import sys

# Before JAX starts: see `jaxrbd.cli.commands.SERIAL_LAPACK_FLAG` (a batched dense solve can deadlock without it).
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_enable_concurrency_optimized_scheduler=false"

from jaxrbd.cli import main  # noqa: E402

main(["bench", *sys.argv[1:]])
