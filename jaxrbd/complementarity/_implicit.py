"""One implicit-differentiation rule for every complementarity solve.

At a solution z* of phi(z, theta) = FB(z, F(z, theta)) = 0 the implicit function
theorem gives dz = -(d phi/dz)^{-1} (d phi/d theta) d theta. The reverse pass
solves (d phi/dz)^T u = z_bar and returns theta_bar = -(d phi/d theta)^T u.

The rule is written once (`implicit_solve`); how the transposed system is solved
is its `Adjoint`: the dense pseudo-inverse here (`DenseAdjoint`), or the block
Gauss-Seidel sweeps of the sparse step solver (`jaxrbd.ContactSweeps`).

When the multipliers are not unique (more contact rows than degrees of freedom,
the lam rows of a sticking contact) d phi/dz is singular. The dense transpose
solve is then the least-squares solve of the Moore-Penrose pseudo-inverse, with
singular values below a relative cutoff dropped. That is the transpose of the
minimum-norm forward derivative; for a consistent perturbation it differs from
every other solution of the linearised problem only along the null space, which
the unique part of the solution (the generalized impulse N c_n + D beta) does not
see. It is computed by a complete orthogonal decomposition (two QR factorizations,
the first with column pivoting, which reveals the rank), the same minimum-norm
solution as the SVD at about a third of its cost.

A friction LCP of a time step carries its Delassus structure (`LCP.delassus`); its
transpose solve is then the (nv, nv) Woodbury solve of the forward Newton steps,
transposed and refined (`_structured_transposed_solve`). In the consistent case it
gives the same gradient as the pseudo-inverse; where its refinements do not meet
z_bar, the pseudo-inverse is computed after all.

The solve's result carries the name `SOLUTION` (`jax.ad_checkpoint.checkpoint_name`),
so a rematerialized step (`simulate`'s) keeps it and never runs the solver again in
its reverse pass.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from .._problems import LCP, split_rows, spread
from ._fb import fischer_burmeister_partials
from ._newton import delassus_transposed_solver

PINV_RTOL_FACTOR = 100.0  # cutoff = factor * n * eps * sigma_max
# The structured transposed solve (`DenseAdjoint`) regularizes J by eps^ADJOINT_EPS_POWER
# (machine eps) and refines against J itself. The forward steps' sqrt(eps) left the
# refinements of the four balls' sticking contacts (10-15 singular values of J below
# 1e-8 of the largest) stalled at 1e-10 of |z_bar| in 22 of 200 float64 steps; with
# eps^(2/3) two refinements met 100 n eps in every step of the three small scenes.
ADJOINT_EPS_POWER = 2.0 / 3.0
ADJOINT_REFINEMENTS = 2


class Adjoint(eqx.Module):
    """How the reverse pass solves the transposed Newton system at the solution."""

    @abc.abstractmethod
    def transposed_solve(self, problem, raw, z_bar):
        """y = db * u, where (d phi / dz)^T u = z_bar at z = raw.z; theta_bar = -(dF/d theta)^T y.

        Args:
            problem: the problem; it has `F(z)` (w, the same shape as z).
            raw: the forward solve's result (`raw.z`, and what else the solver saved).
            z_bar: the cotangent of z.
        """


class DenseAdjoint(Adjoint):
    """The transposed Newton matrix, formed densely and solved by its pseudo-inverse.

    Attributes:
        smoothing: eps >= 0. With eps > 0 the reverse pass uses the Jacobian of the
            smoothed FB(a, b) = a + b - sqrt(a^2 + b^2 + 2 eps^2) at the solution:
            rows near a switch get a blend of both sides instead of a zero or a jump.
    """

    smoothing: float = eqx.field(static=True, default=0.0)

    def transposed_solve(self, problem, raw, z_bar):
        z = raw.z
        n = z.shape[-1]
        free = jnp.arange(n) < problem.n_free
        da, db = reverse_partials(problem, z, self.smoothing)
        da = jnp.where(free, 0.0, da)
        db = jnp.where(free, 1.0, db)
        rtol = PINV_RTOL_FACTOR * n * jnp.finfo(z.dtype).eps
        pinv = lambda p: min_norm_lstsq((jnp.diag(da) + db[:, None] * p.jac(z)).T, z_bar, rtol)
        if not (isinstance(problem, LCP) and problem.delassus is not None):
            return db * pinv(problem)
        u, solved = _structured_transposed_solve(problem, da, db, z_bar, rtol)
        # Where the structured solve does not meet z_bar (z_bar outside the range of J^T,
        # or J too ill-conditioned for the refinements), the pseudo-inverse decides. A
        # while loop, not a cond: under vmap it runs only when some lane needs it. Its
        # problem passes an optimization barrier with the loop's flag, so that XLA forms
        # A (`Delassus.matrix`) inside the loop, not before it in every reverse step.
        arrays, rest = eqx.partition(problem, eqx.is_array)

        def body(c):
            inside, _ = jax.lax.optimization_barrier((arrays, c[1]))
            return jnp.where(c[1], pinv(eqx.combine(inside, rest)), c[0]), False

        u, _ = jax.lax.while_loop(lambda c: c[1], body, (u, ~solved))
        return db * u


BIACTIVE_RTOL = 1e-7  # a row is biactive where z and s w are both below this of the largest normal impulse


def reverse_partials(problem, z, smoothing=0.0):
    """The element (da, db) of the generalized Jacobian of FB(z, F(z)) that the reverse pass uses at z.

    The Fischer-Burmeister partials (smoothed where smoothing > 0); on a time step's friction LCP (its
    `Delassus` structure) without smoothing, the degenerate rows' sides chosen by `biactive_branches`.
    """
    w = problem.F(z)
    da, db = fischer_burmeister_partials(z, w, smoothing)
    if not (isinstance(problem, LCP) and problem.delassus is not None and smoothing == 0.0):
        return da, db
    structure = problem.delassus
    counts = structure.counts
    ng, nc = structure.n_free, len(counts)
    _, zn, _, zl = split_rows(z, ng, nc, sum(counts))

    def friction_rows(sticking):
        no = lambda k: jnp.zeros((k,), bool)
        return jnp.concatenate([no(ng + nc), spread(counts, sticking), no(nc)])

    return biactive_branches(z, structure.scale * w, zn, zl, friction_rows, da, db)


def biactive_branches(z, sw, normal, lam, friction_rows, da, db):
    """The Jacobian element at a friction LCP's biactive rows (z_i = 0 = w_i), chosen by the contact's state.

    At a row with z_i = 0 = w_i the Fischer-Burmeister function has a kink, and the ratio z_i / w_i of two
    round-off numbers would pick the element. A sticking contact that carries a load holds its tangential
    velocity at zero whichever way the state is perturbed (its friction is strictly inside the cone), so its
    biactive friction rows take the active branch (w_i held at 0: da = 0, db = 1). With the inactive branch
    a ball resting on a plane whose normal is then tilted slides in the derivative (h g per unit tilt) where
    it rolls (5/7 h g). Every other biactive row takes the inactive branch (z_i held at 0): a contact that
    touches without a load, a sticking contact on the cone's edge, a sliding contact's unused direction.

    Args:
        z: the solution; sw: the scaled w = A z + q (the rows in impulse units).
        normal, lam: (nc,) each contact's normal impulse and sliding multiplier (lam = 0: sticking).
        friction_rows: (nc,) bool -> z-shaped bool, the mask on each contact's friction rows.
        da, db: the Fischer-Burmeister partials at (z, w).
    """
    tol = BIACTIVE_RTOL * jnp.max(jnp.abs(normal), initial=0.0)
    biactive = (jnp.abs(z) <= tol) & (jnp.abs(sw) <= tol)
    hold = biactive & friction_rows((normal > tol) & (lam <= tol))
    release = biactive & ~hold
    da = jnp.where(hold, 0.0, jnp.where(release, 1.0, da))
    db = jnp.where(hold, 1.0, jnp.where(release, 0.0, db))
    return da, db


def _structured_transposed_solve(problem, da, db, z_bar, rtol):
    """J^T u = z_bar with J = Da + Db A, by the Delassus structure of a friction LCP.

    The regularized transpose (J + eps Db)^T of `delassus_transposed_solver` (an (nv,
    nv) LU instead of the (n, n) decompositions of the pseudo-inverse), eps =
    machine eps^ADJOINT_EPS_POWER, refined `ADJOINT_REFINEMENTS` times against J^T
    itself. Where J is singular and z_bar lies in J^T's range, the refinements
    converge to a solution of J^T u = z_bar; it differs
    from the pseudo-inverse's only along J^T's null space, which a consistent
    perturbation of the problem does not see (the module docstring).

    Returns:
        (u, solved): solved where |J^T u - z_bar| is below rtol of |z_bar| and of the
        round-off in J^T u.
    """
    f = problem.delassus
    s = f.scale
    # J = Da + (Db S^{-1}) (S A): the structure's row scaling, with Db / s as its Db.
    solve = delassus_transposed_solver(problem, da, db / s, s, float(jnp.finfo(z_bar.dtype).eps) ** ADJOINT_EPS_POWER)
    Jt = lambda u: da * u + f.apply_transposed(db * u)
    u = solve(z_bar)
    for _ in range(ADJOINT_REFINEMENTS):
        u = u + solve(z_bar - Jt(u))
    error = jnp.max(jnp.abs(z_bar - Jt(u)))
    size = jnp.maximum(jnp.max(jnp.abs(z_bar)), jnp.max(jnp.abs(da * u) + f.magnitude_transposed(db * u)))
    return u, jnp.all(jnp.isfinite(u)) & (error <= rtol * size)


def min_norm_lstsq(B, c, rtol):
    """The minimum-norm least-squares solution of B x = c, pinv(B) c, by complete orthogonal decomposition.

    B[:, p] = Q R (QR with column pivoting); the rank r counts the diagonal entries
    |R_ii| > rtol |R_00|, and the rows of R below it are dropped. The kept rows R_1
    (r x n) are factored again, R_1^T = Z T, so the least-squares solutions are
    y = Z T^{-T} (Q^T c)_1 plus anything orthogonal to Z, and the minimum-norm one
    has nothing there. The dropped rows make T = [[T_11, 0], [0, 0]], whose trailing
    diagonal is set to one with a zero right-hand side.

    Args:
        B: (n, n) matrix.
        c: (n,) right-hand side.
        rtol: relative cutoff of the rank.
    """
    Q, R, perm = jax.lax.linalg.qr(B, pivoting=True)
    d = jnp.abs(jnp.diagonal(R))
    keep = d > rtol * d[0]
    R = jnp.where(keep[:, None], R, 0.0)
    Z, T = jnp.linalg.qr(R.T)
    T = T + jnp.diag(jnp.where(keep, 0.0, 1.0)).astype(T.dtype)
    x = jax.scipy.linalg.solve_triangular(T, jnp.where(keep, Q.T @ c, 0.0), trans="T")
    return jnp.zeros_like(c).at[perm].set(Z @ x)


SOLUTION = "jaxrbd.solution"


@eqx.filter_custom_vjp
def _implicit(problem, run, adjoint, z0):
    return run(problem, z0)


@_implicit.def_fwd
def _implicit_fwd(perturbed, problem, run, adjoint, z0):
    del perturbed
    raw = run(problem, z0)
    raw = jax.tree_util.tree_map(lambda x: checkpoint_name(x, SOLUTION) if eqx.is_array(x) else x, raw)
    return raw, raw


@_implicit.def_bwd
def _implicit_bwd(raw, cotangent, perturbed, problem, run, adjoint, z0):
    del perturbed, run, z0
    z_bar = cotangent.z
    z_bar = jnp.zeros_like(raw.z) if z_bar is None else jnp.where(jnp.isfinite(z_bar), z_bar, 0.0)
    y = adjoint.transposed_solve(problem, raw, z_bar)
    _, pullback = eqx.filter_vjp(lambda p: p.F(raw.z), problem)
    return pullback(-y)[0]


def implicit_solve(run, problem, z0, grad_smoothing=0.0, adjoint=None):
    """Call `run(problem, z0)` with gradients from the implicit rule at its solution.

    Args:
        run: a callable (problem, z0) -> a result with `.z`; never differentiated.
        problem: an `LCP`, `NCP` or any module with `F(z)`; its floating array
            leaves receive gradients.
        z0: starting point (no gradient).
        grad_smoothing: eps >= 0 of the default `DenseAdjoint`.
        adjoint: the `Adjoint`; None: `DenseAdjoint(grad_smoothing)`.
    """
    adjoint = DenseAdjoint(float(grad_smoothing)) if adjoint is None else adjoint
    # Strongly typed leaves: `filter_custom_vjp` drops the cotangent of a weakly typed
    # input (a Python float traced by `grad`), which would make that gradient zero.
    strong = lambda x: jnp.asarray(x, x.dtype) if eqx.is_inexact_array(x) else x
    problem = jax.tree_util.tree_map(strong, problem)
    if isinstance(problem, LCP) and problem.delassus is not None:
        # The pullback reads F through `Delassus.apply`, whose rule takes U^T and M, not the
        # caches (X, L^-1 and the scaling from X): their cotangents are zero. Stopped here,
        # they are not transposed through X = L^-1 U^T and M's Cholesky factor in every reverse step.
        caches = lambda p: (p.delassus.L_inv, p.delassus.X, p.delassus.scale)
        problem = eqx.tree_at(caches, problem, replace_fn=jax.lax.stop_gradient)
    return _implicit(problem, run, adjoint, z0)
