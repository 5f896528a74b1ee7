"""Least-squares solvers for `sysid.fit`: jaxrbd's Levenberg-Marquardt beside optimistix's LevenbergMarquardt and
GaussNewton, on two fits of the tests (the command line's shortcut scenes: a sliding block and a bouncing ball).

Prints, per solver and fit, the first call (compilation and run) and a second call (compiled), in wall and CPU
seconds, and the fitted coefficient. python benchmarks/bench_least_squares.py
"""

import pathlib
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402
import optimistix as optx  # noqa: E402

import jaxrbd as rbd  # noqa: E402

rbd.configure(compilation_cache=False)
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from jaxrbd.cli.fit import sliding_block_factory, bouncing_ball_factory
from jaxrbd.foreign import rigid_bounces
from jaxrbd.sysid import Free, Interval, Positive, LevenbergMarquardt, fit


def block_case():
    from test_cli import sliding_xy

    t = np.arange(81) * 0.01
    rng = np.random.default_rng(7)
    xy = sliding_xy(t, mu=0.4, v0=(0.6, -0.8), start=(0.2, 0.1), g=9.81) + 1e-3 * rng.standard_normal((81, 2))
    factory = sliding_block_factory()

    def residuals(p, obs):
        traj = rbd.simulate(*factory(**p), dt=0.01, steps=80)
        return traj.q[:, :2] - obs

    p0 = {
        "mu": 0.5,
        "vx": float((xy[1, 0] - xy[0, 0]) / 0.01),
        "vy": float((xy[1, 1] - xy[0, 1]) / 0.01),
        "x": float(xy[0, 0]),
        "y": float(xy[0, 1]),
    }
    bounds = {"mu": Positive(), "vx": Free(), "vy": Free(), "x": Free(), "y": Free()}
    return "sliding block (mu 0.4)", residuals, p0, bounds, xy, "mu", 0.4


def ball_case():
    t = np.arange(301) * 4e-3
    z = rigid_bounces(t, 0.7, 0.6, 0.0, radius=0.1, gravity=9.81) + 1e-3 * np.random.default_rng(4).standard_normal(301)
    factory = bouncing_ball_factory()

    def residuals(p, obs):
        traj = rbd.simulate(*factory(**p), dt=4e-3, steps=300, impact=rbd.NewtonRestitution(locate=True))
        return traj.q[:, 2] - obs

    p0 = {"e": 0.5, "vz": float((z[1] - z[0]) / 4e-3), "z": float(z[0])}
    return "bouncing ball (e 0.7)", residuals, p0, {"e": Interval(0.0, 1.0), "vz": Free(), "z": Free()}, z, "e", 0.7


for case in (block_case, ball_case):
    label, residuals, p0, bounds, data, name, truth = case()
    for solver_name, solver in (
        ("jaxrbd LevenbergMarquardt", LevenbergMarquardt()),
        ("optimistix.LevenbergMarquardt", optx.LevenbergMarquardt(rtol=1e-9, atol=1e-12)),
        ("optimistix.GaussNewton", optx.GaussNewton(rtol=1e-9, atol=1e-12)),
    ):
        for call in ("first", "second"):
            t0, c0 = time.perf_counter(), time.process_time()
            r = fit(
                residuals=residuals,
                params=p0,
                data=data,
                bounds=bounds,
                optimizer=solver,
                steps=50,
                param_rtol=1e-9,
                noise=1e-3,
                progress=False,
            )
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(
                f"{label:24s} {solver_name:30s} {call:6s} {wall:7.1f} s wall {cpu:7.1f} s cpu  steps {r.steps:3d}  {name} = {float(r.params[name]):.6f} (true {truth})  loss {r.loss:.4e}  converged {r.converged}",
                flush=True,
            )
