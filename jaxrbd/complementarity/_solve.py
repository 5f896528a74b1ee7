"""The entry points `solve_lcp` and `solve_ncp`, with input checks and a typed solution."""

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._problems import LCP, NCP, natural_residual
from .._validate import check_value
from ._implicit import implicit_solve
from ._select import least_norm, selects
from ._solvers import SemismoothNewton, Solver, run_batched, within_tolerance
from ._status import Status


class Solution(eqx.Module):
    """The result of a complementarity solve: `solve_lcp`, `solve_ncp` and `solve` return it.

    `jaxrbd.LCPSolution` is the same class, kept for code written against that name.

    Attributes:
        z: (n,) the solution.
        w: (n,) w = F(z) (A z + b for an LCP).
        residual: max-norm of the natural map, |min(z_i, w_i)| (|w_i| on equality rows).
        converged: residual <= tol and all finite.
        status: a `Status` code (`Status.message(code)` says what it means).
        iterations: Newton iterations per start (plus Lemke pivots when the fallback ran).
        fallback: whether the Lemke fallback ran for this problem.
    """

    z: jax.Array
    w: jax.Array
    residual: jax.Array
    converged: jax.Array
    status: jax.Array
    iterations: jax.Array
    fallback: jax.Array


LCPSolution = Solution


def _is_concrete(x):
    return not isinstance(x, jax.core.Tracer)


def _check_n_free(n_free, n):
    if not isinstance(n_free, (int, np.integer)) or isinstance(n_free, bool) or not 0 <= n_free <= n:
        raise ValueError(f"n_free must be an integer in [0, {n}], got {n_free!r}")


def _check_lcp(A, b, n_free):
    A, b = jnp.asarray(A), jnp.asarray(b)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be a square (n, n) matrix, got shape {A.shape}")
    if b.shape != (A.shape[0],):
        raise ValueError(f"b must have shape ({A.shape[0]},) to match A, got {b.shape}")
    _check_n_free(n_free, A.shape[0])
    for name, x in (("A", A), ("b", b)):
        if not jnp.issubdtype(x.dtype, jnp.floating):
            raise ValueError(f"{name} must be a floating-point array, got dtype {x.dtype}")
        if _is_concrete(x) and not np.all(np.isfinite(np.asarray(x))):
            raise ValueError(f"{name} contains NaN or inf")
    dtype = jnp.result_type(A, b)
    return A.astype(dtype), b.astype(dtype)


def _check_z0(z0, n, dtype):
    if z0 is None:
        return jnp.zeros((n,), dtype)
    z0 = jnp.asarray(z0, dtype)
    if z0.shape != (n,):
        raise ValueError(f"z0 must have shape ({n},), got {z0.shape}")
    if _is_concrete(z0) and not np.all(np.isfinite(np.asarray(z0))):
        raise ValueError("z0 contains NaN or inf")
    return z0


def _finish(problem, raw, solver):
    z = raw.z
    w = problem.F(z)
    residual = natural_residual(z, w, problem.n_free)
    tol = solver.tolerance(z.dtype)
    finite = jnp.isfinite(residual)
    converged = finite & within_tolerance(residual, z, tol)
    failed = jnp.where(raw.status == Status.SUCCESS, Status.MAX_STEPS, raw.status)
    status = jnp.where(converged, Status.SUCCESS, jnp.where(finite, failed, Status.NONFINITE))
    return Solution(z, w, residual, converged, status, raw.iterations, raw.fallback)


@eqx.filter_jit
def _solve_checked(problem, solver, z0, grad_smoothing):
    """The solve after the host checks, compiled once and cached.

    The cache key is what `filter_jit` treats as static: the problem's structure,
    its array shapes and dtypes, its static fields (`n_free`, an NCP's `fn`, Python
    scalars in its args), the solver and `grad_smoothing`. Inside the caller's
    `jit`, `vmap` or `grad` the call is traced into the caller's program.
    """
    raw = implicit_solve(functools.partial(_selected, solver), problem, jax.lax.stop_gradient(z0), grad_smoothing)
    return _finish(problem, raw, solver)


def _selected(solver, problem, z0):
    """The solver's result; with `least_norm`, a time step's friction LCP's solution replaced by its least-norm one
    (`_select`).

    Inside the implicit rule: the reverse pass differentiates the selected solution as a solution of the LCP.
    """
    raw = run_batched(solver, problem, z0)
    if not (getattr(solver, "least_norm", False) and selects(problem)):
        return raw
    return eqx.tree_at(lambda r: r.z, raw, least_norm(problem, raw.z, solver.tolerance(raw.z.dtype)))


def solve(problem, *, solver=None, z0=None, grad_smoothing=0.0):
    """Solve an `LCP` or `NCP` problem object; see `solve_lcp`."""
    solver = SemismoothNewton() if solver is None else solver
    if not isinstance(solver, Solver):
        raise TypeError(f"solver must be jaxrbd.SemismoothNewton(...) or jaxrbd.Lemke(...), got {solver!r}")
    check_value("grad_smoothing", grad_smoothing, shape=(), nonnegative=True)
    n = problem.size
    dtype = jax.tree_util.tree_leaves(eqx.filter(problem, eqx.is_inexact_array))[0].dtype
    z0 = _check_z0(z0, n, dtype)
    if n == 0:  # nothing to solve: a time step with no contacts, stops or joints
        empty = jnp.zeros((0,), dtype)
        count = jnp.zeros((), jnp.int32)
        return Solution(
            empty, empty, jnp.zeros((), dtype), jnp.array(True), count + Status.SUCCESS, count, jnp.array(False)
        )
    return _solve_checked(problem, solver, z0, float(grad_smoothing))


def solve_lcp(
    A: ArrayLike,
    b: ArrayLike,
    *,
    solver: Solver | None = None,
    z0: ArrayLike | None = None,
    n_free: int = 0,
    grad_smoothing: float | ArrayLike = 0.0,
) -> Solution:
    """Solve the (mixed) LCP 0 <= z ⊥ w = A z + b >= 0.

    Works under `jit`, `vmap` and `grad`. Gradients with respect to A and b come
    from implicit differentiation at the solution (never through the iterations).
    Outside `jit` the input checks run on the host and the solve itself is compiled
    once per shape, dtype, `n_free`, solver and `grad_smoothing`: the first call
    compiles (about a second), a repeated one takes milliseconds.

    Args:
        A: (n, n) matrix.
        b: (n,) vector.
        solver: `SemismoothNewton()` (default) or `Lemke()`.
        z0: optional (n,) warm start.
        n_free: static number of leading equality rows (w_i = 0, z_i free).
        grad_smoothing: eps >= 0; see `implicit_solve`.

    Returns:
        A `Solution`. Under `jit`, NaN data give `converged = False` and
        status NONFINITE; outside `jit` they raise `ValueError`.
    """
    A, b = _check_lcp(A, b, n_free)
    return solve(LCP(A, b, n_free), solver=solver, z0=z0, grad_smoothing=grad_smoothing)


def solve_ncp(
    fn: Callable,
    args: Any,
    n: int,
    *,
    solver: Solver | None = None,
    z0: ArrayLike | None = None,
    n_free: int = 0,
    grad_smoothing: float | ArrayLike = 0.0,
) -> Solution:
    """Solve the nonlinear (mixed) complementarity problem 0 <= z ⊥ fn(z, args) >= 0.

    Args:
        fn: (z, args) -> w, smooth, both (n,).
        args: pytree of arrays; gradients flow to its floating leaves.
        n: problem size.

    The other arguments are those of `solve_lcp`. `fn` is static: outside `jit` the
    compiled solve is cached by the identity of `fn` (and by any Python scalars in
    `args`), so pass the same function to reuse it; a new lambda on each call
    compiles again.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    _check_n_free(n_free, n)
    return solve(NCP(fn, args, n, n_free), solver=solver, z0=z0, grad_smoothing=grad_smoothing)
