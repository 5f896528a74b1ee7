"""The friction cone family: what every cone provides, and the scale parameters they share."""

import abc

import equinox as eqx
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


class Cone(eqx.Module):
    """A friction cone: turns a step's contact rows into a complementarity problem.

    A cone provides `dim` (its friction components: 1, t; 2, t and o; 3, t, o and
    the torsion r), `size(nc, ng)` (the length of its unknown z) and `build(...)`,
    the step problem. The problem `build` returns has `.problem` (the LCP or NCP
    to solve) and the maps from its solution z to `normal` (nc,), `friction`
    (nc, dim) in contact coordinates, `joint` (ng,), `impulse` (nv,) and
    `velocity` (nv,). A cone whose problem is an LCP with per-contact blocks can
    also serve the sparse solver (`PolyhedralCone.contact_maps`).
    """

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """The number of friction components per contact."""

    @abc.abstractmethod
    def size(self, nc, ng):
        """The length of z for nc contacts and ng joint rows."""

    @abc.abstractmethod
    def build(self, M, N, T, mu, b, *, bn=None, active=None, J=None, bj=None, frictional=None, dry=None):
        """The step problem.

        Args:
            M: (nv, nv) mass matrix.
            N: (nv, nc) normals.
            T: (nc, dim, nv) the friction rows of each contact.
            frictional: (nc,) bool or None: the contacts with friction
            (`Contacts.frictional`); the polyhedral cone decouples the others'
            friction unknowns at zero, the smooth cones read friction from mu alone.
            dry: None, or (mask (nc,) bool, bound (nc,)): the contacts that are a
            joint's dry friction (`Contacts.dry`), without a normal row and with
            their friction impulse bounded by `bound`; the polyhedral cone only.
            mu: (nc,) friction coefficients.
            b: (nv,) free velocity.
            bn: (nc,) offsets of the normal rows; active: (nc,) bool, the contacts in
                the problem; J: (nv, ng) joint rows; bj: (ng,) their offsets.
        """
