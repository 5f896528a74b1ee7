"""A different friction cone per contact: one mixed NCP with polyhedral and smooth rows side by side."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._problems import NCP
from ._base import Cone, contact_scale
from ._polyhedral import PolyhedralCone
from ._smooth import SoftFingerCone, _SmoothCone, project_ball


def _polyhedral_part(cone):
    """The PolyhedralCone behind a cone, or None for a smooth one."""
    if isinstance(cone, PolyhedralCone):
        return cone
    if isinstance(cone, SoftFingerCone) and cone.polyhedral is not None:
        return cone.polyhedral
    return None


class _Layout(eqx.Module):
    """Static layout of the composite problem; z = [c_g, x (smooth), c_n, beta (polyhedral), lam]."""

    ng: int = eqx.field(static=True)
    nc: int = eqx.field(static=True)
    smooth: tuple = eqx.field(static=True)  # per contact: (offset in x, d, torsion_box) or None
    poly: tuple = eqx.field(static=True)  # per contact: (offset in beta, k, index in lam) or None
    nx: int = eqx.field(static=True)
    nb: int = eqx.field(static=True)
    nl: int = eqx.field(static=True)

    @property
    def size(self):
        return self.ng + self.nx + self.nc + self.nb + self.nl

    @property
    def n_free(self):
        return self.ng + self.nx

    def split(self, z):
        ng, nx, nc, nb = self.ng, self.nx, self.nc, self.nb
        c_g, x, c_n = z[:ng], z[ng : ng + nx], z[ng + nx : ng + nx + nc]
        beta, lam = z[ng + nx + nc : ng + nx + nc + nb], z[ng + nx + nc + nb :]
        return c_g, x, c_n, beta, lam

    def __call__(self, z, args):
        ng, nx, nc = self.ng, self.nx, self.nc
        keep = args["active"]
        c_g, x, c_n, beta, lam = self.split(z)
        keep_x = jnp.concatenate([jnp.full((s[1],), 1.0) * keep[i] for i, s in enumerate(self.smooth) if s] or [x])
        keep_b = jnp.concatenate([jnp.full((p[1],), 1.0) * keep[i] for i, p in enumerate(self.poly) if p] or [beta])
        z_imp = jnp.concatenate([c_g, x * keep_x, c_n * keep, beta * keep_b])
        u = args["W"] @ z_imp + args["u0"]
        u_x, u_n, u_b = u[ng : ng + nx], u[ng + nx : ng + nx + nc], u[ng + nx + nc :]
        on = keep > 0
        R = args["mu"] * jnp.where(c_n > 0, c_n, 0.0)
        w_x, w_b, w_l = [], [], []
        for i in range(nc):
            if self.smooth[i]:
                off, d, box = self.smooth[i]
                xi = x[off : off + d]
                y = xi - args["rho"][i] * u_x[off : off + d]
                if box:
                    p = jnp.concatenate([project_ball(y[:2], R[i]), jnp.clip(y[2:], -R[i], R[i])])
                else:
                    p = project_ball(y, R[i])
                w_x.append(jnp.where(on[i], xi - p, xi))
            else:
                off, k, j = self.poly[i]
                b_i = beta[off : off + k]
                w_b.append(jnp.where(on[i], u_b[off : off + k] + lam[j], b_i + 1.0))
                w_l.append(jnp.where(on[i], args["mu"][i] * c_n[i] - jnp.sum(b_i), lam[j] + 1.0)[None])
        w_n = jnp.where(on, u_n, c_n + 1.0)
        return jnp.concatenate([u[:ng], *w_x, w_n, *w_b, *w_l])


class CompositeProblem(eqx.Module):
    """The step problem of a `PerContactCone`: the mixed NCP and the maps from z to impulses."""

    problem: NCP
    layout: _Layout
    M: jax.Array
    b: jax.Array
    N: jax.Array
    J: jax.Array
    T: jax.Array
    scale: jax.Array
    directions: tuple = eqx.field(static=True)  # per polyhedral contact: its (k, d) directions

    def normal(self, z):
        return self.layout.split(z)[2]

    def friction(self, z):
        """(nc, d) the friction impulses in contact coordinates, padded with zeros to the largest d."""
        _, x, _, beta, _ = self.layout.split(z)
        d = self.T.shape[1]
        rows = []
        for i in range(self.layout.nc):
            if self.layout.smooth[i]:
                off, di, _ = self.layout.smooth[i]
                f = x[off : off + di]
            else:
                off, k, _ = self.layout.poly[i]
                f = beta[off : off + k] @ jnp.asarray(self.directions[i], z.dtype)
            rows.append(jnp.pad(f, (0, d - f.shape[0])))
        return jnp.stack(rows) * self.scale

    def joint(self, z):
        return self.layout.split(z)[0]

    def impulse(self, z):
        return self.J @ self.joint(z) + self.N @ self.normal(z) + jnp.einsum("cdv,cd->v", self.T, self.friction(z))

    def velocity(self, z):
        return self.b + jnp.linalg.solve(self.M, self.impulse(z))


class PerContactCone(Cone):
    """A friction cone chosen per contact: `cones[index[j]]` acts at contact j.

    Any mix of polyhedral, elliptic, soft-finger and mixed cones; the step is one
    mixed NCP (smooth contacts' friction rows are equalities, polyhedral contacts
    keep their LCP rows beta, lam), solved by the semismooth Newton solver and
    differentiated by the implicit rule. With a single cone for every contact use
    that cone itself: a polyhedral scene then keeps its LCP and the Lemke fallback.

    Args:
        cones: a sequence of cones.
        index: (nc,) sequence of ints, the cone of each contact.
    """

    cones: tuple
    index: tuple = eqx.field(static=True)

    def __init__(self, cones, index):
        cones = tuple(cones)
        if not cones or not all(isinstance(c, Cone) for c in cones):
            raise TypeError(f"PerContactCone: cones must be a non-empty sequence of cones, got {cones!r}")
        index = tuple(int(i) for i in index)
        if not index or min(index) < 0 or max(index) >= len(cones):
            raise ValueError(f"PerContactCone: index entries must be in [0, {len(cones) - 1}], got {index}")
        dims = {c.dim for c in cones}
        if 1 in dims and len(dims) > 1:
            raise ValueError("PerContactCone: a planar cone (one friction component) cannot mix with spatial ones")
        self.cones, self.index = cones, index

    @property
    def dim(self):
        return max(c.dim for c in self.cones)

    def _layout(self, nc, ng):
        if len(self.index) != nc:
            raise ValueError(f"PerContactCone: index has {len(self.index)} entries, but the scene has {nc} contacts")
        smooth, poly, nx, nb, nl = [], [], 0, 0, 0
        for i in self.index:
            cone = self.cones[i]
            p = _polyhedral_part(cone)
            if p is None:
                smooth.append((nx, cone.dim, bool(cone.torsion_box)))
                poly.append(None)
                nx += cone.dim
            else:
                smooth.append(None)
                poly.append((nb, p.k, nl))
                nb, nl = nb + p.k, nl + 1
        return _Layout(ng, nc, tuple(smooth), tuple(poly), nx, nb, nl)

    def size(self, nc, ng):
        return self._layout(nc, ng).size

    def build(self, M, N, T, mu, b, *, bn=None, active=None, J=None, bj=None, frictional=None, dry=None):
        """The mixed NCP of one step; the arguments are those of the single cones' `build`."""
        if dry is not None:
            raise NotImplementedError(
                f"{type(self).__name__}: joint dry friction (MJCF frictionloss) needs the polyhedral cone"
            )
        nc, d, nv = T.shape
        dtype = T.dtype
        J = jnp.zeros((nv, 0), dtype) if J is None else J
        ng = J.shape[-1]
        layout = self._layout(nc, ng)
        scales, x_cols, d_cols, directions = [], [], [], []
        for j, i in enumerate(self.index):
            cone = self.cones[i]
            s = contact_scale(_scales(cone), nc, dtype)[j]
            s = jnp.pad(s, (0, d - s.shape[0]), constant_values=1.0)
            scales.append(s)
            p = _polyhedral_part(cone)
            rows = T[j, : cone.dim] * s[: cone.dim, None]
            if p is None:
                x_cols.append(rows)
                directions.append(None)
            else:
                U = np.asarray(p.U)
                d_cols.append(jnp.asarray(U, dtype) @ rows)
                directions.append(tuple(tuple(float(v) for v in r) for r in U))
        empty = jnp.zeros((0, nv), dtype)
        X = jnp.concatenate(x_cols or [empty]).T
        D = jnp.concatenate(d_cols or [empty]).T
        G = jnp.concatenate([J, X, N, D], axis=1)
        W = G.T @ jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(M), G)
        u0 = G.T @ b
        if bj is not None:
            u0 = u0.at[:ng].add(bj)
        if bn is not None:
            u0 = u0.at[ng + layout.nx : ng + layout.nx + nc].add(bn)
        diag = jnp.diagonal(W)[ng : ng + layout.nx]
        rho = []
        for j in range(nc):
            if layout.smooth[j]:
                off, dj, _ = layout.smooth[j]
                m = jnp.mean(diag[off : off + dj])
                rho.append(jnp.where(m > 0, 1.0 / jnp.where(m > 0, m, 1.0), 1.0))
            else:
                rho.append(jnp.ones((), dtype))
        keep = jnp.ones((nc,), dtype) if active is None else active.astype(dtype)
        args = dict(
            W=W,
            u0=u0,
            mu=jnp.broadcast_to(jnp.asarray(mu, dtype), (nc,)),
            rho=jax.lax.stop_gradient(jnp.stack(rho)),
            active=keep,
        )
        problem = NCP(layout, args, layout.size, layout.n_free)
        # Directions of the polyhedral contacts (pad each to d components).
        padded = tuple(None if u is None else tuple(tuple(r) + (0.0,) * (d - len(r)) for r in u) for u in directions)
        return CompositeProblem(problem, layout, M, b, N, J, T, jnp.stack(scales), padded)


def _scales(cone):
    p = _polyhedral_part(cone)
    if p is not None:
        return (p.e_t, p.e_o, p.e_r)[: p.dim]
    assert isinstance(cone, _SmoothCone)
    return cone._scales()
