"""`trajectory_loss`: the mean square misfit of a predicted trajectory, with a mask and weights."""

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


def trajectory_loss(
    pred: ArrayLike, observed: ArrayLike, mask: ArrayLike | None = None, weights: ArrayLike | None = None
) -> jax.Array:
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


def _residual_rows(pred, observed, mask, weights):
    """(r, valid): the weighted residuals of one experiment, 0 where not observed."""
    if pred.shape != observed.shape:
        raise ValueError(f"predict returned shape {pred.shape} but one experiment's data have {observed.shape}")
    valid = mask * jnp.isfinite(observed).astype(pred.dtype)
    r = jnp.where(valid > 0, pred - jnp.where(valid > 0, observed, 0.0), 0.0) * jnp.sqrt(weights)
    return r.reshape(-1), (valid > 0).astype(pred.dtype).reshape(-1)
