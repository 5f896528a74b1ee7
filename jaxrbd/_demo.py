"""The demo: the impact step of Stewart and Trinkle's falling rod (003 §4.1, BENCHMARKS.md P1),
and a study of the solvers on random friction LCPs, with a plot."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ._problems import friction_lcp
from ._random import random_friction_lcp
from .complementarity import Lemke, SemismoothNewton, solve_lcp

G = 9.81
ROD = dict(length=0.5, radius=0.05, mass=1.0, inertia=0.002, mu=0.6, theta0=math.radians(30.0), omega0=4.0, y0=0.991)


def rod_contact(q, p=ROD):
    """Gaps f+- (2,), normals N (3, 2) and friction directions D (3, 4) of the rod's two ends.

    f+- = y +- (l/2) sin(theta) - r; N = grad f; the friction directions are
    +-grad of each contact point's x coordinate, x +- (l/2) cos(theta).
    """
    _, y, th = q
    half = 0.5 * p["length"]
    s = jnp.array([1.0, -1.0])
    f = y + s * half * jnp.sin(th) - p["radius"]
    N = jnp.stack([jnp.zeros(2), jnp.ones(2), s * half * jnp.cos(th)])
    d = jnp.stack([jnp.ones(2), jnp.zeros(2), -s * half * jnp.sin(th)])
    D = jnp.stack([d[:, 0], -d[:, 0], d[:, 1], -d[:, 1]], axis=1)
    return f, N, D


def rod_impact_step(h=0.01, p=ROD):
    """The first Stewart-Trinkle step (003 eq. (13)-(20)) whose linearised gap closes.

    The flight before it is exact (free fall and constant spin), so this is the
    LCP the simulator meets at the rod's first impact. Returns (t, q, v, FrictionLCP).
    """
    M = jnp.diag(jnp.array([p["mass"], p["mass"], p["inertia"]]))
    for k in range(10_000):
        t = k * h
        q = jnp.array([0.0, p["y0"] - 0.5 * G * t * t, p["theta0"] + p["omega0"] * t])
        v = jnp.array([0.0, -G * t, p["omega0"]])
        b = v + h * jnp.array([0.0, -G, 0.0])
        f, N, D = rod_contact(q, p)
        if float(jnp.min(f + h * (N.T @ b))) < 0:
            prob = friction_lcp(M, N, D, jnp.full(2, p["mu"]), (2, 2), b, bn=f / h)
            return t, q, v, prob
    raise RuntimeError("the rod never reached the table")


def solver_study(n_problems=200, chunk=100, seed=0):
    """Residuals of Newton alone, the default solver and Lemke on random friction LCPs, cold and warm."""
    solvers = {
        "Newton alone": SemismoothNewton(fallback=False),
        "SemismoothNewton (default)": SemismoothNewton(),
        "Lemke": Lemke(),
    }
    fns = {
        name: jax.jit(jax.vmap(lambda A, b, z0, s=s: solve_lcp(A, b, solver=s, z0=z0).residual))
        for name, s in solvers.items()
        if name != "Lemke"
    }
    lemke = jax.jit(jax.vmap(lambda A, b: solve_lcp(A, b, solver=Lemke())))
    out = {(name, start): [] for name in solvers for start in ("cold", "warm")}
    del out[("Lemke", "warm")]  # Lemke does not use a starting point
    for i in tqdm(range(0, n_problems, chunk), desc="random friction LCPs"):
        keys = jax.random.split(jax.random.PRNGKey(seed + i), chunk)
        probs = jax.vmap(random_friction_lcp)(keys)
        A, b = probs.lcp.A, probs.lcp.b
        exact = lemke(A, b)
        out[("Lemke", "cold")].append(np.asarray(exact.residual))
        stale = jnp.roll(exact.z, 1, axis=0)  # the solution of a different problem
        for name, fn in fns.items():
            out[(name, "cold")].append(np.asarray(fn(A, b, jnp.zeros_like(b))))
            out[(name, "warm")].append(np.asarray(fn(A, b, stale)))
    return {k: np.concatenate(v) for k, v in out.items()}


def plot_demo(prob, q, sol, study, path, p=ROD):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(12, 4.5))
    x, y, th = (float(a) for a in q)
    half, r = 0.5 * p["length"], p["radius"]
    ends = np.array(
        [[x + half * math.cos(th), y + half * math.sin(th)], [x - half * math.cos(th), y - half * math.sin(th)]]
    )
    ax0.plot(ends[:, 0], ends[:, 1], "-", lw=2 * 72 * r * 4, color="tab:blue", solid_capstyle="round", alpha=0.6)
    ax0.axhline(0, color="k")
    c_n, beta, _ = prob.split(sol.z)
    friction = np.asarray(beta[0::2] - beta[1::2])
    scale = 0.3 / max(float(jnp.max(c_n)), 1e-12)
    for i in range(2):
        if float(c_n[i]) > 0:
            px = ends[i, 0]
            tip = (px + scale * friction[i], scale * float(c_n[i]))
            ax0.annotate("", xy=tip, xytext=(px, 0), arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=2))
            ax0.text(tip[0], tip[1] + 0.02, f"c_n = {float(c_n[i]):.3f} N s", color="tab:red", ha="center")
    ax0.set_title("P1 rod at its impact step (h = 0.01): contact impulses")
    ax0.set_aspect("equal")
    ax0.set_xlim(-0.6, 0.6)
    ax0.set_ylim(-0.1, 0.6)
    bins = np.logspace(-17, 1, 37)
    for (name, start), res in study.items():
        ax1.hist(np.maximum(res, 1e-17), bins=bins, histtype="step", lw=1.5, label=f"{name}, {start}")
    ax1.set_xscale("log")
    ax1.axvline(1e-8, color="k", ls=":")
    ax1.set_xlabel("natural residual |min(z, A z + b)|")
    ax1.set_ylabel("problems")
    ax1.set_title(f"{len(next(iter(study.values())))} random friction LCPs")
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_demo(out="out", n_problems=200):
    os.makedirs(out, exist_ok=True)
    t, q, v, prob = rod_impact_step()
    print(
        f"P1 falling rod, h = 0.01: first step with a closing gap starts at t = {t:.3f} s (paper: impact at t ~ 0.383)"
    )
    print(f"  q = {np.round(np.asarray(q), 4)}, v = {np.round(np.asarray(v), 4)}")
    stale = jnp.array([0.0, 3.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.0])  # multipliers of some other step
    rows = [
        ("SemismoothNewton, cold", solve_lcp(prob.lcp.A, prob.lcp.b)),
        ("SemismoothNewton, stale warm start", solve_lcp(prob.lcp.A, prob.lcp.b, z0=stale)),
        (
            "Newton alone, stale warm start",
            solve_lcp(prob.lcp.A, prob.lcp.b, z0=stale, solver=SemismoothNewton(fallback=False)),
        ),
        ("Lemke", solve_lcp(prob.lcp.A, prob.lcp.b, solver=Lemke())),
    ]
    print(f"  {'solver':<36} {'residual':>9}  converged  c_n (both ends)      v+ = (vx, vy, omega)")
    for name, sol in rows:
        c_n, _, _ = prob.split(sol.z)
        print(
            f"  {name:<36} {float(sol.residual):9.1e}  {bool(sol.converged)!s:>9}  {np.round(np.asarray(c_n), 5)!s:<20} "
            f"{np.round(np.asarray(prob.velocity(sol.z)), 4)}"
        )
    study = solver_study(n_problems)
    print(f"random friction LCPs ({n_problems}), fraction with residual <= 1e-8:")
    for (name, start), res in study.items():
        print(f"  {name:<28} {start:<5} {np.mean(res <= 1e-8):6.3f}   worst {res.max():.1e}")
    path = os.path.join(out, "demo.png")
    plot_demo(prob, q, rows[0][1], study, path)
    print(f"wrote {path}")
    return path
