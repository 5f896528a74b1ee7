"""Long runs of resting scenes, 10^5 steps of h = 0.01 in float64.

A box resting on the ground plane, a frictionless tower of three spheres of radius
0.1 on top of each other (with friction the tower, an unstable equilibrium, falls
from round-off: see `sphere_tower`), and `sphere_grid(64)` with its balls on the table (height = radius).
Each starts in exact resting contact (gap 0 up to the round-off of the centres)
with zero velocity, so there is no settling: the exact motion is no motion at all,
and the drift is measured from the initial state over the whole run. The runs use
`simulate`'s defaults (Stewart-Trinkle, the solver `choose_solver` picks: dense
for the box and the tower, `ContactSweeps` for the grid), in chunks of CHUNK steps
that feed the final state of one call into the next (one compiled function).

Asserted over every step: each step converged, max over bodies |p(t) - p(0)| below
DRIFT_TOL, | |quaternion| - 1 | below QUAT_TOL, and the final energy not above the
initial one beyond ENERGY_ROUNDOFF relative. `benchmarks/bench_long.py` prints the
same numbers with timings.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

H = 0.01
STEPS = 100_000
CHUNK = 10_000
DRIFT_TOL = 1e-9  # metres
QUAT_TOL = 1e-12
ENERGY_ROUNDOFF = 1e-12  # relative: the final energy may exceed the initial one by this much (round-off)
MU = 0.5
RADIUS = 0.1


def resting_box():
    """A 0.2 m cube of 1 kg resting on a face, its centre at its half height."""
    b = rbd.SceneBuilder(dim=3, mu=MU)
    b.add_static("ground", rbd.Plane())
    b.add_body("box", rbd.Box((0.1, 0.1, 0.1)), mass=1.0, position=(0.0, 0.0, 0.1))
    return b.build()


def sphere_tower(n=3, mu=0.0):
    """n balls of radius RADIUS and 1 kg, each resting on the one below, the lowest on the ground; frictionless.

    The tower is an unstable equilibrium (an inverted pendulum: a perturbation grows
    like exp(t sqrt(g / r)) roughly). Without friction every impulse is along the
    exactly vertical normals and it stays; with friction the solver's tangential
    impulses at rest, ~1e-17 N s from the round-off of the polyhedral directions,
    seed the unstable mode and the tower falls after about 5 s (500 steps).
    """
    b = rbd.SceneBuilder(dim=3, mu=mu)
    b.add_static("ground", rbd.Plane())
    for k in range(n):
        b.add_body(f"ball{k}", rbd.Sphere(RADIUS), mass=1.0, position=(0.0, 0.0, RADIUS * (2 * k + 1)))
    return b.build()


def resting_grid():
    """`sphere_grid(64)` with the balls on the table instead of 0.5 m above it."""
    return rbd.scenes.sphere_grid(64, radius=RADIUS, height=RADIUS)


SCENES = {"box": resting_box, "sphere_tower": sphere_tower, "sphere_grid_64": resting_grid}


def long_run(scene, steps=STEPS, chunk=CHUNK, progress=iter):
    """Run `steps` steps in chunks; returns the worst drift, quaternion error, the energies and timings.

    Returns a dict: drift (m), quaternion_error, energy (initial, final), unconverged
    (number of steps), compile_s (the first chunk's extra time), seconds_per_chunk
    (the median of the chunks after the first). progress wraps the chunks' range
    (`benchmarks/bench_long.py` passes a tqdm bar).
    """
    system, state = scene
    model = scene.bodies
    run = jax.jit(lambda s: rbd.simulate(system, s, dt=H, steps=chunk))
    p0 = np.asarray(model.positions(state.q))
    energy0 = float(system.energy(state.q, state.v))
    drift = quat_error = 0.0
    unconverged, times = 0, []
    for _ in progress(range(steps // chunk)):
        start = time.perf_counter()
        traj = jax.block_until_ready(run(state))
        times.append(time.perf_counter() - start)
        drift = max(drift, float(np.abs(np.asarray(model.positions(traj.q)) - p0).max()))
        norms = np.linalg.norm(np.asarray(model.orientations(traj.q)), axis=-1)
        quat_error = max(quat_error, float(np.abs(norms - 1).max()))
        unconverged += int(np.sum(~np.asarray(traj.stats.converged)))
        state = rbd.State(traj.t[-1], traj.q[-1], traj.v[-1])
    energy = float(system.energy(state.q, state.v))
    later = np.median(times[1:]) if len(times) > 1 else times[0]
    return dict(
        drift=drift,
        quaternion_error=quat_error,
        energy=(energy0, energy),
        unconverged=unconverged,
        compile_s=times[0] - later,
        seconds_per_chunk=later,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", SCENES)
def test_resting_scene_does_not_drift_in_ten_to_the_fifth_steps(name):
    scene = SCENES[name]()
    assert bool(jnp.all(scene.state.v == 0))
    r = long_run(scene)
    print(
        f"{name}: drift {r['drift']:.3g} m, energy {r['energy'][0]!r} -> {r['energy'][1]!r}, "
        f"quaternion error {r['quaternion_error']:.3g}, {r['seconds_per_chunk']:.1f} s per {CHUNK} steps"
    )
    assert r["unconverged"] == 0
    assert r["drift"] <= DRIFT_TOL
    assert r["quaternion_error"] <= QUAT_TOL
    energy0, energy = r["energy"]
    assert energy - energy0 <= ENERGY_ROUNDOFF * abs(energy0)
