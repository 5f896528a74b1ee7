"""Solver benchmark: time, batch throughput, success rate and gradient cost against problem size."""

import json
import statistics
import time

import jax
import jax.numpy as jnp
from .._progress import tqdm

from .._random import random_friction_lcp
from ..complementarity import Lemke, SemismoothNewton, solve_lcp
from .bench_scenes import median_time

DIRECTIONS = 8
CONTACTS = (1, 2, 5, 10, 20)


def _problems(contacts, batch, seed):
    dofs = max(3, min(30, 3 * contacts))
    keys = jax.random.split(jax.random.PRNGKey(seed), batch)
    make = lambda k: random_friction_lcp(
        k,
        max_dofs=dofs,
        min_dofs=dofs,
        max_contacts=contacts,
        min_contacts=contacts,
        max_directions=DIRECTIONS,
        min_directions=DIRECTIONS,
    )
    return jax.vmap(make)(keys)


def run_benchmark(batch=256, repeats=3, contacts=CONTACTS, seed=0):
    """Return one row per (solver, contacts): size, times, solved fraction, gradient cost."""
    solvers = {"SemismoothNewton": SemismoothNewton(), "Lemke": Lemke()}
    rows = []
    for nc in tqdm(contacts, desc="problem sizes"):
        probs = _problems(nc, batch, seed)
        A, b = probs.lcp.A, probs.lcp.b
        for name, solver in solvers.items():
            one = jax.jit(lambda A, b, s=solver: solve_lcp(A, b, solver=s).z)
            many = jax.jit(jax.vmap(lambda A, b, s=solver: solve_lcp(A, b, solver=s)))
            grad = jax.jit(jax.grad(lambda A, b, s=solver: jnp.sum(solve_lcp(A, b, solver=s).z), argnums=(0, 1)))
            t0 = time.perf_counter()
            jax.block_until_ready(one(A[0], b[0]))
            compile_s = time.perf_counter() - t0
            sol = many(A, b)
            solve_s = median_time(one, A[0], b[0], repeats=repeats)
            rows.append(
                {
                    "solver": name,
                    "contacts": nc,
                    "size": int(b.shape[-1]),
                    "compile_s": compile_s,
                    "solve_ms": 1e3 * solve_s,
                    "batch": batch,
                    "batch_ms": 1e3 * median_time(many, A, b, repeats=repeats),
                    "solved": float(jnp.mean(sol.converged)),
                    "worst_residual": float(jnp.max(sol.residual)),
                    "fallback": float(jnp.mean(sol.fallback)),
                    "grad_over_solve": median_time(grad, A[0], b[0], repeats=repeats) / solve_s,
                }
            )
    return rows


COLUMNS = [
    ("solver", "{:<17}"),
    ("contacts", "{:>8}"),
    ("size", "{:>5}"),
    ("compile_s", "{:>9.2f}"),
    ("solve_ms", "{:>9.2f}"),
    ("batch_ms", "{:>9.1f}"),
    ("solved", "{:>7.3f}"),
    ("worst_residual", "{:>14.1e}"),
    ("fallback", "{:>8.3f}"),
    ("grad_over_solve", "{:>15.2f}"),
]


def format_table(rows):
    head = " ".join(f"{name:>{len(fmt.format(rows[0][name]))}}" for name, fmt in COLUMNS)
    lines = [head, "-" * len(head)]
    lines += [" ".join(fmt.format(row[name]) for name, fmt in COLUMNS) for row in rows]
    return "\n".join(lines)


def main(out=None, batch=256, repeats=3, contacts=CONTACTS, solvers=True):
    rod = rod_benchmark(batch=batch, repeats=repeats)
    print(format_rod(rod))
    if not solvers:
        if out is not None:
            with open(out, "w") as f:
                json.dump({"rod": rod}, f, indent=2)
        return rod
    rows = run_benchmark(batch=batch, repeats=repeats, contacts=contacts)
    header = (
        f"friction LCPs, {DIRECTIONS} directions per contact, {jax.default_backend()} "
        f"({jax.devices()[0].device_kind}), dtype {jnp.zeros(()).dtype}; batch_ms is one vmapped call of {batch}"
    )
    print(header)
    print(format_table(rows))
    if out is not None:
        with open(out, "w") as f:
            json.dump({"rod": rod, "header": header, "rows": rows}, f, indent=2)
    return rows


def rod_benchmark(batch=256, dt=0.0025, steps=320, repeats=3):
    """The falling rod (P1): compile time, steps/s, batched env-steps/s, gradient cost."""
    from .. import scenes
    from ..stepping import simulate

    def final_x(mu):
        return simulate(*scenes.falling_rod(mu=mu), dt=dt, steps=steps).q[-1, 0]

    one = jax.jit(final_x)
    many = jax.jit(jax.vmap(final_x))
    grad = jax.jit(jax.grad(final_x))
    mu, mus = jnp.asarray(0.6), jnp.linspace(0.1, 1.5, batch)
    compile_s = {}
    for name, f, x in (("rollout", one, mu), ("batch", many, mus), ("gradient", grad, mu)):
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        compile_s[name] = time.perf_counter() - t
    rollout = median_time(one, mu, repeats=repeats)
    return {
        "dt": dt,
        "steps": steps,
        "batch": batch,
        "compile_s": compile_s,
        "rollout_s": rollout,
        "steps_per_s": steps / rollout,
        "batch_env_steps_per_s": batch * steps / median_time(many, mus, repeats=repeats),
        "grad_over_rollout": median_time(grad, mu, repeats=repeats) / rollout,
    }


def format_rod(r):
    c = r["compile_s"]
    return "\n".join(
        [
            f"falling rod (P1), dt = {r['dt']}, {r['steps']} steps, {jax.default_backend()}, dtype {jnp.zeros(()).dtype}",
            f"  compile (first call incl.)   rollout {c['rollout']:.2f} s, batch of {r['batch']} {c['batch']:.2f} s, "
            f"gradient {c['gradient']:.2f} s",
            f"  one rollout                  {r['rollout_s'] * 1e3:.1f} ms = {r['steps_per_s']:.0f} steps/s",
            f"  vmapped batch of {r['batch']:<4}        {r['batch_env_steps_per_s']:.0f} env-steps/s",
            f"  gradient / rollout           {r['grad_over_rollout']:.2f}",
        ]
    )


def grid_benchmark(n=64, dt=0.01, steps=20, batches=(64, 512), repeats=1, gradient=True):
    """`sphere_grid(n)`: compile time, steps/s for one environment and env-steps/s for vmapped batches.

    The batch varies mu. Each figure is the median of `repeats` runs after a warm-up call.
    """
    from .. import scenes
    from ..stepping import simulate

    def final(mu):
        traj = simulate(*scenes.sphere_grid(n, mu=mu), dt=dt, steps=steps)
        return traj.q[-1], traj.stats.residual.max()

    one = jax.jit(final)
    t = time.perf_counter()
    _, residual = jax.block_until_ready(one(jnp.asarray(0.5)))
    compile_s = time.perf_counter() - t
    rollout = median_time(one, jnp.asarray(0.4), repeats=repeats)
    result = {
        "n": n,
        "dt": dt,
        "steps": steps,
        "contacts": n,
        "lcp_size": n * (8 + 2),
        "compile_s": compile_s,
        "steps_per_s": steps / rollout,
        "worst_residual": float(residual),
        "batches": {},
    }
    if gradient:
        grad = jax.jit(jax.grad(lambda mu: final(mu)[0][2::7].sum()))
        jax.block_until_ready(grad(jnp.asarray(0.5)))
        result["grad_over_rollout"] = median_time(grad, jnp.asarray(0.4), repeats=repeats) / rollout
    for batch in batches:
        many = jax.jit(jax.vmap(final))
        mus = jnp.linspace(0.1, 1.0, batch)
        t = time.perf_counter()
        jax.block_until_ready(many(mus))
        first = time.perf_counter() - t
        times = []
        for _ in range(repeats):  # the first call was the warm-up
            t = time.perf_counter()
            jax.block_until_ready(many(mus * 1.01))
            times.append(time.perf_counter() - t)
        elapsed = statistics.median(times)
        result["batches"][batch] = {"compile_s": first - elapsed, "env_steps_per_s": batch * steps / elapsed}
    return result


def format_grid(r):
    lines = [
        f"sphere_grid({r['n']}): {r['contacts']} contacts, LCP size {r['lcp_size']}, dt = {r['dt']}, "
        f"{r['steps']} steps, {jax.default_backend()} ({jax.devices()[0].device_kind}), dtype {jnp.zeros(()).dtype}",
        f"  compile (first call incl.)   {r['compile_s']:.1f} s",
        f"  one environment              {r['steps_per_s']:.2f} steps/s (worst residual {r['worst_residual']:.1e})",
    ]
    if "grad_over_rollout" in r:
        lines.append(f"  gradient / rollout           {r['grad_over_rollout']:.2f}")
    for batch, b in r["batches"].items():
        lines.append(
            f"  vmapped batch of {batch:<5}       {b['env_steps_per_s']:.2f} env-steps/s (compile {b['compile_s']:.1f} s)"
        )
    return "\n".join(lines)
