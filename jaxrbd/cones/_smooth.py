"""Smooth friction cones as nonlinear complementarity problems (000 eq. (18)-(22), 002 eq. (1)-(2)).

Coulomb's law with maximal dissipation over a convex set F(mu c_n) of friction
impulses is, in normalized coordinates x = c / e (c = (c_t, c_o[, c_r]), e the
cone's scales), the projection equation of the natural map

    x = P_{K(mu c_n)}(x - rho u),

where u = e * (T^T v+) is the scaled slip velocity of the contact at the end of
the step, K(R) is the ball of radius R (the ellipse or the soft-finger
ellipsoid of 002 eq. (1) in c) or the ball times the interval [-R, R] (the mixed
cone of 002 example (c)), and rho > 0 is any positive constant. At a solution
either |x| < R and u = 0 (sticking), or x = -R u / |u| (sliding: the friction
impulse opposes the scaled slip, which is the maximum-work condition (iv) of 002
with the multiplier s = |u| / (mu c_n)). The normal rows stay complementarity
rows 0 <= c_n ⊥ n^T v+ + bn >= 0, so the whole step is a mixed NCP: the joint and
friction rows are equalities, solved by the same fixed-iteration semismooth
Newton as the LCP, and differentiated by the same implicit rule.

The projection is semismooth. At the apex (mu c_n = 0) it is 0 for every x, and
its generalized Jacobian there is chosen as 0, so a contact without normal
impulse has x = 0 as a regular row (no 0/0); the choice is explicit below.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._problems import NCP
from ._base import Cone, check_scale, contact_scale
from ._polyhedral import PolyhedralCone


def _safe_norm(y):
    sq = jnp.sum(y * y, axis=-1)
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0), pos


def project_ball(y, R):
    """Projection of y (..., d) onto the ball |x| <= R (R >= 0).

    The boundary branch is taken when |y| >= R, so at y = 0, R = 0 the result is 0
    with derivative 0 in y and in R (the apex choice).
    """
    nrm, pos = _safe_norm(y)
    inside = nrm < R
    ratio = R / jnp.where(pos, nrm, 1.0)
    return jnp.where(inside[..., None], y, ratio[..., None] * y)


class _NaturalMap(eqx.Module):
    """w(z) of the smooth-cone step problem; z = [c_g (ng), x (nc d), c_n (nc)]."""

    ng: int = eqx.field(static=True)
    nc: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    torsion_box: bool = eqx.field(static=True)

    def __call__(self, z, args):
        ng, nc, d = self.ng, self.nc, self.d
        keep = args["active"]
        keep_z = jnp.concatenate([jnp.ones((ng,), z.dtype), jnp.repeat(keep, d), keep])
        u = args["W"] @ (z * keep_z) + args["u0"]
        x = z[ng : ng + nc * d].reshape(nc, d)
        c_n = z[ng + nc * d :]
        u_f = u[ng : ng + nc * d].reshape(nc, d)
        R = args["mu"] * jnp.where(c_n > 0, c_n, 0.0)
        y = x - args["rho"][:, None] * u_f
        if self.torsion_box:
            p = jnp.concatenate([project_ball(y[:, :2], R), jnp.clip(y[:, 2:], -R[:, None], R[:, None])], axis=1)
        else:
            p = project_ball(y, R)
        on = keep > 0
        w_f = jnp.where(on[:, None], x - p, x).reshape(-1)
        w_n = jnp.where(on, u[ng + nc * d :], c_n + 1.0)
        return jnp.concatenate([u[:ng], w_f, w_n])


class SmoothProblem(eqx.Module):
    """The smooth-cone step problem: the mixed NCP and its layout.

    Attributes:
        problem: the `NCP`, with n_free = ng + nc d.
        M, b: mass matrix and free velocity.
        N: (nv, nc) normals; J: (nv, ng) joint rows.
        T: (nc, d, nv) contact rows t, o (, r); scale: (nc, d) the cone scales e.
    """

    problem: NCP
    M: jax.Array
    b: jax.Array
    N: jax.Array
    J: jax.Array
    T: jax.Array
    scale: jax.Array

    def _split(self, z):
        ng, (nc, d) = self.J.shape[-1], self.scale.shape
        return z[:ng], z[ng : ng + nc * d].reshape(nc, d), z[ng + nc * d :]

    def normal(self, z):
        return self._split(z)[2]

    def friction(self, z):
        """(nc, d) the friction impulses in contact coordinates (t, o[, r])."""
        return self._split(z)[1] * self.scale

    def joint(self, z):
        return self._split(z)[0]

    def impulse(self, z):
        """The generalized impulse J c_g + N c_n + sum_c T_c^T c_c."""
        c_g, _, c_n = self._split(z)
        return self.J @ c_g + self.N @ c_n + jnp.einsum("cdv,cd->v", self.T, self.friction(z))

    def velocity(self, z):
        return self.b + jnp.linalg.solve(self.M, self.impulse(z))


class _SmoothCone(Cone):
    """Shared build of the smooth cones; subclasses give `_scales()` and `torsion_box`."""

    @property
    def dim(self):
        return len(self._scales())

    def size(self, nc, ng):
        """The length of z for nc contacts and ng joint rows."""
        return ng + nc * (self.dim + 1)

    torsion_box = False

    def build(self, M, N, T, mu, b, *, bn=None, active=None, J=None, bj=None, frictional=None, dry=None):
        """The mixed NCP of one step from the contact rows (see the module docstring).

        Args:
            M: (nv, nv) mass matrix; N: (nv, nc) normals; T: (nc, d, nv) rows t, o (, r).
            mu: (nc,) friction coefficients; b: (nv,) free velocity.
            bn: (nc,) offsets of the normal rows; active: (nc,) bool mask.
            J: (nv, ng) joint rows; bj: (ng,) their offsets.
        """
        if dry is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: joint dry friction (MJCF frictionloss) needs the polyhedral cone"
            )
        nc, d, nv = T.shape
        dtype = T.dtype
        J = jnp.zeros((nv, 0), dtype) if J is None else J
        ng = J.shape[-1]
        scale = contact_scale(self._scales(), nc, dtype)
        Ts = (T * scale[..., None]).reshape(nc * d, nv).T
        G = jnp.concatenate([J, Ts, N], axis=1)
        chol = jax.scipy.linalg.cho_factor(M)
        W = G.T @ jax.scipy.linalg.cho_solve(chol, G)
        u0 = G.T @ b
        if bj is not None:
            u0 = u0.at[:ng].add(bj)
        if bn is not None:
            u0 = u0.at[ng + nc * d :].add(bn)
        # rho: the inverse mean diagonal of each contact's friction block of the
        # Delassus matrix, so x - rho u mixes impulses of like size. The solution
        # set does not depend on rho, so it carries no gradient.
        diag = jnp.diagonal(W)[ng : ng + nc * d].reshape(nc, d).mean(axis=1)
        rho = jax.lax.stop_gradient(jnp.where(diag > 0, 1.0 / jnp.where(diag > 0, diag, 1.0), 1.0))
        keep = jnp.ones((nc,), dtype) if active is None else active.astype(dtype)
        mu = jnp.broadcast_to(jnp.asarray(mu, dtype), (nc,))
        fn = _NaturalMap(ng, nc, d, self.torsion_box)
        args = dict(W=W, u0=u0, mu=mu, rho=rho, active=keep)
        problem = NCP(fn, args, ng + nc * (d + 1), ng + nc * d)
        return SmoothProblem(problem, M, b, N, J, T, scale)


class EllipticCone(_SmoothCone):
    """The quadratic (elliptic) cone c_t^2/e_t^2 + c_o^2/e_o^2 <= mu^2 c_n^2, exact (000 eq. (19)-(22)).

    Solved as a nonlinear complementarity problem (see the module docstring),
    not linearized: the friction impulse of a sliding contact is exactly mu c_n
    (in the e-scaled norm) and opposite to the scaled slip. e_t = e_o = 1 is
    isotropic Coulomb friction; unequal scales give an ellipse of friction
    (anisotropy along the contact's t and o).

    Args:
        e_t: the positive scale along t, a scalar or one per contact.
        e_o: the positive scale along o, a scalar or one per contact.
    """

    e_t: jax.Array
    e_o: jax.Array

    def __init__(self, e_t=1.0, e_o=1.0):
        self.e_t = check_scale("e_t", e_t)
        self.e_o = check_scale("e_o", e_o)

    def _scales(self):
        return (self.e_t, self.e_o)


class SoftFingerCone(_SmoothCone):
    """Soft-finger contact: c_t^2/e_t^2 + c_o^2/e_o^2 + c_r^2/e_r^2 <= mu^2 c_n^2 (002 eq. (1)-(2)).

    c_r is the frictional moment about the contact normal; with e_t = e_o = 1 the
    largest moment is e_r mu c_n, so e_r is a length. Exact (a nonlinear
    complementarity problem) by default; with `directions` (k, 3) unit vectors
    in normalized coordinates (for example `soft_finger_directions("eq5")`), the
    polyhedral approximation of 002 eq. (5)-(6), solved as an LCP.

    Args:
        e_t: the positive scale along t, a scalar or one per contact.
        e_o: the positive scale along o, a scalar or one per contact.
        e_r: the positive scale of the torsion, a scalar or one per contact.
        directions: optional (k, 3) polyhedral directions.
    """

    e_t: jax.Array
    e_o: jax.Array
    e_r: jax.Array
    polyhedral: PolyhedralCone | None

    def __init__(self, e_t=1.0, e_o=1.0, e_r=1.0, *, directions=None):
        self.e_t = check_scale("e_t", e_t)
        self.e_o = check_scale("e_o", e_o)
        self.e_r = check_scale("e_r", e_r)
        self.polyhedral = None
        if directions is not None:
            U = jnp.asarray(directions)
            if U.ndim != 2 or U.shape[1] != 3:
                raise ValueError(f"SoftFingerCone: directions must have shape (k, 3), got {U.shape}")
            self.polyhedral = PolyhedralCone(directions=directions, e_t=e_t, e_o=e_o, e_r=e_r)

    def _scales(self):
        return (self.e_t, self.e_o, self.e_r)

    def size(self, nc, ng):
        if self.polyhedral is not None:
            return self.polyhedral.size(nc, ng)
        return super().size(nc, ng)

    def build(self, M, N, T, mu, b, **kwargs):
        if self.polyhedral is not None:
            return self.polyhedral.build(M, N, T, mu, b, **kwargs)
        return super().build(M, N, T, mu, b, **kwargs)


class MixedCone(_SmoothCone):
    """The mixed cone of 002 example (c): c_t^2/e_t^2 + c_o^2/e_o^2 <= (mu c_n)^2 and |c_r| <= e_r mu c_n.

    Elliptic in the tangent plane, with an independent bound on the frictional
    moment (a box in the torsion); exact, as a nonlinear complementarity problem.

    Args:
        e_t: the positive scale along t, a scalar or one per contact.
        e_o: the positive scale along o, a scalar or one per contact.
        e_r: the positive scale of the torsion, a scalar or one per contact.
    """

    e_t: jax.Array
    e_o: jax.Array
    e_r: jax.Array
    torsion_box = True

    def __init__(self, e_t=1.0, e_o=1.0, e_r=1.0):
        self.e_t = check_scale("e_t", e_t)
        self.e_o = check_scale("e_o", e_o)
        self.e_r = check_scale("e_r", e_r)

    def _scales(self):
        return (self.e_t, self.e_o, self.e_r)
