"""`jaxrbd reproduce`: the soft-finger problems of 002 (P3, P4) beside the paper, with figures."""

import os

import jax
import jax.numpy as jnp
import numpy as np

from . import scenes
from .stepping import StewartTrinkle, simulate

P3_DT = 0.07
P3_STEPS = 18  # about 1.2 s, as in 002 §4.2
SEAM_TIME = 5.0
SEAM_RUNS = (
    # (label, fixed-point iterations (0: the linearized scheme), step)
    ("linearized, h = 0.1", 0, 0.1),
    ("nonlinear, h = 0.1", 3, 0.1),
    ("linearized, h = 0.0012", 0, 0.0012),
)


def spinning_sphere_runs(dt=P3_DT, steps=P3_STEPS):
    """P3 with the exact soft-finger cone and the direction sets of 002 eq. (5) and (6)."""
    return {f: simulate(*scenes.spinning_sphere(friction=f), dt=dt, steps=steps) for f in ("exact", "eq5", "eq6")}


LOADED = 1e-9  # a normal impulse above round-off (N s)


def loaded(traj):
    """(steps, nc) bool: the contacts that carry a normal impulse above round-off in each step."""
    return np.asarray(traj.impulses.normal) > LOADED


def contact_lost(traj):
    """The end time of the last step in which a contact carries a normal impulse."""
    on = loaded(traj).any(axis=1)
    return float(np.asarray(traj.t[1:])[on].max()) if on.any() else 0.0


def seam_run(iterations, dt, time=SEAM_TIME):
    """P4: the sphere in the seam, by the linearized (0) or nonlinear (> 0 fixed-point iterations) scheme."""
    scene = scenes.sphere_in_seam()
    traj = simulate(
        *scene, dt=dt, steps=int(round(time / dt)), scheme=StewartTrinkle(fixed_point_iterations=iterations)
    )
    gaps = jax.vmap(scene.system.gap)(traj.q)
    return traj, gaps


def _report_p3(runs):
    rows = []
    print("P3 spinning sphere (002 §4.2), h = 0.07: exact omega_z = 1.962 (1 - t), stops at t = 1.0")
    print(f"{'cone':>8} {'slope':>10} {'stops in step ending at':>24} {'max |other v|':>14} {'max residual':>13}")
    for name, traj in runs.items():
        w = np.asarray(traj.v[:, 5])
        slope = (w[1] - w[0]) / P3_DT
        stop = float(np.asarray(traj.t)[np.argmax(w <= 1e-12)])
        other = float(jnp.max(jnp.abs(traj.v[:, :5])))
        res = float(jnp.max(traj.stats.residual))
        rows.append(dict(cone=name, slope=slope, stop=stop, other=other, residual=res))
        print(f"{name:>8} {slope:>10.6f} {stop:>24.2f} {other:>14.2e} {res:>13.1e}")
    print("paper: eq. (5) and the nonlinear method match the exact line except in the step containing t = 1;")
    print("       eq. (6) decelerates more slowly.")
    return rows


def _report_seam(results):
    print("\nP4 sphere in the seam (002 §4.3): paper loses contact for good at t ~ 3.6 s")
    print(f"{'run':>24} {'contact lost':>13} {'max gap under load':>19} {'min gap':>10} {'max residual':>13}")
    rows = []
    for label, (traj, gaps) in results.items():
        g = np.asarray(gaps[1:])
        drift = float(np.max(np.where(loaded(traj), g, 0.0)))
        row = dict(
            run=label,
            lost=contact_lost(traj),
            drift=drift,
            min_gap=float(jnp.min(gaps)),
            residual=float(jnp.max(traj.stats.residual)),
        )
        rows.append(row)
        print(f"{label:>24} {row['lost']:>13.4f} {drift:>19.2e} {row['min_gap']:>10.1e} {row['residual']:>13.1e}")
    return rows


def _plot_p3(runs, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    t = np.linspace(0, 1.2, 200)
    axes[0].plot(t, np.maximum(1.962 * (1 - t), 0), "k:", label="exact")
    for (name, traj), mark in zip(runs.items(), "sod"):
        axes[0].plot(traj.t, traj.v[:, 5], mark + "-", ms=4, label=f"omega_z, {name}")
        axes[1].plot(traj.t[1:], traj.impulses.moment[:, 0] / P3_DT, mark + "-", ms=4, label=f"c_r, {name}")
    axes[0].set(xlabel="t (s)", ylabel="rad/s", title="002 Fig. 4 / 7: spin")
    axes[1].set(xlabel="t (s)", ylabel="N m", title="002 Fig. 5 / 8: frictional moment")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_seam(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 3.2 * len(results)), squeeze=False)
    names = ("vx", "vy", "vz", "wx", "wy", "wz")
    for row, (label, (traj, _)) in zip(axes, results.items()):
        h = float(traj.t[1] - traj.t[0])
        for i, n in enumerate(names):
            row[0].plot(traj.t, traj.v[:, i], label=n)
        imp = traj.impulses
        for series, n in (
            (imp.normal[:, 0], "c_n"),
            (imp.friction[:, 0, 0], "c_t"),
            (imp.friction[:, 0, 1], "c_o"),
            (imp.moment[:, 0], "c_r"),
        ):
            row[1].plot(traj.t[1:], series / h, label=n)
        row[0].set(title=f"velocities, {label}", xlabel="t (s)")
        row[1].set(title=f"forces at the contact with the big sphere, {label}", xlabel="t (s)")
        row[0].legend(fontsize=7, ncol=3)
        row[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_reproduce(name="all", out="out"):
    """Run P3 and/or P4, print the tables beside the paper's behaviour and save the figures in `out`."""
    from tqdm import tqdm

    if name not in ("all", "spinning_sphere", "sphere_in_seam"):
        raise ValueError(f"NAME must be spinning_sphere, sphere_in_seam or all, got {name!r}")
    os.makedirs(out, exist_ok=True)
    report = {}
    if name in ("all", "spinning_sphere"):
        runs = spinning_sphere_runs()
        report["spinning_sphere"] = _report_p3(runs)
        _plot_p3(runs, os.path.join(out, "spinning_sphere.png"))
        print(f"wrote {os.path.join(out, 'spinning_sphere.png')}")
    if name in ("all", "sphere_in_seam"):
        results = {}
        for label, iterations, dt in tqdm(SEAM_RUNS, desc="sphere in the seam", unit="run"):
            results[label] = seam_run(iterations, dt)
        report["sphere_in_seam"] = _report_seam(results)
        _plot_seam(results, os.path.join(out, "sphere_in_seam.png"))
        print(f"wrote {os.path.join(out, 'sphere_in_seam.png')}")
    return report
