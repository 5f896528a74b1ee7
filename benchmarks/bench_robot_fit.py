"""How long a robot fit takes: 4 joint parameters of a two-link arm from MuJoCo logs.

The arm of `jaxrbd.foreign.arm_xml`: the shoulder's armature, damping and frictionloss
and the forearm's mass, fitted by Levenberg-Marquardt from 2-second logs (100 Hz,
1e-3 rad noise) that MuJoCo's C engine makes under random excitations. Each fit runs
twice with the same `ModelParameters` and new logs of the same shapes: the first call
compiles, the second is the time after compilation.

python benchmarks/bench_robot_fit.py [--logs 1 3]
"""

import argparse
import time

import jax

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--logs", type=int, nargs="+", default=[1, 3], help="the numbers of logs to fit together")
args = parser.parse_args()
jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402

import jaxrbd as rbd  # noqa: E402
from jaxrbd import foreign  # noqa: E402

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

TRUTH = {"j1.armature": 0.02, "j1.damping": 0.3, "j1.frictionloss": 0.15, "link2.mass": 0.6}
GUESS = foreign.arm_xml(j1={"armature": 0.03, "damping": 0.2, "frictionloss": 0.1}, link2_mass=0.5)
STEPS = 200

named = rbd.sysid.ModelParameters(rbd.load_mjcf(GUESS), list(TRUTH))
print(f"{'logs':>4s} {'call':>8s} {'seconds':>8s} {'iters':>6s} {'worst error':>12s} {'in 95%':>7s}")
for logs in args.logs:
    for call, seed in (("first", 0), ("second", 100)):
        runs = [
            foreign.mujoco_log(
                foreign.arm_xml(), foreign.excitation(STEPS, 2, amplitude=1.5, seed=seed + i), seed=seed + 50 + i
            )
            for i in range(logs)
        ]
        problem = named.replay(np.stack([r.observed for r in runs]), np.stack([r.controls for r in runs]))
        start = time.perf_counter()
        result = rbd.sysid.fit(
            problem,
            named.values,
            bounds=named.bounds,
            optimizer=rbd.sysid.LevenbergMarquardt(),
            noise=1e-3,
            steps=30,
            progress=False,
        )
        seconds = time.perf_counter() - start
        error = max(abs(float(result.params[k]) / v - 1) for k, v in TRUTH.items())
        held = sum(bool(result.interval[k][0] <= v <= result.interval[k][1]) for k, v in TRUTH.items())
        print(f"{logs:4d} {call:>8s} {seconds:8.2f} {result.steps:6d} {100 * error:11.2f}% {held:5d}/4")
