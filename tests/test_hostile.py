"""Property-based hostile scenes (hypothesis).

Random scenes of 1 to 8 bodies (spheres, capsules, boxes, convex meshes) on the ground plane z = 0:
masses log-uniform in [1e-3, 1e3], mu in [0, 2] per body pair, one restitution e in
[0, 1] per scene, random sizes, orientations (random, or aligned with the axes so
that a box rests on a face), bodies placed exactly touching (gap 0) or above their
support, zero or random velocities and spins. Every run asserts:

- q, v, the impulses, the energy and the gradients are finite;
- every step converged or reported (`traj.stats.converged`, and the status
  `SOLVER_FAILED` where it did not): a drawn scene is well-posed (no initial overlap,
  valid parameters), so no other status may appear. Steps that do not converge are
  findings all the same: `test_hostile_regressions.py` holds the ones found, shrunk
  to minimal scenes;
- quaternions have unit norm to QUAT_TOL;
- inelastic `AnitescuPotra()` and `Poisson()` restitution (on `AnitescuPotra()`): the
  energy kinetic + potential never increases by more than ENERGY_RTOL |E| in a step
  (the velocity-level step dissipates: M(v+ - v_free) = J^T c with n^T v+ ⊥ c_n and
  maximal dissipation, and symplectic Euler under gravity loses m g^2 h^2 / 2 per
  step; Poisson's decompression never adds kinetic energy with one e per impact,
  hence one e per scene);
- `StewartTrinkle()`: no penetration beyond what the linearization of the step leaves
  (`penetration_bound`);
- jax.grad of a scalar of the final state with respect to mu, e, the masses
  (inertias follow them) and the initial q and v is finite.

Compile time dominates, so the scene STRUCTURE (number of bodies, their shape kinds,
who is stacked on whom) is one of a few fixed `STRUCTURES`, each compiled once per
scheme as one jitted function (`run_with_gradient`: value and gradient; `run_forward`:
the rollout alone) whose inputs are the parameter VALUES (the leaves of the system and
the state, replaced with `eqx.tree_at`). Hypothesis draws the structure and the
values. Four profiles:

- default run: FAST_EXAMPLES scenes for each scheme of FAST_STRUCTURES, of its small
  structure there, derandomized, without gradients: two compiles, under a minute;
- slow set (`pytest -m slow`, in CI): MIXED_EXAMPLES scenes per scheme of MIXED_SCHEMES
  from MIXED_STRUCTURES (4 bodies of every kind, two of them stacked), with gradients for
  MIXED_GRADIENTS (a gradient program compiles in twice the time of a rollout), and as
  many of MESH_STRUCTURES (a hull on a box) for MESH_SCHEMES without gradients: about four
  minutes of one core; the other schemes of these two profiles run with the long set;
- `pytest -m long` (out of CI for its time): SLOW_EXAMPLES scenes per scheme of
  SLOW_SCHEMES from every structure, with gradients: about 16 minutes of one core per
  scheme (972 s for Anitescu-Potra);
- LONG_EXAMPLES scenes per scheme from every structure with gradients, and
  LONG_RUN_EXAMPLES per scheme for LONG_RUN_STEPS steps, run from
  `benchmarks/hostile_findings.py` (its options choose the schemes and the count).

Every pair of bodies collides (box-box and capsule-box included); `box_stack`
stacks a capsule on a box on a box. A mesh is the hull of a fixed centrally symmetric template of 14 points
stretched along its axes by the drawn half extents: a linear map keeps the hull's faces, so its vertices are
leaves of the one compiled run (`mesh_on_box` drops one on a box, beside a capsule).
"""

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import jaxrbd as rbd

H = 0.01  # step size (s)
STEPS = 150  # steps of a hostile run: 1.5 s, every drop has landed and bounced
LONG_RUN_STEPS = 10_000
LONG_RUN_CHUNK = 1_000  # the long runs feed the final state of one simulate call into the next
G = 9.81
ENERGY_RTOL = 1e-9  # the energy never increases by more than this relative amount in a step
QUAT_TOL = 1e-12  # | |quaternion| - 1 |
GAP_ROUNDOFF = 1e-12  # metres: round-off of a gap
ROW_TOL = 1e-10  # the solvers' float64 tolerance on a row, relative to the impulses above 1 (`within_tolerance`)
FAST_EXAMPLES = 10  # per scheme, in the default run (a small structure's run takes a fraction of a second)
MIXED_EXAMPLES = 5  # per scheme, in the slow set's mixed profile
SLOW_EXAMPLES = 20  # per scheme, in the long set: every structure, with gradients
LONG_EXAMPLES = 100  # per scheme, in the long profile (benchmarks/hostile_findings.py)
LONG_RUN_EXAMPLES = 2  # per scheme, slow: LONG_RUN_STEPS steps each

# Ranges of the drawn values.
MASS_DECADES = (-3.0, 3.0)  # log10 of the masses (kg)
MU_MAX = 2.0
SPHERE_RADIUS = (0.05, 0.2)
CAPSULE_RADIUS = (0.05, 0.1)
CAPSULE_HALF_LENGTH = (0.05, 0.2)
BOX_HALF_EXTENT = (0.05, 0.2)
MESH_HALF_EXTENT = (0.05, 0.2)  # the template's stretch along each axis (its vertices have norm 1)
MAX_DROP = 0.3  # metres above the support
MAX_SPEED = 2.0  # per component (m/s)
MAX_SPIN = 5.0  # per component (rad/s)
MAX_STACK_OFFSET = 0.05  # horizontal offset of a stacked body from the body below it (m)
COLUMN_SPACING = 1.0  # metres between the columns of bodies; wider than any two bodies


@dataclasses.dataclass(frozen=True)
class Structure:
    """The static part of a scene: its bodies' shape kinds, and the body each one rests on (None: the ground)."""

    kinds: tuple
    support: tuple


STRUCTURES = {
    "box": Structure(("box",), (None,)),
    "capsule_on_sphere": Structure(("sphere", "capsule"), (None, 0)),
    "sphere_tower": Structure(("sphere", "sphere", "sphere"), (None, 0, 1)),
    "mixed4": Structure(("box", "sphere", "capsule", "sphere"), (None, 0, None, 2)),
    "box_stack": Structure(("box", "box", "capsule", "sphere"), (None, 0, 1, None)),
    "mixed6": Structure(("capsule", "capsule", "box", "sphere", "sphere", "box"), (None, 0, None, 2, None, None)),
    "mesh_on_box": Structure(("box", "mesh", "capsule"), (None, 0, None)),
    "mixed8": Structure(
        ("box", "sphere", "sphere", "capsule", "sphere", "box", "capsule", "sphere"),
        (None, 0, 1, None, 3, None, None, 6),
    ),
}
# The default run draws from one small structure for each of two schemes, without gradients (10 to 20 seconds
# of compilation each, so that the profile stays under a minute beside a busy worker; Poisson's impact law runs
# in the slow set); the slow set draws MIXED_EXAMPLES scenes per scheme from MIXED_STRUCTURES, where every kind
# of pair meets.
FAST_STRUCTURES = {"anitescu_potra": "box", "stewart_trinkle": "capsule_on_sphere"}
MIXED_STRUCTURES = ("mixed4",)
MESH_STRUCTURES = ("mesh_on_box",)  # the slow set's mesh profile: MIXED_EXAMPLES scenes per scheme
# These run on `ContactSweeps` wherever it supports the scheme (not Poisson's impact law), so that the suite
# attacks the sparse solver too; `simulate` alone runs them on the dense step (their contacts share bodies,
# and they have fewer than AUTO_SIZE_COUPLED rows).
SWEEP_STRUCTURES = ("mixed6", "mixed8")
# The slow set's mixed profile checks gradients for these schemes (a gradient program compiles in twice the
# time of a rollout); the long profile checks them for all.
MIXED_GRADIENTS = ("anitescu_potra",)

SCHEMES = {
    "anitescu_potra": dict(scheme=rbd.AnitescuPotra(), impact=None),
    "poisson": dict(scheme=rbd.AnitescuPotra(), impact=rbd.PoissonRestitution()),
    "stewart_trinkle": dict(scheme=rbd.StewartTrinkle(), impact=None),
}
DISSIPATIVE = ("anitescu_potra", "poisson")
# The schemes of the slow set's mixed and mesh profiles; the others' run with the long set.
MIXED_SCHEMES = ("anitescu_potra", "poisson")  # Stewart-Trinkle's small structure runs by default
MESH_SCHEMES = ("anitescu_potra",)


def _profile(scheme, slow):
    return pytest.param(scheme, marks=pytest.mark.slow if scheme in slow else pytest.mark.long)


# The long profile's schemes: each takes about 16 minutes of one core (eight structures' gradient programs).
SLOW_SCHEMES = ("anitescu_potra", "poisson", "stewart_trinkle")


def _template_mesh():
    """(14, 3) points +-x_i of 7 random unit vectors: a centrally symmetric hull about its centroid, the origin."""
    x = np.random.default_rng(7).normal(size=(7, 3))
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    x = np.concatenate([x, -x])
    assert np.array_equal(rbd.geometry.hull(x)["vertices"], x)  # every point a vertex, in order: the leaf's rows
    return x


MESH = _template_mesh()
# The template's second moments per unit mass about its centroid: the stretched hull's are S C S.
_MESH_INERTIA = rbd.ConvexMesh(MESH).inertia(1.0)
_MESH_MOMENTS = 0.5 * np.trace(_MESH_INERTIA) * np.eye(3) - _MESH_INERTIA


def _mesh_inertia(size, mass):
    """The inertia of the template stretched by size (traceable): mass (tr(C) I - C) with C = S C_T S."""
    C = jnp.asarray(size)[:, None] * _MESH_MOMENTS * jnp.asarray(size)[None, :]
    return mass * (jnp.trace(C) * jnp.eye(3) - C)


def _shape(kind, size):
    if kind == "sphere":
        return rbd.Sphere(size[0])
    if kind == "capsule":
        return rbd.Capsule(size[0], size[1])
    if kind == "mesh":
        return rbd.ConvexMesh(MESH * np.asarray(size))
    return rbd.Box(jnp.asarray(size))


def _columns(structure):
    """(nb,) the column of each body: a grounded body opens a column, a stacked one joins its support's."""
    columns = []
    for k, below in enumerate(structure.support):
        columns.append(max(columns, default=-1) + 1 if below is None else columns[below])
    return columns


@functools.cache
def template(name):
    """The scene of structure `name` with nominal values; runs replace its leaves."""
    structure = STRUCTURES[name]
    builder = rbd.SceneBuilder(dim=3)
    builder.add_static("ground", rbd.Plane())
    for k, (kind, column) in enumerate(zip(structure.kinds, _columns(structure))):
        size = {"sphere": (0.1,), "capsule": (0.05, 0.1), "box": (0.1, 0.1, 0.1), "mesh": (0.1, 0.1, 0.1)}[kind]
        height = 1.0 + k  # apart: the template only fixes the layout
        builder.add_body(f"b{k}", _shape(kind, size), mass=1.0, position=(COLUMN_SPACING * column, 0.0, height))
    return builder.build()


def _pairs(name):
    """The body pairs of the candidate contacts, in first-seen order, and the pair of each contact."""
    names = template(name).bodies.pair_names
    unique = list(dict.fromkeys(names))
    return unique, np.array([unique.index(p) for p in names])


# Host-side geometry: the half height of a centrally symmetric shape about its centre.


def _half_height(kind, size, R):
    """The extent below (and above) the centre along z of a shape with rotation R."""
    if kind == "sphere":
        return size[0]
    if kind == "capsule":
        return size[1] * abs(R[2, 2]) + size[0]
    if kind == "mesh":
        return float(np.max(np.abs((MESH * np.asarray(size)) @ R[2])))
    return float(np.sum(np.abs(R[2]) * np.asarray(size)))


def _reach(kind, size):
    """The distance from the centre to the farthest point of the shape."""
    if kind == "sphere":
        return size[0]
    if kind == "capsule":
        return size[0] + size[1]
    if kind == "mesh":
        return float(np.max(np.linalg.norm(MESH * np.asarray(size), axis=1)))
    return float(np.linalg.norm(size))


def _matrix(quat):
    w, x, y, z = quat
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _quaternion(orientation, angles):
    """A unit quaternion: the identity, lying (90 degrees about x), or from three angles (z-y-x)."""
    if orientation == "aligned":
        return np.array([1.0, 0.0, 0.0, 0.0])
    if orientation == "lying":
        return np.array([math.sqrt(0.5), math.sqrt(0.5), 0.0, 0.0])
    (cz, sz), (cy, sy), (cx, sx) = ((math.cos(a / 2), math.sin(a / 2)) for a in angles)
    quat = np.array(
        [
            cz * cy * cx + sz * sy * sx,
            cz * cy * sx - sz * sy * cx,
            cz * sy * cx + sz * cy * sx,
            sz * cy * cx - cz * sy * sx,
        ]
    )
    return quat / np.linalg.norm(quat)


@dataclasses.dataclass(frozen=True)
class Draw:
    """A drawn scene: the structure's name and every value a run takes (numpy arrays)."""

    structure: str
    sizes: tuple  # per body
    mass: np.ndarray  # (nb,)
    mu: np.ndarray  # (npairs,)
    e: float
    q: np.ndarray  # (7 nb,)
    v: np.ndarray  # (6 nb,)

    def __repr__(self):
        return (
            f"Draw(structure={self.structure!r}, sizes={self.sizes!r}, mass={self.mass.tolist()!r}, "
            f"mu={self.mu.tolist()!r}, e={self.e!r}, q={self.q.tolist()!r}, v={self.v.tolist()!r})"
        )


def place(structure_name, sizes, mass, mu, e, orientations, gaps, offsets, velocities, spins):
    """The `Draw` of a structure from per-body values; bodies rest on their support at the drawn gap.

    A body's z is its support's top (the ground: 0) plus the drawn gap plus its own
    half height. The support lies below the horizontal plane of its top and the body
    above it, so no two bodies overlap, whatever their orientations; a gap of 0 is
    exact touching when the extreme points meet (always on the ground).
    """
    structure = STRUCTURES[structure_name]
    columns = _columns(structure)
    q, top, xy = [], [], []
    for k, kind in enumerate(structure.kinds):
        quat = orientations[k]
        half = _half_height(kind, sizes[k], _matrix(quat))
        below = structure.support[k]
        if below is None:
            base, centre = 0.0, np.array([COLUMN_SPACING * columns[k], 0.0])
        else:
            base, centre = top[below], xy[below] + np.asarray(offsets[k])
        z = base + gaps[k] + half
        q.append(np.concatenate([centre, [z], quat]))
        top.append(z + half)
        xy.append(centre)
    v = np.concatenate([np.concatenate([velocities[k], spins[k]]) for k in range(len(structure.kinds))])
    return Draw(structure_name, tuple(sizes), np.asarray(mass), np.asarray(mu), float(e), np.concatenate(q), v)


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


def _vector3(bound):
    return st.one_of(st.just((0.0, 0.0, 0.0)), st.tuples(*[_floats(-bound, bound)] * 3))


def _size(kind):
    if kind == "sphere":
        return st.tuples(_floats(*SPHERE_RADIUS))
    if kind == "capsule":
        return st.tuples(_floats(*CAPSULE_RADIUS), _floats(*CAPSULE_HALF_LENGTH))
    if kind == "mesh":
        return st.tuples(*[_floats(*MESH_HALF_EXTENT)] * 3)
    return st.tuples(*[_floats(*BOX_HALF_EXTENT)] * 3)


@st.composite
def scenes(draw, names):
    """A `Draw` of one of the structures `names`."""
    name = draw(st.sampled_from(names))
    structure = STRUCTURES[name]
    nb = len(structure.kinds)
    sizes = [draw(_size(kind)) for kind in structure.kinds]
    mass = [10.0 ** draw(_floats(*MASS_DECADES)) for _ in range(nb)]
    orientations = []
    for _ in range(nb):
        kind = draw(st.sampled_from(("aligned", "lying", "random")))
        angles = draw(st.tuples(*[_floats(-math.pi, math.pi)] * 3)) if kind == "random" else None
        orientations.append(_quaternion(kind, angles))
    gaps = [draw(st.one_of(st.just(0.0), _floats(0.0, MAX_DROP))) for _ in range(nb)]
    offsets = [draw(st.tuples(*[_floats(-MAX_STACK_OFFSET, MAX_STACK_OFFSET)] * 2)) for _ in range(nb)]
    velocities = [draw(_vector3(MAX_SPEED)) for _ in range(nb)]
    spins = [draw(_vector3(MAX_SPIN)) for _ in range(nb)]
    mu = [draw(_floats(0.0, MU_MAX)) for _ in _pairs(name)[0]]
    e = draw(_floats(0.0, 1.0))
    return place(name, sizes, mass, mu, e, orientations, gaps, offsets, velocities, spins)


# The runs: one compiled function per (structure, scheme).


class Values(eqx.Module):
    """The traced inputs of a run."""

    mass: jax.Array  # (nb,)
    mu: jax.Array  # (nc,)
    e: jax.Array  # (nc,)
    q: jax.Array
    v: jax.Array
    sizes: dict  # {kind: {name: stacked sizes}}, not differentiated


def values(d):
    """The `Values` of a `Draw`."""
    structure = STRUCTURES[d.structure]
    _, contact_pair = _pairs(d.structure)
    sizes = {}
    for kind in ("sphere", "capsule", "box", "mesh"):
        rows = [s for s, k in zip(d.sizes, structure.kinds) if k == kind]
        if not rows:
            continue
        rows = np.asarray(rows)
        if kind == "sphere":
            sizes[kind] = {"radius": rows[:, 0]}
        elif kind == "capsule":
            sizes[kind] = {"radius": rows[:, 0], "half_length": rows[:, 1]}
        else:  # a box's half extents, a mesh's stretch
            sizes[kind] = {"half_extents": rows}
    mu = d.mu[contact_pair]
    return Values(
        jnp.asarray(d.mass), jnp.asarray(mu), jnp.full(mu.shape, d.e), jnp.asarray(d.q), jnp.asarray(d.v), sizes
    )


def system_of(name, x):
    """The template's system with the leaves of `x`: masses, inertias (mass times the shape's), sizes, mu, e."""
    system = template(name).system
    kinds = STRUCTURES[name].kinds
    counters = {kind: 0 for kind in kinds}
    inertia = []
    for k, kind in enumerate(kinds):
        i, counters[kind] = counters[kind], counters[kind] + 1
        s = x.sizes[kind]
        if kind == "mesh":
            inertia.append(_mesh_inertia(s["half_extents"][i], x.mass[k]))
            continue
        size = {
            "sphere": lambda: (s["radius"][i],),
            "capsule": lambda: (s["radius"][i], s["half_length"][i]),
            "box": lambda: s["half_extents"][i],
        }[kind]()
        inertia.append(_shape(kind, size).inertia(x.mass[k]))
    replaced = [lambda s: s.params.mass, lambda s: s.params.inertia, lambda s: s.mu, lambda s: s.restitution]
    leaves = [x.mass, jnp.stack(inertia), x.mu, x.e]
    for kind, arrays in x.sizes.items():
        if kind == "mesh":  # the template stretched: its vertices
            arrays = {"vertices": MESH * arrays["half_extents"][:, None, :]}
        for key, value in arrays.items():
            replaced.append(lambda s, kind=kind, key=key: s.params.shapes[kind][key])
            leaves.append(value)
    return eqx.tree_at(lambda s: tuple(f(s) for f in replaced), system, tuple(leaves))


def _simulate(name, scheme, x, steps):
    system = system_of(name, x)
    state = rbd.State(jnp.zeros((), x.q.dtype), x.q, x.v)
    options = SCHEMES[scheme]
    if name in SWEEP_STRUCTURES and options["impact"] is None:
        options = dict(options, step_solver=rbd.ContactSweeps())
    traj = rbd.simulate(system, state, dt=H, steps=steps, **options)
    energy = jax.vmap(system.energy)(traj.q, traj.v)
    gaps = jax.vmap(lambda q: system.contacts(q).gap)(traj.q)
    return traj, energy, gaps


def final_scalar(traj):
    """The scalar of the final state whose gradient is checked: every coordinate of q and v, summed."""
    return jnp.sum(traj.q[-1]) + jnp.sum(traj.v[-1])


@functools.cache
def run_with_gradient(name, scheme):
    """jit: Values -> ((scalar, (traj, energy, gaps)), gradient Values), compiled once per structure and scheme."""

    def loss(mass, mu, e, q, v, sizes):
        out = _simulate(name, scheme, Values(mass, mu, e, q, v, sizes), STEPS)
        return final_scalar(out[0]), out

    def run(x):
        value, gradient = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(
            x.mass, x.mu, x.e, x.q, x.v, x.sizes
        )
        return value, Values(*gradient, sizes=None)

    return jax.jit(run)


@functools.cache
def run_forward(name, scheme, steps=STEPS):
    """jit: Values -> (traj, energy, gaps) over `steps` steps, without the gradient."""
    return jax.jit(lambda x: _simulate(name, scheme, x, steps))


# The invariants.


def _body_index(name):
    """The index of a moving body from its template name ("b3" -> 3); None for the ground."""
    return None if name == "ground" else int(name[1:])


def penetration_bound(d, traj):
    """(steps, npairs) the deepest penetration the Stewart-Trinkle step may leave between each body pair (metres).

    The step keeps the linearized gap f(q) + J_n dq >= 0 of every contact (no
    activation distance), and the next step's position-level row pushes any
    penetration out again, so bounds do not accumulate. What is left is the
    second-order remainder of the rigid motion over the step:

    - a translation leaves none: every gap here is affine (a point against the
      plane) or convex (a signed distance between convex shapes) in the relative
      translation of its two shapes, so it never ends below its linearization;
      gravity adds nothing, the gap being affine in the centres;
    - a rotation by theta of a body whose contact lies within L of its centre
      moves it off its tangent line by at most L (1 - cos theta) + L (theta - sin
      theta) <= L (theta^2 / 2 + theta^3 / 6), with L = rho_a + rho_b (the reaches of
      the two shapes, 0 for the ground);
    - seen from a rotating body the other one's relative translation dp turns with
      it: at most theta |dp|.

    theta and dp are each step's rotation angles and displacements of the centres,
    from q. The initial penetration (round-off of exact touching) is added to the
    first step's bound by `check_run`; GAP_ROUNDOFF covers the gaps' round-off.
    The solver leaves a normal row w_n = f / h + J_n v+ >= -ROW_TOL max(1, max |z|),
    a gap of h times that: max |z| is bounded below by the step's largest normal or
    friction impulse (70 N s under a 709 kg box, 7e-11 m).
    """
    structure = STRUCTURES[d.structure]
    nb = len(structure.kinds)
    reach = np.array([_reach(kind, size) for kind, size in zip(structure.kinds, d.sizes)] + [0.0])
    q = np.asarray(traj.q).reshape(traj.q.shape[0], nb, 7)
    cos_half = np.clip(np.abs(np.sum(q[1:, :, 3:] * q[:-1, :, 3:], -1)), 0.0, 1.0)
    theta = np.concatenate([2 * np.arccos(cos_half), np.zeros((q.shape[0] - 1, 1))], -1)  # (steps, nb + 1)
    dp = np.concatenate([np.diff(q[:, :, :3], axis=0), np.zeros((q.shape[0] - 1, 1, 3))], 1)
    bounds = []
    for a, b in _pairs(d.structure)[0]:
        i, j = (nb if k is None else k for k in (_body_index(a), _body_index(b)))
        rotation = (reach[i] + reach[j]) * (theta[:, i] ** 2 / 2 + theta[:, i] ** 3 / 6)
        rotation += (reach[i] + reach[j]) * (theta[:, j] ** 2 / 2 + theta[:, j] ** 3 / 6)
        cross = (theta[:, i] + theta[:, j]) * np.linalg.norm(dp[:, j] - dp[:, i], axis=-1)
        bounds.append(rotation + cross)
    impulses = np.concatenate(
        [np.abs(np.asarray(traj.impulses.normal)), np.abs(np.asarray(traj.impulses.friction)).reshape(len(theta), -1)],
        -1,
    )
    row = H * ROW_TOL * np.maximum(impulses.max(-1), 1.0)
    return np.stack(bounds, -1) + GAP_ROUNDOFF + row[:, None]


def check_run(d, scheme, traj, energy, gaps, gradient=None):
    """Assert the invariants of the module docstring on one run; messages name the scene."""
    leaves = [traj.q, traj.v, energy, *jax.tree_util.tree_leaves(traj.impulses)]
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in leaves), f"non-finite state or impulse: {d!r}"
    converged, status = np.asarray(traj.stats.converged), np.asarray(traj.stats.status)
    reported = converged | (status == rbd.StepStatus.SOLVER_FAILED)
    assert reported.all(), (
        f"{scheme}: steps {np.flatnonzero(~reported).tolist()} neither converged nor reported a failed solve "
        f"(status {status[~reported].tolist()}): {d!r}"
    )
    norms = np.linalg.norm(np.asarray(traj.q).reshape(traj.q.shape[0], -1, 7)[..., 3:], axis=-1)
    assert np.abs(norms - 1).max() <= QUAT_TOL, f"quaternion norm off by {np.abs(norms - 1).max():.3g}: {d!r}"
    E = np.asarray(energy)
    if scheme in DISSIPATIVE:
        gain = np.diff(E) / np.abs(E[:-1])
        worst = int(np.argmax(gain))
        assert gain[worst] <= ENERGY_RTOL, (
            f"{scheme}: energy rose by {gain[worst]:.3g} relative in step {worst} "
            f"({E[worst]!r} -> {E[worst + 1]!r}): {d!r}"
        )
    if scheme == "stewart_trinkle":
        _, contact_pair = _pairs(d.structure)
        gaps = np.asarray(gaps)
        depth = np.stack(
            [-np.minimum(gaps[:, contact_pair == k].min(-1), 0.0) for k in range(contact_pair.max() + 1)], -1
        )
        bound = penetration_bound(d, traj)
        bound[0] += depth[0]
        over = depth[1:] - bound
        step, pair = np.unravel_index(np.argmax(over), over.shape)
        assert over[step, pair] <= 0, (
            f"pair {_pairs(d.structure)[0][pair]}: penetration {depth[step + 1, pair]:.3g} m after step {step} "
            f"exceeds its bound {bound[step, pair]:.3g} m: {d!r}"
        )
    if gradient is not None:
        for field in ("mass", "mu", "e", "q", "v"):
            g = np.asarray(getattr(gradient, field))
            assert np.all(np.isfinite(g)), f"{scheme}: gradient with respect to {field} is not finite: {d!r}"


def run_and_check(d, scheme, gradient=True):
    if gradient:
        (_, (traj, energy, gaps)), grad = run_with_gradient(d.structure, scheme)(values(d))
    else:
        (traj, energy, gaps), grad = run_forward(d.structure, scheme)(values(d)), None
    check_run(d, scheme, traj, energy, gaps, grad)


def long_run_and_check(d, scheme, steps=LONG_RUN_STEPS):
    """`steps` steps in chunks of LONG_RUN_CHUNK (one compiled function), each chunk checked."""
    x = values(d)
    for _ in range(steps // LONG_RUN_CHUNK):
        traj, energy, gaps = run_forward(d.structure, scheme, LONG_RUN_CHUNK)(x)
        check_run(d, scheme, traj, energy, gaps)
        x = Values(x.mass, x.mu, x.e, traj.q[-1], traj.v[-1], x.sizes)


# Derandomized and without an example database: the same scenes in every run, nothing recorded. No
# shrinking: a run takes seconds and hypothesis would spend minutes; `test_hostile_regressions.py` holds
# the failures found, shrunk by hand.
FAST = settings(
    max_examples=FAST_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    phases=(Phase.explicit, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)
SLOW = settings(
    FAST,
    max_examples=SLOW_EXAMPLES,
    # The fixture frees the programs once per scheme, not per example, which is what it is for.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
LONG = settings(FAST, max_examples=LONG_EXAMPLES)


def test_a_stretched_template_mesh_has_its_hulls_inertia_and_extents():
    """The mesh profile's host geometry against the hull's own: the traceable inertia of the stretched template,
    its half height in a rotation and its reach."""
    size, R = np.array([0.05, 0.2, 0.11]), _matrix(_quaternion("random", (0.3, -1.2, 2.0)))
    mesh = rbd.ConvexMesh(MESH * size)
    np.testing.assert_allclose(_mesh_inertia(size, 2.5), mesh.inertia(2.5), rtol=1e-12, atol=1e-15)
    points = MESH * size @ R.T
    assert _half_height("mesh", size, R) == pytest.approx(max(-points[:, 2].min(), points[:, 2].max()), rel=1e-12)
    assert _reach("mesh", size) == pytest.approx(float(mesh._hull["radius"]), rel=1e-12)


@pytest.mark.parametrize("scheme", FAST_STRUCTURES)
@FAST
@given(data=st.data())
def test_hostile_scenes(scheme, data):
    """The default profile: FAST_EXAMPLES scenes of the scheme's small structure."""
    d = data.draw(scenes((FAST_STRUCTURES[scheme],)))
    run_and_check(d, scheme, gradient=False)


@pytest.mark.parametrize("scheme", [_profile(s, MIXED_SCHEMES) for s in SCHEMES])
@settings(FAST, max_examples=MIXED_EXAMPLES)
@given(d=scenes(MIXED_STRUCTURES))
def test_hostile_mixed_scenes(scheme, d):
    """The slow set's profile: MIXED_EXAMPLES scenes of four bodies of every kind, two of them stacked."""
    run_and_check(d, scheme, gradient=scheme in MIXED_GRADIENTS)


@pytest.mark.parametrize("scheme", [_profile(s, MESH_SCHEMES) for s in SCHEMES])
@settings(FAST, max_examples=MIXED_EXAMPLES)
@given(d=scenes(MESH_STRUCTURES))
def test_hostile_mesh_scenes(scheme, d):
    """The slow set's mesh profile: MIXED_EXAMPLES scenes of a stretched hull dropped on or resting on a box,
    beside a capsule (plane-mesh, box-mesh and capsule-mesh contacts), without gradients: the long profile draws
    this structure with gradients, and test_convex.py checks mesh gradients against central differences."""
    run_and_check(d, scheme, gradient=False)


@pytest.fixture
def _free_each_schemes_programs():
    """Drop the compiled programs after each scheme of the long profile: one process that keeps the gradient
    programs of every structure for three schemes crosses Linux's vm.max_map_count and aborts in XLA."""
    yield
    jax.clear_caches()


@pytest.mark.long
@pytest.mark.parametrize("scheme", SLOW_SCHEMES)
@SLOW
@given(d=scenes(tuple(STRUCTURES)))
def test_hostile_scenes_of_every_structure(_free_each_schemes_programs, scheme, d):
    """The long profile: SLOW_EXAMPLES scenes per scheme drawn from every structure, gradients included."""
    run_and_check(d, scheme)
