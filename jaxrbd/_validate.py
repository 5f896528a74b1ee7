"""Host-side checks of user input: errors name the argument and the accepted range."""

import jax
import jax.numpy as jnp
import numpy as np


def is_traced(*values):
    """True when any leaf of the values is a tracer (value checks are then skipped)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(values))


def check_value(name, value, *, positive=False, nonnegative=False, unit_interval=False):
    """ValueError naming the argument when a concrete value is out of range (traced values pass)."""
    if value is None or is_traced(value):
        return
    x = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not np.all(x > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if nonnegative and not np.all(x >= 0):
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    if unit_interval and not np.all((x >= 0) & (x <= 1)):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def as_float(x):
    """x as an array of the default float dtype (float64 with x64 enabled)."""
    return jnp.asarray(x, dtype=jnp.result_type(float))
