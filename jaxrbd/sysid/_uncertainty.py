"""`uncertainty`: the Gauss-Newton covariance, Student t intervals and the parameters the data do not constrain."""

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from ._bounds import Free, Interval, Positive
from ._problem import _problem


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
    residuals: Callable | None = None,
    params: dict | None = None,
    data: Any = None,
    *,
    predict: Callable | None = None,
    experiments: Any = None,
    per_experiment: Sequence[str] = (),
    bounds: dict | None = None,
    noise: float | None = None,
    level: float = 0.95,
    rcond: float = 1e-8,
    rel_std: float = 1.0,
    warn: bool = True,
) -> "Uncertainty":
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
