"""A model file's physical parameters by the names the file gives them: `ModelParameters`."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..bodies._tree import HINGE, SLIDE, Tree, frames
from ..model import State
from ..stepping import simulate
from ._bounds import Free, Positive
from ._experiments import Experiments
from ._forms import ManyExperiments

JOINT_ATTRIBUTES = ("armature", "damping", "stiffness", "frictionloss")
ACTUATOR_ATTRIBUTES = ("gear",)
BODY_ATTRIBUTES = ("mass", "ixx", "iyy", "izz")
MOMENTS = {"ixx": 0, "iyy": 1, "izz": 2}
PAIR_ATTRIBUTES = ("friction",)
ATTRIBUTES = JOINT_ATTRIBUTES + ACTUATOR_ATTRIBUTES + BODY_ATTRIBUTES + PAIR_ATTRIBUTES


def _shape_owner(name):
    """A contact shape owner's name as the file writes it: a static geom is held as 'name (geom N)'."""
    return name.split(" (geom ")[0]


class ModelParameters:
    """Named physical parameters of a model file loaded in joint coordinates (`load_mjcf`), to fit or sweep.

    A name is `ELEMENT.ATTRIBUTE`, with the element named as in the file:

    - `JOINT.armature`, `JOINT.damping`, `JOINT.frictionloss` (the degree of freedom of a
      hinge or slide), `JOINT.stiffness` (its spring);
    - `ACTUATOR.gear`;
    - `BODY.mass`: the body's mass with its inertia scaled alike (the body's mass
      distribution kept: what changing a geom's `mass=` does in the file);
    - `BODY.ixx`, `BODY.iyy`, `BODY.izz`: the diagonal of the body's inertia about
      its centre of mass, in the body's frame (the names of MuJoCo's `fullinertia`),
      the products of inertia kept; a named moment is set as given, not scaled by a
      named mass;
    - `A/B.friction`: the friction coefficient of every contact between the bodies
      (or static geoms) A and B.

        named = rbd.sysid.ModelParameters(scene, ["j1.damping", "j1.armature", "link2.mass"])
        named.values                          # {"j1.damping": 0.3, ...}: the file's values
        system = named.apply(scene.system, {"j1.damping": d, ...})   # differentiable in d
        problem = named.replay(observed, controls, columns=("j1", "j2"))   # logs (E, T, 2), (E, T - 1, nu)
        result = rbd.sysid.fit(problem, named.values, bounds=named.bounds,
                               optimizer=rbd.sysid.LevenbergMarquardt(), noise=1e-3)

    Logs that start at a state nobody wrote down: `replay(..., start="fit")` fits each
    log's start beside the parameters (`named.initial(problem)` holds the start of the
    fit), `segments=K` cuts long logs into K segments with a start each (multiple
    shooting), and `bodies=("link2",)` compares bodies' world positions too.

    A damping or frictionloss that is 0 in the file has no damper or dry-friction row
    in the loaded model, so it cannot be fitted from 0: give it a start value > 0 in
    the file. Unknown elements and attributes raise ValueError naming them.

    Attributes:
        scene: the loaded scene.
        names: the parameter names, in order.
        values: dict name -> the file's value (the start of a fit).
        bounds: dict name -> `Positive()` for a positive value, else `Free()`.
    """

    def __init__(self, scene, names):
        tree = getattr(scene, "bodies", None)
        if not isinstance(tree, Tree):
            raise ValueError(
                "ModelParameters needs a scene loaded in joint coordinates (rbd.load_mjcf(..., coordinates='joints'))"
            )
        if isinstance(names, str):
            names = [s.strip() for s in names.split(",") if s.strip()]
        names = tuple(names)
        if not names:
            raise ValueError("names: name at least one parameter, for example 'j1.damping'")
        if len(set(names)) != len(names):
            raise ValueError(f"names: {sorted({n for n in names if names.count(n) > 1})} appear more than once")
        self.scene = scene
        self.names = names
        self._targets = tuple(_target(tree, scene, scene.system.params, name) for name in names)
        self.values = {n: t[2] for n, t in zip(names, self._targets)}
        self._predictors = {}

    def __repr__(self):
        return f"ModelParameters({list(self.names)})"

    @property
    def bounds(self):
        return {n: Positive() if v > 0 else Free() for n, v in self.values.items()}

    def apply(self, system, values):
        """The system with the named parameters set to `values` (dict name -> scalar, traced or not); names
        missing from `values` keep the system's."""
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise ValueError(f"values: {unknown} are not among this ModelParameters' names {list(self.names)}")
        p, mu = system.params, system.mu
        order = sorted(zip(self.names, self._targets), key=lambda item: item[1][0] in MOMENTS)  # moments last
        for name, (attribute, index, file_value) in order:
            if name not in values:
                continue
            x = jnp.asarray(values[name], p.mass.dtype)
            if attribute == "gear":
                p = eqx.tree_at(lambda p: p.actuators.gear, p, p.actuators.gear.at[index].set(x))
            elif attribute == "mass":
                scale = x / file_value
                p = eqx.tree_at(
                    lambda p: (p.mass, p.inertia), p, (p.mass.at[index].set(x), p.inertia.at[index].multiply(scale))
                )
            elif attribute in MOMENTS:
                k = MOMENTS[attribute]
                p = eqx.tree_at(lambda p: p.inertia, p, p.inertia.at[index, k, k].set(x))
            elif attribute == "friction":
                mu = mu.at[jnp.asarray(index)].set(x)
            else:
                array = getattr(p, attribute)
                p = eqx.tree_at(lambda p: getattr(p, attribute), p, array.at[index].set(x))
        return eqx.tree_at(lambda s: (s.params, s.mu), system, (p, mu))

    def columns(self, columns):
        """The qpos indices of `columns`: qpos indices, or names of hinge and slide joints (their coordinate)."""
        tree = self.scene.bodies
        joints = {j[0]: j for j in tree.joints}
        out = []
        for c in columns:
            if isinstance(c, str):
                if c not in joints or joints[c][1] not in (HINGE, SLIDE):
                    hinges = [n for n, j in joints.items() if j[1] in (HINGE, SLIDE)]
                    raise ValueError(f"columns: {c!r} is not a hinge or slide joint of the model; those are {hinges}")
                out.append(joints[c][3])
            elif isinstance(c, (int, np.integer)) and 0 <= c < tree.nq:
                out.append(int(c))
            else:
                raise ValueError(f"columns: {c!r} is neither a joint name nor a qpos index in [0, {tree.nq})")
        return tuple(out)

    def replay(
        self,
        observed,
        controls,
        *,
        qpos0=None,
        qvel0=None,
        columns=None,
        bodies=(),
        mask=None,
        start="given",
        segments=1,
    ):
        """Logs to fit: each log's controls replayed from its start state, compared with its observed columns.

        Args:
            observed: (E, T, n) the logged coordinates, one row per model timestep: the qpos `columns`, then the
                world position (x, y, z) of each body of `bodies` (MuJoCo's xpos, the body frame's origin).
            controls: (E, T - 1, nu) the control of each step.
            qpos0: (E, nq) each log's start configuration (default: the scene's, its keyframe if it was loaded
                with one).
            qvel0: (E, nv) each log's start velocity (default: the scene's).
            columns: the observed coordinates, as hinge or slide joint names or qpos indices (default: all of
                qpos, or none when `bodies` are named).
            bodies: names of bodies whose world positions are observed after the columns.
            mask: (E, T, n) or None, as in `Experiments`.
            start: where each log starts:
                - "given": at qpos0 and qvel0;
                - "rows": the observed coordinates at the log's first row, their velocities by the second-order
                  difference of its first three rows (the rest from qpos0 and qvel0);
                - "fit": from the "rows" estimate, fitted beside the parameters: the nuisance parameters
                  `start.qpos` and `start.qvel`, (E, n) offsets of the observed coordinates and their
                  velocities, zero at the estimate (`initial(problem)` adds them to the file's values).
                "rows" and "fit" need the columns to be hinge or slide coordinates.
            segments: K >= 1: each log is cut into K segments of (T - 1) // K steps (the last rows of a log that
                do not fill a segment are dropped), each replayed from its own start as set by `start` at its
                first row: multiple shooting, for long logs whose single rollout drifts from the data. The
                segments' starts are tied to the data, not to the previous segment's end; with K > 1, `start`
                must be "rows" or "fit".

        Returns:
            A `ManyExperiments` for `fit` (E K experiments); the same `ModelParameters`, columns, bodies and start
            reuse one compilation.
        """
        tree, state = self.scene.bodies, self.scene.state
        if start not in STARTS:
            raise ValueError(f"start must be one of {STARTS}, got {start!r}")
        if not isinstance(segments, int) or isinstance(segments, bool) or segments < 1:
            raise ValueError(f"segments must be an integer >= 1, got {segments!r}")
        if segments > 1 and start == "given":
            raise ValueError("segments > 1 needs start='rows' or start='fit': each segment starts from its own rows")
        bodies = tuple(self.bodies(bodies))
        default_columns = () if bodies else tuple(range(tree.nq))
        columns = default_columns if columns is None else tuple(self.columns(columns))
        width = len(columns) + 3 * len(bodies)
        observed = jnp.asarray(observed)
        controls = jnp.asarray(controls, observed.dtype)
        if observed.ndim != 3 or observed.shape[2] != width:
            raise ValueError(
                f"observed must have shape (logs, T, {width}) for {len(columns)} columns and {len(bodies)} bodies, "
                f"got {observed.shape}"
            )
        E, T = observed.shape[:2]
        nu = len(self.scene.motors)
        if controls.shape != (E, T - 1, nu):
            raise ValueError(
                f"controls must have shape ({E}, {T - 1}, {nu}) for observed {observed.shape}, got {controls.shape}"
            )
        begin = lambda x, default, n, what: (
            jnp.broadcast_to(default, (E, n)) if x is None else _checked(x, (E, n), what)
        )
        qpos0, qvel0 = begin(qpos0, state.q, tree.nq, "qpos0"), begin(qvel0, state.v, tree.nv, "qvel0")
        if mask is not None:
            mask = jnp.broadcast_to(Experiments(observed, None, mask).mask, observed.shape)
        if segments > 1:
            observed, controls, mask = _segments(observed, controls, mask, segments)
            qpos0, qvel0 = jnp.repeat(qpos0, segments, axis=0), jnp.repeat(qvel0, segments, axis=0)
        inputs = {"controls": controls, "qpos0": qpos0, "qvel0": qvel0}
        if start != "given":
            inputs["qpos0"], inputs["qvel0"] = self._rows_start(observed, columns, inputs["qpos0"], inputs["qvel0"])
        key = (columns, bodies, start == "fit")
        if key not in self._predictors:
            self._predictors[key] = functools.partial(_predict, self, *key)
        per_experiment = ("start.qpos", "start.qvel") if start == "fit" else ()
        return ManyExperiments(self._predictors[key], Experiments(observed, inputs, mask), per_experiment)

    def bodies(self, bodies):
        """The tree's indices of the bodies named `bodies`; ValueError naming an unknown one."""
        names = self.scene.bodies.names
        for b in bodies:
            if b not in names:
                raise ValueError(f"bodies: the model has no body {b!r}; its bodies: {list(names)}")
        return [names.index(b) for b in bodies]

    def initial(self, problem):
        """The start of a fit of `problem` (from `replay`): the file's values, and zero start offsets where
        `replay(start='fit')` made them nuisance parameters."""
        values = dict(self.values)
        if "start.qpos" in problem.per_experiment:
            E, n = problem.experiments.observed.shape[0], len(problem.predict.args[1])
            zeros = jnp.zeros((E, n), problem.experiments.observed.dtype)
            values |= {"start.qpos": zeros, "start.qvel": zeros}
        return values

    def _rows_start(self, observed, columns, qpos0, qvel0):
        """qpos0 and qvel0 with the observed hinge and slide coordinates from the first three rows."""
        dof_of = _scalar_dofs(self.scene.bodies)
        bad = [c for c in columns if c not in dof_of]
        if bad or not columns:
            raise ValueError(
                f"start='rows' and start='fit' read the start state from hinge or slide coordinates; qpos {bad} "
                "are not (name the columns by joint)"
                if bad
                else "start='rows' and start='fit' need qpos columns"
            )
        if observed.shape[1] < 3:
            raise ValueError(f"start='rows' needs at least 3 rows per log (or segment), got {observed.shape[1]}")
        n = len(columns)
        y = observed[:, :3, :n]
        if not bool(jnp.all(jnp.isfinite(y))):
            raise ValueError("start='rows' and start='fit' read the first three rows, which hold missing (NaN) entries")
        velocity = (-3.0 * y[:, 0] + 4.0 * y[:, 1] - y[:, 2]) / (2.0 * self.scene.dt)
        dofs = jnp.asarray([dof_of[c] for c in columns])
        return qpos0.at[:, jnp.asarray(columns)].set(y[:, 0]), qvel0.at[:, dofs].set(velocity)


STARTS = ("given", "rows", "fit")


def _scalar_dofs(tree):
    """{qpos address: dof address} of the hinge and slide joints (a coordinate and its velocity)."""
    return {j[3]: j[4] for j in tree.joints if j[1] in (HINGE, SLIDE)}


def _segments(observed, controls, mask, K):
    """Each log cut into K segments of L = (T - 1) // K steps: observed and mask (E K, L + 1, n), controls
    (E K, L, nu). A segment's last row is the next one's first: it is masked out there but in the last segment."""
    E, T = observed.shape[:2]
    L = (T - 1) // K
    if L < 2:
        raise ValueError(f"segments: {K} segments of a log of {T} rows leave fewer than 2 steps each")
    rows = jnp.arange(K)[:, None] * L + jnp.arange(L + 1)  # (K, L + 1)
    by_segment = lambda x: x[:, rows].reshape(E * K, L + 1, *x.shape[2:])
    once = jnp.ones((K, L + 1), observed.dtype).at[:-1, -1].set(0.0)  # each shared row counted once
    mask = jnp.ones(observed.shape, observed.dtype) if mask is None else mask
    mask = by_segment(mask) * jnp.tile(once, (E, 1))[:, :, None]
    controls = controls[:, : K * L].reshape(E * K, L, controls.shape[2])
    return by_segment(observed), controls, mask


def _checked(x, shape, what):
    x = jnp.asarray(x)
    if x.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {x.shape}")
    return x


def _predict(named, columns, bodies, fitted_start, p, inputs):
    scene, tree = named.scene, named.scene.bodies
    physical = {k: v for k, v in p.items() if k in named.values}
    q0, v0 = inputs["qpos0"], inputs["qvel0"]
    if fitted_start:
        dof_of = _scalar_dofs(tree)
        q0 = q0.at[jnp.asarray(columns)].add(p["start.qpos"])
        v0 = v0.at[jnp.asarray([dof_of[c] for c in columns])].add(p["start.qvel"])
    system = named.apply(scene.system, physical)
    steps = inputs["controls"].shape[0]
    traj = simulate(system, State(scene.state.t, q0, v0), dt=scene.dt, steps=steps, controls=inputs["controls"])
    out = traj.q[:, jnp.asarray(columns, int)]
    if bodies:
        x = jax.vmap(lambda q: frames(tree, q, system.params).x[jnp.asarray(bodies)])(traj.q)
        out = jnp.concatenate([out, x.reshape(x.shape[0], -1)], axis=1)
    return out


def _target(tree, scene, params, name):
    """(attribute, index, the file's value) of one name, or ValueError naming what is wrong."""
    element, dot, attribute = name.rpartition(".")
    if not dot or not element:
        raise ValueError(f"{name!r}: expected ELEMENT.ATTRIBUTE, for example j1.damping or link2.mass")
    if attribute not in ATTRIBUTES:
        raise ValueError(f"{name!r}: unknown attribute {attribute!r}; accepted: {', '.join(ATTRIBUTES)}")
    if attribute in JOINT_ATTRIBUTES:
        joints = {j[0]: (i, j) for i, j in enumerate(tree.joints)}
        if element not in joints:
            raise ValueError(f"{name!r}: the model has no joint {element!r}; its joints: {sorted(joints)}")
        i, (_, kind, _, _, dof) = joints[element]
        if kind not in (HINGE, SLIDE):
            raise ValueError(f"{name!r}: {attribute} is named for hinge and slide joints only")
        if attribute == "stiffness":
            return attribute, i, float(params.stiffness[i])
        value = float(getattr(params, attribute)[dof])
        if attribute == "damping" and not tree.damped:
            raise ValueError(f"{name!r}: the model has no damper (damping 0 in the file); give {element} damping > 0")
        if attribute == "frictionloss" and dof not in tree.frictionloss:
            raise ValueError(
                f"{name!r}: joint {element!r} has no frictionloss in the file, so no dry-friction row; give it "
                "frictionloss > 0 in the file"
            )
        return attribute, dof, value
    if attribute == "gear":
        motors = {m: i for i, m in enumerate(getattr(scene, "motors", ()))}
        if element not in motors:
            raise ValueError(f"{name!r}: the model has no actuator {element!r}; its actuators: {sorted(motors)}")
        return attribute, motors[element], float(params.actuators.gear[motors[element]])
    if attribute in BODY_ATTRIBUTES:
        if element not in tree.names:
            raise ValueError(f"{name!r}: the model has no body {element!r}; its bodies: {list(tree.names)}")
        b = tree.names.index(element)
        if attribute in MOMENTS:
            k = MOMENTS[attribute]
            return attribute, b, float(params.inertia[b, k, k])
        value = float(params.mass[b])
        if not value > 0:
            raise ValueError(f"{name!r}: body {element!r} is massless in the file")
        return attribute, b, value
    a, slash, b = element.partition("/")
    pairs = () if tree.geometry is None else tree.geometry.pair_names
    owners = sorted({_shape_owner(n) for pair in pairs for n in pair})
    if not slash or not a or not b:
        raise ValueError(f"{name!r}: name a contact pair as A/B.friction (bodies or static geoms: {owners})")
    wanted = {a, b}
    index = tuple(i for i, pair in enumerate(pairs) if {_shape_owner(n) for n in pair} == wanted)
    if not index:
        raise ValueError(f"{name!r}: no contact between {a!r} and {b!r}; the contact shapes belong to {owners}")
    return attribute, index, float(np.asarray(scene.system.mu)[index[0]])
