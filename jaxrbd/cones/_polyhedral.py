"""Polyhedral friction cones: the LCP of 004 §3.2 with any set of directions (000 eq. (6), 002 eq. (5)-(6))."""

import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._problems import friction_lcp
from .._validate import check_value
from ._base import Cone, check_scale, contact_scale


def polygon_directions(k):
    """(k, 2) unit vectors at the angles 2 pi i / k: the polyhedral cone of 003 eq. (3) in (t, o)."""
    angles = 2 * np.pi * np.arange(k) / k
    return np.stack([np.cos(angles), np.sin(angles)], axis=1)


# 002 eq. (5) lists 20 generalized directions for the spinning sphere: in (t, o, r)
# coordinates they are points of the ellipsoid c_t^2 + c_o^2 + c_r^2 / e_r^2 = 1 with
# e_r = 0.4. In normalized coordinates (c / e) they are unit vectors: 8 on the
# equator (every 45 degrees), two rings of 5 (every 72 degrees) at the elevation
# whose normalized torsion is 0.3227 / 0.4, and the two poles (pure torsion).
_EQ5_RING_SIN = 0.3227 / 0.4
# 002 eq. (6): 3 directions (every 120 degrees) at each of the torsion levels
# +-0.3504 / 0.4; none of them is pure torsion.
_EQ6_RING_SIN = 0.3504 / 0.4


def _ring(count, sin_elevation, sign):
    cos_e = math.sqrt(1.0 - sin_elevation**2)
    angles = 2 * np.pi * np.arange(count) / count
    return np.stack([cos_e * np.cos(angles), cos_e * np.sin(angles), np.full(count, sign * sin_elevation)], axis=1)


def soft_finger_directions(which):
    """The soft-finger direction sets of 002, as unit vectors in normalized (t/e_t, o/e_o, r/e_r) coordinates.

    Args:
        which: "eq5" for the 20 directions of 002 eq. (5), which contain pure
            torsion (the LCP of one contact has 1 + 20 + 1 = 22 rows, the size
            the paper quotes), or "eq6" for the 6 directions of 002 eq. (6), none
            of which is pure torsion.

    Returns:
        (k, 3) numpy array.
    """
    if which == "eq5":
        equator = np.concatenate([polygon_directions(8), np.zeros((8, 1))], axis=1)
        poles = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])
        return np.concatenate([equator, _ring(5, _EQ5_RING_SIN, 1.0), _ring(5, _EQ5_RING_SIN, -1.0), poles])
    if which == "eq6":
        return np.concatenate([_ring(3, _EQ6_RING_SIN, 1.0), _ring(3, _EQ6_RING_SIN, -1.0)])
    raise ValueError(f"which must be 'eq5' or 'eq6', got {which!r}")


_SPACES = {1: "tangent line (t)", 2: "tangent plane (t, o)", 3: "friction space (t, o, r)"}


def check_positive_span(name, U):
    """ValueError unless the rows of U (k, d) positively span R^d (the tangent plane when d = 2).

    They do iff no y != 0 has u_i . y <= 0 for every i. If such a y exists, one
    lies on an extreme ray of the cone {y : U y <= 0}, where d - 1 independent
    constraints are active; so it suffices to test the null vectors of every
    (d - 1)-subset of the rows (and the rank).
    """
    k, d = U.shape
    space = _SPACES[d]
    rank = np.linalg.matrix_rank(U)
    if rank < d:
        raise ValueError(
            f"{name} must positively span the {space}: the {k} directions do not positively span it, "
            f"they lie in a subspace of dimension {rank}"
        )
    tol = 1e-12 * max(1.0, float(np.max(np.abs(U))))
    for rows in itertools.combinations(range(k), d - 1):
        if d == 1:
            y = np.ones(1)
        else:
            sub = U[list(rows)]
            if np.linalg.matrix_rank(sub) < d - 1:
                continue  # a dependent subset fixes no ray
            y = np.linalg.svd(sub)[2][-1]
        for s in (y, -y):
            if np.all(U @ s <= tol):
                raise ValueError(
                    f"{name} must positively span the {space}: the directions do not positively span it, "
                    f"none has a positive component along {np.round(s, 6).tolist()}"
                )


class _Frozen:
    """A hashable wrapper of a numpy array (a static field compared by value)."""

    def __init__(self, array):
        self.array = np.array(array, dtype=np.float64)
        self.array.setflags(write=False)

    def __hash__(self):
        return hash((self.array.shape, self.array.tobytes()))

    def __eq__(self, other):
        return isinstance(other, _Frozen) and np.array_equal(self.array, other.array)

    def __repr__(self):
        return f"{self.array.shape[0]} directions in {self.array.shape[1]}D"


class PolyhedralProblem(eqx.Module):
    """The polyhedral-cone step problem: a `FrictionLCP` and the map from beta to contact coordinates.

    Attributes:
        friction_lcp: the `FrictionLCP` (z = [c_g, c_n, beta, lam]); `.problem` is its `LCP`.
        U: (k, d) the directions, in normalized contact coordinates.
        scale: (nc, d) per-contact scales (e_t, e_o[, e_r]).
        T: (nc, d, nv) the contact rows in the directions t, o (, r).
    """

    friction_lcp: object
    U: jax.Array
    scale: jax.Array
    T: jax.Array
    rubbing: tuple = eqx.field(static=True, default=None)  # the contacts with friction unknowns; None: all

    @property
    def problem(self):
        return self.friction_lcp.lcp

    @property
    def M(self):
        return self.friction_lcp.M

    @property
    def N(self):
        return self.friction_lcp.N

    def normal(self, z):
        return self.friction_lcp.split(z)[0]

    def friction(self, z):
        """(nc, d) the friction impulses in contact coordinates (t, o[, r])."""
        nc, k = self.T.shape[0], self.U.shape[0]
        if self.rubbing is None:
            beta = self.friction_lcp.split(z)[1].reshape(nc, k)
            return (beta @ self.U) * self.scale
        beta = self.friction_lcp.split(z)[1].reshape(len(self.rubbing), k)
        rubbing = np.array(self.rubbing, int)
        out = jnp.zeros((nc, self.U.shape[1]), beta.dtype)
        return out.at[rubbing].set((beta @ self.U) * self.scale[rubbing])

    def joint(self, z):
        return self.friction_lcp.joint(z)

    def impulse(self, z):
        return self.friction_lcp.impulse(z)

    def velocity(self, z):
        return self.friction_lcp.velocity(z)


class PolyhedralCone(Cone):
    """The polyhedral friction cone {D beta : beta >= 0, sum beta <= mu c_n} (000 eq. (6), 003 eq. (3)).

    The friction impulse of a contact in its coordinates (t, o[, r]) is
    sum_i beta_i e * u_i: the directions u_i (unit vectors in normalized
    coordinates) are stretched by the scales e = (e_t, e_o[, e_r]), so the cone
    is inscribed in the ellipse c_t^2/e_t^2 + c_o^2/e_o^2 <= mu^2 c_n^2 (or the
    soft-finger ellipsoid, 002 eq. (1)). The step is an LCP (004 §3.2), solved
    by the semismooth Newton solver with its Lemke fallback.

    Args:
        k: the number of directions equally spaced in (t, o), the first along t
            (>= 3); ignored when `directions` is given.
        directions: optional (k, d) array of directions in normalized contact
            coordinates, d = 1 (t only, planar), 2 (t, o) or 3 (t, o and the
            torsion r about the normal: polyhedral soft-finger contact). They must
            positively span the friction space.
        e_t: a positive scale (scalar or one per contact) of the anisotropic cone along t.
        e_o: the same along o.
        e_r: the same for the torsion; only with d = 3.
        frictionless: indices of contacts without friction (joint-range stops,
            MJCF pairs of condim 1): they get a normal row and no friction unknowns,
            so the step problem is smaller. The indices are of the system's contact
            record; `load_mjcf(coordinates="joints")` sets them.
    """

    directions: _Frozen = eqx.field(static=True)
    e_t: jax.Array
    e_o: jax.Array
    e_r: jax.Array
    frictionless: tuple = eqx.field(static=True, default=())

    def __init__(self, k=8, *, directions=None, e_t=1.0, e_o=1.0, e_r=1.0, frictionless=()):
        if directions is None:
            if np.ndim(k) > 0:
                raise TypeError(
                    f"PolyhedralCone: k must be an integer >= 3, got an array of shape {np.shape(k)}; "
                    "pass an array of directions as directions=..."
                )
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 3:
                raise ValueError(f"PolyhedralCone: k must be an integer >= 3 for a 2D friction plane, got {k!r}")
            U = polygon_directions(int(k))
        else:
            check_value("PolyhedralCone directions", directions)
            U = np.asarray(directions, dtype=np.float64)
            if U.ndim != 2 or U.shape[1] not in (1, 2, 3):
                raise ValueError(f"PolyhedralCone: directions must have shape (k, 1 | 2 | 3), got {U.shape}")
            if U.shape[0] < U.shape[1] + 1:
                raise ValueError(
                    f"PolyhedralCone directions must positively span the {_SPACES[U.shape[1]]}: {U.shape[0]} "
                    f"directions do not positively span it (that takes >= {U.shape[1] + 1} directions)"
                )
            check_positive_span("PolyhedralCone directions", U)
        self.directions = _Frozen(U)
        self.e_t = check_scale("e_t", e_t)
        self.e_o = check_scale("e_o", e_o)
        self.e_r = check_scale("e_r", e_r)
        frictionless = tuple(sorted({int(i) for i in frictionless}))
        if frictionless and frictionless[0] < 0:
            raise ValueError(f"PolyhedralCone: frictionless must hold contact indices >= 0, got {frictionless}")
        self.frictionless = frictionless

    @property
    def U(self):
        return self.directions.array

    @property
    def dim(self):
        """The number of friction components: 1 (t), 2 (t, o) or 3 (t, o, r)."""
        return self.U.shape[1]

    @property
    def k(self):
        return self.U.shape[0]

    def size(self, nc, ng):
        """The length of z for nc contacts and ng joint rows."""
        return ng + 2 * nc + self.k * len(self._rubbing(nc))

    def _rubbing(self, nc):
        """The contacts (of nc) with friction unknowns."""
        if self.frictionless and self.frictionless[-1] >= nc:
            raise ValueError(
                f"PolyhedralCone: frictionless contact {self.frictionless[-1]} is out of range for {nc} contacts"
            )
        return tuple(sorted(set(range(nc)) - set(self.frictionless)))

    @property
    def regular(self):
        """Whether the directions are the regular polygon of `PolyhedralCone(k)` in (t, o), in angle order."""
        return self.dim == 2 and np.allclose(self.U, polygon_directions(self.k))

    def scaled_directions(self, nc, dtype):
        """(nc, k, d) each contact's directions stretched by its scales, e * u_i."""
        scale = contact_scale((self.e_t, self.e_o, self.e_r)[: self.dim], nc, dtype)
        return jnp.einsum("kd,cd->ckd", jnp.asarray(self.U, dtype), scale)

    def contact_maps(self, mu, active):
        """The per-contact form of the friction LCP, for the sparse solver (`jaxrbd.ContactSweeps`).

        With z_c = [c_n, beta (k), lam] per contact, the impulse in (n, t, o) is
        K_c z_c and the contact's rows are w_c = K_c^T (J_c v+) + L_c z_c.

        Args:
            mu: (nc,) friction coefficients.
            active: (nc,) float, 1 for a contact in the step (K is zero for the others).

        Returns:
            K (nc, 3, k + 2) and L (nc, k + 2, k + 2).
        """
        if self.dim != 2:
            raise ValueError(f"contact_maps needs a cone in (t, o), got {self.dim} friction components")
        if self.frictionless:
            raise ValueError("contact_maps needs every contact with friction unknowns (frictionless=())")
        nc, k, dtype = mu.shape[0], self.k, mu.dtype
        S = self.scaled_directions(nc, dtype)
        K = jnp.zeros((nc, 3, k + 2), dtype)
        K = K.at[:, 0, 0].set(1.0)
        K = K.at[:, 1:, 1 : k + 1].set(jnp.swapaxes(S, 1, 2))
        K = K * active[:, None, None]
        L = jnp.zeros((nc, k + 2, k + 2), dtype)
        L = L.at[:, 1 : k + 1, k + 1].set(1.0)
        L = L.at[:, k + 1, 0].set(mu)
        L = L.at[:, k + 1, 1 : k + 1].set(-1.0)
        return K, L

    def build(
        self, M, N, T, mu, b, *, bn=None, active=None, J=None, bj=None, frictional=None, dry=None, compliance=0.0
    ):
        """The step problem from the contact rows; see `jaxrbd.friction_lcp` for the arguments.

        T: (nc, d, nv) the rows t, o (, r) of each contact; active: (nc,) bool;
        frictional: (nc,) bool or None, the contacts whose friction rows (beta and
        lam) are in the problem: the others' are decoupled at zero, which removes
        the non-unique lam of a contact without friction (a joint's range stop);
        compliance: the normal rows' relative compliance (`jaxrbd.friction_lcp`).
        """
        nc, d = T.shape[0], self.dim
        scale = contact_scale((self.e_t, self.e_o, self.e_r)[:d], nc, T.dtype)
        U = jnp.asarray(self.U, T.dtype)
        rubbing = self._rubbing(nc)
        idx = np.array(rubbing, int)
        if self.frictionless:  # only the contacts with friction unknowns get directions
            scale_r, T_r = scale[idx], T[idx]
        else:
            scale_r, T_r = scale, T
        D = jnp.einsum("kd,cd,cdv->vck", U, scale_r, T_r).reshape(T.shape[-1], len(rubbing) * self.k)
        mask = bl = None
        if active is not None or frictional is not None or self.frictionless or dry is not None:
            on = jnp.ones((nc,), bool) if active is None else active
            rub = on if frictional is None else on & frictional
            if self.frictionless:
                rub = rub & jnp.asarray(np.isin(np.arange(nc), idx))
            normal = on
            if dry is not None:  # a joint's dry friction: no normal row, the cone row bounded by its own constant
                normal = on & ~dry[0]
                bl = jnp.where(dry[0], dry[1], 0.0).astype(T.dtype)
            mask = jnp.concatenate([normal, jnp.repeat(rub[idx] if self.frictionless else rub, self.k), rub])
        has = set(rubbing)
        counts = tuple(self.k if i in has else 0 for i in range(nc))
        lcp = friction_lcp(M, N, D, mu, counts, b, bn=bn, row_active=mask, J=J, bj=bj, bl=bl, compliance=compliance)
        return PolyhedralProblem(lcp, U, scale, T, None if not self.frictionless else rubbing)


def PlanarCone():
    """The exact planar cone |c_t| <= mu c_n: the two directions +t and -t (002 §2)."""
    return PolyhedralCone(directions=np.array([[1.0], [-1.0]]))
