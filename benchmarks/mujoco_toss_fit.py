"""Fit mu and the spin of a cube sliding and spinning across a table to MuJoCo's trajectory of the same throw.

python benchmarks/mujoco_toss_fit.py [--mu 0.5] [--velocity 2.0 0.5] [--spin 10] [--duration 0.6]
    [--cones elliptic pyramidal] [--dts 0.01 0.002] [--compliance 0 1e-4] [--directions 32] [--jaxrbd-cone polyhedral]

MuJoCo's C engine steps a 10 cm, 1 kg cube set flat on a plane, thrown at `--velocity` (m/s) with spin `--spin`
(rad/s) about z, friction mu (its default soft contacts, timestep 1 ms) with each `--cones`; its centre's x, y
and yaw are observed every 10 ms, noise-free, until `--duration`. jaxrbd fits mu and the spin (from mu = 0.4
and the true spin less 20%; the throw's velocity and the start pose are known) with `rbd.sysid.fit`'s
Levenberg-Marquardt on the residuals of x, y and 0.05 m x yaw, in `rbd.scenes.cube_toss` (box on box) at each
step `--dts`, Stewart-Trinkle with each `--compliance` (0: rigid rows), a polyhedral cone of `--directions`
directions (32: within 0.5% of the circle) or, with `--jaxrbd-cone elliptic`, the elliptic cone (rigid rows
only), float64. The table gives the fitted values, their 95% intervals
and the RMS residual (m).

Without spin, the cube slides straight and its deceleration is mu g in both simulators; the fit's bias there is
jaxrbd's own first-order time stepping: positions advance with the end-of-step velocity, so a slide from v0
to rest covers v0 h / 2 less than v0^2 / (2 mu g), and the fitted mu comes out low by about that fraction.
The table's rows at a smaller step show what is left of the bias when that error shrinks.
"""

import argparse
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import jaxrbd as rbd

HALF = 0.05  # the cube's half extent (m)
MASS = 1.0
OBSERVE = 0.01  # s between observations
YAW_SCALE = HALF  # m per radian of yaw in the residuals (a corner's arc)


def mujoco_toss(mu, velocity, spin, duration, cone, timestep=1e-3):
    """MuJoCo's x, y and yaw of the throw every OBSERVE seconds, (n + 1, 3)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(rbd.foreign._box_on_plane_xml(mu, (HALF,) * 3, MASS, timestep, cone=cone))
    data = mujoco.MjData(model)
    data.qvel[:] = [velocity[0], velocity[1], 0.0, 0.0, 0.0, spin]
    q = []
    for _ in range(round(duration / OBSERVE) + 1):
        q.append(data.qpos.copy())
        mujoco.mj_step(model, data, nstep=round(OBSERVE / timestep))
    q = np.array(q)
    w, x, y, z = q[:, 3:7].T
    return np.stack([q[:, 0], q[:, 1], np.unwrap(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))], axis=1)


def observed_pose(q):
    """x, y and yaw of the cube from its (steps + 1, 7) coordinates (a flat cube: yaw from the quaternion)."""
    w, z = q[:, 3], q[:, 6]
    return jnp.stack([q[:, 0], q[:, 1], 2.0 * jnp.arctan2(z, w)], axis=1)


def fit(target, velocity, spin, dt, compliance, directions, cone):
    every = round(OBSERVE / dt)
    steps = every * (target.shape[0] - 1)
    scheme = rbd.StewartTrinkle(compliance=compliance)

    def pose(p):
        scene = rbd.scenes.cube_toss(
            v0=(velocity[0], velocity[1], 0.0),
            w0=(0.0, 0.0, p["spin"]),
            mu=p["mu"],
            height=HALF,
            orientation=(1.0, 0.0, 0.0, 0.0),
            directions=directions,
            cone=rbd.EllipticCone() if cone == "elliptic" else None,
        )
        traj = rbd.simulate(*scene, dt=dt, steps=steps, scheme=scheme)
        return observed_pose(traj.q[::every]), traj.stats.converged.all()

    def residuals(p, data):
        return ((pose(p)[0] - data) * jnp.array([1.0, 1.0, YAW_SCALE])).ravel()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the noise-free data's RMS warning: the bias is what is measured
        result = rbd.sysid.fit(
            residuals=residuals,
            data=jnp.asarray(target),
            params={"mu": 0.4, "spin": 0.8 * spin},
            bounds={"mu": rbd.sysid.Positive(), "spin": rbd.sysid.Free()},
            optimizer=rbd.sysid.LevenbergMarquardt(),
            steps=30,
            noise=1e-4,
            progress=False,
        )
    converged = bool(jax.jit(pose)(result.params)[1])
    return result, converged


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mu", type=float, default=0.5)
    parser.add_argument("--velocity", type=float, nargs=2, default=[2.0, 0.5])
    parser.add_argument("--spin", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=0.6)
    parser.add_argument("--cones", nargs="+", choices=["elliptic", "pyramidal"], default=["elliptic", "pyramidal"])
    parser.add_argument("--dts", nargs="+", type=float, default=[0.01, 0.002])
    parser.add_argument("--compliance", nargs="+", type=float, default=[0.0, 1e-4])
    parser.add_argument("--directions", type=int, default=32)
    parser.add_argument("--jaxrbd-cone", choices=["polyhedral", "elliptic"], default="polyhedral")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    cone = "elliptic" if args.jaxrbd_cone == "elliptic" else f"{args.directions} directions"
    print(
        f"throw: v0 = {tuple(args.velocity)} m/s, spin {args.spin} rad/s, mu = {args.mu}, {args.duration} s; "
        f"jaxrbd's cone: {cone}"
    )
    print(
        f"{'MuJoCo cone':<12} {'jaxrbd h':>8} {'compliance':>10} {'mu':>9} {'mu 95% interval':>20} "
        f"{'mu error':>9} {'spin':>8} {'RMS (m)':>9} {'converged':>9}"
    )
    for cone in args.cones:
        target = mujoco_toss(args.mu, args.velocity, args.spin, args.duration, cone)
        for dt in args.dts:
            for rho in args.compliance:
                result, converged = fit(target, args.velocity, args.spin, dt, rho, args.directions, args.jaxrbd_cone)
                mu, spin = float(result.params["mu"]), float(result.params["spin"])
                lo, hi = (float(x) for x in result.interval["mu"])
                print(
                    f"{cone:<12} {dt:>8g} {rho:>10g} {mu:>9.5f} {f'[{lo:.5f}, {hi:.5f}]':>20} "
                    f"{100 * (mu / args.mu - 1):>+8.2f}% {spin:>8.3f} {result.uncertainty.rms:>9.2e} {converged!s:>9}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
