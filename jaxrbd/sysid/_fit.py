"""`fit`: the optimizer loop (optax, or `LevenbergMarquardt` on residuals) and its `FitResult`."""

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._config import BATCH_COMPILER_OPTIONS
from .._validate import check_value
from ._bounds import Free, Interval, Positive, _norm
from ._experiments import Experiments
from ._forms import PROBLEMS, LeastSquares, Loss, ManyExperiments, keywords
from ._problem import _UPDATES, _cached, _forward_ok, _problem
from ._uncertainty import _assess

_DEFAULT_OPTIMIZER = optax.adam(0.05)


class LevenbergMarquardt(eqx.Module):
    """Levenberg-Marquardt for `fit` with residuals: Gauss-Newton steps damped by lam diag(J^T J).

    For least squares it needs a handful of steps where a gradient method needs
    hundreds, and it reuses the compiled Jacobian that the uncertainty needs (no
    gradient step to compile). The steps are taken in the unconstrained
    coordinates of the bounds. A step that does not lower the loss is retried
    with lam multiplied by `increase` (at most `retries` times); an accepted one
    divides lam by `decrease`. The fit converges when no retry lowers the loss.

    Attributes:
        damping: the initial lam.
        increase, decrease: the factors on lam after a rejected / accepted step.
        retries: the rejected steps allowed per iteration.
    """

    damping: float = eqx.field(static=True, default=1e-3)
    increase: float = eqx.field(static=True, default=4.0)
    decrease: float = eqx.field(static=True, default=3.0)
    retries: int = eqx.field(static=True, default=12)


class FitResult(eqx.Module):
    """The result of `fit`.

    Attributes:
        params: dict of the fitted parameters (in their natural units): the best
            iterate evaluated (lowest loss), not necessarily the last.
        loss: the loss at `params` (the lowest in `loss_history`).
        best_step: the index in `loss_history` of that iterate.
        loss_history: (k,) the loss at each optimizer step (before the update).
        grad_norms: (k,) the gradient norm in the unconstrained coordinates.
        param_history: dict of (k,) arrays, each parameter at each step.
        steps: the number of optimizer steps taken.
        converged: True if a tolerance stopped the fit (False: the step budget did).
        seconds: wall time of the fit, compile included.
        uncertainty: an `Uncertainty` at `params` when the fit was given residuals
            (`residuals=` or `predict=` with `experiments=`), else None.
    """

    params: dict
    loss_history: np.ndarray
    grad_norms: np.ndarray
    param_history: dict
    steps: int
    converged: bool
    seconds: float
    loss: float = np.nan
    best_step: int = 0
    uncertainty: object = None

    @property
    def std(self):
        """The standard deviations (`uncertainty.std`)."""
        return None if self.uncertainty is None else self.uncertainty.std

    @property
    def interval(self):
        """The confidence intervals (`uncertainty.interval`)."""
        return None if self.uncertainty is None else self.uncertainty.interval


def _mean_square(problem):
    def loss(params, data):
        r, valid = problem.residuals(params, data)
        return jnp.sum(valid * r * r) / jnp.maximum(jnp.sum(valid), 1.0)

    return loss


def _make_update(objective_of, maps, optimizer, with_data):
    """The jitted optimizer step: (u, state, data) -> (u_next, state, loss, grad norm)."""
    extra = isinstance(optimizer, optax.GradientTransformationExtraArgs)

    def natural(u):
        return {k: maps[k].to_param(x) for k, x in u.items()}

    @functools.partial(jax.jit, compiler_options=BATCH_COMPILER_OPTIONS)
    def update(u, state, data):
        objective = lambda u: objective_of(natural(u), data) if with_data else objective_of(natural(u))
        value, g = jax.value_and_grad(objective)(u)
        gnorm = _norm(g)
        if extra:  # line-search methods (optax.lbfgs) need the objective
            updates, state = optimizer.update(g, state, u, value=value, grad=g, value_fn=objective)
        else:
            updates, state = optimizer.update(g, state, u)
        return optax.apply_updates(u, updates), state, value, gnorm

    return update


def _record(losses, gnorms, history, value, gnorm, params, where):
    """Append one iterate's loss, gradient norm and parameters; a non-finite loss or gradient stops the fit."""
    if not (np.isfinite(value) and np.isfinite(gnorm)):
        current = {k: np.asarray(v).tolist() for k, v in params.items()}
        raise FloatingPointError(f"fit: non-finite loss or gradient {where} with parameters {current}")
    losses.append(value)
    gnorms.append(gnorm)
    for k in history:
        history[k].append(np.asarray(params[k]))


def _fit_lm(problem, lm, params, maps, data, *, steps, loss_tol, grad_tol, param_rtol, patience, bar):
    """The Levenberg-Marquardt loop on the host, with the problem's compiled Jacobian."""
    names = list(params)
    shapes = [np.shape(params[k]) for k in names]
    sizes = [int(np.prod(x)) for x in shapes]

    def natural(u_flat):
        out, i = {}, 0
        for k, shape, size in zip(names, shapes, sizes):
            out[k] = maps[k].to_param(jnp.asarray(u_flat[i : i + size].reshape(shape)))
            i += size
        return out

    def evaluate(u_flat):
        p = natural(u_flat)
        J, r, valid = problem.jacobian(p, data, names)
        keep = valid > 0
        J, r = J[keep], r[keep]
        m = max(len(r), 1)
        # d theta / d u, entry by entry (every bound maps each entry on its own)
        starts = np.cumsum([0] + sizes[:-1])
        chain = np.concatenate([maps[k].slope(u_flat[i : i + n]) for k, i, n in zip(names, starts, sizes)])
        Ju = J * chain
        return p, float(r @ r) / m, Ju, r, m

    u = np.concatenate([np.ravel(np.asarray(maps[k].to_free(jnp.asarray(params[k], float)))) for k in names])
    lam = lm.damping
    p, value, Ju, r, m = evaluate(u)
    losses, gnorms, history = [], [], {k: [] for k in names}
    converged = small_step = False
    for i in range(steps):
        g = Ju.T @ r
        gnorm = float(np.linalg.norm(2 * g / m))
        _record(losses, gnorms, history, value, gnorm, p, f"at step {i}")
        bar.set_postfix(loss=f"{value:.3e}", grad=f"{gnorm:.1e}")
        bar.update()
        if value <= loss_tol or gnorm <= grad_tol or small_step:
            converged = True
            break
        if i == steps - 1:
            break
        A = Ju.T @ Ju
        accepted = False
        for _ in range(lm.retries):
            damped = A + lam * np.diag(np.maximum(np.diag(A), 1e-12 * max(np.max(np.diag(A)), 1e-300)))
            delta = -np.linalg.lstsq(damped, g, rcond=None)[0]
            trial = evaluate(u + delta)
            if np.isfinite(trial[1]) and trial[1] < value:
                before = p
                u, (p, value, Ju, r, m) = u + delta, trial
                lam = max(lam / lm.decrease, 1e-12)
                accepted = True
                break
            lam *= lm.increase
        if not accepted:  # no damped step lowers the loss: a minimum (to round-off)
            converged = True
            break
        if param_rtol > 0:  # stop after recording this point when it barely moved
            small_step = all(
                np.all(np.abs(np.asarray(p[k]) - np.asarray(before[k])) <= param_rtol * np.abs(np.asarray(p[k])))
                for k in names
            )
    return losses, gnorms, history, converged


def fit(
    loss: Loss | LeastSquares | ManyExperiments | Callable | None = None,
    params: dict | None = None,
    *,
    bounds: dict | None = None,
    optimizer: Any = None,
    steps: int = 200,
    loss_tol: float = 0.0,
    grad_tol: float = 1e-10,
    param_rtol: float = 0.0,
    patience: int = 5,
    progress: bool = True,
    desc: str = "fit",
    data: Any = None,
    residuals: Callable | None = None,
    predict: Callable | None = None,
    experiments: Experiments | None = None,
    per_experiment: Sequence[str] = (),
    noise: float | None = None,
    level: float = 0.95,
) -> FitResult:
    """Minimize a loss over the parameters: by gradient descent with optax, or as least squares.

    The problem is an object, as in `optimistix.least_squares(fn, solver, y0)`:
    `fit(Loss(fn, data), params)`, `fit(LeastSquares(fn, data), params,
    optimizer=LevenbergMarquardt())` or `fit(ManyExperiments(predict, experiments),
    params, ...)`. The same three forms as keywords:

    - `loss(params)` (or `loss(params, data)` with `data=`): a scalar.
    - `residuals=fn`: fn(params) (or fn(params, data)) returns the residual vector
      r (or (r, valid)); the loss is its mean square over the valid entries, and
      the result carries the Gauss-Newton `uncertainty` at the optimum.
    - `predict=fn, experiments=Experiments(observed, inputs, mask)`: many
      experiments sharing the physical parameters. fn(params, inputs_e) returns
      one experiment's (T, n) prediction from its inputs (initial state, ...);
      it is mapped over the experiments (`lax.map`), and the residuals are the masked,
      weighted prediction errors. Names in `per_experiment` are nuisance
      parameters with a leading axis E (initial velocity, ...): experiment e sees
      its own slice. The result carries the `uncertainty`.

    Pass the data as `data=` or `experiments=` and define the function once: the
    compiled step is cached on (function, bounds, optimizer) and the data are its
    argument, so a second fit on new data of the same shapes does not recompile
    (a new lambda, or a new optimizer object, does).

    Args:
        loss: the problem: a `Loss`, `LeastSquares` or `ManyExperiments`; or a
            function of a dict of parameters (and `data`), returning a scalar;
            it usually simulates a scene built from them and compares with data
            (`trajectory_loss`). It is `jit`-compiled once.
        params: dict name -> initial value (scalars or arrays).
        bounds: dict name -> `Free()`, `Positive()` or `Interval(lo, hi)`;
            missing names are `Free()`.
        optimizer: any optax `GradientTransformation`; default `optax.adam(0.05)`
            (steps of about 5% in log space for `Positive()` parameters). Line-search
            methods such as `optax.lbfgs()` get the objective too; they suit
            ill-conditioned fits of several coupled parameters. For residuals:
            `LevenbergMarquardt()` (a host loop on the compiled Jacobian), or an
            optimistix least-squares solver (`optimistix.LevenbergMarquardt(rtol,
            atol)`, `optimistix.GaussNewton(...)`: the whole solve compiled as one
            program; its history holds the start and the solution only).
        steps: the step budget (>= 1).
        loss_tol: stop when the loss is at most this.
        grad_tol: stop when the gradient norm is at most this.
        param_rtol: stop when every parameter has changed by at most this
            (relative) over the last `patience` steps; 0 disables it.
        patience: see `param_rtol`.
        progress: show a tqdm progress bar with the loss.
        desc: the progress bar's label.
        data: the data argument of `loss` or `residuals` (a pytree of arrays).
        residuals: see above.
        predict: see above.
        experiments: see above.
        per_experiment: see above.
        noise: the expected noise level, reported beside the RMS residual (see
            `uncertainty`).
        level: the confidence level of the intervals.

    Returns:
        A `FitResult` holding the best iterate evaluated. A non-finite loss or
        gradient stops the fit with an error naming the step and the parameters.
    """
    from .._progress import tqdm

    if isinstance(loss, PROBLEMS):
        given = [
            k
            for k, v in (("data", data), ("residuals", residuals), ("predict", predict), ("experiments", experiments))
            if v is not None
        ] + (["per_experiment"] if per_experiment else [])
        if given:
            raise TypeError(f"fit: the problem object holds the data and functions; do not also give {given}")
        forms = keywords(loss)
        loss, data, residuals = forms.get("loss"), forms.get("data"), forms.get("residuals")
        predict, experiments = forms.get("predict"), forms.get("experiments")
        per_experiment = forms.get("per_experiment", ())
    problem = _problem(residuals, data, predict, experiments, per_experiment)
    if problem is None:
        if not callable(loss):
            raise TypeError(f"loss must be a function of the dict of parameters, got {loss!r}")
    elif loss is not None:
        raise TypeError("give either loss or residuals= / predict= with experiments=, not both")
    if not isinstance(params, dict) or not params:
        raise TypeError("params must be a non-empty dict name -> initial value")
    for name, count in (("steps", steps), ("patience", patience)):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {count!r}")
    check_value("loss_tol", loss_tol, shape=())
    check_value("grad_tol", grad_tol, shape=(), nonnegative=True)
    check_value("param_rtol", param_rtol, shape=(), nonnegative=True)
    least_squares = isinstance(optimizer, LevenbergMarquardt) or _is_least_squares_solver(optimizer)
    if optimizer is not None and not (isinstance(optimizer, optax.GradientTransformation) or least_squares):
        raise TypeError(
            "optimizer must be an optax GradientTransformation (optax.adam(...)), LevenbergMarquardt() or an "
            f"optimistix least-squares solver (optimistix.LevenbergMarquardt(...)), got {optimizer!r}"
        )
    if least_squares and problem is None:
        raise TypeError(f"{type(optimizer).__name__} needs residuals= or predict= with experiments=, not a scalar loss")
    bounds = dict(bounds or {})
    unknown = set(bounds) - set(params)
    if unknown:
        raise ValueError(f"bounds name parameters that are not fitted: {sorted(unknown)}")
    for name, bound in bounds.items():
        if not isinstance(bound, (Free, Positive, Interval)):
            raise TypeError(f"bounds[{name!r}] must be Free(), Positive() or Interval(lo, hi), got {bound!r}")
    for name in params:
        check_value(f"initial {name}", params[name])
    if experiments is not None:
        data = experiments
        missing = set(per_experiment) - set(params)
        if missing:
            raise ValueError(f"per_experiment names parameters that are not fitted: {sorted(missing)}")
        for k in per_experiment:
            if np.ndim(params[k]) == 0 or np.shape(params[k])[0] != experiments.count:
                raise ValueError(
                    f"per-experiment parameter {k!r} needs the leading axis E = {experiments.count}, "
                    f"got shape {np.shape(params[k])}"
                )
    maps = {k: bounds.get(k, Free()) for k in params}
    if _is_least_squares_solver(optimizer):
        start = time.perf_counter()
        losses, gnorms, history, converged = _fit_optimistix(
            problem, optimizer, {k: np.asarray(v, dtype=float) for k, v in params.items()}, maps, data, steps=steps
        )
        best_step = int(np.argmin(losses))
        best = {k: np.asarray(v[best_step]) for k, v in history.items()}
        return _finish(
            problem, best, losses, gnorms, history, converged, start, best_step, data, bounds, noise, level, desc
        )
    if isinstance(optimizer, LevenbergMarquardt):
        from .._progress import tqdm

        start = time.perf_counter()
        bar = tqdm(total=steps, desc=desc, disable=None if progress else True, leave=False)
        losses, gnorms, history, converged = _fit_lm(
            problem,
            optimizer,
            {k: np.asarray(v, dtype=float) for k, v in params.items()},
            maps,
            data,
            steps=steps,
            loss_tol=loss_tol,
            grad_tol=grad_tol,
            param_rtol=param_rtol,
            patience=patience,
            bar=bar,
        )
        bar.close()
        best_step = int(np.argmin(losses))
        best = {k: np.asarray(v[best_step]) for k, v in history.items()}
        return _finish(
            problem, best, losses, gnorms, history, converged, start, best_step, data, bounds, noise, level, desc
        )
    u = {k: maps[k].to_free(jnp.asarray(v, dtype=jnp.result_type(float))) for k, v in params.items()}
    optimizer = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    state = optimizer.init(u)
    objective_of = loss if problem is None else _mean_square(problem)
    with_data = data is not None or problem is not None
    key = (objective_of if problem is None else problem, tuple(sorted(maps.items())), optimizer, with_data)
    update = _cached(_UPDATES, key, lambda: _make_update(objective_of, maps, optimizer, with_data))

    def natural(u):
        return {k: maps[k].to_param(x) for k, x in u.items()}

    losses, gnorms, history = [], [], {k: [] for k in params}
    best_u, best_loss, best_step = u, np.inf, 0
    converged = False
    start = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, disable=None if progress else True, leave=False)  # None: off without a terminal
    for i in range(steps):
        p = natural(u)
        u_next, state, value, gnorm = update(u, state, data)
        value, gnorm = float(value), float(gnorm)
        try:
            _record(losses, gnorms, history, value, gnorm, p, f"at step {i}")
        except FloatingPointError:
            bar.close()
            raise
        if value < best_loss:
            best_u, best_loss, best_step = u, value, i
        bar.set_postfix(loss=f"{value:.3e}", grad=f"{gnorm:.1e}")
        bar.update()
        if value <= loss_tol or gnorm <= grad_tol:
            converged = True
            break
        u = u_next
        if param_rtol > 0 and i >= patience:
            change = max(
                float(
                    np.max(
                        np.abs(history[k][-1] - history[k][-1 - patience]) / np.maximum(np.abs(history[k][-1]), 1e-300)
                    )
                )
                for k in params
            )
            if change <= param_rtol:
                converged = True
                break
    bar.close()
    best = {k: np.asarray(v) for k, v in natural(best_u).items()}
    return _finish(
        problem, best, losses, gnorms, history, converged, start, best_step, data, bounds, noise, level, desc
    )


def _is_least_squares_solver(optimizer):
    """Whether `optimizer` is an optimistix least-squares solver (optimistix is imported only when it is loaded)."""
    import sys

    optx = sys.modules.get("optimistix")
    return optx is not None and isinstance(optimizer, optx.AbstractLeastSquaresSolver)


_OPTIMISTIX = {}


def _fit_optimistix(problem, solver, params, maps, data, *, steps):
    """`optimistix.least_squares` on the residuals in the unconstrained coordinates, compiled once per
    (problem, names, shapes, bounds, solver, steps): the whole solve is one XLA program.

    optimistix reports no per-iteration history: the result's history holds the
    start and the solution (two entries).
    """
    import optimistix as optx

    names = list(params)
    shapes = [np.shape(params[k]) for k in names]
    leaves, treedef = jax.tree_util.tree_flatten(solver)  # its tolerances may be arrays: keyed by value
    solver_key = (treedef, tuple(repr(np.asarray(x).tolist()) for x in leaves))
    key = (problem, tuple(names), tuple(shapes), tuple(maps[k] for k in names), solver_key, steps)

    def natural(u):
        return {k: maps[k].to_param(u[k]) for k in names}

    def make():
        def r_of(u, data):
            r, valid = problem.residuals(natural(u), data)
            return jnp.where(valid > 0, r, 0.0)

        def run(u0, data):
            # reverse mode where the residuals have no forward mode (the step solves' implicit rule is a custom_vjp)
            jac = "fwd" if _forward_ok(lambda u: r_of(u, data), u0) else "bwd"
            sol = optx.least_squares(r_of, solver, u0, args=data, max_steps=steps, throw=False, options={"jac": jac})
            return sol.value, sol.stats["num_steps"], sol.result == optx.RESULTS.successful

        def loss_grad(u, data):
            r, valid = problem.residuals(natural(u), data)
            m = jnp.maximum(jnp.sum(valid), 1.0)
            value, g = jax.value_and_grad(lambda u: jnp.sum(valid * r_of(u, data) ** 2) / m)(u)
            return value, _norm(g)

        return (
            jax.jit(run, compiler_options=BATCH_COMPILER_OPTIONS),
            jax.jit(loss_grad, compiler_options=BATCH_COMPILER_OPTIONS),
        )

    run, loss_grad = _cached(_OPTIMISTIX, key, make)
    u0 = {k: maps[k].to_free(jnp.asarray(params[k], jnp.result_type(float))) for k in names}
    u, _, converged = run(u0, data)
    losses, gnorms, history = [], [], {k: [] for k in names}
    for where, point in (("at the start", u0), ("at the solution", u)):
        value, gnorm = (float(x) for x in loss_grad(point, data))
        _record(losses, gnorms, history, value, gnorm, natural(point), where)
    return losses, gnorms, history, bool(converged)


def _finish(problem, best, losses, gnorms, history, converged, start, best_step, data, bounds, noise, level, desc):
    found = None
    if problem is not None:
        found = _assess(
            problem,
            {k: jnp.asarray(v) for k, v in best.items()},
            data,
            list(best),
            bounds,
            noise=noise,
            level=level,
            rcond=1e-8,
            rel_std=1.0,
            warn=True,
            label=desc,
        )
    return FitResult(
        params=best,
        loss_history=np.asarray(losses),
        grad_norms=np.asarray(gnorms),
        param_history={k: np.stack(v) for k, v in history.items()},
        steps=len(losses),
        converged=converged,
        seconds=time.perf_counter() - start,
        loss=float(losses[best_step]),
        best_step=best_step,
        uncertainty=found,
    )
