"""How long a one-parameter fit takes once compiled: the README's sliding block (1 mm noise).

The block of `tests/test_sysid.py` slides (then sticks) on the table for 0.6 s; mu = 0.3 is
fitted from its noisy x, y positions, first with the README's Adam fit (scalar loss), then
with Levenberg-Marquardt on the residuals. Each fit runs twice with the same function and
new data: the first call compiles, the second is the time after compilation.

python benchmarks/bench_fit.py [--float32]
"""

import argparse
import time

import jax

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--float32", action="store_true")
args = parser.parse_args()
jax.config.update("jax_enable_x64", not args.float32)
jax.config.update("jax_enable_compilation_cache", False)  # compile times are measured: no persistent cache

import jax.numpy as jnp  # noqa: E402

import jaxrbd as rbd  # noqa: E402
from jaxrbd.sysid import LevenbergMarquardt, Positive, fit, trajectory_loss  # noqa: E402

rbd.configure(compilation_cache=False)  # one OpenBLAS thread, the serial CPU scheduler; compiles measured uncached

NOISE = 1e-3
MU = 0.3


def block_xy(mu):
    scene = rbd.scenes.block_on_incline(
        angle=0.0, mu=mu, speed=1.0, heading=0.3, half_extents=jnp.array([0.1, 0.1, 0.02]), cone=rbd.EllipticCone()
    )
    return rbd.simulate(*scene, dt=0.01, steps=60).q[:, :2]


def loss(params, observed):
    return trajectory_loss(block_xy(params["mu"]), observed)


def residuals(params, observed):
    return (block_xy(params["mu"]) - observed).ravel()


truth = block_xy(MU)
print(f"{'fit':28s} {'call':>8s} {'seconds':>8s} {'steps':>6s} {'mu':>10s}")
for name, kwargs in (
    ("Adam, scalar loss", dict(loss=loss, steps=200, param_rtol=1e-5)),
    ("Levenberg-Marquardt", dict(residuals=residuals, optimizer=LevenbergMarquardt(), steps=50)),
):
    for call, seed in (("first", 0), ("second", 1)):
        observed = truth + NOISE * jax.random.normal(jax.random.PRNGKey(seed), truth.shape)
        start = time.perf_counter()
        result = fit(params={"mu": 0.5}, bounds={"mu": Positive()}, data=observed, progress=False, **kwargs)
        seconds = time.perf_counter() - start
        print(f"{name:28s} {call:>8s} {seconds:8.2f} {result.steps:6d} {float(result.params['mu']):10.6f}", flush=True)
