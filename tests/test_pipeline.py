"""The step pipeline: one contact record per step, one dynamics for every step solver, one rule
that picks the solver, and a package layout without cycles or upward imports."""

import ast
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import geometry

jax.config.update("jax_enable_x64", True)

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "jaxrbd"
SAME = 1e-9  # dense step and ContactSweeps on the same step problem


# --- Collision runs once per step --------------------------------------------------------------


def _count_collisions(monkeypatch, scene, *, step_solver=None, scheme=None, restitution=None, grad=False):
    """Calls of the collision driver (`jaxrbd.geometry.collide`, every narrow phase of the scene)
    while tracing one step (and its gradient)."""
    system, state = scene
    scheme = rbd.StewartTrinkle() if scheme is None else scheme
    options = rbd.StepOptions.resolve(system, state, dt=0.01, scheme=scheme, impact=restitution)
    step_solver = rbd.choose_solver(system, state, options, step_solver=step_solver)
    z0 = step_solver.init(system, state, options.cone)
    calls = []
    original = geometry.collide

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(geometry, "collide", counted)

    def one_step(state):
        return step_solver.step(system, state, z0, options)[0].q

    if grad:
        jax.eval_shape(jax.grad(lambda q: one_step(rbd.State(state.t, q, state.v)).sum()), state.q)
    else:
        jax.eval_shape(one_step, state)
    return len(calls)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"step_solver": rbd.ContactSweeps()},
        {"restitution": rbd.NewtonRestitution()},
        {"restitution": rbd.PoissonRestitution()},
        {"grad": True},
        {"step_solver": rbd.ContactSweeps(), "grad": True},
    ],
    ids=["dense", "ContactSweeps", "Newton", "Poisson", "dense gradient", "ContactSweeps gradient"],
)
def test_one_step_runs_collision_once(monkeypatch, options):
    scene = rbd.scenes.four_balls(restitution=0.5)
    assert _count_collisions(monkeypatch, scene, **options) == 1


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_nonlinear_scheme_collides_once_per_iterate(monkeypatch, k):
    """003 §3.4 re-evaluates the geometry at each estimate of q+: k + 1 records."""
    scheme = rbd.StewartTrinkle(fixed_point_iterations=k)
    assert _count_collisions(monkeypatch, rbd.scenes.four_balls(), scheme=scheme) == k + 1


def test_predicted_activation_and_drift_projection_collide_at_their_own_configurations(monkeypatch):
    """Anitescu-Potra activates on the gap at q + h G v (one more record, at that configuration);
    the drift projection reads the record at q+ (one more)."""
    scene = rbd.scenes.four_balls()
    assert _count_collisions(monkeypatch, scene, scheme=rbd.AnitescuPotra()) == 2
    assert _count_collisions(monkeypatch, scene, scheme=rbd.AnitescuPotra(project=True)) == 3


def test_generalized_systems_evaluate_their_gaps_once_per_step():
    """The rod's record comes from one forward-mode pass over its gap function."""
    system, state = rbd.scenes.falling_rod()
    calls = []

    def counted(q, params, gaps=system.gaps):
        calls.append(1)
        return gaps(q, params)

    system = dataclasses.replace(system, gaps=counted)
    options = rbd.StepOptions.resolve(system, state, dt=0.01)
    step_solver = rbd.choose_solver(system, state, options)
    z0 = step_solver.init(system, state, options.cone)
    calls.clear()
    jax.eval_shape(lambda s: step_solver.step(system, s, z0, options), state)
    assert len(calls) == 1


def test_the_record_agrees_with_the_single_questions():
    """`System.contacts` is what `gap`, `normals`, `contact_rows` and `coefficients` report."""
    system, state = rbd.scenes.four_balls(mu=0.3, restitution=0.25)
    c = system.contacts(state.q)
    assert c.size == 7 and c.blocks.shape == (7, 2, 4, 6)
    np.testing.assert_array_equal(c.gap, system.gap(state.q))
    np.testing.assert_array_equal(c.J_n.T, system.normals(state.q))
    np.testing.assert_array_equal(c.friction_rows(3), system.contact_rows(state.q, 3))
    np.testing.assert_allclose(c.mu, 0.3)
    np.testing.assert_allclose(c.restitution, 0.25)
    # The rows are the velocities of the contact points: J_n v is the gap's rate.
    v = jax.random.normal(jax.random.PRNGKey(0), state.v.shape)
    qdot = system.G(state.q) @ v
    rate = jax.jvp(system.gap, (state.q,), (qdot,))[1]
    np.testing.assert_allclose(c.J_n @ v, rate, atol=1e-12)


# --- One dynamics for every step solver --------------------------------------------------------


@pytest.mark.slow
def test_a_custom_external_force_is_the_same_on_both_step_solvers():
    """A constant horizontal push on a sphere_grid: the dense step and ContactSweeps agree to 1e-9."""
    system, state = rbd.scenes.sphere_grid(4, mu=0.3)
    nb = 4
    push = jnp.tile(jnp.array([2.5, -1.0, 0.0, 0.0, 0.0, 0.0]), nb) * jnp.repeat(jnp.arange(1.0, nb + 1), 6)
    pushed = dataclasses.replace(system, external_force=lambda t, q, v, params: push)
    run = jax.jit(
        lambda system, solver: rbd.simulate(system, state, dt=0.01, steps=50, step_solver=solver), static_argnums=1
    )
    dense, sweeps = run(pushed, rbd.DenseStep()), run(pushed, rbd.ContactSweeps())
    assert bool(dense.stats.converged.all()) and bool(sweeps.stats.converged.all())
    np.testing.assert_allclose(sweeps.q, dense.q, atol=SAME)
    np.testing.assert_allclose(sweeps.v, dense.v, atol=SAME)
    # The push moves every ball: the force was not ignored (ContactSweeps used to drop it).
    free = run(system, rbd.ContactSweeps())
    moved = system.bodies.positions(sweeps.q)[-1] - system.bodies.positions(free.q)[-1]
    assert np.all(np.asarray(moved[:, 0]) > 0.01) and np.all(np.asarray(moved[:, 1]) < -0.004)


# --- One rule picks the solver ----------------------------------------------------------------


def test_simulate_runs_the_solver_choose_solver_names():
    small, large = rbd.scenes.four_balls(), rbd.scenes.sphere_grid(64)
    assert rbd.choose_solver(*small).name == "dense SemismoothNewton"
    assert rbd.choose_solver(*large).name == "ContactSweeps"
    assert rbd.choose_solver(*small, solver=rbd.Lemke()).name == "dense Lemke"
    with pytest.raises(ValueError, match="ContactSweeps: it does not support an impact law"):
        rbd.choose_solver(*small, step_solver=rbd.ContactSweeps(), impact=rbd.Newton())
    with pytest.raises(TypeError, match="solver must be None or a complementarity solver"):
        rbd.choose_solver(*small, solver="lemke")


# --- The layout -------------------------------------------------------------------------------

# The pipeline's layers, bottom first: a module imports only from its own layer or below.
LAYERS = [
    [
        "jaxrbd._config",
        "jaxrbd._status",
        "jaxrbd._validate",
        "jaxrbd._rotation",
        "jaxrbd._progress",
        "jaxrbd._small",
        "jaxrbd._lanes",
    ],
    ["jaxrbd._problems", "jaxrbd._contacts", "jaxrbd.geometry", "jaxrbd.complementarity"],
    ["jaxrbd.cones", "jaxrbd._random"],
    ["jaxrbd.model"],
    ["jaxrbd.dynamics"],
    ["jaxrbd.bodies"],
    ["jaxrbd.stepping"],
    ["jaxrbd.scenes", "jaxrbd.analysis", "jaxrbd.mjcf", "jaxrbd.foreign"],
    ["jaxrbd.sysid", "jaxrbd.batch", "jaxrbd.reference"],
    ["jaxrbd.cli"],
    ["jaxrbd"],
]


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules():
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name, path, modules):
    """The jaxrbd modules that `name` imports (anywhere in its source, functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("jaxrbd"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            if not origin.startswith("jaxrbd"):
                continue
            for alias in node.names:
                target = f"{origin}.{alias.name}"
                found.add(target if target in modules else origin)
    found.discard(name)
    return found


def _layer(name):
    for i, layer in enumerate(LAYERS):
        if any(name == m or name.startswith(m + ".") for m in layer):
            return i
    raise AssertionError(f"module {name} is in no layer of the pipeline: add it to LAYERS")


def test_the_package_has_no_import_cycle_and_no_upward_import():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    upward = [(a, b) for a, deps in graph.items() for b in deps if a != "jaxrbd" and _layer(b) > _layer(a)]
    assert not upward, f"upward imports: {upward}"
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, stack + [dep])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


def test_nothing_but_the_command_line_imports_it():
    """Library modules, notebooks and tests (other than the command line's own) do not import `jaxrbd.cli`."""
    modules = _modules()
    offenders = [
        name
        for name, path in modules.items()
        if not name.startswith("jaxrbd.cli") and any(d.startswith("jaxrbd.cli") for d in _imports(name, path, modules))
    ]
    for path in sorted((ROOT / "tests").glob("*.py")):
        if not path.name.startswith("test_cli") and _imports_cli(path.read_text()):
            offenders.append(path.name)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
        if _imports_cli(source):
            offenders.append(path.name)
    assert not offenders, f"these import the command-line package: {offenders}"


def _imports_cli(source):
    """Whether Python source imports `jaxrbd.cli` or anything in it."""
    is_cli = lambda name: name == "jaxrbd.cli" or name.startswith("jaxrbd.cli.")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(is_cli(alias.name) for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module:
            if is_cli(node.module) or any(is_cli(f"{node.module}.{alias.name}") for alias in node.names):
                return True
    return False


def test_the_former_keywords_still_work_with_a_deprecation_warning():
    """simulate(friction=, restitution=) are cone= and impact=; SceneBuilder, set_pair, load_mjcf and the scenes
    take cone= with friction= as its former name. Both at once is an error."""
    system, state = rbd.scenes.bouncing_ball(0.5)

    def program(**options):  # the rollout's traced program: the same options give the same program
        return str(jax.make_jaxpr(lambda s: rbd.simulate(system, s, dt=0.01, steps=3, **options))(state))

    with pytest.warns(DeprecationWarning, match=r"simulate\(restitution=...\) is deprecated: use impact="):
        old = program(restitution=rbd.Newton())
    assert old == program(impact=rbd.NewtonRestitution())
    with pytest.warns(DeprecationWarning, match=r"simulate\(friction=...\) is deprecated: use cone="):
        old = program(impact=rbd.Newton(), friction=rbd.PolyhedralCone(8))
    assert old == program(impact=rbd.Newton(), cone=rbd.PolyhedralCone(8))
    with pytest.raises(TypeError, match="give impact= only"):
        rbd.simulate(system, state, dt=0.01, steps=3, impact=rbd.Newton(), restitution=rbd.Newton())
    with pytest.warns(DeprecationWarning, match=r"SceneBuilder\(friction=...\)"):
        b = rbd.SceneBuilder(friction=rbd.EllipticCone())
    assert isinstance(b.friction, rbd.EllipticCone)
    with pytest.warns(DeprecationWarning, match=r"scenes.rolling_ball\(friction=...\)"):
        scene = rbd.scenes.rolling_ball(friction=rbd.EllipticCone())
    assert isinstance(scene.system.friction, rbd.EllipticCone)
    with pytest.warns(DeprecationWarning, match=r"choose_solver\(restitution=...\)"):
        assert rbd.choose_solver(system, state, restitution=rbd.Newton()).name == "dense SemismoothNewton"
    with pytest.warns(DeprecationWarning, match=r"pass DenseStep\(...\) as step_solver="):
        assert rbd.choose_solver(system, state, solver=rbd.DenseStep(rbd.Lemke())).name == "dense Lemke"
    with pytest.raises(TypeError, match="not both"):
        rbd.choose_solver(system, state, solver=rbd.Lemke(), step_solver=rbd.ContactSweeps())


def test_step_options_are_checked_once_with_the_argument_named():
    system, state = rbd.scenes.four_balls()
    options = rbd.StepOptions.resolve(system, state, dt=0.01)
    assert isinstance(options.scheme, rbd.StewartTrinkle) and isinstance(options.cone, rbd.PolyhedralCone)
    assert options.impact is None and options.project_joints is True
    with pytest.raises(TypeError, match="impact must be None, jaxrbd.NewtonRestitution"):
        rbd.StepOptions.resolve(system, state, dt=0.01, impact="newton")
    with pytest.raises(TypeError, match="scheme must be"):
        rbd.StepOptions.resolve(system, state, dt=0.01, scheme="stewart")
    with pytest.raises(ValueError, match="grad_smoothing must be >= 0"):
        rbd.StepOptions.resolve(system, state, dt=0.01, grad_smoothing=-1.0)
    with pytest.raises(TypeError, match="options= or the option keywords, not both"):
        rbd.choose_solver(system, state, options, impact=rbd.NewtonRestitution())
