"""The scene benchmark: jaxrbd beside MuJoCo MJX and MuJoCo's C engine on the same scenes.

Each scene is built once by jaxrbd and once as MJCF with the same sizes, masses,
friction and step, its MuJoCo initial state copied from jaxrbd's. For every
simulator: compile time, steps per second of one environment in a jitted
`lax.scan` rollout, environment-steps per second of vmapped batches, the cost of
a reverse-mode gradient of the rollout relative to the rollout, XLA's memory
estimate of the largest batch, and the physical answer it gives.

MuJoCo runs with its default solver settings ("mjx default": Newton, 100
iterations, 50 line-search steps) and with the settings its users pick for speed
("mjx fast": Newton, 1 iteration, 4 line-search steps). mujoco and mujoco-mjx are
the optional extra `.[bench]`; without them only jaxrbd is reported. jaxrbd runs
the step solver `simulate` chooses for the scene (`stepping.choose_solver`),
named in the table's solver column.
"""

import dataclasses
import math
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import scenes
from .._progress import tqdm
from ..model import State
from ..stepping import simulate

BATCHES = (64, 512, 4096)
MJX_SETTINGS = {"mjx default": None, "mjx fast": dict(iterations=1, ls_iterations=4)}


def _mujoco():
    """(mujoco, mjx) or None when the optional extra is not installed."""
    try:
        import mujoco
        from mujoco import mjx
    except ImportError:
        return None
    return mujoco, mjx


@dataclasses.dataclass
class Case:
    """One benchmark scene.

    Attributes:
        name: the scene's name in the table.
        scene: () -> (system, state) of jaxrbd.
        dt: the step.
        seconds: the simulated time of the single-environment rollout and the gradient.
        batch_start: the time (s) from which batched rollouts start (in contact).
        batch_steps: steps of each batched rollout.
        mjcf: the same scene as MJCF, and its initial (qpos, qvel).
        answer: (name, jaxrbd final q -> value, MuJoCo final qpos -> value).
        max_batch: the largest batch run for this scene. MJX's batch of 4,096 needs
            8-12 GB on sphere_grid(64) and more on the box scene, so only
            sphere_grid (the scene of the acceptance ratios) runs it, which keeps
            the whole benchmark within 24 GB and about 10 minutes on 2 cores; the
            other scenes run no batch in float64.
    """

    name: str
    scene: Callable
    dt: float
    seconds: float
    batch_start: float
    batch_steps: int
    mjcf: Callable
    answer: tuple
    max_batch: int = 512


def _free_qpos(state, nb):
    """Free-joint qpos (position, quaternion wxyz per body) and qvel (linear, body-frame angular)."""
    from .. import _rotation as rot

    q = np.asarray(state.q).reshape(nb, 7)
    v = np.asarray(state.v).reshape(nb, 6)
    R = np.asarray(rot.to_matrix(jnp.asarray(q[:, 3:])))
    w_local = np.einsum("bji,bj->bi", R, v[:, 3:])
    return q.reshape(-1), np.concatenate([v[:, :3], w_local], -1).reshape(-1)


def _mjcf(dt, bodies, statics, pairs):
    body_xml = "\n".join(bodies)
    pair_xml = "\n".join(
        f'<pair geom1="{a}" geom2="{b}" condim="3" friction="{mu} {mu} 0.005 0.0001 0.0001"/>' for a, b, mu in pairs
    )
    return f"""<mujoco>
  <option timestep="{dt}" gravity="0 0 -9.81"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    {statics}
    {body_xml}
  </worldbody>
  <contact>{pair_xml}</contact>
</mujoco>"""


def _ball(name, x, radius=0.1, mass=1.0):
    return (
        f'<body name="{name}" pos="{x[0]} {x[1]} {x[2]}"><freejoint/>'
        f'<geom name="{name}" type="sphere" size="{radius}" mass="{mass}"/></body>'
    )


def _grid_case(n=64):
    mu = 0.5

    def mjcf(state):
        x = np.asarray(state.q).reshape(n, 7)[:, :3]
        bodies = [_ball(f"b{i}", x[i]) for i in range(n)]
        xml = _mjcf(
            0.01, bodies, '<geom name="table" type="plane" size="0 0 1"/>', [("table", f"b{i}", mu) for i in range(n)]
        )
        return (xml, *_free_qpos(state, n))

    return Case(
        name=f"sphere_grid({n})",
        scene=lambda: scenes.sphere_grid(n, mu=mu),
        max_batch=4096,
        dt=0.01,
        seconds=1.0,
        batch_start=0.4,
        batch_steps=20,
        mjcf=mjcf,
        answer=(
            "mean final ball height (m; exact 0.1)",
            lambda q: float(np.mean(np.asarray(q).reshape(n, 7)[:, 2])),
            lambda qpos: float(np.mean(np.asarray(qpos).reshape(n, 7)[:, 2])),
        ),
    )


def _four_balls_case():
    mu = 0.4

    def mjcf(state):
        x = np.asarray(state.q).reshape(4, 7)[:, :3]
        bodies = [_ball(f"b{i}", x[i]) for i in range(4)]
        pairs = [("table", f"b{i}", mu) for i in range(4)] + [(f"b{i}", f"b{i + 1}", mu) for i in range(3)]
        xml = _mjcf(0.005, bodies, '<geom name="table" type="plane" size="0 0 1"/>', pairs)
        return (xml, *_free_qpos(state, 4))

    def xs(q):
        return np.round(np.asarray(q).reshape(4, 7)[:, 0], 3).tolist()

    return Case(
        name="four_balls",
        scene=lambda: scenes.four_balls(mu=mu),
        dt=0.005,
        seconds=1.0,
        batch_start=0.6,
        batch_steps=20,
        mjcf=mjcf,
        answer=("final x of the balls (m)", xs, xs),
    )


def _rod_case():
    scene = scenes.falling_rod()

    def mjcf(state):
        x, y, theta = np.asarray(state.q)
        vx, vy, omega = np.asarray(state.v)
        body = (
            '<body name="rod"><joint name="x" type="slide" axis="1 0 0"/><joint name="z" type="slide" axis="0 0 1"/>'
            '<joint name="theta" type="hinge" axis="0 -1 0"/>'
            '<inertial pos="0 0 0" mass="1" diaginertia="0.002 0.002 0.002"/>'
            '<geom name="rod" type="capsule" fromto="-0.25 0 0 0.25 0 0" size="0.05"/></body>'
        )
        xml = _mjcf(0.0025, [body], '<geom name="table" type="plane" size="0 0 1"/>', [("table", "rod", 0.6)])
        return xml, np.array([x, y, theta]), np.array([vx, vy, omega])

    pose = lambda q: np.round(np.asarray(q)[:3], 4).tolist()
    return Case(
        name="falling_rod",
        scene=lambda: scene,
        dt=0.0025,
        seconds=1.0,
        batch_start=0.4,
        batch_steps=40,
        mjcf=mjcf,
        answer=("final (x, y, theta)", pose, pose),
    )


def _incline_case():
    angle, mu = math.radians(30.0), 0.8  # mu > tan(30 deg) = 0.577: the cube must not move
    uphill = np.array([math.cos(angle), 0.0, math.sin(angle)])
    normal = np.array([-math.sin(angle), 0.0, math.cos(angle)])

    def mjcf(state):
        q = np.asarray(state.q)
        body = (
            f'<body name="cube" pos="{q[0]} {q[1]} {q[2]}" quat="{q[3]} {q[4]} {q[5]} {q[6]}"><freejoint/>'
            '<geom name="cube" type="box" size="0.05 0.05 0.05" mass="1"/></body>'
        )
        n = " ".join(str(c) for c in normal)
        xml = _mjcf(
            0.01, [body], f'<geom name="incline" type="plane" size="0 0 1" zaxis="{n}"/>', [("incline", "cube", mu)]
        )
        return (xml, *_free_qpos(state, 1))

    x0 = np.asarray(scenes.block_on_incline(angle, mu).state.q)[:3]
    creep = lambda q: float(np.dot(np.asarray(q)[:3] - x0, -uphill))
    return Case(
        name="cube on incline",
        scene=lambda: scenes.block_on_incline(angle, mu),
        dt=0.01,
        seconds=1.0,
        batch_start=0.5,
        batch_steps=20,
        mjcf=mjcf,
        answer=("creep down the slope in 1 s (m; exact 0)", creep, creep),
    )


CASES = {"sphere_grid": _grid_case, "four_balls": _four_balls_case, "falling_rod": _rod_case, "incline": _incline_case}


def median_time(f, *args, repeats, warmup=True):
    """The median wall time of `repeats` calls of f(*args), after one warm-up call unless warmup=False."""
    if warmup:
        jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# A batch call that takes less than this is timed again: the median of `repeats` more calls.
RETIME_BELOW_S = 5.0


def batch_times(calls, repeats):
    """{key: wall time} of batched calls {key: (f, args)}: each one's first call, or, when that took under
    `RETIME_BELOW_S`, the median of `repeats` more, taken in rounds that call every such batch once in turn.

    A first call also pays for first touching the batch's buffers, which a sweep of many batches pays once:
    sphere_grid(64) at B = 4,096 ran its first call at 8,004 env-steps/s and the next four at 11,921-14,469. A call
    of a minute (MJX default at B = 4,096) is timed once: there that cost is a small part. The rounds interleave
    the batches, so that B = 64 and B = 512, which the table compares, see the same state of a shared machine:
    timed one after the other, a batch of 50 ms moved by 20% between them. The same rule for every simulator.
    """
    first = {}
    for key, (f, args) in calls.items():
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        first[key] = time.perf_counter() - start
    again = interleaved_times({key: calls[key] for key in calls if first[key] < RETIME_BELOW_S}, repeats, warmup=False)
    return {key: again.get(key, first[key]) for key in calls}


# The one-environment figures (forward, and gradient over forward) take at least this long in all: a
# rollout of 10 ms timed 3 times moved by 30-40% between runs of the benchmark on this 2-core machine.
SINGLE_BUDGET_S = 2.0
MAX_ROUNDS = 200


def interleaved_times(calls, rounds, budget_s=0.0, warmup=True):
    """{key: median wall time} of calls {key: (f, args)}, after one warm-up call each (unless warmup=False), timed
    in rounds that call each once in turn: at least `rounds` rounds, and more (at most `MAX_ROUNDS`) until they
    took `budget_s`.

    The gradient-over-forward ratio then compares calls made in the same moments of a shared machine.
    """
    if not calls:
        return {}
    if warmup:
        for f, args in calls.values():
            jax.block_until_ready(f(*args))
    times = {key: [] for key in calls}
    start = time.perf_counter()
    for done in range(1, MAX_ROUNDS + 1):
        for key, (f, args) in calls.items():
            t = time.perf_counter()
            jax.block_until_ready(f(*args))
            times[key].append(time.perf_counter() - t)
        if done >= rounds and time.perf_counter() - start >= budget_s:
            break
    return {key: statistics.median(ts) for key, ts in times.items()}


def _compile(f, *args):
    t = time.perf_counter()
    compiled = jax.jit(f).lower(*args).compile()
    return compiled, time.perf_counter() - t


def _memory(compiled):
    """XLA's estimate of the peak memory of a compiled call (bytes), or None."""
    try:
        m = compiled.memory_analysis()
        return int(m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes)
    except Exception:  # not every backend reports it
        return None


_FREE_OPS = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast")


def thunk_count(compiled):
    """The XLA thunks of a compiled rollout's loop bodies and branches: the work of one step, counted statically.

    Every instruction of a computation that runs as a loop body or condition, or
    as a branch of a conditional, is one thunk of XLA's CPU runtime (a fusion, a
    LAPACK call, a copy), except the free ones (parameters, constants, tuples).
    Instructions inside fusions are not thunks and are not counted. The count is
    static: a branch or loop body counts once, however often it runs.
    """
    import re

    text = compiled.as_text()
    called = set()
    for key in ("body", "condition", "true_computation", "false_computation"):
        called.update(re.findall(rf"{key}=%?([\w.\-]+)", text))
    for group in re.findall(r"branch_computations=\{([^}]*)\}", text):
        called.update(name.strip().lstrip("%") for name in group.split(","))
    count, current = 0, None
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head and not line.startswith(" "):
            current = head.group(1)
        elif current in called and " = " in line:
            op = re.search(r"= [^ ]+ ([\w\-]+)\(", line)
            count += op is not None and op.group(1) not in _FREE_OPS
    return count


SAME_WINDOW = 512  # batches up to this size all run the case's `batch_steps`


def _batch_inputs(q, v, batch_steps, batch):
    """The benchmark's batch of `batch` environments from (q, v), and its steps.

    Batches up to `SAME_WINDOW` run the same `batch_steps` steps, so that their
    env-steps/s compare the same stretch of the motion (the first steps after
    `batch_start` can be the hardest: with fewer steps the larger batch measured
    only those). Larger batches (sphere_grid's 4,096, where MJX's batch of 20 steps
    would take minutes) run proportionally fewer, at least 2.
    """
    n = max(2, min(batch_steps, batch_steps * SAME_WINDOW // batch))
    return _batch_of(q, batch), jnp.broadcast_to(v, (batch,) + v.shape), n


def _batch_of(x, batch):
    """x repeated with a small shift of the first coordinate per environment (1e-4 m apart)."""
    shift = jnp.zeros((batch,) + x.shape, x.dtype).at[:, 0].set(1e-4 * jnp.arange(batch, dtype=x.dtype))
    return x[None] + shift


def _measure(full, q0, v0, steps, batch_start, batch_steps, batches, repeats):
    """The figures of one simulator, given full(q0, v0, steps) -> final (q, v)."""
    rollout = lambda q, v, steps: full(q, v, steps)[0]
    batch_q, batch_v = jax.jit(full, static_argnums=2)(q0, v0, batch_start)
    row = {}
    compiled, row["compile_s"] = _compile(lambda q, v: rollout(q, v, steps), q0, v0)
    row["thunks"] = thunk_count(compiled)
    row["final_q"] = np.asarray(compiled(q0, v0))
    single = {"forward": (compiled, (q0, v0))}
    try:
        grad, row["grad_compile_s"] = _compile(jax.grad(lambda q, v: jnp.sum(rollout(q, v, steps))), q0, v0)
        single["grad"] = (grad, (q0, v0))
    except Exception as err:  # MJX's solver loop is not reverse-differentiable
        row["grad_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:80]}"
    times = interleaved_times(single, repeats, SINGLE_BUDGET_S)
    row["steps_per_s"] = steps / times["forward"]
    if "grad" in times:
        row["grad_over_forward"] = times["grad"] / times["forward"]
    calls, env_steps = {}, {}
    for batch in batches:
        qs, vs, n = _batch_inputs(batch_q, batch_v, batch_steps, batch)
        many, _ = _compile(jax.vmap(lambda q, v, n=n: rollout(q, v, n)), qs, vs)
        calls[batch], env_steps[batch] = (many, (qs, vs)), batch * n
        row["memory_bytes"] = _memory(many)
    row["batches"] = {batch: env_steps[batch] / t for batch, t in batch_times(calls, repeats).items()}
    return row


def _jaxrbd_scene(case, dtype):
    """The case's (system, state) in `dtype`, and the step solver `simulate` would run on it (by its rule)."""
    from ..stepping import choose_solver

    system, state = case.scene()
    system = _cast(system, dtype)
    state = State(jnp.zeros((), dtype), jnp.asarray(state.q, dtype), jnp.asarray(state.v, dtype))
    return system, state, choose_solver(system, state)


def _jaxrbd_rollout(case, dtype):
    """(rollout(q, v, steps) -> final (q, v), q0, v0, the solver's name)."""
    system, state, solver = _jaxrbd_scene(case, dtype)

    def rollout(q, v, steps):
        traj = simulate(system, State(jnp.zeros((), dtype), q, v), dt=case.dt, steps=steps, step_solver=solver)
        return traj.q[-1], traj.v[-1]

    return rollout, state.q, state.v, solver.name


def _mjx_rollout(case, state, settings, dtype):
    mujoco, mjx = _mujoco()
    xml, qpos, qvel = case.mjcf(state)
    model = mujoco.MjModel.from_xml_string(xml)
    if settings is not None:
        model.opt.iterations = settings["iterations"]
        model.opt.ls_iterations = settings["ls_iterations"]
    mx = mjx.put_model(model)
    mx = _cast(mx, dtype)
    d0 = mjx.make_data(mx)

    def rollout(q, v, steps):
        d = d0.replace(qpos=q, qvel=v)
        d = jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=steps)[0]
        return d.qpos, d.qvel

    return rollout, jnp.asarray(qpos, dtype), jnp.asarray(qvel, dtype)


def _mujoco_c(case, state, seconds, repeats):
    """MuJoCo's C engine, one environment, stepped from Python: steps/s and the final qpos."""
    mujoco, _ = _mujoco()
    xml, qpos, qvel = case.mjcf(state)
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    steps = round(seconds / case.dt)
    times = []
    for _ in range(repeats):
        mujoco.mj_resetData(model, data)
        data.qpos[:], data.qvel[:] = qpos, qvel
        t = time.perf_counter()
        for _ in range(steps):
            mujoco.mj_step(model, data)
        times.append(time.perf_counter() - t)
    return {"steps_per_s": steps / statistics.median(times), "final_q": np.array(data.qpos)}


def run(cases=tuple(CASES), dtypes=("float32", "float64"), batches=BATCHES, repeats=3, mjx_dtypes=("float32",)):
    """Run the benchmark; returns the rows (dicts), one per (scene, simulator, dtype)."""
    have_mujoco = _mujoco() is not None
    rows = []
    jobs = []
    for key in cases:
        case = CASES[key]()
        for dtype in dtypes:
            jobs.append((case, "jaxrbd", dtype))
            if have_mujoco and dtype in mjx_dtypes:
                jobs += [(case, name, dtype) for name in MJX_SETTINGS]
        if have_mujoco:
            jobs.append((case, "mujoco C", "float64"))
    jobs.sort(key=lambda job: job[2])  # float32 first; x64 is switched per dtype
    for case, simulator, dtype in tqdm(jobs, desc="benchmark"):
        jax.config.update("jax_enable_x64", dtype == "float64")
        steps = round(case.seconds / case.dt)
        start = round(case.batch_start / case.dt)
        _, state = case.scene()
        jdtype = jnp.dtype(dtype)
        if simulator == "mujoco C":
            row = _mujoco_c(case, state, case.seconds, repeats)
        else:
            if simulator == "jaxrbd":
                full, q0, v0, solver_name = _jaxrbd_rollout(case, jdtype)
            else:
                full, q0, v0 = _mjx_rollout(case, state, MJX_SETTINGS[simulator], jdtype)
            sizes = tuple(b for b in batches if b <= case.max_batch)
            if dtype == "float64" and case.max_batch < max(BATCHES):
                sizes = ()  # the small scenes' float64 batches cost 2 of the benchmark's 10 minutes
            row = _measure(full, q0, v0, steps, start, case.batch_steps, sizes, repeats)
            if simulator == "jaxrbd":
                row["solver"] = solver_name
                row["worst_residual"], row["iterations"], row["batch_converged"] = _solver_stats(
                    case, jdtype, steps, start, sizes
                )
        label, ours, theirs = case.answer
        row["answer"] = (ours if simulator == "jaxrbd" else theirs)(row.pop("final_q"))
        row.update(scene=case.name, simulator=simulator, dtype=dtype, answer_label=label, batch_steps=case.batch_steps)
        row["batches"] = row.get("batches", {})
        rows.append(row)
    return rows


def _solver_stats(case, dtype, steps, start, batches):
    """Over the single-environment rollout: the largest complementarity residual and the mean
    iterations per step (`StepStats.iterations`); and the fraction of converged lane-steps of
    each batch (the benchmark's batches, re-run with their statistics)."""
    system, state, solver = _jaxrbd_scene(case, dtype)
    run = lambda x, n: simulate(system, x, dt=case.dt, steps=n, step_solver=solver)
    traj = jax.jit(run, static_argnums=1)(state, steps)
    batch_q, batch_v = traj.q[start], traj.v[start]
    converged = {}
    for batch in batches:
        qs, vs, n = _batch_inputs(batch_q, batch_v, case.batch_steps, batch)
        states = State(jnp.zeros((batch,), dtype), qs, vs)
        many = jax.jit(jax.vmap(lambda x, n=n: run(x, n).stats.converged))(states)
        converged[batch] = float(np.mean(np.asarray(many)))
    return float(traj.stats.residual.max()), float(np.mean(np.asarray(traj.stats.iterations))), converged


def _cast(tree, dtype):
    return jax.tree_util.tree_map(
        lambda x: x.astype(dtype) if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating) else x, tree
    )


def scaling(ns=(8, 64, 512), steps=50, repeats=3):
    """Cost per step of `sphere_grid(n)` on `ContactSweeps` (the route is forced for every n).

    Returns {"n": [...], "ms_per_step": [...], "exponent": slope of log(cost) on log(n)}.
    """
    from ..stepping import ContactSweeps

    costs = []
    for n in tqdm(ns, desc="scaling"):
        system, state = scenes.sphere_grid(n)
        f = jax.jit(lambda s, x: simulate(s, x, dt=0.01, steps=steps, step_solver=ContactSweeps()).q[-1])
        costs.append(1e3 * median_time(f, system, state, repeats=repeats) / steps)
    exponent = float(np.polyfit(np.log(ns), np.log(costs), 1)[0])
    return {"n": list(ns), "ms_per_step": costs, "exponent": exponent}


def plot_scaling(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, cost = np.array(result["n"]), np.array(result["ms_per_step"])
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ax.loglog(n, cost, "o-", label=f"jaxrbd ContactSweeps (slope {result['exponent']:.2f})")
    ax.loglog(n, cost[0] * n / n[0], "k:", label="linear")
    ax.set_xlabel("spheres n (= contacts)")
    ax.set_ylabel("ms per step")
    ax.set_title(f"sphere_grid(n), one environment, {jax.default_backend()}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _rate(x):
    return "-" if x is None else f"{x:,.0f}"


def format_rows(rows, batches=BATCHES):
    """The table: one line per (scene, simulator, dtype), with jaxrbd's step solver in the solver column."""
    width = max([len("solver"), *(len(r.get("solver", "-")) for r in rows)])
    head = (
        f"{'scene':<17} {'simulator':<12} {'dtype':<8} {'solver':<{width}} {'compile s':>9} {'steps/s':>9} "
        + " ".join(f"{'B=' + str(b):>10}" for b in batches)
        + f" {'grad/fwd':>8} {'mem MB':>7} {'thunks':>6} {'iters':>6}  answer"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        grad = f"{r['grad_over_forward']:.2f}" if "grad_over_forward" in r else ("n/a" if "grad_error" in r else "-")
        mem = f"{r['memory_bytes'] / 2**20:.1f}" if r.get("memory_bytes") else "-"
        compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else "-"
        thunks = str(r["thunks"]) if "thunks" in r else "-"
        iters = f"{r['iterations']:.2f}" if "iterations" in r else "-"
        cols = " ".join(f"{_rate(r.get('batches', {}).get(b)):>10}" for b in batches)
        lines.append(
            f"{r['scene']:<17} {r['simulator']:<12} {r['dtype']:<8} {r.get('solver', '-'):<{width}} {compile_s:>9} "
            f"{r['steps_per_s']:>9,.0f} "
            f"{cols} {grad:>8} {mem:>7} {thunks:>6} {iters:>6}  {r['answer']}"
        )
    return "\n".join(lines)


def ratios(rows, scene="sphere_grid(64)", dtype="float32", batch=4096):
    """jaxrbd's throughput over each other simulator's on one scene (single env and the batch)."""
    by = {(r["scene"], r["simulator"], r["dtype"]): r for r in rows}
    ours = by.get((scene, "jaxrbd", dtype))
    if ours is None:
        return {}
    out = {}
    for name in (*MJX_SETTINGS, "mujoco C"):
        theirs = by.get((scene, name, dtype)) or by.get((scene, name, "float64"))
        if theirs is None:
            continue
        entry = {"single": ours["steps_per_s"] / theirs["steps_per_s"]}
        if batch in theirs.get("batches", {}) and batch in ours["batches"]:
            entry["batch"] = ours["batches"][batch] / theirs["batches"][batch]
        elif name == "mujoco C" and batch in ours["batches"]:
            entry["batch"] = ours["batches"][batch] / theirs["steps_per_s"]  # one C thread
        out[name] = entry
    return out


def main(
    out=None, plot=None, cases=tuple(CASES), dtypes=("float32", "float64"), batches=BATCHES, repeats=3, scale=True
):
    """Run everything, print the tables, write JSON (and the scaling plot)."""
    import json
    import platform

    import jaxlib

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}",
        "backend": jax.default_backend(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
    }
    mj = _mujoco()
    if mj is None:
        print("mujoco / mujoco-mjx are not installed (pip install -e .[bench]): reporting jaxrbd alone")
    else:
        info["mujoco"] = mj[0].__version__
    rows = run(cases=cases, dtypes=dtypes, batches=batches, repeats=repeats)
    print(" ".join(f"{k}: {v};" for k, v in info.items()))
    print("float64 is jaxrbd's default (the tests); MJX runs in its usual float32. Batched columns: env-steps/s;")
    print("single: steps/s of one environment in a jitted lax.scan rollout of 1 s; grad/fwd: reverse-mode")
    print("gradient of that rollout over the rollout; mem: XLA's estimate for the largest batch; thunks:")
    print("XLA thunks of the step (static count, `thunk_count`); iters: mean solver iterations per step.")
    print(format_rows(rows, batches))
    for r in rows:
        if r.get("batch_converged"):
            fractions = ", ".join(f"B={b}: {f:.4f}" for b, f in r["batch_converged"].items())
            print(f"converged lane-steps, {r['scene']} {r['dtype']}: {fractions}")
    result = {"info": info, "rows": rows, "ratios": {}}
    for scene in dict.fromkeys(r["scene"] for r in rows):
        batch = max(b for b in batches if b <= 512) if scene != "sphere_grid(64)" else max(batches)
        result["ratios"][scene] = ratios(rows, scene=scene, batch=batch)
        for name, r in result["ratios"][scene].items():
            parts = ", ".join(f"{k} {v:.2f}x" for k, v in r.items())
            print(f"{scene} float32: jaxrbd / {name}: {parts} (batch B={batch})")
    if scale:
        jax.config.update("jax_enable_x64", True)
        result["scaling"] = scaling()
        s = result["scaling"]
        print(
            "scaling, sphere_grid(n) on ContactSweeps, float64: "
            + ", ".join(f"n={n}: {c:.3f} ms/step" for n, c in zip(s["n"], s["ms_per_step"]))
            + f"; fitted exponent {s['exponent']:.2f}"
        )
        if plot is not None:
            plot_scaling(s, plot)
    if out is not None:
        with open(out, "w") as f:
            json.dump(result, f, indent=1, default=float)
    return result
