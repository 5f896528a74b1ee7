"""The scene benchmark: jaxrbd beside MuJoCo MJX (default and fast settings) and MuJoCo C.

Scenes: sphere_grid(64), four_balls, the falling rod, a cube on an incline. Prints one
table and writes it as JSON, then fits the cost per step against the number of
spheres (8, 64, 512) and plots it. Same as `jaxrbd bench`.

python benchmarks/bench_scenes.py [--scenes sphere_grid incline] [--batches 64 512 4096] [--out bench.json]
"""

import sys

from jaxrbd.cli import main  # `jaxrbd bench`: it calls jaxrbd.configure with the compilation cache off

main(["bench", *sys.argv[1:]])
