"""The residual problem of a fit: one compiled Jacobian per (function, names, shapes), cached."""

import jax
import jax.numpy as jnp
import numpy as np

from .._config import BATCH_COMPILER_OPTIONS
from ._experiments import Experiments, _experiment_functions


def _user_residuals(fn, with_data):
    def residuals(params, data):
        out = fn(params, data) if with_data else fn(params)
        r, valid = out if isinstance(out, tuple) else (out, None)
        r = jnp.ravel(jnp.asarray(r))
        valid = jnp.ones_like(r) if valid is None else jnp.broadcast_to(jnp.ravel(jnp.asarray(valid, r.dtype)), r.shape)
        return jnp.where(valid > 0, r, 0.0), valid  # a NaN where nothing was observed does not count

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
