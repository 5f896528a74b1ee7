"""The complementarity solvers: `SemismoothNewton` (default) and `Lemke` (exact pivoting).

A solver only knows how to find a solution; how that solution is differentiated
is decided once, in `_implicit.py`.
"""

import abc
import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._lanes import every_lane
from .._problems import LCP, natural_residual
from ._lemke import lemke_mixed
from ._newton import newton_solve, problem_scale, row_scale
from ._status import Status

POLISH_LINE_SEARCH = 8
POLISH_REGULARIZATION = 1e-4


def default_tol(dtype):
    """Convergence tolerance on the natural residual: 1e-10 in float64, 1e-5 in float32.

    Relative to the impulses where they exceed 1 (`within_tolerance`).
    """
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-5


class RawSolution(eqx.Module):
    """What a solver returns before it is wrapped: z, a status code and step counts."""

    z: jax.Array
    status: jax.Array
    iterations: jax.Array
    fallback: jax.Array


def _is_number(x):
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_count(x, least):
    """x is an integer (not a bool) >= least."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= least


def within_tolerance(residual, z, tol):
    """The convergence test: residual <= tol * max(1, max |z|).

    Absolute for impulses up to 1, relative above: the round-off in the impulses
    of heavy bodies (1000 kg at h = 0.01 carries about 100 N s) grows with them.
    The solvers still aim at the absolute tolerance; this decides `converged`.
    """
    scale = jnp.maximum(jnp.max(jnp.abs(z), axis=-1, initial=0.0), 1.0)
    return residual <= tol * scale


def _residual(problem, z):
    return natural_residual(z, problem.F(z), problem.n_free)


def _pivots(problem, left, right, max_pivots):
    """Lemke's pivoting on the LCP scaled to (L A R, L b), with z = R z' (L, R > 0 diagonal)."""
    A = left[:, None] * problem.A * right
    z, status, pivots = lemke_mixed(A, left * problem.b, problem.n_free, max_pivots)
    return RawSolution(right * z, status, pivots, jnp.array(False))


class Solver(eqx.Module):
    """A complementarity solver: finds a solution, and knows nothing of how it is differentiated.

    Attributes every solver has: `tol`, the convergence tolerance on the natural
    residual (None: by dtype, `default_tol`), relative to max |z| where that
    exceeds 1 (`within_tolerance`).
    """

    tol: eqx.AbstractVar[float | None]

    def __check_init__(self):
        tol = self.tol
        if tol is not None and not (_is_number(tol) and 0 < tol < math.inf):
            raise ValueError(f"{type(self).__name__}: tol must be None or a finite number > 0, got {tol!r}")
        least_norm = getattr(self, "least_norm", False)
        if not isinstance(least_norm, bool):
            raise TypeError(f"{type(self).__name__}: least_norm must be True or False, got {least_norm!r}")

    def tolerance(self, dtype):
        """The natural-residual tolerance: `tol`, or by dtype (`default_tol`)."""
        return self.tol if self.tol is not None else default_tol(dtype)

    @abc.abstractmethod
    def run(self, problem, z0) -> RawSolution:
        """Solve `problem` (an `LCP` or `NCP`) from z0; never differentiated."""

    def run_lanes(self, lanes) -> RawSolution:
        """Solve a batch of problems (`Lanes`): what `run` becomes under `vmap` (see `run_batched`).

        The default maps `run` over the lanes.
        """
        return lanes.map(self.run)


class Lanes:
    """A batch of (problem, z0) under `vmap`: the arrays, which of them carry the batch axis, and the rest.

    `map(f, *extra)` maps f(problem, z0, *extra) over the lanes (the extra arrays
    batched along their first axis); `take(idx)` is the batch of the lanes idx.
    """

    def __init__(self, size, dynamic, batched, static):
        self.size, self.dynamic, self.batched, self.static = size, dynamic, batched, static

    def map(self, f, *extra):
        in_axes = jax.tree_util.tree_map(lambda b: 0 if b else None, self.batched)
        call = lambda dynamic, *args: f(*eqx.combine(dynamic, self.static), *args)
        return jax.vmap(call, in_axes=(in_axes,) + (0,) * len(extra))(self.dynamic, *extra)

    def take(self, idx):
        dynamic = jax.tree_util.tree_map(lambda x, b: x[idx] if b else x, self.dynamic, self.batched)
        return Lanes(idx.shape[0], dynamic, self.batched, self.static)

    def blocks(self, block, f):
        """f(lanes) over blocks of `block` lanes, one block after another (a `lax.map`), concatenated.

        The last block is filled up with the last lane, whose extra results are dropped.
        """
        count = -(-self.size // block)
        idx = jnp.minimum(jnp.arange(count * block), self.size - 1).reshape(count, block)
        out = lax.map(lambda i: f(self.take(i)), idx)
        return jax.tree_util.tree_map(lambda x: x.reshape((count * block,) + x.shape[2:])[: self.size], out)


def run_batched(solver, problem, z0):
    """`solver.run(problem, z0)`, which under `vmap` becomes `solver.run_lanes` on the whole batch.

    A `jax.custom_batching.custom_vmap`: a solver can then give the lanes that
    need more work a pass of their own, instead of a batched loop in which every
    lane waits for the slowest (`SemismoothNewton.run_lanes`).
    """
    dynamic, static = eqx.partition((problem, z0), eqx.is_array)

    @jax.custom_batching.custom_vmap
    def call(dynamic):
        return solver.run(*eqx.combine(dynamic, static))

    @call.def_vmap
    def _rule(axis_size, in_batched, dynamic):
        batched = in_batched[0]
        raw = solver.run_lanes(Lanes(axis_size, dynamic, batched, static))
        # The batch keeps the dtypes of one lane's result (custom_vmap checks them).
        lane = jax.tree_util.tree_map(
            lambda x, b: jax.ShapeDtypeStruct(x.shape[1:], x.dtype) if b else x, dynamic, batched
        )
        one = jax.eval_shape(call.fun, lane)
        raw = jax.tree_util.tree_map(lambda x, like: x.astype(like.dtype), raw, one)
        return raw, jax.tree_util.tree_map(lambda _: True, raw)

    return call(dynamic)


class Lemke(Solver):
    """Lemke's complementary pivoting method (003 §4), the exact reference solver.

    Pivots with the lexicographic rule (no cycling on the degenerate rows of the
    friction LCP), in a `lax.while_loop` bounded by `max_pivots`; a secondary ray
    is reported as status RAY, never as a solution. Equality rows of a mixed LCP
    are eliminated first by a Schur complement. The pivoted solution is then
    polished by semismooth Newton steps while its residual is above the tolerance,
    which removes the round-off that a tableau accumulates (no step when the
    pivoting was accurate enough).

    Attributes:
        max_pivots: static bound on the pivots; default 10 n.
        polish_iterations: static bound on the Newton steps after pivoting.
        tol: convergence tolerance on the natural residual (default by dtype).
        least_norm: as `SemismoothNewton`'s.
    """

    max_pivots: int | None = eqx.field(static=True, default=None)
    polish_iterations: int = eqx.field(static=True, default=3)
    tol: float | None = eqx.field(static=True, default=None)
    least_norm: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        if self.max_pivots is not None and not _is_count(self.max_pivots, 1):
            raise ValueError(f"Lemke: max_pivots must be None or a positive integer, got {self.max_pivots!r}")
        if not _is_count(self.polish_iterations, 0):
            raise ValueError(f"Lemke: polish_iterations must be an integer >= 0, got {self.polish_iterations!r}")

    def run(self, problem, z0):
        del z0
        if not isinstance(problem, LCP):
            raise TypeError("Lemke solves linear complementarity problems only; use SemismoothNewton for an NCP")
        s = row_scale(problem.A)
        tol = self.tolerance(problem.b.dtype)
        max_pivots = self.max_pivots or 10 * problem.size
        # Pivot on LCP(d A d, d b), z = d z', d = sqrt(s): a symmetric scaling keeps
        # A's copositivity, on which Lemke's termination for the friction LCP rests
        # (a row scaling alone does not: it ended on a secondary ray at a mass ratio
        # of 1e5). Where that basis is off by round-off (a degenerate tie read the
        # other way), pivot again on the row-scaled problem, then on the unscaled
        # one, and keep the best: each ordering of the pivots has cases that only it
        # solves to 1e-10. A lane already solved hands the later runs the trivial
        # problem (A = I, b = 1), so they cost nothing for it. The three orderings are the
        # rounds of one `lax.while_loop`, so the pivoting is compiled once.
        n, ones = problem.size, jnp.ones_like(s)
        lefts, rights = jnp.stack([jnp.sqrt(s), s, ones]), jnp.stack([jnp.sqrt(s), ones, ones])

        def going(c):
            k, _, residual = c
            return (k == 0) | ((k < 3) & ~(residual <= tol))

        def ordering(c):
            k, raw, residual = c
            retry = (k == 0) | ~(residual <= tol)
            masked = LCP(
                jnp.where(retry, problem.A, jnp.eye(n, dtype=problem.A.dtype)),
                jnp.where(retry, problem.b, jnp.ones((n,), problem.b.dtype)),
                problem.n_free,
            )
            again = _pivots(masked, lefts[k], rights[k], max_pivots)
            again_residual = _residual(problem, again.z)
            better = retry & ((k == 0) | (again_residual < residual))
            raw = RawSolution(
                jnp.where(better, again.z, raw.z),
                jnp.where(better, again.status, raw.status).astype(raw.status.dtype),
                raw.iterations + jnp.where(retry, again.iterations, 0).astype(raw.iterations.dtype),
                raw.fallback,
            )
            return k + 1, raw, jnp.where(better, again_residual, residual)

        nothing = RawSolution(
            jnp.zeros((n,), s.dtype), jnp.array(int(Status.MAX_STEPS)), jnp.array(0), jnp.array(False)
        )
        _, raw, residual = lax.while_loop(going, ordering, (jnp.array(0), nothing, jnp.array(jnp.inf, s.dtype)))
        z, status, pivots = raw.z, raw.status, raw.iterations
        if self.polish_iterations:
            polished = newton_solve(
                problem,
                z,
                s,
                tol=tol,
                iterations=self.polish_iterations,
                line_search_steps=POLISH_LINE_SEARCH,
                regularization=POLISH_REGULARIZATION,
            )
            z = jnp.where(polished.residual < residual, polished.z, z)
        return RawSolution(z, status, pivots, jnp.array(False))


class SemismoothNewton(Solver):
    """Semismooth Newton on the Fischer-Burmeister reformulation, from the warm start until converged.

    phi_i(z) = z_i + s_i w_i - sqrt(z_i^2 + s_i^2 w_i^2) = 0 (equality rows:
    s_i w_i = 0), with row scaling s_i = 1 / max_j |dw_i/dz_j|. Each iteration is a
    Levenberg-Marquardt step with regularisation proportional to |phi|^2 (bounded
    steps along the non-unique multipliers) and a backtracking Armijo line search
    (`newton_solve`).

    The main path is the warm start alone: Newton runs from z0 in a `lax.while_loop`
    that stops at the tolerance, so a warm start that already solves the problem
    (most steps of a rollout) costs one residual evaluation, and a step that needs
    two iterations costs two. The friction LCP is copositive but not P, so the merit
    function has stationary points that are not solutions (reference problem P1); a lane
    that has not converged after `iterations` steps, or stalls, goes on to

      1. a cold restart from z = 0 (at most `iterations` steps, kept if better);
      2. (LCPs, `fallback=True`) `Lemke`, then a polish; on a friction LCP it
         fails on whole, on the closing contacts first (`_lemke_near_first`);
      3. where Lemke failed too, Newton again from the best point found (at most
         `iterations` steps).

    The warm start and these are the rounds of one loop around one Newton solve
    (`_newton_starts`), which makes no round beyond the first for a converged lane,
    so when every lane converged (the common case, also under `vmap`) they cost
    nothing. None of this is differentiated: gradients come from the implicit rule.

    Attributes:
        iterations: static bound on the Newton iterations per start (> 0).
        line_search_steps: static bound on the step halvings (> 0).
        regularization: factor of the Levenberg-Marquardt term (> 0).
        fallback: use Lemke on the lanes that did not converge (LCPs only).
        tol: convergence tolerance on the natural residual (default by dtype).
        lane_iterations: under `vmap`, the Newton steps every lane gets before the
            lanes still open go on alone (`run_lanes`).
        lane_chunk: under `vmap`, how many open lanes go on together.
        lane_block: under `vmap`, how many lanes are solved together; a larger
            batch is solved one block after another.
        least_norm: on a time step's friction LCP, return the least-norm solution among
            those with the solve's velocities and active rows (`_select.least_norm`): a
            flat rest then loads its corners equally whatever the warm start. It adds
            about 0.2 ms to a step of the four balls (1.7 times the rollout's time).
    """

    iterations: int = eqx.field(static=True, default=30)
    line_search_steps: int = eqx.field(static=True, default=12)
    regularization: float = eqx.field(static=True, default=1e-4)
    fallback: bool = eqx.field(static=True, default=True)
    tol: float | None = eqx.field(static=True, default=None)
    lane_iterations: int = eqx.field(static=True, default=6)
    lane_chunk: int = eqx.field(static=True, default=2)
    lane_block: int = eqx.field(static=True, default=64)
    least_norm: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        for name in ("iterations", "line_search_steps", "lane_iterations", "lane_chunk", "lane_block"):
            value = getattr(self, name)
            if not _is_count(value, 1):
                raise ValueError(f"SemismoothNewton: {name} must be a positive integer, got {value!r}")
        r = self.regularization
        if not (_is_number(r) and 0 < r < math.inf):
            raise ValueError(f"SemismoothNewton: regularization must be a finite number > 0, got {r!r}")
        if not isinstance(self.fallback, bool):
            raise TypeError(f"SemismoothNewton: fallback must be True or False, got {self.fallback!r}")

    def _newton_options(self, dtype, iterations):
        """The keyword arguments of `newton_solve` for this solver, with at most `iterations` steps."""
        return dict(
            tol=self.tolerance(dtype),
            iterations=iterations,
            line_search_steps=self.line_search_steps,
            regularization=self.regularization,
        )

    def run(self, problem, z0):
        options = self._newton_options(z0.dtype, self.iterations)
        return _newton_starts(problem, z0, options, lemke=self.fallback and isinstance(problem, LCP))

    def run_lanes(self, lanes):
        """The batch: `lane_iterations` Newton steps on every lane, then the open lanes on their own.

        Every lane starts from its warm start with at most `lane_iterations` steps
        (a batched loop that ends when every lane converged or reached the bound).
        The lanes that did not converge go on, `lane_chunk` at a time, through `run`
        (Newton from where they stopped, the cold restart, Lemke), in a loop that
        makes no trip when every lane converged: the batch does not wait for its
        slowest lane at every Newton step. A batch larger than `lane_block` does this
        block by block: each block waits only for its own slowest lane, and its
        matrices stay in cache. Lemke pivots only in the rounds where a lane of the
        chunk needs it (a pass of Lemke over the whole batch pivots every lane's tableau:
        Gymnasium's humanoid (418 rows) at 64 lanes over its landing (0.2 s, 4
        lane-steps on Lemke) ran 124 env-steps/s and 431 with the failed lanes
        alone, `cube_toss` at 512 lanes (float64, 100 steps) 1,015 and 5,848).

        The defaults come from the benchmark batches (float32, 20 steps in contact,
        512 lanes): 85% of the four balls' lane-steps took at most 6 iterations (most
        5 or 6), 90% of the incline's at most 6 (most 2). Against one batched loop to
        the slowest lane, four balls ran 2.5x (64 lanes) and 7.4x (512 lanes) faster.
        The open lanes are few and their steps differ in number, so they go on two at a
        time: four balls at 512 lanes, blocks of 32 and 16 open lanes together 3,908
        env-steps/s, blocks of 64 and 2 together 4,921; the incline 38,662 and 37,836.
        """
        if lanes.size > self.lane_block:
            return lanes.blocks(self.lane_block, self._block)
        return self._block(lanes)

    def _block(self, lanes):
        """`run_lanes` on one block: the first steps on every lane, then `run` on the open lanes, `lane_chunk` at a time."""
        options = self._newton_options(lanes.dynamic[1].dtype, min(self.lane_iterations, self.iterations))
        tol = options["tol"]
        first = lambda problem, z0: newton_solve(problem, z0, problem_scale(problem, z0), hand_over=False, **options)
        warm = lanes.map(first)
        open_ = warm.capped | ~(warm.residual <= tol)

        def more(sub, idx):
            out = sub.map(lambda problem, _, z: self.run(problem, z), warm.z[idx])
            return RawSolution(out.z, out.status, warm.iterations[idx] + out.iterations, out.fallback)

        status = jnp.full((lanes.size,), Status.SUCCESS, jnp.int32)
        start = RawSolution(warm.z, status, warm.iterations, jnp.zeros((lanes.size,), bool))
        return _each_open(lanes, open_, self.lane_chunk, more, start)


def _each_open(lanes, open_, chunk, solve, raw):
    """`raw` with the lanes where `open_` replaced by solve(lanes.take(idx), idx), `chunk` lanes at a time.

    A `lax.while_loop` over the open lanes only (none: no trip), so a batch pays for the few lanes that need
    more work, not for all of them. Slots past the last open lane hold a closed lane, and their results are
    dropped.
    """
    size = lanes.size
    count = jnp.sum(open_)
    chunk = min(size, chunk)
    order = jnp.argsort(~open_, stable=True)  # the open lanes first
    spare = order[size - 1]  # a closed lane, if any, fills the slots past the open ones

    def body(c):
        i, raw = c
        position = i * chunk + jnp.arange(chunk)
        valid = position < count
        idx = jnp.where(valid, order[jnp.minimum(position, size - 1)], spare)
        out = solve(lanes.take(idx), idx)
        target = jnp.where(valid, idx, size)  # out of range: dropped
        return i + 1, jax.tree_util.tree_map(lambda x, y: x.at[target].set(y.astype(x.dtype), mode="drop"), raw, out)

    return lax.while_loop(lambda c: c[0] * chunk < count, body, (jnp.array(0), raw))[1]


# The starts of `SemismoothNewton`'s Newton runs, in the order it tries them.
WARM, COLD, LEMKE = 0, 1, 2


def _finite(residual):
    """A NaN residual as inf, so that any finite one compares better."""
    return jnp.where(jnp.isnan(residual), jnp.inf, residual)


def _newton_starts(problem, z0, options, *, lemke):
    """Newton (`newton_solve` with `options`) from each start in turn until converged: WARM, COLD, LEMKE.

    The starts: WARM, z0; COLD, z = 0; LEMKE (if `lemke`), `Lemke`'s solution (on a friction
    LCP that it fails on whole, on the closing contacts first: `_lemke_near_first`) where it
    lowers the residual. Each run is kept where it lowers the residual of the best point so
    far. A lane that Lemke leaves unsolved as well (its tableau's round-off on a badly scaled
    problem: a 1 g box beside a 32 kg one, condition number 3e23, ended on a secondary ray
    scaled or not) goes on with Newton from the best point found, for as many steps again:
    that problem took 55 steps, two starts of 30 stopping short.

    The starts are the rounds of one `lax.while_loop` with one `newton_solve` in its body, so
    the Newton iteration is compiled once for all of them. The loop makes no round once the
    lane has converged (in the common case, after the warm start). Under `vmap` a converged
    lane makes no step in a round, and Lemke pivots only in the rounds where some lane is at
    its LEMKE start (`every_lane`); the other lanes hand it the trivial problem.

    Returns:
        A `RawSolution` whose `fallback` says whether Lemke ran.
    """
    tol = options["tol"]
    cold = jnp.zeros_like(z0)
    s = problem_scale(problem, cold)
    last = LEMKE if lemke else COLD

    def going(c):
        k, _, residual, *_ = c
        return (k <= last) & ~(residual <= tol)

    def pivot(z, residual, run):
        lemke_z, status, pivots = _lemke_near_first(problem, run, tol)
        lemke_residual = _finite(_residual(problem, lemke_z))
        better = run & (lemke_residual < residual)
        return jnp.where(better, lemke_z, z), jnp.where(better, lemke_residual, residual), status, pivots

    def no_pivot(z, residual, run):
        return z, residual, jnp.array(int(Status.MAX_STEPS)), jnp.array(0)

    def body(c):
        k, z, residual, status, iterations, lemke_ran = c
        if lemke:
            run = (k == LEMKE) & ~(residual <= tol)
            z, residual, lemke_status, pivots = lax.cond(every_lane(~run), no_pivot, pivot, z, residual, run)
            status = jnp.where(run, lemke_status, status).astype(status.dtype)
            iterations = (iterations + jnp.where(run, pivots, 0)).astype(iterations.dtype)
            lemke_ran = lemke_ran | run
        start = jnp.where(k == WARM, z0, jnp.where(k == COLD, cold, z))
        out = newton_solve(problem, start, s, run=~(residual <= tol), **options)
        better = _finite(out.residual) < residual
        return (
            k + 1,
            jnp.where(better, out.z, z),
            jnp.where(better, _finite(out.residual), residual),
            status,
            (iterations + out.iterations).astype(iterations.dtype),
            lemke_ran,
        )

    inf, failed = jnp.array(jnp.inf, z0.dtype), jnp.array(int(Status.MAX_STEPS))
    start = (jnp.array(WARM), z0, inf, failed, jnp.array(0), jnp.array(False))
    _, z, residual, status, iterations, lemke_ran = lax.while_loop(going, body, start)
    status = jnp.where(residual <= tol, int(Status.SUCCESS), status)
    return RawSolution(z, status, iterations, lemke_ran)


NEAR_FIRST_ROUNDS = 3


def _lemke_near_first(problem, run, tol):
    """(z, status, pivots): `Lemke` on the LCP where `run`; on a friction LCP it fails on, on the closing contacts.

    Found on a `box_stack` step (Stewart-Trinkle, 300 rows, condition number 7e22):
    Newton stalled at 1.9e-4 and Lemke ended on a secondary ray, but the same
    problem restricted to the 11 of its 30 contacts within 1 cm solved to 5e-13.
    A contact that no impulse closes carries none: its normal and friction
    impulses are 0, and its cone multiplier is the least that keeps its friction
    rows nonnegative, max(0, -min_k w_k) (its cone row is then 0; it enters no
    other row). Its rows in the problem only add degenerate pivots (the friction
    rows tied at their minimum) whose round-off the tableau accumulates.

    So where Lemke fails on the whole problem (`LCP.counts` gives the layout),
    it runs again on the contacts that the free motion closes (normal offset
    b_n <= 0), the others completed as above; then on those and every contact
    the last solution penetrates (w_n < 0), up to NEAR_FIRST_ROUNDS rounds. A
    `lax.while_loop` with one Lemke in its body, kept per lane only where it
    lowers the residual; no trip beyond the first when no lane needs one.
    """
    n, n_free, dtype = problem.size, problem.n_free, problem.b.dtype
    eye, ones = jnp.eye(n, dtype=dtype), jnp.ones((n,), dtype)
    counts = problem.counts or None
    if counts is None:  # one round, on the whole problem
        rows_of = lambda contacts: jnp.ones((n,), bool)
        complete = lambda z, contacts: z
        penetrated = lambda z, contacts: contacts  # (0,): no contacts
        closing = jnp.zeros((0,), bool)
    else:
        nc, nd = len(counts), sum(counts)
        normal = n_free + jnp.arange(nc)
        friction, cone = n_free + nc + jnp.arange(nd), n_free + nc + nd + jnp.arange(nc)
        owner = jnp.asarray(np.repeat(np.arange(nc), counts))  # the contact of each friction row

        def rows_of(contacts):  # the rows of the contacts in, and the equalities
            rows = jnp.ones((n,), bool).at[normal].set(contacts)
            return rows.at[friction].set(contacts[owner]).at[cone].set(contacts)

        def complete(z, contacts):  # the cone multipliers of the contacts left out
            least = jnp.maximum(-jax.ops.segment_min(problem.F(z)[friction], owner, num_segments=nc), 0.0)
            return z.at[cone].set(jnp.where(contacts, z[cone], least))

        penetrated = lambda z, contacts: ~contacts & (problem.F(z)[normal] < 0)
        closing = problem.b[normal] <= 0

    def needed(state):
        k, _, grew, _, residual, *_ = state
        return (k == 0) | ((k <= NEAR_FIRST_ROUNDS) & jnp.any(run & grew & ~(residual <= tol)))

    def body(state):  # round 0: the whole problem (every contact in); then the contacts in
        k, contacts, _, best, residual, status, pivots = state
        keep = run & rows_of(contacts)
        masked = LCP(jnp.where(keep[:, None] & keep[None, :], problem.A, eye), jnp.where(keep, problem.b, ones), n_free)
        out = Lemke().run(masked, jnp.zeros((n,), dtype))
        z = complete(out.z, contacts)
        r = _residual(problem, z)
        better = run & (r < residual)
        added = penetrated(z, contacts)
        return (
            k + 1,
            jnp.where(k == 0, closing, contacts | added),
            jnp.where(k == 0, ~jnp.all(closing), jnp.any(added)),
            jnp.where(better, z, best),
            jnp.where(better, r, residual),
            jnp.where(better, out.status, status).astype(status.dtype),
            (pivots + jnp.where(run, out.iterations, 0)).astype(pivots.dtype),
        )

    start = (
        jnp.array(0),
        jnp.ones_like(closing),
        jnp.array(False),
        jnp.zeros((n,), dtype),
        jnp.array(jnp.inf, dtype),
        jnp.array(int(Status.MAX_STEPS)),
        jnp.array(0),
    )
    _, _, _, z, _, status, pivots = lax.while_loop(needed, body, start)
    return z, status, pivots
