"""Benchmark the complementarity solvers on random friction LCPs (1 to 20 contacts).

python benchmarks/bench_lcp.py [--float32] [--batch 256] [--out bench_lcp.json]
"""

import argparse

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--float32", action="store_true", help="time in float32 (default: float64)")
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--out", default="bench_lcp.json", help="where to write the table as JSON")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)

from jaxrbd.cli.bench_solvers import main

main(out=args.out, batch=args.batch, repeats=args.repeats)
