"""`jaxrbd fit`: fit mu (a sliding block) or e (a bouncing ball) to a trajectory file (CSV or NPZ)."""

import json
import os

import numpy as np

COLUMNS = {"sliding_block": ("t", "x", "y"), "bouncing_ball": ("t", "z")}
DT_RTOL = 1e-6


class TrajectoryFileError(ValueError):
    """A trajectory file that cannot be fitted; the message names the problem."""


def load_trajectory(path, scene, dt):
    """The columns `COLUMNS[scene]` of a CSV (with a header) or NPZ file, checked.

    Raises `TrajectoryFileError` for a missing file or column, NaN or inf, fewer
    than 3 samples, or sample times not spaced by dt.
    """
    if not os.path.isfile(path):
        raise TrajectoryFileError(f"{path}: no such file")
    need = COLUMNS[scene]
    if path.endswith(".npz"):
        with np.load(path) as f:
            data = {k: np.asarray(f[k], dtype=float).reshape(-1) for k in f.files}
    elif path.endswith(".csv"):
        with open(path) as f:
            header = [h.strip() for h in f.readline().strip().split(",")]
        try:
            rows = np.genfromtxt(path, delimiter=",", skip_header=1, ndmin=2)
        except ValueError as err:
            raise TrajectoryFileError(f"{path}: cannot read the rows: {err}") from None
        if rows.shape[1] != len(header):
            raise TrajectoryFileError(f"{path}: the header has {len(header)} columns, the rows {rows.shape[1]}")
        data = {h: rows[:, i] for i, h in enumerate(header)}
    else:
        raise TrajectoryFileError(f"{path}: the file must end in .csv or .npz")
    missing = [c for c in need if c not in data]
    if missing:
        raise TrajectoryFileError(f"{path}: missing column(s) {missing}; a {scene} file needs {list(need)}")
    cols = {c: data[c] for c in need}
    n = len(cols["t"])
    if any(len(v) != n for v in cols.values()):
        raise TrajectoryFileError(f"{path}: the columns {list(need)} have different lengths")
    if n < 3:
        raise TrajectoryFileError(f"{path}: needs at least 3 samples, got {n}")
    for c, v in cols.items():
        bad = np.where(~np.isfinite(v))[0]
        if bad.size:
            raise TrajectoryFileError(f"{path}: column {c!r} has NaN or inf in row(s) {bad[:5].tolist()}")
    steps = np.diff(cols["t"])
    if not np.allclose(steps, dt, rtol=DT_RTOL, atol=0.0):
        i = int(np.argmax(np.abs(steps - dt)))
        raise TrajectoryFileError(
            f"{path}: the time step must be --dt = {dt} in every row; rows {i} and {i + 1} are {steps[i]:.6g} apart"
        )
    return cols


def _sliding_block(data, dt):
    import jax.numpy as jnp

    from .. import scenes
    from ..cones import EllipticCone
    from ..stepping import simulate

    xy = np.stack([data["x"], data["y"]], axis=1)
    steps = len(xy) - 1
    v0 = (xy[1] - xy[0]) / dt

    def predict(p):
        speed = jnp.sqrt(p["vx"] ** 2 + p["vy"] ** 2)
        heading = jnp.arctan2(p["vy"], p["vx"])
        scene = scenes.block_on_incline(
            angle=0.0,
            mu=p["mu"],
            speed=speed,
            heading=heading,
            half_extents=jnp.array([0.1, 0.1, 0.02]),
            friction=EllipticCone(),
        )
        return simulate(*scene, dt=dt, steps=steps).q[:, :2] + jnp.asarray(xy[0])

    return xy, predict, {"mu": 0.5, "vx": float(v0[0]), "vy": float(v0[1])}, "mu"


def _bouncing_ball(data, dt, radius):
    import jax.numpy as jnp

    from .. import scenes
    from ..stepping import Newton, simulate

    z = data["z"][:, None]
    steps = len(z) - 1
    if not z[0, 0] > radius:
        raise TrajectoryFileError(f"the first height z = {z[0, 0]} must exceed the ball's radius {radius}")

    def predict(p):
        scene = scenes.bouncing_ball(
            p["e"], height=float(z[0, 0]) - radius, radius=radius, velocity=jnp.stack([0.0, 0.0, p["vz"]])
        )
        return simulate(*scene, dt=dt, steps=steps, restitution=Newton()).q[:, 2:3]

    return z, predict, {"e": 0.5, "vz": float((z[1, 0] - z[0, 0]) / dt)}, "e"


def run_fit(path, *, scene, dt, out, force=False, steps=100, radius=0.1):
    """Fit the file's trajectory; write `out/fit.json` and `out/fit.png`; return the fitted parameters."""
    import jax.numpy as jnp

    from ..sysid import Free, Interval, Positive, fit, trajectory_loss

    if not dt > 0:
        raise TrajectoryFileError(f"--dt must be > 0, got {dt}")
    result_path = os.path.join(out, "fit.json")
    if os.path.exists(result_path) and not force:
        raise FileExistsError(f"{result_path} exists; pass --force to overwrite it")
    data = load_trajectory(path, scene, dt)
    if scene == "sliding_block":
        observed, predict, start, main = _sliding_block(data, dt)
        bounds = {"mu": Positive(), "vx": Free(), "vy": Free()}
    else:
        observed, predict, start, main = _bouncing_ball(data, dt, radius)
        bounds = {"e": Interval(0.0, 1.0), "vz": Free()}
    observed = jnp.asarray(observed)
    import optax

    # L-BFGS: the initial velocity is fitted with the coefficient, and the two are coupled.
    result = fit(
        lambda p: trajectory_loss(predict(p), observed),
        start,
        bounds=bounds,
        optimizer=optax.lbfgs(),
        steps=steps,
        param_rtol=1e-7,
        desc=scene,
    )
    params = {k: float(v) for k, v in result.params.items()}
    os.makedirs(out, exist_ok=True)
    with open(result_path, "w") as f:
        summary = dict(
            scene=scene,
            file=path,
            params=params,
            steps=result.steps,
            converged=result.converged,
            loss=float(result.loss),
            seconds=result.seconds,
        )
        json.dump(summary, f, indent=2)
    _plot(data, observed, np.asarray(predict(result.params)), result, os.path.join(out, "fit.png"))
    print(f"{scene}: {main} = {params[main]:.6g}; all: {params}")
    print(f"{result.steps} steps, best loss {result.loss:.3e} (step {result.best_step}), {result.seconds:.1f} s")
    print(f"wrote {result_path} and {os.path.join(out, 'fit.png')}")
    return params


def _plot(data, observed, fitted, result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    t = data["t"]
    for i in range(observed.shape[1]):
        axes[0].plot(t, observed[:, i], ".", ms=2, label=f"observed {i}")
        axes[0].plot(t, fitted[:, i], "-", label=f"fit {i}")
    axes[0].set(xlabel="t (s)", title="trajectory")
    axes[0].legend(fontsize=8)
    axes[1].semilogy(result.loss_history)
    axes[1].set(xlabel="optimizer step", ylabel="loss", title="loss")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
