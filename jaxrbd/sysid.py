"""System identification: fit physical parameters to observed trajectories by gradient descent (optax).

    def loss(p):
        scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=1.0)
        traj = rbd.simulate(*scene, dt=0.01, steps=100)
        return rbd.sysid.trajectory_loss(traj.q[:, :2], q_obs)

    result = rbd.sysid.fit(loss, {"mu": 0.5}, bounds={"mu": rbd.sysid.Positive()})
    result.params["mu"], result.loss_history, result.grad_norms

Each parameter is optimized in an unconstrained coordinate u: `Positive()` maps
u to exp(u) (masses, mu, e_r: log space), `Interval(lo, hi)` to lo + (hi - lo)
sigmoid(u) (restitution: `Interval(0, 1)`), `Free()` is the identity.

Identifiability and `grad_smoothing`. Contact makes some exact gradients zero:
a block that sticks for the whole observation does not move whatever mu is, so
the exact d(loss)/d(mu) is 0 and mu cannot be identified from such data (any mu
above the sticking threshold fits). Where the data cross a switch (the block
stops, a contact closes) the exact gradient also jumps. `simulate(...,
grad_smoothing=eps)` differentiates each step through the smoothed
Fischer-Burmeister residual instead, which blends the two sides of a switch over
a width eps in the impulses; it does not change the forward simulation, only
the gradient. Use it (eps ~ 1e-6-1e-4 of the impulses) when a fit stalls on a
plateau; it cannot create information that the data do not hold.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._validate import check_value


def _norm(tree):
    tree_utils = getattr(optax, "tree", None)
    return tree_utils.norm(tree) if hasattr(tree_utils, "norm") else optax.global_norm(tree)


class Free(eqx.Module):
    """An unconstrained parameter (identity map)."""

    def to_param(self, u):
        return u

    def to_free(self, p):
        return p


class Positive(eqx.Module):
    """A positive parameter, optimized in log space: p = exp(u)."""

    def to_param(self, u):
        return jnp.exp(u)

    def to_free(self, p):
        if not np.all(np.asarray(p) > 0):
            raise ValueError(f"a Positive() parameter must start > 0, got {p!r}")
        return jnp.log(p)


class Interval(eqx.Module):
    """A parameter in (lo, hi): p = lo + (hi - lo) sigmoid(u). `Interval(0, 1)` for restitution."""

    lo: float = eqx.field(static=True, default=0.0)
    hi: float = eqx.field(static=True, default=1.0)

    def __check_init__(self):
        check_value("Interval lo", self.lo, shape=())
        check_value("Interval hi", self.hi, shape=())
        if not self.hi > self.lo:
            raise ValueError(f"Interval needs lo < hi, got ({self.lo}, {self.hi})")

    def to_param(self, u):
        return self.lo + (self.hi - self.lo) * jax.nn.sigmoid(u)

    def to_free(self, p):
        s = (np.asarray(p, dtype=float) - self.lo) / (self.hi - self.lo)
        if not np.all((s > 0) & (s < 1)):
            raise ValueError(f"an Interval({self.lo}, {self.hi}) parameter must start strictly inside, got {p!r}")
        return jnp.log(s) - jnp.log1p(-s)


def trajectory_loss(pred, observed, mask=None, weights=None):
    """Mean squared error over the observed entries.

    Args:
        pred: (T, n) simulated quantities (positions, velocities, ...).
        observed: (T, n) the data; NaN entries are ignored (missing observations).
        mask: optional (T, n) or (n,) array, 1 where an entry is observed (partial
            observations), 0 elsewhere.
        weights: optional (n,) weight per column (for example 1 / sigma^2).
    """
    pred, observed = jnp.asarray(pred), jnp.asarray(observed)
    if pred.shape != observed.shape:
        raise ValueError(f"pred has shape {pred.shape} but observed has {observed.shape}")
    m = jnp.isfinite(observed).astype(pred.dtype)
    if mask is not None:
        m = m * jnp.broadcast_to(jnp.asarray(mask, pred.dtype), pred.shape)
    r = jnp.where(m > 0, pred - jnp.where(m > 0, observed, 0.0), 0.0)
    if weights is not None:
        r = r * jnp.sqrt(jnp.asarray(weights, pred.dtype))
    return jnp.sum(r * r) / jnp.maximum(jnp.sum(m), 1.0)


class FitResult(eqx.Module):
    """The result of `fit`.

    Attributes:
        params: dict of the fitted parameters (in their natural units).
        loss_history: (k,) the loss at each optimizer step (before the update).
        grad_norms: (k,) the gradient norm in the unconstrained coordinates.
        param_history: dict of (k,) arrays, each parameter at each step.
        steps: the number of optimizer steps taken.
        converged: True if a tolerance stopped the fit (False: the step budget did).
        seconds: wall time of the fit, compile included.
    """

    params: dict
    loss_history: np.ndarray
    grad_norms: np.ndarray
    param_history: dict
    steps: int
    converged: bool
    seconds: float


def fit(
    loss,
    params,
    *,
    bounds=None,
    optimizer=None,
    steps=200,
    loss_tol=0.0,
    grad_tol=1e-10,
    param_rtol=0.0,
    patience=5,
    progress=True,
    desc="fit",
):
    """Minimize `loss(params)` over the parameters by gradient descent with optax.

    Args:
        loss: a function of a dict of parameters, returning a scalar; it usually
            simulates a scene built from them and compares with data
            (`trajectory_loss`). It is `jit`-compiled once.
        params: dict name -> initial value (scalars or arrays).
        bounds: dict name -> `Free()`, `Positive()` or `Interval(lo, hi)`;
            missing names are `Free()`.
        optimizer: any optax `GradientTransformation`; default `optax.adam(0.05)`
            (steps of about 5% in log space for `Positive()` parameters). Line-search
            methods such as `optax.lbfgs()` get the objective too; they suit
            ill-conditioned fits of several coupled parameters.
        steps: the step budget (>= 1).
        loss_tol: stop when the loss is at most this.
        grad_tol: stop when the gradient norm is at most this.
        param_rtol: stop when every parameter has changed by at most this
            (relative) over the last `patience` steps; 0 disables it.
        patience: see `param_rtol`.
        progress: show a tqdm progress bar with the loss.
        desc: the progress bar's label.

    Returns:
        A `FitResult`. A non-finite loss or gradient stops the fit with an error
        naming the step and the parameters.
    """
    from tqdm.auto import tqdm

    if not callable(loss):
        raise TypeError(f"loss must be a function of the dict of parameters, got {loss!r}")
    if not isinstance(params, dict) or not params:
        raise TypeError("params must be a non-empty dict name -> initial value")
    for name, count in (("steps", steps), ("patience", patience)):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {count!r}")
    check_value("loss_tol", loss_tol, shape=())
    check_value("grad_tol", grad_tol, shape=(), nonnegative=True)
    check_value("param_rtol", param_rtol, shape=(), nonnegative=True)
    if optimizer is not None and not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer must be an optax GradientTransformation (optax.adam(...)), got {optimizer!r}")
    bounds = dict(bounds or {})
    unknown = set(bounds) - set(params)
    if unknown:
        raise ValueError(f"bounds name parameters that are not fitted: {sorted(unknown)}")
    for name, bound in bounds.items():
        if not isinstance(bound, (Free, Positive, Interval)):
            raise TypeError(f"bounds[{name!r}] must be Free(), Positive() or Interval(lo, hi), got {bound!r}")
    for name in params:
        check_value(f"initial {name}", params[name])
    maps = {k: bounds.get(k, Free()) for k in params}
    u = {k: maps[k].to_free(jnp.asarray(v, dtype=jnp.result_type(float))) for k, v in params.items()}
    optimizer = optax.adam(0.05) if optimizer is None else optimizer
    state = optimizer.init(u)

    def natural(u):
        return {k: maps[k].to_param(x) for k, x in u.items()}

    objective = lambda u: loss(natural(u))
    extra = isinstance(optimizer, optax.GradientTransformationExtraArgs)

    @jax.jit
    def update(u, state):
        value, g = jax.value_and_grad(objective)(u)
        gnorm = _norm(g)
        if extra:  # line-search methods (optax.lbfgs) need the objective
            updates, state = optimizer.update(g, state, u, value=value, grad=g, value_fn=objective)
        else:
            updates, state = optimizer.update(g, state, u)
        return optax.apply_updates(u, updates), state, value, gnorm

    losses, gnorms, history = [], [], {k: [] for k in params}
    converged = False
    start = time.perf_counter()
    bar = tqdm(total=steps, desc=desc, disable=None if progress else True, leave=False)  # None: off without a terminal
    for i in range(steps):
        p = natural(u)
        u_next, state, value, gnorm = update(u, state)
        value, gnorm = float(value), float(gnorm)
        if not (np.isfinite(value) and np.isfinite(gnorm)):
            bar.close()
            current = {k: np.asarray(v).tolist() for k, v in p.items()}
            raise FloatingPointError(f"fit: non-finite loss or gradient at step {i} with parameters {current}")
        losses.append(value)
        gnorms.append(gnorm)
        for k in params:
            history[k].append(np.asarray(p[k]))
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
    final = natural(u)
    return FitResult(
        params={k: np.asarray(v) for k, v in final.items()},
        loss_history=np.asarray(losses),
        grad_norms=np.asarray(gnorms),
        param_history={k: np.stack(v) for k, v in history.items()},
        steps=len(losses),
        converged=converged,
        seconds=time.perf_counter() - start,
    )
