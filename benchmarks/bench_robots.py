"""Gymnasium's robots in joint coordinates beside MuJoCo's C engine and MJX, in one process.

python benchmarks/bench_robots.py [--models hopper ant] [--seconds 1.0] [--batch 64] [--batch-seconds 0.2]
                                  [--no-mjx] [--float32]

For each model of tests/data/gymnasium, loaded by `rbd.load_mjcf(path, coordinates="joints")` from Gymnasium's
start pose, with controls drawn once uniformly in the actuators' ranges (seed 0), it prints:

- load: the wall time of `load_mjcf` (after `import jaxrbd` and one load of another model, so that the
  process's one-time set-up is not counted);
- compile: lowering and compiling the rollout of `--seconds` of simulated time (the persistent compilation
  cache off);
- steps/s of one environment (the median of repeated calls) and env-steps/s of a `vmap` batch of `--batch`
  environments over `--batch-seconds`, with the share of steps that converged;
- grad/fwd: the time of the gradient of the final state with respect to every control over the forward (the
  medians of alternated calls);
- the same file in MuJoCo's C engine (`mj_step` from Python, its own integrator and solver) and in MJX (default
  settings, one environment and the batch; the humanoid's PGS solver, which MJX lacks, replaced by MJX's
  default Newton), and jaxrbd's ratios to them.

float64 unless `--float32`.
"""

import argparse
import pathlib
import statistics
import time
import warnings

import jax
import numpy as np

import jaxrbd as rbd
from jaxrbd.cli.bench_scenes import median_time

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "gymnasium"
# Gymnasium's start poses (its environments' init_qpos; the others start at the file's qpos0).
STARTS = {"ant": [0.0, 0.0, 0.75, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, -1.0, 0.0, -1.0, 0.0, 1.0]}
MODELS = ("inverted_double_pendulum", "hopper", "ant", "humanoid")


def _xml(name):
    xml = (DATA / f"{name}.xml").read_text()
    if name in STARTS:
        key = " ".join(map(repr, STARTS[name]))
        xml = xml.replace("</mujoco>", f'<keyframe><key name="start" qpos="{key}"/></keyframe></mujoco>')
    return xml


def _controls(m, steps, batch=None, seed=0):
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    lo, hi = np.where(m.actuator_ctrllimited, lo, -1.0), np.where(m.actuator_ctrllimited, hi, 1.0)
    shape = (steps, m.nu) if batch is None else (batch, steps, m.nu)
    return np.random.default_rng(seed).uniform(lo, hi, size=shape)


def jaxrbd_row(name, seconds, batch, batch_seconds, dtype):
    import jax.numpy as jnp

    import jaxrbd as rbd

    xml = _xml(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        scene = rbd.load_mjcf(xml, coordinates="joints", keyframe="start" if name in STARTS else None)
        load = time.perf_counter() - start
    import mujoco

    m = mujoco.MjModel.from_xml_string(xml)
    system, state = jax.tree_util.tree_map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tuple(scene)
    )
    steps, batch_steps = round(seconds / scene.dt), round(batch_seconds / scene.dt)

    def rollout(u, steps):
        return rbd.simulate(system, state, dt=scene.dt, steps=steps, controls=u)

    u = jnp.asarray(_controls(m, steps), dtype)
    forward = lambda u: rollout(u, steps)
    t = time.perf_counter()
    compiled = jax.jit(forward).lower(u).compile()
    compile_s = time.perf_counter() - t
    traj = compiled(u)
    single = median_time(compiled, u, repeats=3)
    loss = lambda u: jnp.sum(forward(u).q[-1])
    grad_ratio = interleaved_ratio(jax.jit(jax.grad(loss)), jax.jit(lambda u: forward(u).q[-1]), u)
    ub = jnp.asarray(_controls(m, batch_steps, batch), dtype)
    batched = jax.jit(jax.vmap(lambda u: rollout(u, batch_steps)))
    batch_traj = batched(ub)
    batch_s = median_time(batched, ub, repeats=1)
    return dict(
        load=load,
        compile=compile_s,
        single=steps / single,
        converged=float(np.mean(traj.stats.converged)),
        batch=batch * batch_steps / batch_s,
        batch_converged=float(np.mean(batch_traj.stats.converged)),
        grad_ratio=grad_ratio,
        nv=int(m.nv),
        contacts=int(system.mu.shape[0]),
    )


def interleaved_ratio(f, g, x, seconds=2.0):
    """median time of f(x) / median time of g(x), the calls alternated for about `seconds` (at least 5 pairs).

    Alternated, both see the same state of a shared machine: the pendulum's 1 ms rollout and its gradient, timed
    as three calls of each one after the other, gave ratios from 2.1 to 6.0 across runs.
    """
    jax.block_until_ready(f(x))
    jax.block_until_ready(g(x))
    tf, tg = [], []
    while len(tf) < 5 or sum(tf) + sum(tg) < seconds:
        for f_or_g, times in ((f, tf), (g, tg)):
            t = time.perf_counter()
            jax.block_until_ready(f_or_g(x))
            times.append(time.perf_counter() - t)
    return statistics.median(tf) / statistics.median(tg)


def mujoco_row(name, seconds, batch, batch_seconds, mjx, dtype):
    import mujoco

    xml = _xml(name)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    steps = round(seconds / m.opt.timestep)
    u = _controls(m, steps)
    times = []
    for _ in range(3):
        mujoco.mj_resetData(m, d)
        if m.nkey:
            mujoco.mj_resetDataKeyframe(m, d, 0)
        t = time.perf_counter()
        for k in range(steps):
            d.ctrl[:] = u[k]
            mujoco.mj_step(m, d)
        times.append(time.perf_counter() - t)
    row = dict(c=steps / statistics.median(times))
    if not mjx:
        return row
    import jax.numpy as jnp
    from mujoco import mjx as mjx_module

    if m.opt.solver == mujoco.mjtSolver.mjSOL_PGS:  # the humanoid's file; MJX has no PGS, its default is Newton
        m.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON
    mx = mjx_module.put_model(m)
    d0 = mjx_module.make_data(mx)
    if m.nkey:
        d0 = d0.replace(qpos=jnp.asarray(m.key_qpos[0], dtype))
    d0 = jax.tree_util.tree_map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, d0)
    # The carry of the scan in the dtypes of a step's output (under x64 some of MJX's integer fields widen).
    out = jax.eval_shape(mjx_module.step, mx, d0)
    d0 = jax.tree_util.tree_map(lambda x, o: x.astype(o.dtype), d0, out)

    def rollout(u):
        def body(d, uk):
            return mjx_module.step(mx, d.replace(ctrl=uk)), None

        return jax.lax.scan(body, d0, u)[0].qpos

    single = jax.jit(rollout)
    row["mjx"] = steps / median_time(single, jnp.asarray(u, dtype), repeats=3)
    batch_steps = round(batch_seconds / m.opt.timestep)
    ub = jnp.asarray(_controls(m, batch_steps, batch), dtype)
    row["mjx_batch"] = batch * batch_steps / median_time(jax.jit(jax.vmap(rollout)), ub, repeats=1)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seconds", type=float, default=1.0, help="simulated time of the one-environment rollout")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batch-seconds", type=float, default=0.2, help="simulated time of the batch's rollout")
    parser.add_argument("--no-mjx", action="store_true")
    parser.add_argument("--float32", action="store_true")
    args = parser.parse_args()
    if not args.float32:
        jax.config.update("jax_enable_x64", True)
    dtype = np.float32 if args.float32 else np.float64
    import jaxrbd as rbd

    with warnings.catch_warnings():  # the process's one-time set-up, not counted in the load times
        warnings.simplefilter("ignore")
        rbd.load_mjcf(str(DATA / "inverted_double_pendulum.xml"), coordinates="joints")
    header = (
        f"{'model':<26}{'nv':>4}{'nc':>5}{'load s':>8}{'compile s':>11}{'steps/s':>10}{'conv':>6}"
        f"{f'B={args.batch} env-st/s':>17}{'conv':>6}{'grad/fwd':>9}{'MuJoCo C':>10}{'MJX':>9}{'MJX B':>9}"
        f"{'vs C':>7}{'vs MJX':>8}{'B vs MJX':>9}"
    )
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {'float32' if args.float32 else 'float64'}")
    print(header)
    for name in args.models:
        ours = jaxrbd_row(name, args.seconds, args.batch, args.batch_seconds, dtype)
        theirs = mujoco_row(name, args.seconds, args.batch, args.batch_seconds, not args.no_mjx, dtype)
        mjx, mjx_b = theirs.get("mjx", float("nan")), theirs.get("mjx_batch", float("nan"))
        print(
            f"{name:<26}{ours['nv']:>4}{ours['contacts']:>5}{ours['load']:>8.3f}{ours['compile']:>11.1f}"
            f"{ours['single']:>10,.0f}{ours['converged']:>6.3f}{ours['batch']:>17,.0f}{ours['batch_converged']:>6.3f}"
            f"{ours['grad_ratio']:>9.2f}{theirs['c']:>10,.0f}{mjx:>9,.0f}{mjx_b:>9,.0f}"
            f"{ours['single'] / theirs['c']:>7.3f}{ours['single'] / mjx:>8.2f}{ours['batch'] / mjx_b:>9.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
