"""The complementarity solvers: `SemismoothNewton` (default) and `Lemke` (exact pivoting).

A solver only knows how to find a solution; how that solution is differentiated
is decided once, in `_implicit.py`.
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from .._problems import LCP, natural_residual
from ._lemke import lemke_mixed
from ._newton import newton_chain, row_scale
from ._status import Status

POLISH_LINE_SEARCH = 8
POLISH_REGULARIZATION = 1e-4


def default_tol(dtype):
    """Convergence tolerance on the natural residual: 1e-10 in float64, 1e-5 in float32."""
    return 1e-10 if jnp.finfo(dtype).bits >= 64 else 1e-5


class RawSolution(eqx.Module):
    """What a solver returns before it is wrapped: z, a status code and step counts."""

    z: jax.Array
    status: jax.Array
    iterations: jax.Array
    fallback: jax.Array


def _residual(problem, z):
    return natural_residual(z, problem.F(z), problem.n_free)


class Solver(eqx.Module):
    """A complementarity solver: finds a solution, and knows nothing of how it is differentiated.

    Attributes every solver has: `tol`, the convergence tolerance on the natural
    residual (None: by dtype, `default_tol`).
    """

    tol: eqx.AbstractVar[float | None]

    @abc.abstractmethod
    def run(self, problem, z0) -> RawSolution:
        """Solve `problem` (an `LCP` or `NCP`) from z0; never differentiated."""


class Lemke(Solver):
    """Lemke's complementary pivoting method (003 §4), the exact reference solver.

    Pivots with the lexicographic rule (no cycling on the degenerate rows of the
    friction LCP), in a `lax.while_loop` bounded by `max_pivots`; a secondary ray
    is reported as status RAY, never as a solution. Equality rows of a mixed LCP
    are eliminated first by a Schur complement. The pivoted solution is then
    polished by a few semismooth Newton steps, which removes the round-off that a
    tableau accumulates.

    Attributes:
        max_pivots: static bound on the pivots; default 10 n.
        polish_iterations: static number of Newton steps after pivoting.
        tol: convergence tolerance on the natural residual (default by dtype).
    """

    max_pivots: int | None = eqx.field(static=True, default=None)
    polish_iterations: int = eqx.field(static=True, default=3)
    tol: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if self.max_pivots is not None and self.max_pivots < 1:
            raise ValueError(f"Lemke: max_pivots must be a positive integer, got {self.max_pivots}")
        if self.polish_iterations < 0:
            raise ValueError(f"Lemke: polish_iterations must be >= 0, got {self.polish_iterations}")

    def run(self, problem, z0):
        del z0
        if not isinstance(problem, LCP):
            raise TypeError("Lemke solves linear complementarity problems only; use SemismoothNewton for an NCP")
        n = problem.size
        s = row_scale(problem.A)
        max_pivots = self.max_pivots or 10 * n
        z, status, pivots = lemke_mixed(s[:, None] * problem.A, s * problem.b, problem.n_free, max_pivots)
        if self.polish_iterations:
            zp = newton_chain(problem, z, s, self.polish_iterations, POLISH_LINE_SEARCH, POLISH_REGULARIZATION)
            z = jnp.where(_residual(problem, zp) < _residual(problem, z), zp, z)
        return RawSolution(z, status, pivots, jnp.array(False))


class SemismoothNewton(Solver):
    """Fixed-iteration semismooth Newton on the Fischer-Burmeister reformulation.

    phi_i(z) = z_i + s_i w_i - sqrt(z_i^2 + s_i^2 w_i^2) = 0 (equality rows:
    s_i w_i = 0), with row scaling s_i = 1 / max_j |dw_i/dz_j|. Each iteration is a
    Levenberg-Marquardt step with regularisation proportional to |phi|^2 (bounded
    steps along the non-unique multipliers) and a fixed-length Armijo line search.
    Everything is a `lax.scan` of static length.

    The friction LCP is copositive but not P, so the merit function has stationary
    points that are not solutions (BENCHMARKS.md P1). Two guards:
      1. two starts run side by side, the given warm start and the cold start
         z = 0, and the one with the smaller natural residual is kept;
      2. (LCPs, `fallback=True`) a lane whose residual is still above `tol` is
         solved by `Lemke` and polished. The pivoting runs in a while loop whose
         predicate is false for converged lanes, so when every lane converged
         (the common case, also under `vmap`) it costs nothing.
    Neither path is differentiated: gradients come from the implicit rule.

    Attributes:
        iterations: static Newton iterations per start (> 0).
        line_search_steps: static number of step halvings tried (> 0).
        regularization: factor of the Levenberg-Marquardt term (> 0).
        fallback: use Lemke on the lanes that did not converge (LCPs only).
        tol: convergence tolerance on the natural residual (default by dtype).
    """

    iterations: int = eqx.field(static=True, default=30)
    line_search_steps: int = eqx.field(static=True, default=12)
    regularization: float = eqx.field(static=True, default=1e-4)
    fallback: bool = eqx.field(static=True, default=True)
    tol: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        for name in ("iterations", "line_search_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"SemismoothNewton: {name} must be a positive integer, got {value!r}")
        if not self.regularization > 0:
            raise ValueError(f"SemismoothNewton: regularization must be > 0, got {self.regularization}")

    def run(self, problem, z0):
        n = problem.size
        cold = jnp.zeros((n,), z0.dtype)
        s = row_scale(problem.jac(cold))
        starts = jnp.stack([z0, cold])
        zs = jax.vmap(
            lambda z: newton_chain(problem, z, s, self.iterations, self.line_search_steps, self.regularization)
        )(starts)
        res = jax.vmap(lambda z: _residual(problem, z))(zs)
        res = jnp.where(jnp.isnan(res), jnp.inf, res)
        z = zs[jnp.argmin(res)]
        tol = self.tol if self.tol is not None else default_tol(z0.dtype)
        failed = ~(jnp.min(res) <= tol)
        iterations = jnp.array(self.iterations)
        if not (self.fallback and isinstance(problem, LCP)):
            return RawSolution(z, jnp.where(failed, Status.MAX_STEPS, Status.SUCCESS), iterations, jnp.array(False))
        return _lemke_fallback(problem, z, failed, iterations)


def _lemke_fallback(problem, z, failed, iterations):
    """Lemke for a lane that failed; a zero-trip loop for one that converged.

    A converged lane hands Lemke the trivial problem (A = I, b = 1), solved before
    the first pivot, so under `vmap` the batched while loop runs only as long as
    the slowest failed lane needs.
    """
    n = problem.size
    masked = LCP(
        jnp.where(failed, problem.A, jnp.eye(n, dtype=z.dtype)),
        jnp.where(failed, problem.b, jnp.ones((n,), z.dtype)),
        problem.n_free,
    )
    raw = Lemke().run(masked, z)
    better = failed & (_residual(problem, raw.z) < _residual(problem, z))
    z = jnp.where(better, raw.z, z)
    status = jnp.where(failed, raw.status, Status.SUCCESS)
    return RawSolution(z, status, iterations + jnp.where(failed, raw.iterations, 0), failed)
