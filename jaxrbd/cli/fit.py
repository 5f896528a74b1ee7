"""`jaxrbd fit`: fit the parameters of a scene to a trajectory file (CSV or NPZ).

Two shortcuts (`sliding_block`: mu; `bouncing_ball`: e), any scene from a
Python factory (`--scene module:function`, see `run_scene_fit`), and an MJCF
model file (`--scene model.xml`: its mu and restitution, `model_file_factory`).
"""

import importlib
import inspect
import json
import os
import re

import numpy as np

COLUMNS = {"sliding_block": ("t", "x", "y"), "bouncing_ball": ("t", "z")}
DT_RTOL = 1e-6


class TrajectoryFileError(ValueError):
    """A trajectory file that cannot be fitted; the message names the problem."""


def _delimiter(line):
    """The field separator of a text line: a tab, else a comma, else whitespace (None)."""
    return "\t" if "\t" in line else "," if "," in line else None


def read_columns(path):
    """dict column -> (n,) float array of a text file with a header row (.csv, .tsv, .txt) or an NPZ file;
    `TrajectoryFileError` otherwise.

    Text: the header may start with '#' (numpy's `savetxt(header=...)`); the fields of the header and of the
    rows are separated by tabs, commas or whitespace, each line's own.
    """
    if not os.path.isfile(path):
        raise TrajectoryFileError(f"{path}: no such file")
    if path.endswith(".npz"):
        with np.load(path) as f:
            return {k: np.asarray(f[k], dtype=float).reshape(-1) for k in f.files}
    if path.endswith((".csv", ".tsv", ".txt")):
        with open(path) as f:
            line = f.readline().strip().lstrip("#").strip()
            first_row = f.readline()
        header = [h.strip() for h in line.split(_delimiter(line))]
        try:
            rows = np.genfromtxt(path, delimiter=_delimiter(first_row), skip_header=1, ndmin=2)
        except ValueError as err:
            raise TrajectoryFileError(f"{path}: cannot read the rows: {err}") from None
        if rows.shape[1] != len(header):
            raise TrajectoryFileError(f"{path}: the header has {len(header)} columns, the rows {rows.shape[1]}")
        return {h: rows[:, i] for i, h in enumerate(header)}
    raise TrajectoryFileError(f"{path}: the file must end in .csv, .tsv, .txt or .npz")


def load_trajectory(path, scene, dt):
    """The columns `COLUMNS[scene]` of a CSV (with a header) or NPZ file, checked.

    Raises `TrajectoryFileError` for a missing file or column, NaN or inf, fewer
    than 3 samples, or sample times not spaced by dt.
    """
    need = COLUMNS[scene] if isinstance(scene, str) else tuple(scene)
    data = read_columns(path)
    missing = [c for c in need if c not in data]
    if missing:
        what = f"a {scene} file" if isinstance(scene, str) else "--columns"
        raise TrajectoryFileError(
            f"{path}: missing column(s) {missing}; {what} needs {list(need)}; the file has {sorted(data)}"
        )
    cols = {c: data[c] for c in need}
    n = len(next(iter(cols.values())))
    if any(len(v) != n for v in cols.values()):
        raise TrajectoryFileError(f"{path}: the columns {list(need)} have different lengths")
    if n < 3:
        raise TrajectoryFileError(f"{path}: needs at least 3 samples, got {n}")
    for c, v in cols.items():
        bad = np.where(~np.isfinite(v))[0]
        if bad.size:
            raise TrajectoryFileError(f"{path}: column {c!r} has NaN or inf in row(s) {bad[:5].tolist()}")
    if "t" not in cols:
        return cols
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


# --- any scene from a Python factory -------------------------------------------------------------------

_TARGET = re.compile(r"^(q|v)\[?(\d+)\]?$")


def parse_number(text):
    """A float from '0.01', '1e-3' or a fraction '1/240'."""
    parts = str(text).split("/")
    try:
        if len(parts) == 2:
            return float(parts[0]) / float(parts[1])
        if len(parts) == 1:
            return float(parts[0])
    except (ValueError, ZeroDivisionError):
        pass
    raise TrajectoryFileError(f"not a number: {text!r} (a float such as 0.01 or a fraction such as 1/240)")


def model_file_factory(path):
    """A scene factory for an MJCF model file: factory(mu=None, restitution=None) -> the loaded scene with every
    contact's friction coefficient and restitution set to mu and restitution (None keeps the file's).

    The file is loaded once (`jaxrbd.load_mjcf`); the parameters arrive as traced scalars and replace the
    system's per-contact arrays, so they are differentiable like a Python factory's.
    """
    import equinox as eqx
    import jax.numpy as jnp

    from ..mjcf import load_mjcf

    try:
        loaded = load_mjcf(path)
    except (ValueError, OSError) as err:
        raise TrajectoryFileError(f"--scene {path!r}: {err}") from None

    def factory(mu=None, restitution=None):
        system, state = loaded
        if mu is not None:
            system = eqx.tree_at(lambda s: s.mu, system, jnp.full_like(system.mu, mu))
        if restitution is not None:
            e = jnp.full_like(system.mu, restitution)
            system = eqx.tree_at(lambda s: s.restitution, system, e, is_leaf=lambda x: x is None)
        return system, state

    return factory


def load_factory(spec):
    """The scene factory of --scene: a model file (.xml, `model_file_factory`) or the callable named by
    'module:function' (the module importable from sys.path or the working folder)."""
    import sys

    if isinstance(spec, str) and spec.lower().endswith(".xml"):
        if not os.path.isfile(spec):
            raise TrajectoryFileError(f"--scene {spec!r}: no such model file")
        return model_file_factory(spec)
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise TrajectoryFileError(
            f"--scene {spec!r}: expected sliding_block, bouncing_ball, a model file (.xml) or module:function "
            "(a scene factory)"
        )
    module_name, attr = spec.split(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise TrajectoryFileError(f"--scene {spec!r}: cannot import module {module_name!r}: {err}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise TrajectoryFileError(f"--scene {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(factory):
        raise TrajectoryFileError(f"--scene {spec!r}: {attr!r} is not callable")
    return factory


def parse_params(items, factory, spec):
    """dict name -> float from ['name=value', ...], each name checked against the factory's signature."""
    signature = inspect.signature(factory)
    named = {
        k
        for k, p in signature.parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    params = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise TrajectoryFileError(f"--param {item!r}: expected name=value")
        if name not in named and not takes_any:
            raise TrajectoryFileError(
                f"--param {name}: the scene factory {spec} takes no parameter {name!r}; it takes {sorted(named)}"
            )
        params[name] = parse_number(value)
    return params


def parse_columns(text, nq, nv):
    """[(column, 'q' or 'v', index)] from 'x=q0,vx=v[0],...'; the index checked against nq or nv."""
    out = []
    for item in [s for s in (text or "").split(",") if s.strip()]:
        column, sep, target = item.partition("=")
        column, target = column.strip(), target.strip()
        match = _TARGET.match(target)
        if not sep or not column or match is None:
            raise TrajectoryFileError(
                f"--columns {item!r}: expected COLUMN=qI or COLUMN=vI (I the coordinate's index), "
                "for example x=q0,vx=v0"
            )
        kind, index = match.group(1), int(match.group(2))
        size = nq if kind == "q" else nv
        if index >= size:
            raise TrajectoryFileError(f"--columns {item!r}: the scene has {size} {kind} coordinates (0..{size - 1})")
        out.append((column, kind, index))
    if not out:
        raise TrajectoryFileError("--columns: map at least one column, for example x=q0")
    return out


def run_scene_fit(
    path,
    *,
    scene,
    dt,
    out,
    params=(),
    fit_names="",
    columns="",
    force=False,
    steps=50,
    impact="none",
    noise=None,
):
    """Fit the parameters `fit_names` of the scene `factory(**params)` to the file's columns.

    The factory takes the parameters as keyword arguments (every `--param` must
    be one of them) and returns a `Scene` (or a (system, state) pair); the fitted
    ones arrive as traced scalars. The simulated q and v coordinates named in
    `columns` ('x=q0,z=q2,vz=v2') are compared with the file's columns, over
    len(file) - 1 steps of dt from the factory's state, by Levenberg-Marquardt
    (`jaxrbd.sysid.fit` with residuals). A fitted parameter that starts > 0 is
    fitted in log space (`Positive()`), one that starts <= 0 unbounded.
    Writes `out/fit.json` (values, standard deviations, 95% intervals,
    identifiability, loss) and `out/fit.png` (data vs fit); returns the fitted
    values.
    """
    import jax.numpy as jnp

    from ..stepping import Newton, Poisson, simulate
    from ..sysid import Free, LevenbergMarquardt, Positive, _problem, fit

    if not dt > 0:
        raise TrajectoryFileError(f"--dt must be > 0, got {dt}")
    result_path = os.path.join(out, "fit.json")
    if os.path.exists(result_path) and not force:
        raise FileExistsError(f"{result_path} exists; pass --force to overwrite it")
    factory = load_factory(scene)
    start = parse_params(params, factory, scene)
    names = [s.strip() for s in (fit_names or "").split(",") if s.strip()]
    if not names:
        raise TrajectoryFileError("--fit: name at least one parameter to fit, for example --fit mu")
    unknown = [k for k in names if k not in start]
    if unknown:
        raise TrajectoryFileError(
            f"--fit {unknown}: give each fitted parameter a starting value with --param NAME=VALUE"
        )
    fixed = {k: v for k, v in start.items() if k not in names}
    try:
        built = factory(**start)
        system, state = built
    except TrajectoryFileError:
        raise
    except Exception as err:
        raise TrajectoryFileError(f"--scene {scene}: the factory failed with {start}: {err}") from None
    mapping = parse_columns(columns, np.shape(state.q)[0], np.shape(state.v)[0])
    data = load_trajectory(path, [c for c, _, _ in mapping] + (["t"] if "t" in read_columns(path) else []), dt)
    observed = jnp.asarray(np.stack([data[c] for c, _, _ in mapping], axis=1))
    n = observed.shape[0]
    restitution = {"none": None, "newton": Newton(), "poisson": Poisson()}[impact]

    def predict(p):
        system, state = factory(**fixed, **p)
        traj = simulate(system, state, dt=dt, steps=n - 1, restitution=restitution)
        return jnp.stack([(traj.q if kind == "q" else traj.v)[:, i] for _, kind, i in mapping], axis=1)

    def residuals(p, obs):
        return predict(p) - obs

    bounds = {k: Positive() if start[k] > 0 else Free() for k in names}
    result = fit(
        residuals=residuals,
        params={k: start[k] for k in names},
        data=observed,
        bounds=bounds,
        optimizer=LevenbergMarquardt(),
        steps=steps,
        param_rtol=1e-9,
        noise=noise,
        desc=f"fit {','.join(names)}",
    )
    fitted = {k: float(v) for k, v in result.params.items()}
    u = result.uncertainty
    summary = dict(
        scene=scene,
        file=path,
        params=fitted,
        fixed=fixed,
        std={k: float(u.std[k]) for k in names},
        interval={k: [float(x) for x in u.interval[k]] for k in names},
        identified={k: bool(u.identified[k]) for k in names},
        level=0.95,
        rms=float(u.rms),
        columns={c: f"{kind}{i}" for c, kind, i in mapping},
        steps=result.steps,
        converged=result.converged,
        loss=float(result.loss),
        seconds=result.seconds,
    )
    os.makedirs(out, exist_ok=True)
    with open(result_path, "w") as f:
        json.dump(summary, f, indent=2)
    t = data["t"] if "t" in data else dt * np.arange(n)
    # the fitted curves from the fit's own compiled residuals (no second compilation): pred = obs + r
    _, r, _ = _problem(residuals=residuals, data=observed).jacobian(
        {k: jnp.asarray(v) for k, v in fitted.items()}, observed, names
    )
    fitted_curves = np.asarray(observed) + r.reshape(observed.shape)
    _plot({"t": t}, np.asarray(observed), fitted_curves, result, os.path.join(out, "fit.png"))
    for k in names:
        lo, hi = summary["interval"][k]
        print(f"{k} = {fitted[k]:.6g} +- {summary['std'][k]:.2g} (95%: [{lo:.6g}, {hi:.6g}])")
    print(f"{result.steps} steps, best loss {result.loss:.3e} (step {result.best_step}), {result.seconds:.1f} s")
    print(f"wrote {result_path} and {os.path.join(out, 'fit.png')}")
    return fitted
