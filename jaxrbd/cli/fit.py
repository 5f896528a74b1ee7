"""`jaxrbd fit`: fit the parameters of a scene to a trajectory file (CSV or NPZ).

Two shortcuts (`sliding_block`: mu; `bouncing_ball`: e; their geometry, mass,
gravity and start position are options, see `run_fit`), any scene from a Python
factory (`--scene module:function`, see `run_scene_fit`), and an MJCF model file
(`--scene model.xml`: its mu and restitution, `model_file_factory`). All of them
are fitted by `fit_scene`.
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


class FitFailedError(RuntimeError):
    """A fit that ran but did not determine its parameters; the message gives the reasons (fit.json has them too)."""


# A fit whose RMS residual exceeds the stated noise by more than this factor has not explained the data.
RMS_NOISE_LIMIT = 3.0


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


def load_trajectory(path, scene, dt, *, resample=False):
    """The columns `COLUMNS[scene]` (or the list `scene`) of a CSV or NPZ file, checked.

    Raises `TrajectoryFileError` for a missing file or column, NaN or inf, or
    fewer than 3 samples. A `t` column must be spaced by dt to `DT_RTOL` of dt;
    with `resample`, it need only increase, and every column is interpolated
    linearly onto t[0] + k dt, k = 0, 1, ... up to the last sample.
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
    t = cols["t"]
    steps = np.diff(t)
    if np.allclose(steps, dt, rtol=DT_RTOL, atol=0.0):
        return cols
    if not resample:
        i = int(np.argmax(np.abs(steps - dt)))
        raise TrajectoryFileError(
            f"{path}: the time step must be --dt = {dt} in every row; rows {i} and {i + 1} are {steps[i]:.6g} "
            "apart (pass --resample to interpolate the columns onto a grid of --dt)"
        )
    if not np.all(steps > 0):
        i = int(np.argmin(steps))
        raise TrajectoryFileError(f"{path}: --resample needs increasing times; rows {i} and {i + 1} are not")
    grid = t[0] + dt * np.arange(int(np.floor((t[-1] - t[0]) / dt * (1 + DT_RTOL))) + 1)
    if len(grid) < 3:
        raise TrajectoryFileError(f"{path}: resampled at --dt = {dt}, the file spans only {len(grid)} samples")
    return {c: grid if c == "t" else np.interp(grid, t, v) for c, v in cols.items()}


# --- the two shortcut scenes ---------------------------------------------------------------------------

SHORTCUT_DEFAULTS = {"half_extents": (0.1, 0.1, 0.02), "radius": 0.1, "mass": 1.0, "gravity": 9.81, "substeps": 1}


def sliding_block_factory(
    *,
    half_extents=SHORTCUT_DEFAULTS["half_extents"],
    mass=SHORTCUT_DEFAULTS["mass"],
    gravity=SHORTCUT_DEFAULTS["gravity"],
):
    """The `sliding_block` scene: factory(mu, vx, vy, x, y) -> a box of these half extents (m) and mass (kg)
    resting on the table z = 0 under gravity (m/s^2, along -z), its centre at (x, y), sliding at (vx, vy).

    Four corner contacts with the elliptic cone (`scenes.block_on_incline(angle=0)`). The velocity is set on
    the state, not as a speed and a heading, so the factory stays differentiable at rest.
    """
    import equinox as eqx
    import jax.numpy as jnp

    from .. import scenes
    from ..cones import EllipticCone

    half_extents = np.asarray(half_extents, dtype=float)

    def factory(mu, vx, vy, x, y):
        system, state = scenes.block_on_incline(
            angle=0.0, mu=mu, mass=mass, half_extents=half_extents, cone=EllipticCone(), gravity=gravity
        )
        q = state.q.at[:2].set(jnp.stack([x, y]))
        v = state.v.at[:2].set(jnp.stack([vx, vy]))
        return system, eqx.tree_at(lambda s: (s.q, s.v), state, (q, v))

    return factory


def bouncing_ball_factory(
    *, radius=SHORTCUT_DEFAULTS["radius"], mass=SHORTCUT_DEFAULTS["mass"], gravity=SHORTCUT_DEFAULTS["gravity"]
):
    """The `bouncing_ball` scene: factory(e, vz, z) -> a ball of this radius (m) and mass (kg) above the table
    z = 0, its centre at height z moving up at vz, bouncing with restitution e under gravity (m/s^2, along -z)."""
    import jax.numpy as jnp

    from .. import scenes

    def factory(e, vz, z):
        velocity = jnp.stack([jnp.zeros_like(vz), jnp.zeros_like(vz), vz])
        return scenes.bouncing_ball(e, height=z - radius, radius=radius, mass=mass, gravity=gravity, velocity=velocity)

    return factory


def _positive(name, value):
    if not (np.all(np.isfinite(value)) and np.all(np.asarray(value) > 0)):
        raise TrajectoryFileError(f"--{name.replace('_', '-')} must be > 0, got {value}")


def _shortcut(scene, data, dt, *, half_extents, radius, mass, gravity, start):
    """(factory, start values, fitted names, bounds, column map, impact law) of a shortcut scene and its data.

    The start values: mu or e 0.5 and the velocity from the first two samples, all fitted; the position
    `start`, held, or when None the first sample, fitted (a noisy first sample would bias the coefficient).
    """
    from ..stepping import NewtonRestitution
    from ..sysid import Free, Interval, Positive

    _positive("mass", mass)
    _positive("gravity", gravity)
    if scene == "sliding_block":
        _positive("half_extents", np.asarray(half_extents, dtype=float))
        if np.shape(half_extents) != (3,):
            raise TrajectoryFileError(f"--half-extents takes three lengths HX,HY,HZ, got {half_extents}")
        xy = np.stack([data["x"], data["y"]], axis=1)
        x0 = xy[0] if start is None else np.asarray(start, dtype=float)
        if np.shape(x0) != (2,):
            raise TrajectoryFileError(f"--start for sliding_block takes the position X,Y, got {start}")
        v0 = (xy[1] - xy[0]) / dt
        values = {"mu": 0.5, "vx": float(v0[0]), "vy": float(v0[1]), "x": float(x0[0]), "y": float(x0[1])}
        bounds = {"mu": Positive(), "vx": Free(), "vy": Free(), "x": Free(), "y": Free()}
        factory = sliding_block_factory(half_extents=half_extents, mass=mass, gravity=gravity)
        names = ["mu", "vx", "vy"] + (["x", "y"] if start is None else [])
        return factory, values, names, bounds, [("x", "q", 0), ("y", "q", 1)], None
    _positive("radius", radius)
    z = data["z"]
    z0 = float(z[0] if start is None else np.asarray(start, dtype=float).reshape(()))
    if not z0 > radius:
        raise TrajectoryFileError(f"the start height z = {z0} must exceed the ball's radius {radius}")
    values = {"e": 0.5, "vz": float((z[1] - z[0]) / dt), "z": z0}
    bounds = {"e": Interval(0.0, 1.0), "vz": Free(), "z": Free()}
    factory = bouncing_ball_factory(radius=radius, mass=mass, gravity=gravity)
    names = ["e", "vz"] + (["z"] if start is None else [])
    return factory, values, names, bounds, [("z", "q", 2)], NewtonRestitution(locate=True)


def run_fit(
    path,
    *,
    scene,
    dt,
    out,
    force=False,
    iterations=50,
    half_extents=SHORTCUT_DEFAULTS["half_extents"],
    radius=SHORTCUT_DEFAULTS["radius"],
    mass=SHORTCUT_DEFAULTS["mass"],
    gravity=SHORTCUT_DEFAULTS["gravity"],
    start=None,
    substeps=SHORTCUT_DEFAULTS["substeps"],
    resample=False,
    noise=None,
):
    """Fit a shortcut scene (`sliding_block`: mu, `bouncing_ball`: e, each with its start velocity and, unless
    `start` gives it, its start position) to the file's `t,x,y` or `t,z` columns; write `out/fit.json` and `out/fit.png`; return the fitted values.

    The scenes are `sliding_block_factory` and `bouncing_ball_factory` (the ball with the located Newton
    bounce), built from the geometry, mass and gravity given; see `_shortcut` for the start values and
    `fit_scene` for the fit.
    """
    _check_output(out, force, dt)
    data = load_trajectory(path, scene, dt, resample=resample)
    factory, values, names, bounds, mapping, impact = _shortcut(
        scene,
        data,
        dt,
        half_extents=half_extents,
        radius=radius,
        mass=mass,
        gravity=gravity,
        start=start,
    )
    return fit_scene(
        factory,
        values,
        names,
        data,
        mapping,
        dt=dt,
        out=out,
        label=scene,
        path=path,
        bounds=bounds,
        impact=impact,
        substeps=substeps,
        iterations=iterations,
        noise=noise,
    )


def _plot(t, observed, fitted, mapping, result, path):
    """fit.png: `fit_figure` saved."""
    import matplotlib.pyplot as plt

    fig = fit_figure(t, observed, fitted, mapping, result)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fit_figure(t, observed, fitted, mapping, result):
    """Each fitted column (the file's samples as dots, the fit as a curve, labelled by the column's name) over t,
    and the loss over the optimizer's iterations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for i, (column, kind, index) in enumerate(mapping):
        (line,) = axes[0].plot(t, fitted[:, i], "-", label=f"{column}: fit ({kind}{index})")
        axes[0].plot(t, observed[:, i], ".", ms=2, color=line.get_color(), label=f"{column}: file")
    axes[0].set(xlabel="t (s)", ylabel="the columns' values (file units)", title="trajectory")
    axes[0].legend(fontsize=8)
    axes[1].semilogy(result.loss_history)
    axes[1].set(xlabel="optimizer iteration", ylabel="loss (mean square residual)", title="loss")
    fig.tight_layout()
    return fig


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


def model_file_factory(path, keyframe=None):
    """A scene factory for an MJCF model file: factory(mu=None, restitution=None, **values) -> the loaded scene
    with every contact's friction coefficient and restitution set to mu and restitution (None keeps the file's),
    the model parameters named as in the file set (`jaxrbd.sysid.ModelParameters`: `j1.damping`, `link2.mass`,
    `u1.gear`, `floor/box.friction`, ...), and the start state's coordinates qI and vI (keywords `q0`, `v3`,
    ...) set where given.

    The file is loaded once in joint coordinates (`jaxrbd.load_mjcf`, from `keyframe`: a `<key>` name or index,
    or None for the file's qpos0 at rest), so qI and vI are MuJoCo's qpos and qvel entries; the parameters
    arrive as traced scalars, so they are differentiable like a Python factory's. `factory.defaults` holds the
    loaded state's coordinates by name (the start value of a fitted qI or vI without --param),
    `factory.file_values(names)` the file's values of named model parameters, and `factory.motors` the
    actuators in the order of the controls.
    """
    import equinox as eqx
    import jax.numpy as jnp

    from ..mjcf import load_mjcf
    from ..sysid import ModelParameters

    try:
        loaded = load_mjcf(path, keyframe=keyframe)
    except (ValueError, OSError, KeyError) as err:
        raise TrajectoryFileError(f"--scene {path!r}: {err}") from None
    q0, v0 = np.asarray(loaded.state.q), np.asarray(loaded.state.v)
    named = {}

    def model_parameters(names):
        names = tuple(sorted(names))
        if names not in named:
            try:
                named[names] = ModelParameters(loaded, names)
            except ValueError as err:
                raise TrajectoryFileError(f"--scene {path}: {err}") from None
        return named[names]

    def factory(mu=None, restitution=None, **values):
        system, state = loaded.system, loaded.state
        if mu is not None:
            system = eqx.tree_at(lambda s: s.mu, system, jnp.full_like(system.mu, mu))
        if restitution is not None:
            e = jnp.full_like(system.mu, restitution)
            system = eqx.tree_at(lambda s: s.restitution, system, e, is_leaf=lambda x: x is None)
        model = {k: v for k, v in values.items() if "." in k}
        if model:
            system = model_parameters(model).apply(system, model)
        q, v = state.q, state.v
        for name, value in values.items():
            if name in model:
                continue
            match = _TARGET.match(name)
            size = q0.size if match and match.group(1) == "q" else v0.size
            if match is None or int(match.group(2)) >= size:
                raise TrajectoryFileError(
                    f"--param {name}: a model file takes mu, restitution, the start coordinates q0..q{q0.size - 1}"
                    f" and v0..v{v0.size - 1}, and its parameters by name (JOINT.damping, BODY.mass, ...)"
                )
            i = int(match.group(2))
            if match.group(1) == "q":
                q = q.at[i].set(value)
            else:
                v = v.at[i].set(value)
        return system, eqx.tree_at(lambda s: (s.q, s.v), state, (q, v))

    factory.defaults = {f"q{i}": float(x) for i, x in enumerate(q0)} | {f"v{i}": float(x) for i, x in enumerate(v0)}
    factory.file_values = lambda names: model_parameters(names).values
    factory.motors = loaded.motors
    return factory


def load_factory(spec, keyframe=None):
    """The scene factory of --scene: a model file (.xml, `model_file_factory` from `keyframe`) or the callable
    named by 'module:function' (the module importable from sys.path or the working folder)."""
    import sys

    if isinstance(spec, str) and spec.lower().endswith(".xml"):
        if not os.path.isfile(spec):
            raise TrajectoryFileError(f"--scene {spec!r}: no such model file")
        return model_file_factory(spec, keyframe=_keyframe(keyframe))
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


def _keyframe(text):
    """--keyframe: an index where the text is a non-negative integer, else a key's name; None stays None."""
    if text is None:
        return None
    return int(text) if str(text).isdigit() else str(text)


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


def _check_output(out, force, dt):
    if not dt > 0:
        raise TrajectoryFileError(f"--dt must be > 0, got {dt}")
    result_path = os.path.join(out, "fit.json")
    if os.path.exists(result_path) and not force:
        raise FileExistsError(f"{result_path} exists; pass --force to overwrite it")


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
    iterations=50,
    impact="none",
    substeps=1,
    resample=False,
    noise=None,
    keyframe=None,
    controls="",
):
    """Fit the parameters `fit_names` of the scene `factory(**params)` to the file's columns.

    The factory (`load_factory(scene)`) takes the parameters as keyword arguments
    (every `--param` must be one of them) and returns a `Scene` (or a (system,
    state) pair); the fitted ones arrive as traced scalars. The simulated q and v
    coordinates named in `columns` ('x=q0,z=q2,vz=v2') are compared with the
    file's columns (`fit_scene`). A model file (.xml) starts from `keyframe` (or
    its qpos0 at rest), and its start coordinates qI and vI can be fitted too
    (`--fit mu,v0`), starting from the loaded state's values unless a --param
    gives one, and so can its parameters by name (`--fit j1.damping,link2.mass`,
    starting from the file's values); `controls` ('u0,u1') names the columns
    that hold the control of each actuator, replayed in every step (row k's
    controls act from row k to row k + 1). A fitted parameter that starts > 0 is fitted in log space
    (`Positive()`), any other one unbounded (the start coordinates always).
    Returns the fitted values.
    """
    from ..stepping import NewtonRestitution, PoissonRestitution
    from ..sysid import Free, Positive

    _check_output(out, force, dt)
    factory = load_factory(scene, keyframe=keyframe)
    start = parse_params(params, factory, scene)
    names = [s.strip() for s in (fit_names or "").split(",") if s.strip()]
    if not names:
        raise TrajectoryFileError("--fit: name at least one parameter to fit, for example --fit mu")
    defaults = getattr(factory, "defaults", {})
    start |= {k: defaults[k] for k in names if k not in start and k in defaults}
    by_name = [k for k in names if k not in start and "." in k]
    if by_name and hasattr(factory, "file_values"):
        start |= factory.file_values(by_name)
    unknown = [k for k in names if k not in start]
    if unknown:
        raise TrajectoryFileError(
            f"--fit {unknown}: give each fitted parameter a starting value with --param NAME=VALUE"
        )
    try:
        system, state = factory(**start)
    except TrajectoryFileError:
        raise
    except Exception as err:
        raise TrajectoryFileError(f"--scene {scene}: the factory failed with {start}: {err}") from None
    mapping = parse_columns(columns, np.shape(state.q)[0], np.shape(state.v)[0])
    control_columns = _control_columns(controls, factory)
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    if len(paths) > 1:
        started = [k for k in names if _TARGET.match(k)]
        if started:
            raise TrajectoryFileError(
                f"--fit {','.join(started)}: several logs share the fitted parameters, not their start coordinates"
            )
    data = []
    for p in paths:
        need = [c for c, _, _ in mapping] + control_columns + (["t"] if "t" in read_columns(p) else [])
        data.append(load_trajectory(p, need, dt, resample=resample))
    lengths = [len(d[mapping[0][0]]) for d in data]
    if len(set(lengths)) > 1:
        raise TrajectoryFileError(f"the logs {paths} have {lengths} rows: several logs must have the same length")
    u = np.stack([np.stack([d[c] for c in control_columns], axis=1)[:-1] for d in data]) if control_columns else None
    if len(paths) == 1:
        data, u, path = data[0], None if u is None else u[0], paths[0]
    return fit_scene(
        factory,
        start,
        names,
        data,
        mapping,
        dt=dt,
        out=out,
        label=scene,
        path=path,
        bounds={k: Positive() if start[k] > 0 and not _TARGET.match(k) else Free() for k in names},
        impact={
            "none": None,
            "newton": NewtonRestitution(),
            "located": NewtonRestitution(locate=True),
            "poisson": PoissonRestitution(),
        }[impact],
        substeps=substeps,
        iterations=iterations,
        noise=noise,
        controls=u,
    )


def _control_columns(text, factory):
    """The columns of --controls, one per actuator of a model file (`factory.motors`)."""
    names = [c.strip() for c in (text or "").split(",") if c.strip()]
    if not names:
        return []
    motors = getattr(factory, "motors", None)
    if motors is None:
        raise TrajectoryFileError("--controls: only for model files (--scene MODEL.xml), whose actuators it drives")
    if len(names) != len(motors):
        raise TrajectoryFileError(
            f"--controls {','.join(names)}: the model has {len(motors)} actuators {list(motors)}, one column each"
        )
    return names


def fit_scene(
    factory,
    values,
    names,
    data,
    mapping,
    *,
    dt,
    out,
    label,
    path,
    bounds,
    impact=None,
    substeps=1,
    iterations=50,
    noise=None,
    controls=None,
):
    """Fit `names` of `factory(**values)` to the columns of `data` by Levenberg-Marquardt; write the fit.

    The simulation runs (len(data) - 1) * substeps steps of dt / substeps from the
    factory's state and is sampled every `substeps` steps; the simulated
    coordinates `mapping` [(column, 'q' or 'v', index)] are compared with the
    columns (`jaxrbd.sysid.fit` with residuals; `bounds` per fitted name).
    `controls` (len(data) - 1, nu), or None, holds each sample interval's
    controls, held over its substeps. `data` may be a list of logs of one length,
    fitted together from the same start state, with `controls` (logs, len - 1, nu).
    Writes `out/fit.json` (values, standard deviations, 95% intervals,
    identifiability, RMS, loss, and `failed`: the reasons the fit failed, empty
    when it did not) and `out/fit.png` (data vs fit); prints them and returns the
    fitted values. Raises `FitFailedError` (after writing both) when the fit did
    not determine its parameters: an interval that is not finite, a gradient
    that is exactly zero at the start (the data do not depend on the
    parameters), or an RMS residual above `RMS_NOISE_LIMIT` times `noise`.
    """

    import jax
    import jax.numpy as jnp

    from ..stepping import simulate
    from ..sysid import LevenbergMarquardt, fit
    from ..sysid._problem import _problem

    if not (isinstance(substeps, int) and substeps >= 1):
        raise TrajectoryFileError(f"--substeps must be an integer >= 1, got {substeps!r}")
    fixed = {k: v for k, v in values.items() if k not in names}
    logs = data if isinstance(data, list) else [data]
    observed = jnp.asarray(np.stack([np.stack([d[c] for c, _, _ in mapping], axis=1) for d in logs]))
    if not isinstance(data, list):
        observed, controls = observed[0], None if controls is None else np.asarray(controls)[None]
    n = observed.shape[-2]
    held = None if controls is None else jnp.repeat(jnp.asarray(controls, float), substeps, axis=1)

    def predict(p, u):
        system, state = factory(**fixed, **p)
        traj = simulate(system, state, dt=dt / substeps, steps=(n - 1) * substeps, impact=impact, controls=u)
        q, v = traj.q[::substeps], traj.v[::substeps]
        return jnp.stack([(q if kind == "q" else v)[:, i] for _, kind, i in mapping], axis=1)

    def residuals(p, obs):
        if held is None:
            return predict(p, None) - obs
        if obs.ndim == 2:
            return predict(p, held[0]) - obs
        return jax.vmap(lambda u: predict(p, u))(held) - obs

    result = fit(
        residuals=residuals,
        params={k: values[k] for k in names},
        data=observed,
        bounds={k: bounds[k] for k in names},
        optimizer=LevenbergMarquardt(),
        steps=iterations,
        param_rtol=1e-9,
        noise=noise,
        desc=f"{label}: fit {','.join(names)}",
        progress=True,
    )
    fitted = {k: float(v) for k, v in result.params.items()}
    u = result.uncertainty
    failed = _failures(result, names, noise)
    summary = dict(
        scene=label,
        file=path,
        params=fitted,
        fixed=fixed,
        std={k: float(u.std[k]) for k in names},
        interval={k: [float(x) for x in u.interval[k]] for k in names},
        identified={k: bool(u.identified[k]) for k in names},
        level=0.95,
        rms=float(u.rms),
        columns={c: f"{kind}{i}" for c, kind, i in mapping},
        dt=dt,
        substeps=substeps,
        steps=result.steps,
        converged=result.converged,
        loss=float(result.loss),
        seconds=result.seconds,
        failed=failed,
    )
    os.makedirs(out, exist_ok=True)
    result_path = os.path.join(out, "fit.json")
    with open(result_path, "w") as f:
        json.dump(summary, f, indent=2)
    t = logs[0]["t"] - logs[0]["t"][0] if "t" in logs[0] else dt * np.arange(n)
    # the fitted curves from the fit's own compiled residuals (no second compilation): pred = obs + r
    _, r, _ = _problem(residuals=residuals, data=observed).jacobian(
        {k: jnp.asarray(v) for k, v in fitted.items()}, observed, names
    )
    fitted_curves = np.asarray(observed) + r.reshape(observed.shape)
    if observed.ndim == 3:  # the logs one after another
        t = np.concatenate([t + e * (t[-1] + dt) for e in range(len(logs))])
        observed, fitted_curves = np.concatenate(list(observed)), np.concatenate(list(fitted_curves))
    _plot(t, np.asarray(observed), fitted_curves, mapping, result, os.path.join(out, "fit.png"))
    for k in names:
        lo, hi = summary["interval"][k]
        print(f"{k} = {fitted[k]:.6g} +- {summary['std'][k]:.2g} (95%: [{lo:.6g}, {hi:.6g}])")
    print(
        f"{result.steps} optimizer iterations, best loss {result.loss:.3e} (iteration {result.best_step}), "
        f"{result.seconds:.1f} s"
    )
    print(f"wrote {result_path} and {os.path.join(out, 'fit.png')}")
    if failed:
        raise FitFailedError("; ".join(failed))
    return fitted


def _failures(result, names, noise):
    """The reasons a finished fit did not determine its parameters (empty when it did)."""
    reasons = []
    u = result.uncertainty
    for k in names:
        lo, hi = (float(x) for x in u.interval[k])
        if not (np.isfinite(lo) and np.isfinite(hi)):
            reasons.append(f"{k}'s 95% interval [{lo:.6g}, {hi:.6g}] is not finite: the data do not determine it")
    if len(result.grad_norms) and float(result.grad_norms[0]) == 0.0:
        reasons.append(
            "the loss's gradient is exactly zero at the start: the fitted columns do not depend on "
            f"{', '.join(names)} there"
        )
    if noise is not None and float(u.rms) > RMS_NOISE_LIMIT * noise:
        reasons.append(
            f"the RMS residual {float(u.rms):.3g} is {float(u.rms) / noise:.0f} times the noise {noise:g} "
            f"(more than {RMS_NOISE_LIMIT:g}): the model does not explain the data"
        )
    return reasons
