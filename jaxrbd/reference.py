"""The reference problems' runs (docs/reference-problems.md P2-P5) and the papers' published numbers.

Shared by the tests, the notebooks and `jaxrbd reproduce` (which prints the tables and draws the figures).
"""

import jax
import jax.numpy as jnp
import numpy as np
from ._progress import tqdm

from . import scenes
from .analysis import convergence_row
from .cones import SoftFingerCone, soft_finger_directions
from .stepping import AnitescuPotra, StewartTrinkle, simulate

# P2, the four balls (003 §4.2): the paper's step sizes, the finest the reference.
P2_STEPS = (0.02, 0.01, 0.005, 0.0025, 0.00125)
# 003 Table 1: h -> (velocity error, position error, velocity variation).
P2_PUBLISHED = {
    0.02: (0.5050, 0.2505, 19.4046),
    0.01: (0.3523, 0.2015, 19.1728),
    0.005: (0.1657, 0.0838, 19.1702),
    0.0025: (0.0700, 0.0298, 19.0862),
    0.00125: (None, None, 19.0690),
}

# P3, the spinning sphere (002 §4.2).
P3_DT = 0.07
P3_STEPS = 18  # about 1.2 s, as in 002 §4.2

# P4, the sphere in the seam (002 §4.3).
SEAM_TIME = 5.0
SEAM_RUNS = (
    # (label, fixed-point iterations (0: the linearized scheme), step)
    ("linearized, h = 0.1", 0, 0.1),
    ("nonlinear, h = 0.1", 3, 0.1),
    ("linearized, h = 0.0012", 0, 0.0012),
)

LOADED = 1e-9  # a normal impulse above round-off (N s)


def four_balls_table(progress=True):
    """P2 at the paper's step sizes over 1 s: the 003 Table 1 measures against the finest run, and the runs.

    Returns (one `convergence_row` per step in `P2_STEPS`, {h: (scene, trajectory)}).
    """
    runs = {}
    for h in tqdm(P2_STEPS, desc="four balls", unit="h", disable=None if progress else True):
        scene = scenes.four_balls()
        runs[h] = (scene, simulate(*scene, dt=h, steps=int(round(1.0 / h))))
    scene, reference = runs[P2_STEPS[-1]]
    return [convergence_row(scene.bodies, runs[h][1], reference) for h in P2_STEPS], runs


def spinning_sphere_runs(dt=P3_DT, steps=P3_STEPS):
    """P3 with the exact soft-finger cone and the direction sets of 002 eq. (5) and (6): {name: trajectory}."""
    return {f: simulate(*scenes.spinning_sphere(cone=f), dt=dt, steps=steps) for f in ("exact", "eq5", "eq6")}


def loaded(traj):
    """(steps, nc) bool: the contacts that carry a normal impulse above round-off in each step."""
    return np.asarray(traj.impulses.normal) > LOADED


def contact_lost(traj):
    """The end time of the last step in which a contact carries a normal impulse (0 if none does)."""
    on = loaded(traj).any(axis=1)
    return float(np.asarray(traj.t[1:])[on].max()) if on.any() else 0.0


def seam_run(iterations, dt, time=SEAM_TIME):
    """P4 by the linearized (0) or nonlinear (> 0 fixed-point iterations) scheme: (trajectory, gaps)."""
    scene = scenes.sphere_in_seam()
    traj = simulate(
        *scene, dt=dt, steps=int(round(time / dt)), scheme=StewartTrinkle(fixed_point_iterations=iterations)
    )
    return traj, jax.vmap(scene.system.gap)(traj.q)


def seam_velocity_level_run(dt=0.1, time=SEAM_TIME, delta=1e-3):
    """P4 by the velocity-level linearization (Anitescu-Potra, 002's 20 directions): (trajectory, gaps).

    At h = 0.1 it shows the paper's penetration and bouncing across the seam (its "Stewart method").
    """
    cone = SoftFingerCone(1.0, 1.0, 0.3, directions=soft_finger_directions("eq5"))
    scene = scenes.sphere_in_seam(cone=cone)
    traj = simulate(*scene, dt=dt, steps=int(round(time / dt)), scheme=AnitescuPotra(delta=delta))
    return traj, jax.vmap(scene.system.gap)(traj.q)


def painleve_run(dt=0.001, steps=300):
    """P5, Painleve's rod (004 §1.3), on the default step: a dict of the measures `jaxrbd reproduce` reports.

    Keys: margin (n^T M^-1 (n - mu t) < 0: no force solution), finite, first_friction_impulse,
    bounded_force_impulse (dt mu m g), min_gap, max_energy_increase (per step), residual (the worst).
    """
    system, state = scenes.painleve_rod()
    margin = float(scenes.painleve_margin(system, state.q[2]))
    traj = simulate(system, state, dt=dt, steps=steps)
    energy = jax.vmap(system.energy)(traj.q, traj.v)
    gaps = jax.vmap(system.gap)(traj.q)
    return dict(
        margin=margin,
        finite=bool(jnp.all(jnp.isfinite(traj.q)) & jnp.all(jnp.isfinite(traj.v))),
        first_friction_impulse=float(jnp.abs(traj.impulses.friction[0, 1, 0])),
        bounded_force_impulse=dt * float(system.mu[1] * system.params["mass"]) * 9.81,
        min_gap=float(jnp.min(gaps)),
        max_energy_increase=float(jnp.max(jnp.diff(energy))),
        residual=float(jnp.max(traj.stats.residual)),
    )
