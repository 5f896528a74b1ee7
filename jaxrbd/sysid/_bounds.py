"""The parameter maps of a fit: each parameter optimized in an unconstrained coordinate (`Free`, `Positive`, `Interval`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from .._validate import check_value


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
