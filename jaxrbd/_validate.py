"""Host-side checks of user input: errors name the argument and the accepted range."""

import jax
import jax.numpy as jnp
import numpy as np


def is_traced(*values):
    """True when any leaf of the values is a tracer (value checks are then skipped)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(values))


def _shape_text(shape):
    return "a scalar" if shape == () else f"of shape {shape}"


def check_shape(name, value, shape):
    """ValueError naming the argument unless it has the shape, or one of the shapes, given.

    Shapes are known under tracing, so this check runs for traced values too.

    Args:
        shape: a shape such as (3,), or a tuple of accepted shapes such as ((), (3,)).
    """
    accepted = shape if shape and isinstance(shape[0], tuple) else (shape,)
    try:
        got = tuple(np.shape(value))
    except jax.errors.TracerArrayConversionError:  # a list that holds tracers
        got = jnp.shape(jnp.asarray(value))
    if got not in accepted:
        raise ValueError(f"{name} must be {' or '.join(map(_shape_text, accepted))}, got shape {got}")


def check_value(
    name, value, *, shape=None, positive=False, nonnegative=False, unit_interval=False, nonzero=False, finite=True
):
    """ValueError naming the argument when a value is out of range (traced values: the shape alone).

    Args:
        name: the argument as the user knows it (`"plane normal"`, `"mass of body 'ball'"`).
        value: a number or array; None passes.
        shape: the accepted shape or shapes (`check_shape`).
        positive: every entry > 0.
        nonnegative: every entry >= 0.
        unit_interval: every entry in [0, 1].
        nonzero: a vector whose squared norm is > 0 (a direction or a quaternion
            that can be normalized).
        finite: reject inf too (NaN is always rejected).
    """
    if value is None:
        return
    if shape is not None:
        check_shape(name, value, shape)
    if is_traced(value):
        return
    try:
        x = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or an array of numbers, got {value!r}") from None
    if np.any(np.isnan(x)) or (finite and not np.all(np.isfinite(x))):
        raise ValueError(f"{name} must be {'finite' if finite else 'a number, not NaN'}, got {value!r}")
    if positive and not np.all(x > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if nonnegative and not np.all(x >= 0):
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    if unit_interval and not np.all((x >= 0) & (x <= 1)):
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    if nonzero and not np.sum(x * x) > 0:
        raise ValueError(f"{name} must be a nonzero vector, got {value!r}")


def check_inertia(name, inertia):
    """ValueError naming the argument unless the (3, 3) inertia is finite, symmetric, positive definite
    and satisfies the triangle inequality I1 + I2 >= I3 on its principal moments (traced values pass)."""
    check_value(name, inertia, shape=(3, 3))
    if is_traced(inertia):
        return
    I = np.asarray(inertia, float)
    if not np.allclose(I, I.T, rtol=0, atol=1e-12 * max(np.max(np.abs(I)), 1e-300)):
        raise ValueError(f"{name} must be a symmetric matrix, got {I.tolist()}")
    moments = np.linalg.eigvalsh(I)
    if not moments[0] > 0:
        raise ValueError(f"{name} must be positive definite, principal moments {moments.tolist()}")
    if moments[0] + moments[1] < moments[2] * (1 - 1e-9):
        raise ValueError(
            f"{name} violates the triangle inequality I1 + I2 >= I3 on its principal "
            f"moments {moments.tolist()}: no rigid body has it"
        )


def host_numpy(*values):
    """numpy where no leaf of the values is traced, else jax.numpy.

    Models are built with it on the host: numpy arithmetic on concrete numbers
    compiles nothing, where each eager jax.numpy operation compiles a small XLA
    program the first time it meets a shape. Callers take their inputs through
    `xp.asarray`: a concrete JAX array closed over by a `jit`ted function is then read
    on the host, where each jax.numpy operation on it would be staged into the trace.
    """
    return jnp if is_traced(*values) else np


def as_array(x, dtype=None):
    """`jnp.asarray(x, dtype)` that compiles nothing for numbers, tuples and numpy arrays: they are converted on
    the host and transferred (eager jax.numpy compiles even a Python float's conversion)."""
    if is_traced(x) or isinstance(x, jax.Array):
        return jnp.asarray(x, dtype=dtype)
    return jax.device_put(np.asarray(x, dtype=dtype))


def as_float(x):
    """x as an array of the default float dtype (float64 with x64 enabled), compiling nothing for concrete x."""
    return as_array(x, jnp.result_type(float))


def host_float(x):
    """x as a numpy array of the default float dtype, or as `as_float` where it is traced."""
    return as_float(x) if is_traced(x) else np.asarray(x, dtype=jnp.result_type(float))


def renamed(where, old, old_value, new, new_value, *, stacklevel=3):
    """The value of keyword `new`, or of its deprecated name `old` with a DeprecationWarning; both: a TypeError."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"{where}: give {new}= only ({old}= is its deprecated name)")
    import warnings

    warnings.warn(f"{where}({old}=...) is deprecated: use {new}=", DeprecationWarning, stacklevel=stacklevel)
    return old_value
