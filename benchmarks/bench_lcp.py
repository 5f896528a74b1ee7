"""Benchmark the complementarity solvers on random friction LCPs (1 to 20 contacts).

Also times a repeated eager (outside `jit`) `solve_lcp` on one 18 x 18 friction LCP:
the first call (it compiles) and the median of the later ones.

python benchmarks/bench_lcp.py [--float32] [--batch 256] [--out bench_lcp.json] [--eager-only]
"""

import argparse
import time

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--float32", action="store_true", help="time in float32 (default: float64)")
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--out", default="bench_lcp.json", help="where to write the table as JSON")
parser.add_argument("--eager-only", action="store_true", help="only the eager solve_lcp line")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import jaxrbd as rbd
from jaxrbd.cli.bench_scenes import median_time
from jaxrbd.cli.bench_solvers import main

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached


def eager_solve_ms(repeats=20):
    """(first call, median of `repeats` later calls) of an eager `rbd.solve_lcp(A, b)`, in ms."""
    key = jax.random.PRNGKey(0)
    prob = rbd.random_friction_lcp(key, max_contacts=3, min_contacts=3, max_directions=4, min_directions=4)
    A, b = prob.lcp.A, prob.lcp.b
    assert A.shape == (18, 18)
    t = time.perf_counter()
    jax.block_until_ready(rbd.solve_lcp(A, b))
    first = time.perf_counter() - t
    return 1e3 * first, 1e3 * median_time(lambda: rbd.solve_lcp(A, b), repeats=repeats, warmup=False)


first_ms, repeat_ms = eager_solve_ms(repeats=max(20, args.repeats))
print(f"eager solve_lcp, 18 x 18 friction LCP: first call {first_ms:.0f} ms, repeated call {repeat_ms:.2f} ms (median)")
if not args.eager_only:
    main(out=args.out, batch=args.batch, repeats=args.repeats)
