"""Block Gauss-Seidel over contacts: a step whose cost grows linearly with the scene.

The dense step assembles the whole friction LCP, nc (k + 2) rows, and factors it
in every Newton iteration: cubic in the number of contacts. In a scene of rigid
bodies a contact couples only the two bodies it touches (000 §2.4), so the LCP
matrix A = K^T J M^{-1} J^T K + L is sparse: its block (c, c') is non-zero only
when contacts c and c' share a moving body. `ContactSweeps` exploits that:

- M is block diagonal; its 6 x 6 inverse blocks are formed once per step and
  reused by every sweep and by the backward pass;
- the contacts are coloured once, at trace time, so that no two contacts of a
  colour share a moving body (greedy colouring of the static contact graph);
- a sweep visits the colours in order. The contacts of a colour solve their own
  (k + 2)-row LCP at once (`vmap`), with the other contacts' impulses frozen in
  the body velocities, by semismooth Newton (`SemismoothNewton`, Lemke fallback),
  and write their impulse increments back to the velocities of their bodies.
  This is the nonsmooth (projected) block Gauss-Seidel method; a sweep costs
  O(nc + nb), and a scene whose contacts touch disjoint bodies (a grid of balls
  on a table) is solved exactly by one sweep; coupled contacts take rounds of
  sweeps until the step's residual reaches the tolerance (`max_sweeps`);
- with a broad phase (`jaxrbd.BroadPhase`) the contact slots' bodies are traced,
  so the slots are coloured in every step (`color_slots`), sorted by colour once
  a sweep, and each colour pass solves nb lanes, masked (`Blocks.over_colors`);
- the gradient comes from the implicit rule of every complementarity solve
  (`jaxrbd.complementarity.implicit_solve`) with its own `Adjoint`: the
  transposed Newton system (d phi / dz)^T u = z_bar is solved by the same
  coloured block Gauss-Seidel sweeps, each diagonal block by its
  pseudo-inverse, applying A^T matrix-free (a `vjp` of the sparse w(z)).

The step reads the contact record (`System.contacts`, per-body rows) and the
shared dynamics (`jaxrbd.dynamics`) like the dense step.

Every step reports the natural residual of the whole LCP, evaluated sparsely.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import dynamics
from .._lanes import every_lane
from .._problems import LCP, inverse_row_sizes, natural_residual
from .._small import inv3, matmul, matvec
from .._validate import check_value
from ..bodies import Tree
from ..bodies._model import free_body_motion
from ..complementarity import Adjoint, SemismoothNewton, implicit_solve, within_tolerance
from ..complementarity._fb import fischer_burmeister_partials
from ..complementarity._implicit import ADJOINT_EPS_POWER, PINV_RTOL_FACTOR, biactive_branches, min_norm_lstsq
from ..complementarity._solvers import default_tol
from ..cones import PolyhedralCone
from ..model import State
from ._coloring import color_contacts, color_slots
from ._dense import step_active
from ._local import enumerate_contact
from ._solver import StepSolver
from ._types import ContactImpulses, StepStats

# The dense LCP size above which `simulate` picks `ContactSweeps` by itself for a
# scene of rigid bodies whose contacts share no moving body, where one sweep is
# exact (a contact has 10 rows: sphere_grid(4) has 40, sphere_grid(64) 640). Both
# give the same answer there; `benchmarks/bench_auto_size.py` (float64, at rest, ms a
# step, dense against sweeps): 10, 20 and 40 rows 0.01-0.02 against 0.01; 90 rows
# 0.13 against 0.02, 160 rows 0.49 against 0.02, 250 rows 1.23 against 0.04.
AUTO_SIZE = 40
# The same where contacts share bodies (a box on the table, a stack, a pile): there
# Gauss-Seidel needs rounds of sweeps, more the longer the chains of coupled
# contacts, and the dense step stays ahead to larger sizes. Measured with
# `benchmarks/bench_auto_size.py` (2-core CPU, float64, Stewart-Trinkle, resting
# stacks): box_stack(5), 360 rows, dense 3.2 ms a step against 20; box_stack(10),
# 760 rows, 43 against 96; box_stack(14), 1,080 rows, 95 against 622. A tall stack
# is the sweeps' worst case; beyond 1,000 rows the dense step's cubic cost (0.1 s
# a step there) is what bounds it, and shorter chains favour the sweeps.
AUTO_SIZE_COUPLED = 1000
# Gauss-Seidel sweeps per step when contacts share bodies; one sweep is exact when they do not.
COUPLED_SWEEPS = 100
# The largest step problem (rows) that `ContactSweeps.dense_fallback` solves densely. Its cost
# is that of the dense step at that size and more: each Newton iteration factors the whole
# matrix (cubic), and Lemke may pivot up to 10 n times over an n x 2n tableau. Measured on
# MuJoCo's `boxpile.xml` (29 boxes, 244 contacts, 2,440 rows): 10 steps took 198 s, most of it
# the first step's dense fallback; `stonehenge.xml` at 7,460 rows used 10 GB and did not finish
# compiling in 10 minutes. At 1,080 rows the dense step takes about 0.1 s (`AUTO_SIZE_COUPLED`).
DENSE_FALLBACK_ROWS = 1200
# Refinements of the adjoint's block solve (`_block_solver`) against B^T. Its regularization
# eps^ADJOINT_EPS_POWER leaves a relative error of about eps^(2/3) times the block's
# sensitivity; one refinement squares that, to eps^(4/3), below the round-off. The second,
# which the dense adjoint takes, was 4% of a sphere_grid gradient and changed nothing there.
BLOCK_REFINEMENTS = 1


class ContactSweeps(StepSolver):
    """The sparse solver for scenes of rigid bodies: block Gauss-Seidel sweeps over contacts.

    Pass it as `simulate(..., step_solver=ContactSweeps())`; `simulate` also picks it
    by itself when a body scene's dense LCP has more rows than `auto_size` says
    (`choose_solver`). It supports 3D scenes built by `SceneBuilder` with the
    polyhedral cone, the Stewart-Trinkle (linearized) and Anitescu-Potra schemes,
    no joints and no impact law (`supports` says why not; `simulate` raises a
    ValueError naming the option).

    Attributes:
        sweeps: static number of Gauss-Seidel sweeps per step (forward and adjoint);
            None: one when no two contacts share a moving body (then one sweep is
            exact), else `COUPLED_SWEEPS`. When contacts share bodies and the
            step's residual is still above `tol` after them, further rounds of as
            many sweeps run, up to `max_sweeps` in all (a pile of balls needs
            about 300); the backward pass runs as many adjoint sweeps.
        max_sweeps: the most sweeps of a step.
        iterations: static semismooth Newton iterations of each contact's LCP per
            sweep, for cones whose directions are not a regular polygon; a regular
            polygon (`PolyhedralCone(k)`) is solved exactly (`enumerate_contact`).
        fallback: solve a contact's LCP by Lemke when Newton leaves it above `tol`.
        dense_fallback: solve a step that the sweeps leave above `tol` once more as
            one dense LCP by `SemismoothNewton` (with its Lemke fallback); block
            Gauss-Seidel stalls on coupled stacks with mass ratios of 1e4 and
            more. It costs nothing in a step whose sweeps converged. Its gradient
            still comes from the adjoint sweeps (as many as the forward ran),
            accurate only as far as they converge.
        dense_rows: the largest step problem (nc (k + 2) rows) that the dense
            fallback takes (`DENSE_FALLBACK_ROWS`); a larger one is never assembled
            densely, and a step its sweeps leave above `tol` is reported as not
            converged (`StepStats.converged`, with its residual).
        tol: convergence tolerance of the step's natural residual (default by dtype).
    """

    sweeps: int | None = eqx.field(static=True, default=None)
    max_sweeps: int = eqx.field(static=True, default=1000)
    iterations: int = eqx.field(static=True, default=6)
    fallback: bool = eqx.field(static=True, default=True)
    dense_fallback: bool = eqx.field(static=True, default=True)
    dense_rows: int = eqx.field(static=True, default=DENSE_FALLBACK_ROWS)
    tol: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        for name in ("sweeps", "max_sweeps", "iterations", "dense_rows"):
            value = getattr(self, name)
            if value is None and name == "sweeps":
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ContactSweeps: {name} must be a positive integer, got {value!r}")
        for name in ("fallback", "dense_fallback"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"ContactSweeps: {name} must be a bool, got {getattr(self, name)!r}")
        if self.tol is not None:
            check_value("ContactSweeps: tol", self.tol, positive=True)

    @property
    def local(self):
        return SemismoothNewton(iterations=self.iterations, fallback=self.fallback)

    @property
    def name(self):
        return "ContactSweeps"

    def supports(self, system, options):
        scheme, cone = options.scheme, options.cone
        model = system.bodies
        if model is None:
            return "it needs a scene of rigid bodies built by jaxrbd.SceneBuilder (system.bodies is None)"
        if isinstance(model, Tree):
            return (
                "it sweeps free bodies, and a kinematic tree (jaxrbd.bodies.Tree) couples all of its contacts "
                "through M(q)^-1; use the dense SemismoothNewton"
            )
        if scheme.compliance:
            return "it solves rigid normal rows (the scheme's compliance is 0); use the dense SemismoothNewton"
        if model.dim != 3:
            return "it supports 3D scenes only (this one is planar)"
        if model.joints:
            return "it does not support joints; use the dense SemismoothNewton"
        if model.body_damping:
            return "it does not support free-body dampers (set_body_damping); use the dense SemismoothNewton"
        if not model.groups:
            return "the scene has no contact pairs, so there is nothing to sweep; use the dense SemismoothNewton"
        if not isinstance(cone, PolyhedralCone) or cone.dim != 2:
            return f"it supports the polyhedral cone in (t, o) only, got {type(cone).__name__}"
        if options.impact is not None:
            return "it does not support an impact law (impact must be None)"
        if options.grad_smoothing:
            return "grad_smoothing must be 0"
        if scheme.fixed_point_iterations:
            return "it supports the linearized Stewart-Trinkle scheme only (fixed_point_iterations=0)"
        if scheme.projects:
            return "it does not support AnitescuPotra(project=True)"
        return None

    def auto_size(self, system):
        """The dense size above which `choose_solver` picks this solver for `system` (a scene it supports):
        `AUTO_SIZE` when no two contacts share a moving body, else `AUTO_SIZE_COUPLED` (also with a broad
        phase, whose slots' bodies change with q)."""
        model = system.bodies
        uncoupled = not model.dynamic and len(_colors(model)) == 1
        return AUTO_SIZE if uncoupled else AUTO_SIZE_COUPLED

    def init(self, system, state, cone):
        return jnp.zeros((system.ncontacts(state.q), cone.k + 2), state.q.dtype)

    def step(self, system, state, z, options):
        """One step by block Gauss-Seidel sweeps: (next state, z (nc, k + 2), impulses, stats).

        The impact law and grad_smoothing are refused by `supports`; project_joints has no effect (no joints).
        """
        dt, scheme, cone = options.dt, options.scheme, options.cone
        model = system.bodies
        t, q, v = state.t, state.q, state.v
        nb, dtype = model.nbodies, q.dtype
        contacts = system.contacts(q)
        motion = free_body_motion(system, t, q, v, dt)
        active = step_active(system, contacts, q, v, dt, scheme.delta)
        a, b = contacts.body_a, contacts.body_b
        n_a, n_b = contacts.blocks[:, 0, 0], contacts.blocks[:, 1, 0]  # (nc, 6): the normal row on bodies a and b
        gap = contacts.gap + jnp.sum(n_a * motion.shift[a] + n_b * motion.shift[b], -1)  # at q0 (`FreeMotion.shift`)
        bn = gap / dt if scheme.position_level else jnp.zeros_like(gap)
        mu = contacts.mu.astype(dtype)
        K, L = cone.contact_maps(mu, active.astype(dtype))
        S = cone.scaled_directions(contacts.size, dtype)
        blocks = Blocks(
            J_a=contacts.blocks[:, 0, :3],
            J_b=contacts.blocks[:, 1, :3],
            Minv=motion.Minv,
            v_free=motion.v_free,
            K=K,
            L=L,
            bn=bn,
            active=jax.lax.stop_gradient(active.astype(dtype)),
            mu=mu,
            S=S if cone.regular else None,
            a=a,
            b=b,
            color=color_slots(contacts.body_a, contacts.body_b, nb) if model.dynamic else None,
            colors=None if model.dynamic else _colors(model),
            moving=tuple(
                side for side, k in (("a", a), ("b", b)) if not (isinstance(k, np.ndarray) and np.all(k == nb))
            ),
            spans=tuple(
                (side, int(k[0]), int(k[0]) + k.size)
                for side, k in (("a", a), ("b", b))
                if isinstance(k, np.ndarray) and k.size and np.array_equal(k, k[0] + np.arange(k.size))
            ),
        )
        z, residual, converged, fallback, sweeps = solve_blocks(blocks, z, self)
        v_next = blocks.velocity(z)[:nb].reshape(-1)
        q_next = dynamics.integrate(system, motion.q0, v_next, dt)
        impulses = ContactImpulses(
            normal=z[:, 0],
            friction=matvec(jnp.swapaxes(S, -1, -2), z[:, 1:-1]),
            moment=jnp.zeros((contacts.size,), dtype),
            joint=jnp.zeros((0,), dtype),
        )
        stats = StepStats(
            residual=residual,
            converged=converged & motion.solved,
            fallback=fallback,
            iterations=sweeps,
            active=active,
            joint_violation=jnp.zeros((), dtype),
            overflow=contacts.overflow,
        )
        return State(t + dt, q_next, v_next), z, impulses, stats


class Blocks(eqx.Module):
    """The sparse step problem: w(z) per contact, z (nc, m) = [c_n, beta (k), lam] per contact.

    Attributes:
        J_a, J_b: (nc, 3, 6) the rows (n, t, o) of each contact on bodies a and b.
        Minv: (nb + 1, 6, 6) inverse mass blocks; the world's is zero.
        v_free: (nb + 1, 6) the velocities at the end of the step without contact.
        K: (nc, 3, m) the map from z to the impulse (c_n, c_t, c_o); zero when inactive.
        L: (nc, m, m) the lam column and the cone row mu c_n - sum beta.
        bn: (nc,) the offset of the normal rows.
        active: (nc,) 1.0 for a contact in the step, 0.0 for one masked out.
        mu: (nc,) friction coefficients.
        S: (nc, k, 2) the scaled directions s_i = (e_t u_i1, e_o u_i2) when they form
            a regular polygon (the exact local solver `enumerate_contact`); None
            for other direction sets (local semismooth Newton).
        a, b: (nc,) body indices of each contact (from the contact record).
        color: (nc,) int colour of each contact (`color_slots`) when the bodies
            are traced; None for a static layout.
        colors: the static colouring (`color_contacts`), or None when `color` is used.
        moving: the sides ("a", "b") whose body is not the world in every contact (a static
            layout's table is one side of all its contacts: its terms are zero and left out).
        spans: (side, start, stop) for each side whose bodies are, contact by contact, the
            consecutive bodies start, ..., stop - 1 in a static layout (sphere_grid's balls):
            there the per-body values of every contact are a slice and the impulses a pad,
            not a gather and a scatter.
    """

    J_a: jax.Array
    J_b: jax.Array
    Minv: jax.Array
    v_free: jax.Array
    K: jax.Array
    L: jax.Array
    bn: jax.Array
    active: jax.Array
    mu: jax.Array
    S: jax.Array | None
    a: jax.Array
    b: jax.Array
    color: jax.Array | None
    colors: tuple | None = eqx.field(static=True)
    moving: tuple = eqx.field(static=True, default=("a", "b"))
    spans: tuple = eqx.field(static=True, default=())

    @property
    def uncoupled(self):
        """A static layout of one colour: no two contacts share a moving body, so A is block diagonal."""
        return self.colors is not None and len(self.colors) == 1

    def over_colors(self, fn, carry):
        """carry through fn(carry, idx, mask) once per colour, in order.

        Static colouring: idx indexes the colour's contacts (all of them: `slice(None)`) and mask is None.
        Traced colours: idx (cap,) indexes the colour's contacts in chunks of
        cap, the number of moving bodies (the most a colour can hold, as its
        contacts touch distinct moving bodies), and mask (cap,) marks the lanes
        that hold one; the others index nc, past the end: a gather clamps it and
        a scatter drops it, and fn must keep their values. A pass costs O(nb),
        not O(nc).
        """
        if self.colors is not None:
            if self.uncoupled:  # every contact (a gather and a scatter saved)
                return fn(carry, slice(None), None)
            for color in self.colors:
                carry = fn(carry, np.array(color), None)
            return carry
        nc = self.color.shape[0]
        cap = min(nc, self.v_free.shape[0] - 1)
        lanes = jnp.arange(cap)
        order = jnp.argsort(self.color, stable=True)  # the contacts, colour by colour
        end = jnp.cumsum(jnp.zeros(nc, jnp.int32).at[self.color].add(1))  # past each colour's last

        def one_color(k, carry):
            def chunk(start_carry):  # one chunk, unless colours overflowed MAX_COLORS
                start, carry = start_carry
                p = start + lanes
                inside = p < end[k]
                return start + cap, fn(carry, jnp.where(inside, order[jnp.minimum(p, nc - 1)], nc), inside)

            start = jnp.where(k > 0, end[k - 1], 0)
            return jax.lax.while_loop(lambda state: state[0] < end[k], chunk, (start, carry))[1]

        return jax.lax.fori_loop(0, jnp.max(self.color) + 1, one_color, carry)

    def _sides(self, idx=slice(None)):
        """[(J (len(idx), 3, 6), bodies)] of the contacts idx, for each side in `moving`; bodies indexes the
        per-body arrays: a (len(idx),) array, or a slice (`spans`) when idx is every contact."""
        spans = {side: slice(start, stop) for side, start, stop in self.spans}
        every = isinstance(idx, slice) and idx == slice(None)
        return [
            (getattr(self, "J_" + side)[idx], spans[side] if every and side in spans else getattr(self, side)[idx])
            for side in self.moving
        ]

    def velocity(self, z):
        """(nb + 1, 6) the body velocities v+ = v_free + M^{-1} J^T K z."""
        return self.v_free + self._apply(matvec(self.K, z))

    def _apply(self, p, idx=slice(None)):
        """M^{-1} J^T p per body, for impulses p (len(idx), 3) in (n, t, o) of the contacts idx."""
        impulse = jnp.zeros_like(self.v_free)
        for J, k in self._sides(idx):
            per_contact = matvec(jnp.swapaxes(J, -1, -2), p)
            if isinstance(k, slice):
                impulse = impulse + jnp.pad(per_contact, ((k.start, impulse.shape[0] - k.stop), (0, 0)))
            else:
                impulse = impulse.at[k].add(per_contact)
        return matvec(self.Minv, impulse)

    def rows(self, v, idx=slice(None)):
        """(nc, 3) J v: the relative velocity of the contacts in (n, t, o)."""
        return sum(matvec(J, v[k]) for J, k in self._sides(idx))

    def _local(self, w, z, idx=slice(None)):
        """w completed by the cone rows and the offset; masked contacts get w = z + 1."""
        K, L, act = self.K[idx], self.L[idx], self.active[idx][:, None]
        w = matvec(jnp.swapaxes(K, -1, -2), w) + matvec(L, z)
        w = w.at[:, 0].add(self.bn[idx])
        return act * w + (1.0 - act) * (z + 1.0)

    def F(self, z):
        """(nc, m) w = A z + b, applied sparsely."""
        return self._local(self.rows(self.velocity(z)), z)

    def delassus(self):
        """(nc, 3, 3) the diagonal blocks J_c M^{-1} J_c^T of the Delassus operator."""
        return sum(matmul(matmul(J, self.Minv[k]), jnp.swapaxes(J, -1, -2)) for J, k in self._sides())

    def diagonal(self, W):
        """(nc, m, m) the diagonal blocks of A (identity for a masked contact)."""
        A = matmul(matmul(jnp.swapaxes(self.K, -1, -2), W), self.K) + self.L
        act = self.active[:, None, None]
        return act * A + (1.0 - act) * jnp.eye(A.shape[-1], dtype=A.dtype)


def _sweep_count(blocks, solver):
    """The static number of sweeps: the solver's, else one when no two contacts share a body."""
    if solver.sweeps is not None:
        return solver.sweeps
    return 1 if blocks.uncoupled else COUPLED_SWEEPS


def _gauss_seidel(blocks, z, solver):
    """Coloured block Gauss-Seidel sweeps from z, in rounds of `_sweep_count`.

    Returns (z, any Lemke fallback, the number of rounds).
    """
    W = blocks.delassus()
    sweeps = _sweep_count(blocks, solver)
    if blocks.S is not None:
        exact = jax.vmap(enumerate_contact)

        def local(free, zc, idx):
            z_new, _ = exact(W[idx], free.at[:, 0].add(blocks.bn[idx]), blocks.mu[idx], blocks.S[idx])
            return z_new * blocks.active[idx][:, None], jnp.zeros((), bool)  # a masked contact's solution is 0
    else:
        newton = jax.vmap(solver.local.run)
        A = blocks.diagonal(W)

        def local(free, zc, idx):
            raw = newton(LCP(A[idx], blocks._local(free, jnp.zeros_like(zc), idx)), zc)
            return raw.z, jnp.any(raw.fallback)

    def solve_color(carry, idx, mask):
        v, z, fallback = carry
        zc = z[idx]
        free = blocks.rows(v, idx) - matvec(W[idx], matvec(blocks.K[idx], zc))  # without the contact's own impulse
        z_new, used_fallback = local(free, zc, idx)
        if mask is not None:
            z_new = jnp.where(mask[:, None], z_new, zc)
        dp = matvec(blocks.K[idx], z_new - zc)  # only the colour's contacts: O(colour + nb)
        return v + blocks._apply(dp, idx), z.at[idx].set(z_new), fallback | used_fallback

    def sweep(carry, _):
        return blocks.over_colors(solve_color, carry), None

    def rounds(carry):
        return jax.lax.scan(sweep, carry, None, length=sweeps)[0]

    carry = rounds((blocks.velocity(z), z, jnp.array(False)))
    if blocks.uncoupled:  # one sweep is exact
        return carry[1], carry[2], jnp.ones((), jnp.int32)
    # Coupled contacts: more rounds of `sweeps` until the step's residual reaches the
    # tolerance (a pile converges more slowly than a line of balls). This loop is never
    # differentiated: the backward pass runs the same number of adjoint sweeps.
    tol = solver.tol if solver.tol is not None else default_tol(z.dtype)
    limit = max(solver.max_sweeps // sweeps, 1)

    def unsolved(state):
        (_, z, _), n = state
        return (n < limit) & ~within_tolerance(
            natural_residual(z.reshape(-1), blocks.F(z).reshape(-1)), z.reshape(-1), tol
        )

    carry, n = jax.lax.while_loop(unsolved, lambda state: (rounds(state[0]), state[1] + 1), (carry, jnp.int32(1)))
    if not solver.dense_fallback or z.size > solver.dense_rows:
        return carry[1], carry[2], n
    z, fallback = carry[1], carry[2]
    return (*_dense_fallback(blocks, z, fallback, tol), n)


def _dense_fallback(blocks, z, fallback, tol):
    """A step the sweeps leave above `tol`, solved once more as one dense LCP; (z, fallback).

    Block Gauss-Seidel stalls on coupled stacks with mass ratios of 1e4 and more,
    where `SemismoothNewton` (Newton from the sweeps' point, then Lemke, then
    Newton from the best point) still solves the dense friction LCP; Lemke alone
    ended on a ray in a hostile draw (Stewart-Trinkle, `mixed6`). A loop of at
    most one trip: none when the sweeps converged, also under `vmap` when every
    lane did. Kept only if it lowers the residual.
    """
    shape = z.shape
    F = lambda x: blocks.F(x.reshape(shape)).reshape(-1)  # affine: w = A z + b
    residual = lambda x: natural_residual(x, F(x))

    def needed(state):
        z, _, tried = state
        return ~tried & ~within_tolerance(residual(z), z, tol)

    def solve(state):
        A, b, (z, fallback, _) = _dense_lcp(blocks, shape, state)
        dense = SemismoothNewton(tol=tol).run(LCP(A, b), z).z
        better = residual(dense) < residual(z)
        return jnp.where(better, dense, z), fallback | better, jnp.array(True)

    z, fallback, _ = jax.lax.while_loop(needed, solve, (z.reshape(-1), fallback, jnp.array(False)))
    return z.reshape(shape), fallback


def _dense_lcp(blocks, shape, state):
    """(A, b, state): the step's LCP w = A z + b (z of `shape`, flattened) assembled densely from the sparse F.

    Called in the body of a loop whose state is `state`.

    The barrier ties the assembly to the loop's state: A does not depend on it, and
    XLA would otherwise hoist the assembly out of the loop into every step.
    """
    n, dtype = int(np.prod(shape)), jax.tree_util.tree_leaves(state)[0].dtype
    basis, state = jax.lax.optimization_barrier((jnp.eye(n, dtype=dtype), state))
    F = lambda z: blocks.F(z.reshape(shape)).reshape(-1)
    b = F(jnp.zeros((n,), dtype))
    return jax.vmap(lambda e: F(e) - b, out_axes=1)(basis), b, state


class SweepResult(eqx.Module):
    """The forward sweeps' result: z (nc, m), whether a local Lemke fallback ran, the rounds of sweeps."""

    z: jax.Array
    fallback: jax.Array
    rounds: jax.Array


class SweepAdjoint(Adjoint):
    """The transposed Newton system solved by as many coloured block Gauss-Seidel sweeps as the forward solve ran.

    With one colour (no two contacts share a moving body) the system is block diagonal:
    one block solve per contact (`_block_solver`) is its solution.

    Attributes:
        sweeps: the static sweeps per round (`_sweep_count`); the rounds come from the forward result.
        dense_rows: the largest problem whose unsolved transposed system is solved densely
            (`ContactSweeps.dense_rows`); a larger one keeps the sweeps' solution.
    """

    sweeps: int = eqx.field(static=True)
    dense_rows: int = eqx.field(static=True)

    def transposed_solve(self, problem, raw, z_bar):
        blocks, z = problem, raw.z
        w = blocks.F(z)
        W = blocks.delassus()
        s = inverse_row_sizes(jnp.max(jnp.abs(blocks.diagonal(W)), axis=-1))
        da, db = fischer_burmeister_partials(z, w)
        friction_rows = lambda sticking: jnp.zeros_like(z, bool).at[:, 1:-1].set(sticking[:, None])
        da, db = biactive_branches(z, s * w, z[:, 0], z[:, -1], friction_rows, da, db)
        _, At = jax.vjp(blocks.F, z)  # w is affine in z: A^T y = vjp
        block_solve, Bt = _block_solver(blocks, W, da, db)
        if blocks.uncoupled:  # A is block diagonal
            return db * block_solve(z_bar, slice(None))

        def transposed(u):
            return da * u + At(db * u)[0]

        def solve_color(u, idx, mask):
            r = z_bar[idx] - transposed(u)[idx] + Bt(u[idx], idx)
            u_new = block_solve(r, idx)
            if mask is not None:
                u_new = jnp.where(mask[:, None], u_new, u[idx])
            return u.at[idx].set(u_new)

        def sweep(u, _):
            return blocks.over_colors(solve_color, u), None

        one_round = lambda _, u: jax.lax.scan(sweep, u, None, length=self.sweeps)[0]
        u = jax.lax.fori_loop(0, raw.rounds, one_round, jnp.zeros_like(z))
        if z.size > self.dense_rows:
            return db * u
        return db * _dense_adjoint_fallback(blocks, da, db, transposed, z_bar, u)


def _block_solver(blocks, W, da, db):
    """(solve, Bt): r, idx -> u with B_c^T u = r for the contacts idx, B = Da + Db A the Newton matrix's diagonal
    blocks; u, idx -> B_c^T u, applied without forming B_c (10 x 10 per contact).

    A 10 x 10 SVD pseudo-inverse per contact was a fifth of a sphere_grid gradient;
    the blocks have structure that makes the solve elementwise work. A_cc = K^T W K + L,
    with L the lam column and the cone row, so with Db' = act Db (a masked contact's A
    is I) and Da' = Da + eps Db + (1 - act) Db,

        B^T + eps Db = C + K^T W (K Db),   C = Da' + L^T Db',

    C is an arrowhead matrix (diagonal, plus the lam row and column), solved in O(m)
    with a Schur complement that is a sum of positive terms, and the rank-3 rest is
    Woodbury's: (B^T + eps Db)^-1 y = x - Z N^-1 W K Db x with x = C^-1 y, Z = C^-1 K^T
    and N = I + W K Db Z, a 3 x 3 matrix inverted once per step in closed form (forming
    N^-1 W K Db, 3 x m, and the products around it took a tenth of a sphere_grid
    gradient). eps = machine eps^`ADJOINT_EPS_POWER` keeps the diagonal of C positive
    (FB partials have da + db >= 2 - sqrt 2); each solve is refined `BLOCK_REFINEMENTS`
    times against B^T itself.
    A contact whose residual stays above sqrt(eps) |r| (a singular block, whose
    regularized solution is large or misses r) gets the SVD pseudo-inverse's answer;
    that branch runs only in the passes where some contact of some lane needs it
    (`every_lane`).
    """
    dtype = da.dtype
    nc, m = da.shape
    k, lam = m - 2, m - 1
    eps = float(jnp.finfo(dtype).eps)
    act = blocks.active[:, None]

    def Bt(u, idx):  # B_c^T u = Da u + A_cc^T Db u, A_cc = act (K^T W K + L) + (1 - act) I, without forming it
        x = db[idx] * u
        K, a, x_lam = blocks.K[idx], act[idx], x[:, lam:]
        Ax = matvec(jnp.swapaxes(K, -1, -2), matvec(jnp.swapaxes(W[idx], -1, -2), matvec(K, x)))
        sides = blocks.mu[idx][:, None] * x_lam, -jnp.broadcast_to(x_lam, (x.shape[0], k)), jnp.sum(x[:, 1:lam], -1)
        Lx = jnp.concatenate([sides[0], sides[1], sides[2][:, None]], -1)  # L^T x (L: `contact_maps`)
        return da[idx] * u + a * (Ax + Lx) + (1.0 - a) * x

    dl = act * db
    delta = da + eps**ADJOINT_EPS_POWER * db + (1.0 - act) * db
    # C's lam column above the diagonal (mu db_lam at the normal row, -db_lam at the friction rows) and its lam row.
    column = jnp.concatenate([blocks.mu[:, None] * dl[:, lam:], -jnp.broadcast_to(dl[:, lam:], (nc, k))], -1)
    column = column / delta[:, :lam]
    row = dl[:, 1:lam]
    schur = delta[:, lam] + dl[:, lam] * jnp.sum(row / delta[:, 1:lam], -1)

    def c_solve(y, idx):  # C^-1 y for y (len(idx), m) or (len(idx), m, r)
        expand = lambda a: a[idx].reshape(a[idx].shape + (1,) * (y.ndim - 2))
        yd = y[:, :lam] / expand(delta[:, :lam])
        x_lam = (y[:, lam] - jnp.sum(expand(row) * yd[:, 1:], 1)) / expand(schur)
        return jnp.concatenate([yd - expand(column) * x_lam[:, None], x_lam[:, None]], 1)

    KDb = blocks.K * db[:, None, :]  # (nc, 3, m)
    Z = c_solve(jnp.swapaxes(blocks.K, -1, -2), slice(None))  # C^-1 K^T (nc, m, 3)
    N_inv = inv3(jnp.eye(3, dtype=dtype) + matmul(W, matmul(KDb, Z)))  # (I + W K Db C^-1 K^T)^-1

    def regularized(y, idx):  # (B^T + eps Db)^-1 y = x - Z N^-1 W K Db x, x = C^-1 y (Woodbury)
        x = c_solve(y, idx)
        return x - matvec(Z[idx], matvec(N_inv[idx], matvec(W[idx], matvec(KDb[idx], x))))

    rtol = PINV_RTOL_FACTOR * m * eps

    def solve(r, idx):
        u = regularized(r, idx)
        for _ in range(BLOCK_REFINEMENTS):
            u = u + regularized(r - Bt(u, idx), idx)
        ok = jnp.max(jnp.abs(r - Bt(u, idx)), -1) <= jnp.sqrt(eps) * jnp.max(jnp.abs(r), -1)  # False if not finite

        def with_pinv():
            Bt_c = jnp.swapaxes(
                da[idx][:, :, None] * jnp.eye(m, dtype=dtype) + db[idx][:, :, None] * blocks.diagonal(W)[idx], -1, -2
            )
            return jnp.where(ok[:, None], u, matvec(jnp.linalg.pinv(Bt_c, rtol=rtol), r))

        return jax.lax.cond(every_lane(ok), lambda: u, with_pinv)

    return solve, Bt


def _dense_adjoint_fallback(blocks, da, db, transposed, z_bar, u):
    """u from the adjoint sweeps, or, where they left (d phi / dz)^T u = z_bar unsolved, its dense pseudo-inverse solve.

    Block Gauss-Seidel on the transposed system need not converge: on coupled
    stacks with mass ratios of 1e3 and more (where the forward sweeps also stall
    and `_dense_fallback` solves the step) the adjoint sweeps diverged, to 1e82
    and then NaN. A loop of at most one trip, none when the sweeps' residual is
    below sqrt(eps) |z_bar|; the dense solution is kept only if its residual is lower.
    """
    rtol = PINV_RTOL_FACTOR * u.size * jnp.finfo(u.dtype).eps
    scale = jnp.max(jnp.abs(z_bar))

    def residual(u):  # inf when not finite: a max reduction may skip NaN (it did under `vmap` on the CPU)
        r = z_bar - transposed(u)
        return jnp.where(jnp.all(jnp.isfinite(r)), jnp.max(jnp.abs(r)), jnp.inf)

    worse = lambda r, than: ~(r <= than)

    def needed(state):
        u, tried = state
        return ~tried & worse(residual(u), jnp.sqrt(jnp.finfo(u.dtype).eps) * scale)

    def solve(state):
        A, _, (u, _) = _dense_lcp(blocks, z_bar.shape, state)
        J = jnp.diag(da.reshape(-1)) + db.reshape(-1)[:, None] * A
        dense = min_norm_lstsq(J.T, z_bar.reshape(-1), rtol).reshape(z_bar.shape)
        return jnp.where(worse(residual(u), residual(dense)), dense, u), jnp.array(True)

    return jax.lax.while_loop(needed, solve, (u, jnp.array(False)))[0]


def solve_blocks(blocks, z0, solver):
    """Solve the sparse step problem from z0; returns (z, residual, converged, fallback, sweeps)."""
    run = lambda blocks, z0: SweepResult(*_gauss_seidel(blocks, z0, solver))
    sweeps = _sweep_count(blocks, solver)
    adjoint = SweepAdjoint(sweeps, solver.dense_rows)
    raw = implicit_solve(run, blocks, jax.lax.stop_gradient(z0), adjoint=adjoint)
    z = raw.z
    residual = natural_residual(z.reshape(-1), blocks.F(z).reshape(-1))
    tol = solver.tol if solver.tol is not None else default_tol(z.dtype)
    converged = jnp.isfinite(residual) & within_tolerance(residual, z.reshape(-1), tol)
    return z, residual, converged, raw.fallback, raw.rounds * sweeps


def _colors(model):
    a, b = model.contact_bodies
    return color_contacts(a, b, model.nbodies)
