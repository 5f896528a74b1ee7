"""The demo: Stewart and Trinkle's falling rod (003 §4.1, reference problem P1) at four step sizes,
with the paper's event times beside ours and the paper's velocity plots (003 Figures 2-5)."""

import math
import os

import jax
import numpy as np
from .._progress import tqdm

from .. import scenes
from ..analysis import rod_events
from ..stepping import simulate

STEP_SIZES = (0.01, 0.005, 0.0025, 0.00125)
DURATION = 0.8
PAPER = {"first_impact": 0.383, "full_contact": 0.548, "rest": 0.548 + 0.02}


def run_rod(h, duration=DURATION, **scene_args):
    system, state = scenes.falling_rod(**scene_args)
    traj = jax.jit(lambda s, x: simulate(s, x, dt=h, steps=round(duration / h)))(system, state)
    return system, traj


def plot_rod(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0, 0]
    system, traj = results[0.0025]
    p = {k: float(v) for k, v in system.params.items()}
    half, r = 0.5 * p["length"], p["radius"]
    for time in (0.30, 0.36, 0.383, 0.42, 0.47, 0.52, 0.548, 0.60):
        x, y, th = np.asarray(traj.q[int(round(time / 0.0025))])
        ends = np.array(
            [[x - half * math.cos(th), y - half * math.sin(th)], [x + half * math.cos(th), y + half * math.sin(th)]]
        )
        ax.plot(ends[:, 0], ends[:, 1], "-", lw=72 * 2 * r * 1.6, solid_capstyle="round", alpha=0.45)
        ax.text(x, y + 0.08, f"{time:.3f}", ha="center", fontsize=7)
    ax.axhline(0, color="k")
    ax.set_aspect("equal")
    ax.set_title("rod at h = 0.0025 (simulated time above each)")
    for ax, i, name in (
        (axes[0, 1], 1, "vertical velocity (m/s)"),
        (axes[1, 0], 2, "angular velocity (rad/s)"),
        (axes[1, 1], 0, "horizontal velocity (m/s)"),
    ):
        for h, (_, traj) in results.items():
            ax.plot(np.asarray(traj.t), np.asarray(traj.v[:, i]), lw=1, label=f"h = {h}")
        ax.set_xlim(0.3, DURATION)
        ax.set_xlabel("t (s)")
        ax.set_title(name)
        for key, value in PAPER.items():
            if key != "rest":
                ax.axvline(value, color="k", ls=":", lw=0.8)
        ax.legend(fontsize=7)
    fig.suptitle("Falling rod (Stewart & Trinkle 2000, §4.1); dotted: the paper's impact 0.383 and slap-down 0.548")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_demo(out="out"):
    os.makedirs(out, exist_ok=True)
    results = {h: run_rod(h) for h in tqdm(STEP_SIZES, desc="falling rod, step sizes")}
    print("P1 falling rod (003 §4.1): Stewart-Trinkle step, default solver, float64")
    print(
        f"  {'h':>8} {'first impact':>13} {'full contact':>13} {'at rest':>8} {'worst residual':>15} {'all converged':>14}"
    )
    print(
        f"  {'paper':>8} {PAPER['first_impact']:13.3f} {PAPER['full_contact']:13.3f} {'~' + format(PAPER['rest'], '.3f'):>8}"
    )
    for h, (system, traj) in results.items():
        ev = rod_events(system, traj)
        print(
            f"  {h:8.5f} {ev.first_impact:13.4f} {ev.full_contact:13.4f} {ev.rest:8.4f} "
            f"{float(traj.stats.residual.max()):15.1e} {bool(traj.stats.converged.all())!s:>14}"
        )
    system, traj = results[0.0025]
    print(
        "  contact phases at h = 0.0025 (x to the right; the paper: tip slides right, stops, slides left, slap-down, slides left ~0.02 s, rests):"
    )
    for label, t0, t1 in rod_events(system, traj).phases:
        print(f"    {t0:7.4f} - {t1:7.4f}  {label}")
    path = os.path.join(out, "falling_rod.png")
    plot_rod(results, path)
    print(f"wrote {path}")
    gif = os.path.join(out, "falling_rod.gif")
    animate_rod(system, traj, gif)
    print(f"wrote {gif}")
    return results


def animate_rod(system, traj, path, every=8):
    """A GIF of the rod (every `every`-th step), with matplotlib's Pillow writer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation, PillowWriter

    half, r = 0.5 * float(system.params["length"]), float(system.params["radius"])
    q, t = np.asarray(traj.q), np.asarray(traj.t)
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.axhline(0, color="k")
    ax.set(xlim=(-0.6, 0.6), ylim=(-0.05, 1.1), aspect="equal")
    (line,) = ax.plot([], [], lw=72 * 2 * r * 1.4, solid_capstyle="round")

    def draw(k):
        x, y, th = q[k]
        line.set_data(
            [x - half * math.cos(th), x + half * math.cos(th)], [y - half * math.sin(th), y + half * math.sin(th)]
        )
        ax.set_title(f"falling rod, t = {t[k]:.3f} s")
        return (line,)

    FuncAnimation(fig, draw, frames=range(0, len(t), every)).save(path, writer=PillowWriter(fps=15))
    plt.close(fig)
