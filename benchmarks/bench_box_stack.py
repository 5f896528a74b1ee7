"""Creep of a resting stack of boxes: jaxrbd beside MuJoCo's C engine.

`scenes.box_stack(n)` (n cubes of half size 0.1 m, 1 kg, mu = 0.5, on the table
z = 0, each resting exactly on the one below) is run for `seconds` at step h
in jaxrbd (Stewart-Trinkle, the default solver, float64) and in MuJoCo (the same
boxes, default solver settings, pyramidal cone, the same h). Printed: the
largest displacement of any box from its start, the same from t = 1 s on (the
creep once the soft contacts of MuJoCo have settled), the deepest penetration at
the end, and the wall time of the run (jaxrbd: after compilation).

    python benchmarks/bench_box_stack.py [--n 5] [--seconds 10] [--h 0.01]
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import numpy as np

import jaxrbd as rbd

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached


def run_jaxrbd(n, seconds, h, half, mu):
    scene = rbd.scenes.box_stack(n, mu=mu, half_extents=half)
    steps = int(round(seconds / h))
    run = jax.jit(lambda state: rbd.simulate(scene.system, state, dt=h, steps=steps))
    jax.block_until_ready(run(scene.state))  # compile
    start = time.perf_counter()
    traj = jax.block_until_ready(run(scene.state))
    wall = time.perf_counter() - start
    x = np.asarray(scene.bodies.positions(traj.q))
    settled = int(round(1.0 / h))
    gaps = np.asarray(jax.jit(lambda q: scene.system.gap(q))(traj.q[-1]))
    return dict(
        drift=float(np.abs(x - x[0]).max()),
        creep=float(np.abs(x[settled:] - x[settled]).max()),
        penetration=float(max(0.0, -gaps.min())),
        wall=wall,
        note=f"residual {float(traj.stats.residual.max()):.1e}",
    )


def run_mujoco(n, seconds, h, half, mu):
    import mujoco

    bodies = "".join(
        f'<body pos="0 0 {(2 * i + 1) * half}"><freejoint/>'
        f'<geom type="box" size="{half} {half} {half}" mass="1" friction="{mu} 0.005 0.0001"/></body>'
        for i in range(n)
    )
    xml = (
        f'<mujoco><option timestep="{h}" gravity="0 0 -9.81" cone="pyramidal"/>'
        f'<worldbody><geom type="plane" size="5 5 0.1" friction="{mu} 0.005 0.0001"/>{bodies}</worldbody></mujoco>'
    )
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    x0 = data.xpos[1:].copy()
    steps = int(round(seconds / h))
    settled = int(round(1.0 / h))
    drift, creep, x1 = 0.0, 0.0, None
    start = time.perf_counter()
    for k in range(steps):
        mujoco.mj_step(model, data)
        drift = max(drift, float(np.abs(data.xpos[1:] - x0).max()))
        if k + 1 == settled:
            x1 = data.xpos[1:].copy()
        if x1 is not None:
            creep = max(creep, float(np.abs(data.xpos[1:] - x1).max()))
    wall = time.perf_counter() - start
    depth = max([0.0] + [-float(data.contact[i].dist) for i in range(data.ncon)])
    return dict(drift=drift, creep=creep, penetration=depth, wall=wall, note="soft constraints (default solref)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--h", type=float, default=0.01)
    args = parser.parse_args()
    half, mu = 0.1, 0.5
    rows = [("jaxrbd", run_jaxrbd(args.n, args.seconds, args.h, half, mu))]
    try:
        rows.append(("MuJoCo C", run_mujoco(args.n, args.seconds, args.h, half, mu)))
    except ImportError:
        rows.append(("MuJoCo C", None))
    print(f"\n{args.n} boxes resting for {args.seconds} s at h = {args.h}")
    print(f"{'engine':10} {'drift (m)':>11} {'after 1 s (m)':>14} {'penetration (m)':>16} {'wall (s)':>9}  note")
    for name, r in rows:
        if r is None:
            print(f"{name:10} {'(mujoco not installed)':>38}")
            continue
        print(f"{name:10} {r['drift']:11.2e} {r['creep']:14.2e} {r['penetration']:16.2e} {r['wall']:9.3f}  {r['note']}")


if __name__ == "__main__":
    main()
