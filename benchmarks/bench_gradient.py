"""Where a scene's gradient time goes: forward and reverse-mode rollouts, and the thunks XLA runs per step.

python benchmarks/bench_gradient.py [--scene incline] [--float32] [--rounds 5] [--profile]

Times the scene's 1-second rollout (the case of `jaxrbd bench`, with the step solver `simulate` picks) and the
gradient of the sum of its final q with respect to (q0, v0), alternating the two for `--rounds` rounds of 7
calls each, and prints every round's medians and their ratio: on a shared 2-core machine one pair of timings
moves by a third, so read the spread, not one figure.

`--profile` also runs three gradient calls under `jax.profiler.trace` and counts, per simulated step, the
thunks the CPU runtime executed (a fusion, a LAPACK call, a copy: each costs a fixed overhead on top of its
work), split by XLA's op metadata into the forward pass inside the gradient and the backward pass, with the
most frequent kinds of each. The forward alone is counted the same way. The trace is written under a
temporary directory and removed.
"""

import argparse
import collections
import gzip
import json
import pathlib
import re
import statistics
import tempfile
import time

import jax

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument(
    "--scene", default="incline", help="a case of `jaxrbd bench`: sphere_grid four_balls falling_rod incline"
)
parser.add_argument("--float32", action="store_true", help="in float32 (default: float64)")
parser.add_argument("--rounds", type=int, default=5, help="alternating rounds of forward and gradient timings")
parser.add_argument("--profile", action="store_true", help="count the thunks executed per step (jax.profiler)")
parser.add_argument("--top", type=int, default=8, help="kinds of thunk listed per pass with --profile")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)

import jax.numpy as jnp

import jaxrbd  # noqa: E402
from jaxrbd.cli import bench_scenes

jaxrbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

case = bench_scenes.CASES[args.scene]()
dtype = jnp.float32 if args.float32 else jnp.float64
rollout, q0, v0, solver = bench_scenes._jaxrbd_rollout(case, dtype)
steps = round(case.seconds / case.dt)
forward = jax.jit(lambda q, v: rollout(q, v, steps)[0]).lower(q0, v0).compile()
gradient = jax.jit(jax.grad(lambda q, v: jnp.sum(rollout(q, v, steps)[0]), argnums=(0, 1))).lower(q0, v0).compile()


def median_ms(fn, calls=7):
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(fn(q0, v0))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


jax.block_until_ready(forward(q0, v0))
jax.block_until_ready(gradient(q0, v0))
print(f"{case.name}, {jnp.dtype(dtype).name}, {solver}, {steps} steps of h = {case.dt}")
print(f"{'round':>5} {'forward ms':>10} {'gradient ms':>11} {'ratio':>6}")
ratios = []
for k in range(args.rounds):
    f, g = median_ms(forward), median_ms(gradient)
    ratios.append(g / f)
    print(f"{k + 1:>5} {f:>10.2f} {g:>11.2f} {g / f:>6.2f}")
print(f"gradient / forward: median {statistics.median(ratios):.2f}, range {min(ratios):.2f} .. {max(ratios):.2f}")


def thunks_per_step(compiled, label, split):
    """Thunk executions per step of three profiled calls of a compiled rollout, by kind, and with `split` by pass
    (XLA's op metadata names the backward pass's ops transpose(...))."""
    op_name = dict(re.findall(r'^\s*%?([\w.\-]+) = .*?op_name="([^"]*)"', compiled.as_text(), re.MULTILINE))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            for _ in range(3):
                jax.block_until_ready(compiled(q0, v0))
        (trace,) = pathlib.Path(tmp).glob("plugins/profile/*/*.trace.json.gz")
        with gzip.open(trace) as f:
            events = json.load(f)["traceEvents"]
    counts = collections.Counter()
    for event in events:
        name = event.get("name", "")
        if event.get("ph") != "X" or name not in op_name or name.startswith("while"):
            continue  # a loop is not a thunk of its own: the thunks of its body are counted
        phase = "backward" if split and "transpose(" in op_name[name] else "forward"
        counts[phase, re.sub(r"[.\d]+$", "", name)] += 1
    scale = 3 * steps
    for phase in ("forward", "backward"):
        kinds = {kind: n for (p, kind), n in counts.items() if p == phase}
        if not kinds:
            continue
        top = ", ".join(f"{kind} {n / scale:.0f}" for kind, n in collections.Counter(kinds).most_common(args.top))
        print(f"{label}, {phase}: {sum(kinds.values()) / scale:.0f} thunks per step ({top})")


if args.profile:
    thunks_per_step(forward, "rollout", split=False)
    thunks_per_step(gradient, "gradient", split=True)
