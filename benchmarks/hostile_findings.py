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
from test_hostile import GAP_ROUNDOFF, H  # noqa: E402

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
    for finding in (tilting_capsule_on_a_parallel_one,):
        print(f"{finding.__name__}: {finding()}")
    if "--long" in sys.argv:
        long_profile()
