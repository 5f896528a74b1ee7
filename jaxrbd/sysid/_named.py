"""A model file's physical parameters by the names the file gives them: `ModelParameters`."""

import functools

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ..bodies._tree import HINGE, SLIDE, Tree
from ..model import State
from ..stepping import simulate
from ._bounds import Free, Positive
from ._experiments import Experiments
from ._forms import ManyExperiments

JOINT_ATTRIBUTES = ("armature", "damping", "stiffness", "frictionloss")
ACTUATOR_ATTRIBUTES = ("gear",)
BODY_ATTRIBUTES = ("mass",)
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
    - `A/B.friction`: the friction coefficient of every contact between the bodies
      (or static geoms) A and B.

        named = rbd.sysid.ModelParameters(scene, ["j1.damping", "j1.armature", "link2.mass"])
        named.values                          # {"j1.damping": 0.3, ...}: the file's values
        system = named.apply(scene.system, {"j1.damping": d, ...})   # differentiable in d
        problem = named.replay(observed, controls, columns=("j1", "j2"))   # logs (E, T, 2), (E, T - 1, nu)
        result = rbd.sysid.fit(problem, named.values, bounds=named.bounds,
                               optimizer=rbd.sysid.LevenbergMarquardt(), noise=1e-3)

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
        for name, (attribute, index, file_value) in zip(self.names, self._targets):
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

    def replay(self, observed, controls, *, qpos0=None, qvel0=None, columns=None, mask=None):
        """Logs to fit: each log's controls replayed from its start state, its qpos `columns` compared with `observed`.

        Args:
            observed: (E, T, n) the logged coordinates, one row per model timestep.
            controls: (E, T - 1, nu) the control of each step.
            qpos0: (E, nq) each log's start configuration (default: the scene's).
            qvel0: (E, nv) each log's start velocity (default: the scene's).
            columns: the n observed coordinates, as joint names or qpos indices (default: all of qpos).
            mask: (E, T, n) or None, as in `Experiments`.

        Returns:
            A `ManyExperiments` for `fit`; the same `ModelParameters` and columns reuse one compilation.
        """
        tree, state = self.scene.bodies, self.scene.state
        columns = tuple(range(tree.nq)) if columns is None else self.columns(columns)
        observed = jnp.asarray(observed)
        controls = jnp.asarray(controls, observed.dtype)
        if observed.ndim != 3 or observed.shape[2] != len(columns):
            raise ValueError(f"observed must have shape (logs, T, {len(columns)}), got {observed.shape}")
        E, T = observed.shape[:2]
        nu = len(self.scene.motors)
        if controls.shape != (E, T - 1, nu):
            raise ValueError(
                f"controls must have shape ({E}, {T - 1}, {nu}) for observed {observed.shape}, got {controls.shape}"
            )
        start = lambda x, default, n, what: (
            jnp.broadcast_to(default, (E, n)) if x is None else _checked(x, (E, n), what)
        )
        inputs = {
            "controls": controls,
            "qpos0": start(qpos0, state.q, tree.nq, "qpos0"),
            "qvel0": start(qvel0, state.v, tree.nv, "qvel0"),
        }
        if columns not in self._predictors:
            self._predictors[columns] = functools.partial(_predict, self, columns)
        return ManyExperiments(self._predictors[columns], Experiments(observed, inputs, mask))


def _checked(x, shape, what):
    x = jnp.asarray(x)
    if x.shape != shape:
        raise ValueError(f"{what} must have shape {shape}, got {x.shape}")
    return x


def _predict(named, columns, p, inputs):
    scene = named.scene
    state = State(scene.state.t, inputs["qpos0"], inputs["qvel0"])
    steps = inputs["controls"].shape[0]
    traj = simulate(named.apply(scene.system, p), state, dt=scene.dt, steps=steps, controls=inputs["controls"])
    return traj.q[:, jnp.asarray(columns)]


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
    if attribute == "mass":
        if element not in tree.names:
            raise ValueError(f"{name!r}: the model has no body {element!r}; its bodies: {list(tree.names)}")
        b = tree.names.index(element)
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
