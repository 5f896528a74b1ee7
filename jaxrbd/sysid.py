"""System identification: fit physical parameters to observed trajectories by gradient descent (optax).

    def loss(p):
        scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=1.0)
        traj = rbd.simulate(*scene, dt=0.01, steps=100)
        return rbd.sysid.trajectory_loss(traj.q[:, :2], q_obs)

    result = rbd.sysid.fit(loss, {"mu": 0.5}, bounds={"mu": rbd.sysid.Positive()})
    result.params["mu"], result.loss_history, result.grad_norms

Residuals, many experiments, uncertainty. Give the residual vector instead of
a scalar loss and `fit` also returns the Gauss-Newton uncertainty at the
optimum; give a batch of experiments and it shares the physical parameters
across them (the prediction is mapped over the experiments, one after another):

    def predict(p, inputs):                       # one experiment: (T, n)
        scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=inputs["speed"], dim=2)
        return rbd.simulate(*scene, dt=0.01, steps=60).q[:, :1]

    experiments = rbd.sysid.Experiments(x_obs, {"speed": speeds}, mask=None)   # x_obs: (E, T, n)
    result = rbd.sysid.fit(params={"mu": 0.5}, predict=predict, experiments=experiments,
                           bounds={"mu": rbd.sysid.Positive()}, optimizer=rbd.sysid.LevenbergMarquardt(),
                           noise=1e-3)
    result.params["mu"], result.interval["mu"], result.std["mu"], result.best_step
    result.uncertainty.singular_values, result.uncertainty.rms, result.uncertainty.identified

- `fit` returns the best iterate it evaluated (`best_step`, `loss`), not the last.
- `per_experiment=("v0",)` fits nuisance parameters with a leading axis E (an
  initial velocity per throw) beside the shared ones.
- `residuals=fn` (fn(params, data) -> r) is the same without the experiment
  structure; `loss=fn` with `data=` a scalar loss (no uncertainty).
- `residuals=MultipleShooting(run, L)` fits a long or chaotic trajectory in
  segments of L steps, each from its own fitted start state, tied by defects.
- `uncertainty(...)` computes sigma^2 (J^T J)^-1 with sigma^2 = RSS / (m - p),
  J the residual Jacobian in the natural parameters, Student t intervals with
  m - p degrees of freedom, and names in a warning every parameter the data do
  not constrain, with the range the data allow (a block that sticks: mu >= about
  tan(angle)).
- `LevenbergMarquardt()` suits residual fits: a few Gauss-Newton steps, and it
  reuses the compiled Jacobian of the uncertainty (one compilation per fit).
- No recompilation: the data are an argument of the compiled step, cached on
  (function, bounds, optimizer). Define the function once (not a new lambda per
  data set) and pass the data through `data=` / `experiments=`; a fit on new data
  of the same shapes then compiles nothing.

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

import functools
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ._config import BATCH_COMPILER_OPTIONS
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

    def slope(self, u):
        """d p / d u (numpy)."""
        return np.ones_like(np.asarray(u, dtype=float))


class Positive(eqx.Module):
    """A positive parameter, optimized in log space: p = exp(u)."""

    def to_param(self, u):
        return jnp.exp(u)

    def slope(self, u):
        """d p / d u (numpy)."""
        return np.exp(np.asarray(u, dtype=float))

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

    def slope(self, u):
        """d p / d u (numpy)."""
        s = 1.0 / (1.0 + np.exp(-np.asarray(u, dtype=float)))
        return (self.hi - self.lo) * s * (1.0 - s)

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


class Experiments(eqx.Module):
    """A batch of E experiments of one system, observed with the same shapes.

    Attributes:
        observed: (E, T, n) the data; NaN entries are missing observations.
        inputs: a pytree whose leaves have the leading axis E: what differs
            between experiments and is known (initial states, time step, slope,
            ...); `predict(params, inputs_e)` receives one experiment's slice.
            None: nothing.
        mask: (E, T, n), (E, n) or (E,) 1 where observed, 0 where not (partial
            observations; an experiment whose mask is all 0 drops out of the fit
            without changing any shape, hence without recompiling). None: all 1.
        weights: (n,) weight per column (for example 1 / sigma_i^2). None: all 1.
    """

    observed: jax.Array
    inputs: object
    mask: jax.Array
    weights: jax.Array

    def __init__(self, observed, inputs=None, mask=None, weights=None):
        observed = jnp.asarray(observed, dtype=jnp.result_type(observed, float))
        if observed.ndim != 3:
            raise ValueError(f"observed must have shape (E, T, n), got {observed.shape}")
        E = observed.shape[0]
        for leaf in jax.tree_util.tree_leaves(inputs):
            if np.ndim(leaf) == 0 or np.shape(leaf)[0] != E:
                raise ValueError(f"every leaf of inputs needs the leading axis E = {E}, got shape {np.shape(leaf)}")
        if mask is None:
            mask = jnp.ones(observed.shape, observed.dtype)
        else:
            mask = jnp.asarray(mask, observed.dtype)
            if mask.ndim == 1:
                mask = mask[:, None, None]
            elif mask.ndim == 2:
                mask = mask[:, None, :]
            try:
                mask = jnp.broadcast_to(mask, observed.shape)
            except ValueError:
                raise ValueError(f"mask of shape {mask.shape} does not fit observed {observed.shape}") from None
        weights = (
            jnp.ones(observed.shape[-1:], observed.dtype) if weights is None else jnp.asarray(weights, observed.dtype)
        )
        if weights.shape != observed.shape[-1:]:
            raise ValueError(f"weights must have shape {observed.shape[-1:]}, got {weights.shape}")
        self.observed = observed
        self.inputs = inputs
        self.mask = mask
        self.weights = weights

    @property
    def count(self):
        """E, the number of experiments."""
        return self.observed.shape[0]


class MultipleShooting(eqx.Module):
    """Residuals of a long or chaotic trajectory cut into K segments, each simulated from its own start state.

    One rollout over a long horizon makes a rugged loss: a small change of a
    parameter moves a late bounce or a tumble by whole steps. Multiple shooting
    fits the start state of every segment (the nodes, nuisance parameters)
    beside the physical parameters, and ties the segments together by the
    defects: the state a segment ends in minus the next segment's start,
    weighted by `continuity` (a penalty, not a constraint; at an exact fit of
    noise-free data the defects are 0).

        def run(params, node):          # one segment from the node (z, vz)
            scene = ...                 # built from params and node
            traj = rbd.simulate(*scene, dt=dt, steps=L, restitution=rbd.Newton())
            return traj.q[:L, 2:3], jnp.stack([traj.q[L, 2], traj.v[L, 2]])

        shooting = rbd.sysid.MultipleShooting(run, L)
        nodes = shooting.nodes_from(states)    # (K, m): every L-th row of a first guess of the states
        result = rbd.sysid.fit(residuals=shooting, data=observed, params={"e": 0.5, "nodes": nodes},
                               optimizer=rbd.sysid.LevenbergMarquardt())
        shooting.defects(result.params)        # (K - 1, m)

    Attributes:
        run: run(params, node) -> (pred, end): the segment from the node state
            (an array of m numbers, in whatever coordinates the user chooses:
            only what the observations and the dynamics need), its (L, n)
            prediction of the observations at the segment's steps 0 .. L - 1,
            and its state after L steps in the node's coordinates. `params`
            holds every parameter but the nodes; `run` is `vmap`ped over the
            segments.
        segment_steps: L, the steps of one segment (>= 1).
        continuity: the weight of the defects (> 0): a defect d enters the
            residuals as continuity * d, beside the prediction errors.
        nodes: the name of the nodes' entry in the parameters, shape (K, m).

    The data are the observed trajectory, (K L, n), NaN where not observed.
    Pass the same object (or an equal one: same function, L, weight and name)
    to every fit: the compiled step is cached on it.
    """

    run: object = eqx.field(static=True)
    segment_steps: int = eqx.field(static=True)
    continuity: float = eqx.field(static=True, default=1.0)
    nodes: str = eqx.field(static=True, default="nodes")

    def __check_init__(self):
        if not callable(self.run):
            raise TypeError(f"MultipleShooting: run must be a function (params, node) -> (pred, end), got {self.run!r}")
        L = self.segment_steps
        if not isinstance(L, int) or isinstance(L, bool) or L < 1:
            raise ValueError(f"MultipleShooting: segment_steps must be an integer >= 1, got {L!r}")
        check_value("MultipleShooting: continuity", self.continuity, shape=(), positive=True)
        if not isinstance(self.nodes, str):
            raise TypeError(f"MultipleShooting: nodes must be the name of a parameter, got {self.nodes!r}")

    def _segments(self, params):
        """(pred (K, L, n), end (K, m), nodes (K, m)) for the parameters."""
        if self.nodes not in params:
            raise KeyError(
                f"MultipleShooting: the parameters have no entry {self.nodes!r} (the segments' start states)"
            )
        nodes = jnp.asarray(params[self.nodes])
        if nodes.ndim != 2:
            raise ValueError(f"MultipleShooting: params[{self.nodes!r}] must have shape (K, m), got {nodes.shape}")
        physical = {k: v for k, v in params.items() if k != self.nodes}
        pred, end = jax.vmap(lambda node: self.run(physical, node))(nodes)
        pred, end = jnp.asarray(pred), jnp.asarray(end)
        K, L = nodes.shape[0], self.segment_steps
        if pred.ndim != 3 or pred.shape[:2] != (K, L):
            raise ValueError(
                f"MultipleShooting: run must return a prediction of shape (L, n) = ({L}, n) per "
                f"segment, got {pred.shape[1:]}"
            )
        if end.shape != nodes.shape:
            raise ValueError(
                f"MultipleShooting: run must return the end state in the node's shape {nodes.shape[1:]}, "
                f"got {end.shape[1:]}"
            )
        return pred, end, nodes

    def __call__(self, params, observed):
        """(r, valid): the prediction errors of every segment, then the weighted defects."""
        pred, end, nodes = self._segments(params)
        K, L, n = pred.shape
        observed = jnp.asarray(observed, pred.dtype)
        if observed.shape != (K * L, n):
            raise ValueError(
                f"MultipleShooting: observed must have shape (K L, n) = ({K * L}, {n}) for K = {K} "
                f"segments of L = {L} steps, got {observed.shape}"
            )
        r_fit, valid = _residual_rows(pred.reshape(K * L, n), observed, 1.0, jnp.ones((n,), pred.dtype))
        gaps = self.continuity * (end[:-1] - nodes[1:]).reshape(-1)
        return jnp.concatenate([r_fit, gaps]), jnp.concatenate([valid, jnp.ones_like(gaps)])

    def defects(self, params):
        """(K - 1, m): where each segment ends minus where the next one starts (unweighted)."""
        _, end, nodes = self._segments(params)
        return end[:-1] - nodes[1:]

    def nodes_from(self, states):
        """(K, m): the start state of every segment, rows 0, L, 2 L, ... of `states` (T, m), a first guess of the
        states at every step (from the data: positions observed, velocities by differences)."""
        states = jnp.asarray(states)
        if states.ndim != 2 or states.shape[0] < self.segment_steps:
            raise ValueError(
                f"MultipleShooting.nodes_from: states must have shape (T, m) with T >= L = "
                f"{self.segment_steps}, got {states.shape}"
            )
        return states[:: self.segment_steps][: states.shape[0] // self.segment_steps]


def _residual_rows(pred, observed, mask, weights):
    """(r, valid): the weighted residuals of one experiment, 0 where not observed."""
    if pred.shape != observed.shape:
        raise ValueError(f"predict returned shape {pred.shape} but one experiment's data have {observed.shape}")
    valid = mask * jnp.isfinite(observed).astype(pred.dtype)
    r = jnp.where(valid > 0, pred - jnp.where(valid > 0, observed, 0.0), 0.0) * jnp.sqrt(weights)
    return r.reshape(-1), (valid > 0).astype(pred.dtype).reshape(-1)


def _split(params, per_experiment):
    return {k: v for k, v in params.items() if k not in per_experiment}, {k: params[k] for k in per_experiment}


def _experiment_functions(predict, per_experiment):
    """The residual function and its per-experiment Jacobian (jacrev per experiment) for `predict`."""

    def one(shared, own, inputs, observed, mask, weights):
        r, valid = _residual_rows(jnp.asarray(predict({**shared, **own}, inputs)), observed, mask, weights)
        return r, (r, valid)

    def each(fn, shared, own, exps):
        # One experiment after another (`lax.map`), not `vmap`ped: a `vmap` batches the simulator's dense solves,
        # and on jaxlib 0.10.2's CPU backend two batched LAPACK kernels at once can deadlock its thread pool (ten
        # throws of a cube hung every time; see `violation_residuals`).
        return jax.lax.map(lambda xs: fn(shared, *xs, exps.weights), (own, exps.inputs, exps.observed, exps.mask))

    def residuals(params, exps):
        shared, own = _split(params, per_experiment)
        _, (r, valid) = each(one, shared, own, exps)
        return r.reshape(-1), valid.reshape(-1)

    def jacobian(params, exps):
        shared, own = _split(params, per_experiment)
        (Js, Jo), (r, valid) = each(jax.jacrev(one, argnums=(0, 1), has_aux=True), shared, own, exps)
        return (Js, Jo), r, valid

    return residuals, jacobian


def _user_residuals(fn, with_data):
    def residuals(params, data):
        out = fn(params, data) if with_data else fn(params)
        r, valid = out if isinstance(out, tuple) else (out, None)
        r = jnp.ravel(jnp.asarray(r))
        valid = jnp.ones_like(r) if valid is None else jnp.broadcast_to(jnp.ravel(jnp.asarray(valid, r.dtype)), r.shape)
        return r * (valid > 0), valid

    return residuals


def _forward_ok(fn, *args):
    try:
        jax.eval_shape(jax.jacfwd(fn), *args)
        return True
    except TypeError:  # a custom_vjp (the simulator's implicit rule) has no forward mode
        return False


class _Problem:
    """A least-squares problem: residuals(params, data) -> (r, valid), its compiled pieces, cached per function."""

    def __init__(self, residuals, jacobian=None, per_experiment=()):
        self.per_experiment = tuple(per_experiment)
        self.residuals = residuals
        self.structured = jacobian
        self.jac = {}  # (names, shapes) or "structured" -> the jitted Jacobian

    def jacobian(self, params, data, names):
        """(J (m, p) in natural parameters, flat in `names` order; r (m,); valid (m,)) as numpy arrays."""
        params = {k: jnp.asarray(params[k]) for k in names}
        if self.structured is not None:
            if "structured" not in self.jac:
                self.jac["structured"] = jax.jit(self.structured, compiler_options=BATCH_COMPILER_OPTIONS)
            (Js, Jo), r, valid = self.jac["structured"](params, data)
            E, m_e = r.shape[0], r.shape[1]
            blocks = []
            for k in names:
                if k in self.per_experiment:
                    Jk = np.asarray(Jo[k]).reshape(E, m_e, -1)
                    s = Jk.shape[2]
                    block = np.zeros((E * m_e, E * s))
                    for e in range(E):
                        block[e * m_e : (e + 1) * m_e, e * s : (e + 1) * s] = Jk[e]
                else:
                    block = np.asarray(Js[k]).reshape(E * m_e, -1)
                blocks.append(block)
            return np.concatenate(blocks, axis=1), np.asarray(r).reshape(-1), np.asarray(valid).reshape(-1)
        shapes = [params[k].shape for k in names]

        def flat_r(theta, data):
            parts, i = {}, 0
            for k, shape in zip(names, shapes):
                size = int(np.prod(shape))
                parts[k] = theta[i : i + size].reshape(shape)
                i += size
            r, valid = self.residuals(parts, data)
            return r, (r, valid)

        theta = jnp.concatenate([jnp.ravel(params[k]) for k in names])
        key = (tuple(names), tuple(shapes))
        if key not in self.jac:  # forward mode where the model has it (p columns), else reverse (m rows)
            forward = _forward_ok(lambda t: flat_r(t, data)[0], theta)
            self.jac[key] = jax.jit(
                (jax.jacfwd if forward else jax.jacrev)(flat_r, has_aux=True), compiler_options=BATCH_COMPILER_OPTIONS
            )
        J, (r, valid) = self.jac[key](theta, data)
        return np.asarray(J), np.asarray(r), np.asarray(valid)


_PROBLEMS = {}
_UPDATES = {}
_CACHE_SIZE = 32
_DEFAULT_OPTIMIZER = optax.adam(0.05)


def _cached(cache, key, make):
    if key not in cache:
        if len(cache) >= _CACHE_SIZE:
            cache.pop(next(iter(cache)))
        cache[key] = make()
    return cache[key]


def _problem(residuals=None, data=None, predict=None, experiments=None, per_experiment=()):
    """The `_Problem` for the user's arguments, or None for a plain loss."""
    per_experiment = tuple(per_experiment)
    if predict is not None or experiments is not None:
        if predict is None or experiments is None:
            raise TypeError("predict= and experiments= go together: predict(params, inputs) -> (T, n) per experiment")
        if not isinstance(experiments, Experiments):
            raise TypeError(f"experiments must be an Experiments(observed, inputs, mask), got {type(experiments)}")
        if residuals is not None or data is not None:
            raise TypeError("give either residuals= (with data=) or predict= with experiments=, not both")
        return _cached(
            _PROBLEMS,
            ("experiments", predict, per_experiment),
            lambda: _Problem(*_experiment_functions(predict, per_experiment), per_experiment),
        )
    if per_experiment:
        raise TypeError("per_experiment= needs predict= and experiments=")
    if residuals is None:
        return None
    if not callable(residuals):
        raise TypeError(f"residuals must be a function of the parameters returning a vector, got {residuals!r}")
    with_data = data is not None
    return _cached(
        _PROBLEMS, ("residuals", residuals, with_data), lambda: _Problem(_user_residuals(residuals, with_data))
    )


class Uncertainty(eqx.Module):
    """Gauss-Newton uncertainty of fitted parameters (see `uncertainty`). Per-parameter dicts have the parameters' shapes.

    Attributes:
        std: dict of standard deviations (inf where not identified).
        interval: dict name -> (lo, hi) of the two-sided `level` confidence interval,
            value -/+ t_{m-p} std (Student t with m - p degrees of freedom).
        identified: dict of bools; False where the data do not constrain the entry.
        range: dict name -> (lo, hi): for entries not identified, the values of that
            entry (the others held at the optimum) whose residual sum of squares stays
            within chi2_1(level) sigma^2 of the optimum: the data say only that the
            entry lies there; a side the scan never left is -inf / +inf (or the
            bound of an `Interval`). NaN for identified entries.
        covariance: (p, p) sigma^2 (J^T J)^-1 over the flat entries in `names` order
            (pseudo-inverse on the identified entries; NaN rows for the others).
        names: the parameter names, the order of the flat entries.
        singular_values: the singular values of the residual Jacobian J (m, p) in
            the natural parameters, largest first.
        rms: the RMS of the (weighted) residuals at the optimum, sqrt(RSS / m).
        sigma: the noise level used: sqrt(RSS / (m - p)).
        noise: the noise level the user gave, or None.
        m: the number of observed residuals; p: the number of parameters; dof: m - p.
        level: the confidence level; quantile: the Student t quantile used.
    """

    std: dict
    interval: dict
    identified: dict
    range: dict
    covariance: np.ndarray
    names: tuple
    singular_values: np.ndarray
    rms: float
    sigma: float
    noise: object
    m: int
    p: int
    dof: int
    level: float
    quantile: float


def _scan_range(problem, params, data, names, bounds, index, rss_min, threshold):
    """(lo, hi) of flat entry `index`: how far it moves, in its unconstrained coordinate, before RSS > threshold."""
    sizes = [int(np.size(params[k])) for k in names]
    offsets = np.cumsum([0] + sizes)
    j = int(np.searchsorted(offsets, index, side="right") - 1)
    name, within = names[j], index - offsets[j]
    bound = bounds.get(name, Free())
    base = np.array(params[name], dtype=float)
    u0 = float(np.ravel(np.asarray(bound.to_free(base)))[within])
    span = 12.0 if isinstance(bound, (Positive, Interval)) else 1e3 * max(1.0, abs(u0))

    def rss(u):
        value = base.copy().reshape(-1)
        value[within] = float(bound.to_param(jnp.asarray(u)))
        trial = {k: (jnp.asarray(value.reshape(base.shape)) if k == name else params[k]) for k in params}
        _, r, valid = problem.jacobian(trial, data, names)  # the compiled Jacobian also gives r: no new compile
        return float((r * valid) @ (r * valid))

    ends = []
    for direction in (-1.0, 1.0):
        far = u0 + direction * span
        if rss(far) <= threshold:
            end = {Positive: (0.0, np.inf), Interval: (getattr(bound, "lo", 0.0), getattr(bound, "hi", 1.0))}
            ends.append(end.get(type(bound), (-np.inf, np.inf))[direction > 0])
            continue
        inside, outside = u0, far
        for _ in range(30):  # 12 / 2^30: 1e-8 in the unconstrained coordinate
            mid = 0.5 * (inside + outside)
            inside, outside = (mid, outside) if rss(mid) <= threshold else (inside, mid)
        ends.append(float(bound.to_param(jnp.asarray(inside))))
    return tuple(ends)


def _assess(problem, params, data, names, bounds, *, noise, level, rcond, rel_std, warn, label):
    from scipy import stats

    J, r, valid = problem.jacobian(params, data, names)
    keep = valid > 0
    J, r = J[keep], r[keep]
    m, p = J.shape
    theta = np.concatenate([np.ravel(np.asarray(params[k], dtype=float)) for k in names])
    dof = m - p
    if dof < 1:
        raise ValueError(f"{label}: {m} observed residuals cannot give the uncertainty of {p} parameters (need m > p)")
    rss = float(r @ r)
    sigma2 = rss / dof
    col = np.linalg.norm(J, axis=0)
    flat = col <= 1e-12 * max(float(col.max()), 1e-300) + 1e-300  # d r / d theta_j vanishes: no information
    ok = ~flat
    cov = np.full((p, p), np.nan)
    if ok.any():
        cov_ok = sigma2 * np.linalg.pinv(J[:, ok].T @ J[:, ok], rcond=1e-15, hermitian=True)
        cov[np.ix_(ok, ok)] = cov_ok
    std = np.where(ok, np.sqrt(np.abs(np.diag(cov))), np.inf)
    singular = np.linalg.svd(J, compute_uv=False)
    # Scale-type entries (Positive() or Interval bounds: masses, mu, e) are judged relative to their value;
    # offset-type entries (Free(): positions, velocities, whose 0 is arbitrary) by their column alone.
    relative = np.concatenate(
        [np.full(int(np.size(params[k])), not isinstance(bounds.get(k, Free()), Free)) for k in names]
    )
    # A direction of J D with a tiny singular value; D = |theta| (relative) or 1 / |column| (offset entries).
    scale = np.where(relative, np.maximum(np.abs(theta), 1e-12), 1.0 / np.maximum(col, 1e-300))
    _, s_scaled, Vt = np.linalg.svd(J * scale, full_matrices=False)
    weak = np.zeros(p, bool)
    if s_scaled.size and s_scaled[0] > 0:
        for s_k, v_k in zip(s_scaled, Vt):
            if s_k < rcond * s_scaled[0]:
                weak |= v_k**2 > 0.1
    loose = relative & (np.abs(theta) > 0) & (std > rel_std * np.abs(theta))
    unidentified = flat | weak | loose
    t = float(stats.t.ppf(0.5 + level / 2, dof))
    rng = np.full((p, 2), np.nan)
    if unidentified.any():
        threshold = rss + float(stats.chi2.ppf(level, 1)) * sigma2 + 1e-12 * rss
        for i in np.where(unidentified)[0]:
            rng[i] = _scan_range(problem, params, data, names, bounds, int(i), rss, threshold)

    def per_name(x):
        out, i = {}, 0
        for k in names:
            shape = np.shape(params[k])
            size = int(np.prod(shape))
            out[k] = x[i : i + size].reshape(shape + x.shape[1:])
            i += size
        return out

    result = Uncertainty(
        std=per_name(std),
        interval={
            k: (v[..., 0], v[..., 1]) for k, v in per_name(np.stack([theta - t * std, theta + t * std], -1)).items()
        },
        identified=per_name(~unidentified),
        range={k: (v[..., 0], v[..., 1]) for k, v in per_name(rng).items()},
        covariance=cov,
        names=tuple(names),
        singular_values=singular,
        rms=float(np.sqrt(rss / m)),
        sigma=float(np.sqrt(sigma2)),
        noise=noise,
        m=m,
        p=p,
        dof=dof,
        level=level,
        quantile=t,
    )
    if warn:
        _warn(result, params, bounds, names, flat, weak, loose, rng, label)
    return result


def _warn(result, params, bounds, names, flat, weak, loose, rng, label):
    import warnings

    entries = []
    for k in names:
        size = int(np.size(params[k]))
        entries += [k if size == 1 else f"{k}[{i}]" for i in range(size)]
    lines = []
    for i, name in enumerate(entries):
        why = (
            "the residuals do not depend on it (zero gradient)"
            if flat[i]
            else "a near-zero singular value of the residual Jacobian"
            if weak[i]
            else "its standard deviation exceeds its value"
            if loose[i]
            else None
        )
        if why:
            lo, hi = rng[i]
            lines.append(f"{name} ({why}); the data only say {lo:.6g} <= {name} <= {hi:.6g}")
    if lines:
        warnings.warn(f"{label}: not identified by the data: " + "; ".join(lines), stacklevel=3)
    if result.noise is not None and result.rms > 1.5 * result.noise:
        warnings.warn(
            f"{label}: the RMS residual {result.rms:.3g} is far above the noise level {result.noise:.3g}: "
            "the model does not explain the data (wrong model, wrong data, or a local minimum)",
            stacklevel=3,
        )
    for k in names:
        bound = bounds.get(k, Free())
        if isinstance(bound, Interval):
            s = (np.asarray(params[k], dtype=float) - bound.lo) / (bound.hi - bound.lo)
            if np.any((s < 1e-6) | (s > 1 - 1e-6)):
                warnings.warn(f"{label}: {k} sits on a bound of Interval({bound.lo}, {bound.hi})", stacklevel=3)


def uncertainty(
    residuals=None,
    params=None,
    data=None,
    *,
    predict=None,
    experiments=None,
    per_experiment=(),
    bounds=None,
    noise=None,
    level=0.95,
    rcond=1e-8,
    rel_std=1.0,
    warn=True,
):
    """The Gauss-Newton uncertainty of least-squares parameters at an optimum.

    With r(theta) the residual vector (m observed entries) and J = dr/dtheta (m, p)
    in the natural parameters (`jax.jacfwd` where the model allows forward mode,
    else `jax.jacrev`; for `Experiments`, a `jacrev` per experiment, one after another):
    covariance = sigma^2 (J^T J)^-1 with sigma^2 = RSS / (m - p); the intervals are
    theta -/+ t std, t the Student t quantile with m - p degrees of freedom (the
    noise is estimated from the residuals; t tends to the normal 1.96 for large m).
    The approximation is linear: exact for a model linear in theta, good when the
    interval is small against the curvature of r.

    An entry is *not identified* (named in a `warnings.warn`, `identified` False)
    when its Jacobian column is zero (a block that sticks all the time: mu does not
    change the trajectory), when it takes part in a singular direction of the
    scaled Jacobian J D below `rcond` times the largest, or when its standard
    deviation exceeds `rel_std` times its value. Entries with `Positive()` or
    `Interval` bounds (masses, mu, e) are scale-type: D holds |theta| and the
    standard deviation is judged against the value. `Free()` entries (positions,
    velocities: offset-type, 0 means nothing special) are judged by their column
    alone: D holds 1 / |column|, so a singular direction means they cannot be told
    apart from other entries, and their value is not compared with their standard
    deviation. For such
    entries `range` gives, with the other entries held at the optimum, the values
    whose RSS stays within chi2_1(level) sigma^2 of the optimum (a likelihood-ratio
    bound, found by bisection in the entry's unconstrained coordinate): for the
    sticking block, mu >= (about) tan(angle), the data only say that it sticks.

    Args:
        residuals: residuals(params) or, with `data`, residuals(params, data) ->
            the residual vector r (any shape; flattened), or (r, valid) with valid
            1 where observed. Weight r by 1/sigma_i yourself if the noise differs.
        params: dict name -> value at the optimum (natural units).
        data: the data argument of `residuals` (a pytree of arrays).
        predict: the many-experiment form's prediction (see `fit`).
        experiments: the many-experiment form's experiments (see `fit`).
        per_experiment: the many-experiment form's per-experiment names (see `fit`).
        bounds: the `fit` bounds (used by the scan of unidentified entries).
        noise: the noise level you expect (same units as r); the result reports it
            beside the RMS residual and warns when the RMS is more than 1.5 times it.
        level: the confidence level of `interval`.
        rcond: the relative singular value below which a direction is unidentified.
        rel_std: the relative standard deviation above which a scale-type entry is unidentified.
        warn: emit the warnings.

    Returns:
        An `Uncertainty`.
    """
    if not isinstance(params, dict) or not params:
        raise TypeError("params must be a non-empty dict name -> value")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    problem = _problem(residuals, data, predict, experiments, per_experiment)
    if problem is None:
        raise TypeError(
            "uncertainty needs residuals= (a function returning the residual vector) or predict= with experiments="
        )
    data = experiments if experiments is not None else data
    params = {k: jnp.asarray(v, dtype=jnp.result_type(v, float)) for k, v in params.items()}
    return _assess(
        problem,
        params,
        data,
        list(params),
        dict(bounds or {}),
        noise=noise,
        level=level,
        rcond=rcond,
        rel_std=rel_std,
        warn=warn,
        label="uncertainty",
    )


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
        if not (np.isfinite(value) and np.isfinite(gnorm)):
            current = {k: np.asarray(v).tolist() for k, v in p.items()}
            raise FloatingPointError(f"fit: non-finite loss or gradient at step {i} with parameters {current}")
        losses.append(value)
        gnorms.append(gnorm)
        for k in names:
            history[k].append(np.asarray(p[k]))
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
    loss=None,
    params=None,
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
    data=None,
    residuals=None,
    predict=None,
    experiments=None,
    per_experiment=(),
    noise=None,
    level=0.95,
):
    """Minimize a loss over the parameters by gradient descent with optax.

    Three ways to state the problem:

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
        loss: a function of a dict of parameters (and `data`), returning a scalar;
            it usually simulates a scene built from them and compares with data
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
    from ._progress import tqdm

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
    if optimizer is not None and not isinstance(optimizer, (optax.GradientTransformation, LevenbergMarquardt)):
        raise TypeError(
            f"optimizer must be an optax GradientTransformation (optax.adam(...)) or LevenbergMarquardt(), got {optimizer!r}"
        )
    if isinstance(optimizer, LevenbergMarquardt) and problem is None:
        raise TypeError("LevenbergMarquardt() needs residuals= or predict= with experiments=, not a scalar loss")
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
    if isinstance(optimizer, LevenbergMarquardt):
        from ._progress import tqdm

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
        if not (np.isfinite(value) and np.isfinite(gnorm)):
            bar.close()
            current = {k: np.asarray(v).tolist() for k, v in p.items()}
            raise FloatingPointError(f"fit: non-finite loss or gradient at step {i} with parameters {current}")
        losses.append(value)
        gnorms.append(gnorm)
        for k in params:
            history[k].append(np.asarray(p[k]))
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


# --- The complementarity-violation loss: no rollout --------------------------------


def _smooth_cone(system, q):
    """The exact smooth cone that scores a step: the system's own when smooth, else Coulomb's law with its tangents."""
    from .cones import EllipticCone
    from .cones._smooth import _SmoothCone
    from .stepping import default_cone

    contacts = jax.eval_shape(system.contacts, q)
    cone = default_cone(system, contacts)
    if isinstance(cone, _SmoothCone) and not getattr(cone, "polyhedral", None):
        return cone
    if contacts.tangents == 1:
        return _LineCone()
    return EllipticCone()


def _line_cone_class():
    from .cones._smooth import _SmoothCone

    class LineCone(_SmoothCone):
        """Coulomb's law on one tangent, |c_t| <= mu c_n, as the smooth cone's NCP (the exact planar law)."""

        def _scales(self):
            return (jnp.ones(()),)

    return LineCone


_LINE_CONE = []


def _LineCone():
    if not _LINE_CONE:
        _LINE_CONE.append(_line_cone_class())
    return _LINE_CONE[0]()


def velocities_from_positions(system, q, dt):
    """(T, nv) the velocities v_1..v_T that the scheme's update q_{k+1} = q_k + h G(q_k) v_{k+1} implies.

    v_{k+1} = G(q_k)^+ (q_{k+1} - q_k) / h: exact for coordinates the step
    integrates linearly (positions, planar angles); first order for quaternions,
    which the step renormalizes.
    """
    q = jnp.asarray(q)
    return jax.vmap(lambda a, b: jnp.linalg.lstsq(system.G(a), (b - a) / dt)[0])(q[:-1], q[1:])


def _step_violation(system, cone, scheme, dt, weight, iterations, t, q, v, v_next):
    """The residual vector R(z*, theta) of one observed step, z* its minimizer over the impulses (held fixed)."""
    from .model import State
    from .stepping import step_problem_at

    prob, _ = step_problem_at(system, State(t, q, v), dt, scheme=scheme, cone=cone)
    L = jnp.linalg.cholesky(prob.M)
    n_free = prob.problem.n_free
    free = jnp.arange(prob.problem.n) < n_free

    def R(z, prob):
        w = prob.problem.F(z)
        phi = jnp.where(free, w, jnp.minimum(z, w))
        return jnp.concatenate([L.T @ (v_next - prob.velocity(z)), weight * phi])

    # start: the smallest impulses (in the M^-1 norm) that explain v+ (Delassus normal equations, Tikhonov)
    W = prob.problem.args["W"]
    rhs = jax.jacfwd(prob.impulse)(jnp.zeros(prob.problem.n, q.dtype)).T @ (v_next - prob.b)
    eps = 1e-12 * (jnp.trace(W) / W.shape[0] + 1e-300)
    z0 = jnp.linalg.solve(W + eps * jnp.eye(W.shape[0], dtype=W.dtype), rhs)
    fixed = jax.lax.stop_gradient(prob)

    # Levenberg-Marquardt on |R(z)|^2 in z alone, a fixed number of iterations (z ~ 20 unknowns per step)
    def body(carry, _):
        z, lam = carry
        r = R(z, fixed)
        Jz = jax.jacfwd(R)(z, fixed)
        A = Jz.T @ Jz
        g = Jz.T @ r
        scale = jnp.maximum(jnp.diag(A), 1e-12 * jnp.max(jnp.diag(A)) + 1e-300)
        dz = -jnp.linalg.solve(A + lam * jnp.diag(scale), g)
        better = jnp.sum(R(z + dz, fixed) ** 2) < jnp.sum(r * r)
        return (jnp.where(better, z + dz, z), jnp.where(better, lam / 3.0, lam * 10.0)), None

    (z, _), _ = jax.lax.scan(body, (jax.lax.stop_gradient(z0), jnp.asarray(1e-3, q.dtype)), None, length=iterations)
    return R(jax.lax.stop_gradient(z), prob)


def violation_residuals(system, q, v=None, *, dt, t0=0.0, scheme=None, cone=None, weight=1.0, iterations=30):
    """(K, m) the complementarity-violation residuals of K observed steps: a loss without rollouts.

    For each observed step (q_k, v_k) -> v_{k+1}, the step's complementarity
    problem is built at the observed state with the system's parameters
    (`jaxrbd.stepping.step_problem_at`: the same free motion, contact rows and
    normal offsets as the simulator's step), as the exact smooth cone's mixed NCP
    (000 eq. (18)-(22)), whose unknowns z are the contact impulses themselves.
    The step is scored by

        L_k(theta) = min_z |L^T (v_{k+1} - v+(z))|^2 + weight^2 |phi(z)|^2,

    the ContactNets idea (Pfrommer et al. 2020) with the problem's own natural
    map phi (equality rows w, complementarity rows min(z, w)): the first term is
    the dynamics left unexplained by the impulses z (M = L L^T, the kinetic-energy
    norm), the second how far z is from satisfying the contact law (normal
    complementarity, Coulomb's law with maximal dissipation). Data the model
    explains exactly give L_k = 0; with a wrong mu no impulse satisfies both.
    The inner minimum is taken by a fixed number of Levenberg-Marquardt steps in z
    from the least-norm impulses that explain v_{k+1}, and z* is then held fixed:
    by the envelope theorem the gradient in the parameters of the minimum is
    the partial one, so nothing is differentiated through the inner solve.

    The system's cone picks the law: a smooth cone (`EllipticCone`,
    `SoftFingerCone`, `MixedCone`) is used as is; a polyhedral cone is replaced
    by the exact law on its tangents (one tangent: |c_t| <= mu c_n, which
    `PlanarCone` is exactly; two: the elliptic cone, which a polyhedral cone only
    approximates). No impact law: the steps are inelastic (Stewart-Trinkle or
    Anitescu-Potra rows of `scheme`).

    Args:
        system: the `System`, built from the parameters being fitted (traced).
        q: (K + 1, nq) observed configurations.
        v: (K + 1, nv) observed velocities, or None: the velocities are taken from
            q by the scheme's own update (`velocities_from_positions`), which loses
            the first step (K - 1 steps are scored).
        dt: the step size h of the data.
        t0: the time of q[0] (for time-dependent forces).
        scheme: `StewartTrinkle()` (default) or `AnitescuPotra(...)`.
        cone: the smooth cone to score with (None: see above).
        weight: the weight of the contact-law rows against the dynamics rows.
        iterations: inner Levenberg-Marquardt steps per observed step.

    Returns:
        (K, n_v + n_z) residuals, one row per observed step. The steps are scored
        one after another (`lax.map`), not `vmap`ped: a `vmap` batches their
        dense solves, and on jaxlib 0.10.2's CPU backend two batched LAPACK kernels
        running at once can each wait for the other's share of the 2-thread pool
        (a deadlock, seen every time on P2's four balls; a gdb stack shows both
        threads in `ParallelBatchMap`). The price: value and gradient on a 40-step
        planar block cost 7.0 ms instead of 2.1 ms.
    """
    from .stepping import StewartTrinkle

    scheme = StewartTrinkle() if scheme is None else scheme
    q = jnp.asarray(q)
    if v is None:
        v = velocities_from_positions(system, q, dt)
        q = q[1:]
        t0 = t0 + dt
    v = jnp.asarray(v, q.dtype)
    if q.ndim != 2 or v.ndim != 2 or v.shape[0] != q.shape[0] or q.shape[0] < 2:
        raise ValueError(f"q (K + 1, nq) and v (K + 1, nv) with K >= 1 needed, got {q.shape} and {v.shape}")
    cone = _smooth_cone(system, q[0]) if cone is None else cone
    t = t0 + dt * jnp.arange(q.shape[0] - 1, dtype=q.dtype)
    one = lambda t, q, v, v_next: _step_violation(system, cone, scheme, dt, weight, iterations, t, q, v, v_next)
    return jax.lax.map(lambda args: one(*args), (t, q[:-1], v[:-1], v[1:]))


def violation_loss(system, q, v=None, *, dt, **kwargs):
    """The mean over observed steps of the squared complementarity violation (`violation_residuals`).

    A loss in the parameters of `system` that needs no rollout: each observed
    step is scored on its own, so it is as cheap as one step per sample
    and does not compound errors over a long trajectory. Differentiable; use it
    with `fit(loss=...)` or `violation_residuals` with `fit(residuals=...)`.
    """
    r = violation_residuals(system, q, v, dt=dt, **kwargs)
    return jnp.mean(jnp.sum(r * r, axis=-1))
