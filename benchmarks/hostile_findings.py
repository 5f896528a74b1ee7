"""The open findings of the hostile suite (`tests/test_hostile.py`, issue 20): scenes that still fail.

Each prints what the step does now beside what it should do. They are not tests
because they fail until the library is fixed; when one passes, move it back into
`tests/test_hostile.py` as a regression test. `--long` also runs the suite's long
profile (derandomized: the same draws every time) and prints the first failing
draw per scheme; it belongs in the slow set once it passes.

    python benchmarks/hostile_findings.py [--long]
"""

import math
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxrbd as rbd  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
from test_hostile import GAP_ROUNDOFF, H, _body_at, _one_step  # noqa: E402

LYING = (math.sqrt(0.5), math.sqrt(0.5), 0.0, 0.0)  # a shape's z axis along -y


def tilting_capsule_on_a_parallel_one():
    """Two parallel capsules, one resting on the other, the upper one tilting at 5 rad/s.

    Found on `mixed6` (a capsule stacked on a parallel one): after one step of
    h = 0.01 the upper capsule's end is 9.7 mm inside the lower one, where the
    position-level step leaves at most the second-order remainder of the rotation,
    L (theta^2 / 2 + theta^3 / 6) + theta |dp| = 0.6 mm (`penetration_bound`). The
    capsule-capsule pair has one contact, at the first segment's midpoint when the
    axes are parallel, so the tilt (theta = h w) sinks a segment end by theta times
    the half length: a first-order penetration.
    """
    b = rbd.SceneBuilder(dim=3, mu=0.5)
    b.add_static("ground", rbd.Plane())
    radius, half_length = 0.05, 0.2
    capsule = rbd.Capsule(radius, half_length)
    b.add_body("lower", capsule, mass=1.0, position=(0.0, 0.0, radius), orientation=LYING)
    b.add_body(
        "upper", capsule, mass=1.0, position=(0.0, 0.0, 3 * radius), orientation=LYING, angular_velocity=(5.0, 0, 0)
    )
    scene = b.build()
    traj = rbd.simulate(*scene, dt=H, steps=1)
    pair = np.array([p == ("lower", "upper") for p in scene.bodies.pair_names])
    depth = -float(np.asarray(scene.system.contacts(traj.q[1]).gap)[pair].min())
    q = np.asarray(traj.q).reshape(2, 2, 7)
    theta = 2 * np.arccos(np.clip(np.abs(np.sum(q[1, :, 3:] * q[0, :, 3:], -1)), 0, 1))
    reach = 2 * (radius + half_length)
    dp = np.linalg.norm((q[1, 1, :3] - q[0, 1, :3]) - (q[1, 0, :3] - q[0, 0, :3]))
    bound = np.sum(reach * (theta**2 / 2 + theta**3 / 6)) + np.sum(theta) * dp + GAP_ROUNDOFF
    return (
        f"converged {bool(jnp.all(traj.stats.converged))}, penetration {depth:.3g} m, second-order bound {bound:.3g} m"
    )


def capsule_landing_flat():
    """A 1 kg capsule (r 0.06, half length 0.13) landing on its side at 0.38 m/s, turning at 2.9 rad/s, mu 1.3.

    Found on `capsule_on_sphere`, shrunk to a sphere at rest with a frictionless
    upright capsule on it, 4 cm off centre: the capsule slides off and lands flat in
    step 59, whose solve stops at residual 4.3e-10 (35 Newton iterations and the
    Lemke fallback) above the 1e-10 tolerance. The state is the one that run reached.
    """
    b = rbd.SceneBuilder(dim=3, mu=1.3)
    b.add_static("ground", rbd.Plane())
    q = ["-0x1.4f24630aaac6ep-6", "0x1.23dc9c79610b2p-49", "0x1.eb851eb851eb8p-5", "0x1.6a099f9ec7aabp-1"]
    q += ["-0x1.4036582dccfcdp-47", "-0x1.6a0a2d3111f7dp-1", "-0x1.86e33b92d65a7p-50"]
    v = ["-0x1.4bcb913293780p-3", "0x1.f7d713df965ecp-49", "-0x1.80ef42118e0b4p-2"]
    v += ["-0x1.2877391fea6a4p-43", "-0x1.709c1d5a11ea7p+1", "-0x1.1bd9a3da69a5ep-45"]
    _body_at(b, "capsule", rbd.Capsule(0.06, 0.13), 1.0, q, v)
    stats = _one_step(b)
    return f"converged {bool(stats.converged[0])}, residual {float(stats.residual[0]):.3g} (tolerance 1e-10)"


def heavy_spinning_ball_on_a_light_box():
    """A 1000 kg ball (r 0.1) resting on a 10 g cube (half extent 0.1) on the ground, spinning at 1 rad/s about y.

    Found on `mixed4` (a 1000 kg ball on a 25 g box, Poisson's law): mass ratio
    1e5, mu 0.5 on the ground and 0.1 between ball and box, everything at rest but
    the spin. With `AnitescuPotra()` one step of 20 stops at residual 0.036; with
    `StewartTrinkle()` 9 of 20 stop at about 3e-10, above the 1e-10 tolerance
    (without the spin, or with a 1 kg box, every step converges). The outcome hangs
    on round-off: with the ball 2.8e-17 m into the box instead of 5.6e-17 m above
    it, AnitescuPotra's worst step is at 1.2e-10.
    """
    b = rbd.SceneBuilder(dim=3)
    b.add_static("ground", rbd.Plane())
    b.add_body("box", rbd.Box((0.1, 0.1, 0.1)), mass=0.01, position=(0.0, 0.0, 0.1))
    z = 2 * 0.1 + 0.1  # 0.30000000000000004: the ball 5.6e-17 m above the box
    b.add_body("ball", rbd.Sphere(0.1), mass=1000.0, position=(0.0, 0.0, z), angular_velocity=(0.0, 1.0, 0.0))
    b.set_pair("ground", "box", mu=0.5)
    b.set_pair("ground", "ball", mu=0.5)
    b.set_pair("box", "ball", mu=0.1)
    scene = b.build()
    out = []
    for scheme in (rbd.AnitescuPotra(), rbd.StewartTrinkle()):
        stats = rbd.simulate(*scene, dt=H, steps=20, scheme=scheme).stats
        residual = np.asarray(stats.residual)
        bad = int(np.sum(~np.asarray(stats.converged)))
        out.append(f"{type(scheme).__name__}: {bad} of 20 steps not converged, worst residual {residual.max():.3g}")
    return "; ".join(out) + " (tolerance 1e-10)"


def long_profile():
    """The hostile suite's long profile, per scheme: 'passed' or the first failure with its draw."""
    from hypothesis import given, settings
    from test_hostile import LONG, LONG_RUN_EXAMPLES, SCHEMES, STRUCTURES, long_run_and_check, run_and_check, scenes

    for scheme in SCHEMES:
        for name, check, profile in (
            ("long", run_and_check, LONG),
            ("10^4 steps", long_run_and_check, settings(LONG, max_examples=LONG_RUN_EXAMPLES)),
        ):
            run = profile(given(d=scenes(tuple(STRUCTURES)))(lambda d: check(d, scheme)))
            try:
                run()
                print(f"{scheme}, {name}: passed")
            except AssertionError as err:
                print(f"{scheme}, {name}: FAILED {str(err)[:2000]}")


if __name__ == "__main__":
    for finding in (tilting_capsule_on_a_parallel_one, capsule_landing_flat, heavy_spinning_ball_on_a_light_box):
        print(f"{finding.__name__}: {finding()}")
    if "--long" in sys.argv:
        long_profile()
