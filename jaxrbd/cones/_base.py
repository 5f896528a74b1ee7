"""Shared helpers of the friction cones: their scale parameters."""

import jax.numpy as jnp

from .._validate import as_float, check_value


def check_scale(name, value):
    """A positive scale (e_t, e_o, e_r) as a float array leaf; ValueError naming it otherwise."""
    check_value(name, value, positive=True)
    x = as_float(value)
    if x.ndim > 1:
        raise ValueError(f"{name} must be a scalar or one value per contact (nc,), got shape {x.shape}")
    return x


def contact_scale(scales, nc, dtype):
    """(nc, d) the scales of each contact, broadcast from scalars or (nc,) arrays."""
    for s in scales:
        if s.ndim == 1 and s.shape[0] != nc:
            raise ValueError(f"a cone scale has {s.shape[0]} entries, but the scene has {nc} contacts")
    return jnp.stack([jnp.broadcast_to(jnp.asarray(s, dtype), (nc,)) for s in scales], axis=-1)
