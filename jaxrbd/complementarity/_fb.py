"""The Fischer-Burmeister function, its smoothing and its generalized Jacobian."""

import jax.numpy as jnp


def _safe_norm(a, b, eps):
    """sqrt(a^2 + b^2 + 2 eps^2), with a zero-safe square root (never NaN under autodiff)."""
    s = a * a + b * b + 2.0 * eps * eps
    pos = s > 0
    r = jnp.sqrt(jnp.where(pos, s, 1.0))
    return jnp.where(pos, r, 0.0), pos


def fischer_burmeister(a, b, eps=0.0):
    """phi(a, b) = a + b - sqrt(a^2 + b^2 + 2 eps^2); zero iff 0 <= a, b and a b = eps^2.

    Where a + b > 0 it is evaluated as 2 (a b - eps^2) / (a + b + r), which is the
    same number without the cancellation: with b >> |a| the plain form rounds a + b
    to b and returns 0, so a round-off z (1e-15 against w = 400) would never be
    stepped back to 0.
    """
    r, _ = _safe_norm(a, b, eps)
    s = a + b
    positive = s > 0
    return jnp.where(positive, 2.0 * (a * b - eps * eps) / jnp.where(positive, s + r, 1.0), s - r)


def fischer_burmeister_partials(a, b, eps=0.0):
    """An element (da, db) of the generalized Jacobian of `fischer_burmeister`.

    At the kink a = b = 0 (only reachable with eps = 0) the element (1, 0) is chosen
    explicitly: it treats the row as inactive (z stays at its bound), so the
    derivative is finite and never 0/0.
    """
    r, pos = _safe_norm(a, b, eps)
    rr = jnp.where(pos, r, 1.0)
    da = jnp.where(pos, 1.0 - a / rr, 1.0)
    db = jnp.where(pos, 1.0 - b / rr, 0.0)
    return da, db
