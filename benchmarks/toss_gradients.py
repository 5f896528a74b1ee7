"""d(final pose)/d(mu) of a cube thrown sliding and spinning onto a table, against central differences.

python benchmarks/toss_gradients.py [--throws 5] [--steps 50] [--schemes stewart_trinkle anitescu_potra]
    [--compliance 0 1e-4]

Each throw is `rbd.scenes.cube_toss` with mu = 0.5, the cube flat, its centre 1 cm above resting height, v0 =
(U(0.5, 2), U(-0.5, 0.5), 0) m/s and w0 = (0, 0, U(-10, 10)) rad/s (seed 0), stepped 50 times at h = 0.01 in
float64. For each scheme and each `compliance` of its normal rows (0: rigid) the table gives the largest
difference between the reverse-mode derivative of the final q (7 entries) and central differences of step
1e-6 and 1e-4, relative to the largest entry of the differences. The two steps agree where the pose is
smooth in mu.

Where the cube spins, its corners slide towards different directions, and the rigid step's normal impulses
are not unique (four corners on three normal directions): its velocities are then not unique either (the
friction torque depends on the split), the run follows the solution its solver's path finds, and the
derivative differs (the identification guide, "What contact data can identify"). A small compliance makes
the step's solution unique (the simulating guide, "One load split where many solve").
"""

import argparse
import functools
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import jaxrbd as rbd

SCHEMES = {"stewart_trinkle": rbd.StewartTrinkle, "anitescu_potra": rbd.AnitescuPotra}


def _final_pose(mu, v0, w0, *, scheme, steps):
    scene = rbd.scenes.cube_toss(v0=v0, w0=w0, mu=mu, height=0.06, orientation=(1.0, 0.0, 0.0, 0.0))
    return rbd.simulate(*scene, dt=0.01, steps=steps, scheme=scheme).q[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throws", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--schemes", nargs="+", choices=list(SCHEMES), default=list(SCHEMES))
    parser.add_argument("--compliance", nargs="+", type=float, default=[0.0, 1e-4], help="the schemes' compliance")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    warnings.simplefilter("ignore", DeprecationWarning)
    rng = np.random.default_rng(0)
    throws = [
        (np.array([rng.uniform(0.5, 2.0), rng.uniform(-0.5, 0.5), 0.0]), np.array([0.0, 0.0, rng.uniform(-10, 10)]))
        for _ in range(args.throws)
    ]
    print(
        f"{'scheme':<16} {'compliance':>10} {'v0 (m/s)':<16} {'wz (rad/s)':>10} {'rel. diff, 1e-6':>16} "
        f"{'rel. diff, 1e-4':>16}"
    )
    for name, rho in itertools.product(args.schemes, args.compliance):
        final_pose = functools.partial(_final_pose, scheme=SCHEMES[name](compliance=rho), steps=args.steps)
        pose = jax.jit(final_pose)
        derivative = jax.jit(jax.jacrev(final_pose))
        for v0, w0 in throws:
            v0, w0 = jnp.asarray(v0), jnp.asarray(w0)
            ad = np.asarray(derivative(0.5, v0, w0))
            errors = []
            for eps in (1e-6, 1e-4):
                fd = (np.asarray(pose(0.5 + eps, v0, w0)) - np.asarray(pose(0.5 - eps, v0, w0))) / (2 * eps)
                errors.append(np.max(np.abs(ad - fd)) / np.max(np.abs(fd)))
            v = f"({float(v0[0]):.2f}, {float(v0[1]):.2f})"
            row = f"{name:<16} {rho:>10g} {v:<16} {float(w0[2]):>10.2f} {errors[0]:>16.1e} {errors[1]:>16.1e}"
            print(row, flush=True)


if __name__ == "__main__":
    main()
