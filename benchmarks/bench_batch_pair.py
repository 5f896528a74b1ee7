"""Two vmapped batch sizes of one scene, timed interleaved: is the larger batch's env-steps/s at least the smaller's?

`jaxrbd bench` times each batch once (the median of a few calls); a batch of 64
small scenes runs for about 50 ms there, and one such timing moves by 20% on a
shared 2-core machine, more than the difference in question. Here both batches are
compiled first, then timed in alternating rounds (each round the median of `--calls`
calls), so that both see the same state of the machine. Inputs and steps are the
benchmark's (`batch_start`, `batch_steps`).

    python benchmarks/bench_batch_pair.py [--scene sphere_grid] [--float32] [--batches 64 512] [--rounds 6]
"""

import argparse
import statistics
import time

import jax


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", default="sphere_grid")
    parser.add_argument("--float32", action="store_true", help="float32 (default float64)")
    parser.add_argument("--batches", type=int, nargs=2, default=[64, 512])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5)
    args = parser.parse_args()
    import jaxrbd

    jaxrbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler
    if not args.float32:
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from jaxrbd.cli import bench_scenes as bs

    case = bs.CASES[args.scene]()
    dtype = jnp.float32 if args.float32 else jnp.float64
    rollout, q0, v0, _ = bs._jaxrbd_rollout(case, dtype)
    q, v = jax.jit(rollout, static_argnums=2)(q0, v0, round(case.batch_start / case.dt))
    calls = {}
    for batch in args.batches:
        qs, vs, steps = bs._batch_inputs(q, v, case.batch_steps, batch)
        f = jax.jit(jax.vmap(lambda q, v, steps=steps: rollout(q, v, steps))).lower(qs, vs).compile()
        jax.block_until_ready(f(qs, vs))
        calls[batch] = (f, qs, vs, batch * steps)

    def rate(batch):
        f, qs, vs, env_steps = calls[batch]
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            jax.block_until_ready(f(qs, vs))
            times.append(time.perf_counter() - start)
        return env_steps / statistics.median(times)

    small, large = args.batches
    print(f"{case.name}, {jnp.dtype(dtype).name}, env-steps/s, each the median of {args.calls} calls")
    print(f"{'round':>5s} {f'B={small}':>10s} {f'B={large}':>10s}  larger >= smaller")
    rates = {small: [], large: []}
    for k in range(args.rounds):
        for batch in args.batches:
            rates[batch].append(rate(batch))
        print(f"{k + 1:5d} {rates[small][-1]:10,.0f} {rates[large][-1]:10,.0f}  {rates[large][-1] >= rates[small][-1]}")
    above = sum(b >= a for a, b in zip(rates[small], rates[large]))
    print(
        f"median B={small} {statistics.median(rates[small]):,.0f}, B={large} {statistics.median(rates[large]):,.0f}; "
        f"B={large} >= B={small} in {above} of {args.rounds} rounds"
    )


if __name__ == "__main__":
    main()
