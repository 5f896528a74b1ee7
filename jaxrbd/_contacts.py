"""The contact record: everything a step needs to know about its contacts, computed once.

A system produces one `Contacts` per configuration (`System.contacts(q)`): collision
runs once, and the step solvers, the impact laws, the drift projection and the user
read the same record. Its shapes are fixed: a contact capacity nc, with an `active`
mask for the contacts the geometry keeps.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

# Rows of a contact in `Contacts.blocks`: normal, tangent, bitangent, torsion.
ROW_N, ROW_T, ROW_O, ROW_R = 0, 1, 2, 3


class Contacts(eqx.Module):
    """The contacts of one configuration, with fixed capacity nc.

    Each contact j is between shapes a and b (or is the gap f_j(q) of a system in
    generalized coordinates) with the normal n_j pointing from a to b. Its rows map
    the generalized velocity v to the velocity of b relative to a at the contact
    point: along n (J_n), along the tangents t and o (J_t, J_o; planar scenes and
    planar systems have only t) and the relative spin about n (J_r, the torsional
    row of soft-finger contact).

    The rows are stored in one of two forms:
    - `rows` (nc, r, nv): dense rows (n, t, optionally o, optionally r), for systems in generalized
      coordinates and planar body scenes;
    - `blocks` (nc, 2, 4, 6) with `body_a`, `body_b`: the rows (n, t, o, r) of each
      contact on the (linear, angular) velocity of its two bodies (3D body scenes).
      A block on the world (index nbodies) is zero. Memory is O(nc), which the
      sparse solver `jaxrbd.ContactSweeps` needs; the dense rows are formed from
      them on demand (`J_n`, `friction_rows`).

    Attributes:
        gap: (nc,) signed distances f_j(q).
        active: (nc,) bool, the contacts the geometry keeps (gap below the margin).
        mu: (nc,) friction coefficients.
        restitution: (nc,) restitution coefficients (zeros when none were given).
        index: (nc,) each contact's place among the system's candidates (the entries
            of `system.mu`); with a broad phase the slots hold the nearest pairs'.
        overflow: () int, shape pairs within the broad phase's distance left without
            a slot (0 without a broad phase).
        rows: (nc, r, nv) dense rows, or None.
        blocks: (nc, 2, 4, 6) per-body rows of bodies a and b, or None.
        body_a, body_b: (nc,) int body indices (nbodies: the world); None for
            systems in generalized coordinates.
        point: (nc, 3) contact points; None for systems in generalized coordinates.
        normal, tangent, bitangent: (nc, 3) the frame (n, t, o), t x o = n; None
            for systems in generalized coordinates.
        nv: static number of velocity coordinates.
        tangents: static number of tangent directions (1: t, 2: t and o).
        torsion: static, whether the torsional row J_r exists.
        frictional: (nc,) bool, the contacts that have friction rows in the step; the
            others (joint-range stops, MJCF pairs of condim 1) are frictionless, their
            friction unknowns fixed at zero. None: every contact.
        dry: (nc,) bool, the entries that are a joint's dry friction (MJCF
            frictionloss: a tree's `Tree.frictionloss`): no normal row, their friction
            rows the joint's rate, the friction impulse bounded by dry_friction h.
            None: none.
        dry_friction: (nc,) the bound of those entries (a force or torque), 0 elsewhere.
        limits: static number of joint-range stops at the end of the record
            (`jaxrbd.bodies.BodyModel.limit_rows`): frictionless rows (mu = 0, zero
            friction rows) whose gap is the distance of a joint coordinate to its
            limit and whose normal row is the coordinate's rate row.
    """

    gap: jax.Array
    active: jax.Array
    mu: jax.Array
    restitution: jax.Array
    index: jax.Array
    overflow: jax.Array
    rows: jax.Array | None = None
    blocks: jax.Array | None = None
    body_a: jax.Array | None = None
    body_b: jax.Array | None = None
    point: jax.Array | None = None
    normal: jax.Array | None = None
    tangent: jax.Array | None = None
    bitangent: jax.Array | None = None
    frictional: jax.Array | None = None
    dry: jax.Array | None = None
    dry_friction: jax.Array | None = None
    nv: int = eqx.field(static=True, default=0)
    tangents: int = eqx.field(static=True, default=2)
    torsion: bool = eqx.field(static=True, default=False)
    limits: int = eqx.field(static=True, default=0)

    @property
    def size(self):
        """The capacity nc."""
        return self.gap.shape[0]

    def dense_rows(self):
        """(nc, r, nv) the rows (n, t, optionally o, optionally r) on the whole velocity vector."""
        if self.rows is not None:
            return self.rows
        nc, nvb = self.size, self.blocks.shape[-1]
        nb = self.nv // nvb
        idx = np.arange(nc)
        out = jnp.zeros((nc, 4, nb + 1, nvb), self.blocks.dtype)
        out = out.at[idx, :, self.body_a].add(self.blocks[:, 0]).at[idx, :, self.body_b].add(self.blocks[:, 1])
        return out[:, :, :nb].reshape(nc, 4, nb * nvb)

    @property
    def J_n(self):
        """(nc, nv) the normal rows; their transpose is the matrix N of the papers."""
        return self.dense_rows()[:, ROW_N]

    @property
    def J_t(self):
        """(nc, nv) the rows along the first tangent t."""
        return self.dense_rows()[:, ROW_T]

    @property
    def J_o(self):
        """(nc, nv) the rows along the second tangent o (spatial contacts only)."""
        if self.tangents < 2:
            raise ValueError("these contacts have one tangent direction: no J_o")
        return self.dense_rows()[:, ROW_O]

    @property
    def J_r(self):
        """(nc, nv) the torsional rows (relative spin about n)."""
        if not self.torsion:
            raise ValueError("these contacts have no torsional row J_r")
        return self.dense_rows()[:, 1 + self.tangents]

    def friction_rows(self, d):
        """(nc, d, nv) the rows along t (d = 1), t and o (d = 2), or t, o and the torsion r (d = 3)."""
        if d == self.tangents or (d == 3 and self.tangents == 2 and self.torsion):
            return self.dense_rows()[:, 1 : 1 + d]
        have = f"{self.tangents} tangent direction(s)" + (" and torsion" if self.torsion else "")
        raise ValueError(f"the friction cone needs {d} friction components, but the system has {have}")


def from_gaps(gaps, tangents, torsions, kinematics, contact_active, mu, restitution, q):
    """The record of a system in generalized coordinates from its gap functions (000 §5).

    The gap f(q) and its gradient come from one forward-mode pass, so the gap
    function runs once; n = G^T grad f.

    Args:
        gaps: q -> (nc,) gap functions.
        tangents: q -> (nc, m, nv) tangential rows.
        torsions: q -> (nc, nv) torsional rows, or None.
        kinematics: G(q) (nq, nv).
        contact_active: (nc,) bool or None (all active).
        mu, restitution: (nc,) coefficients.
    """
    grad, gap = jax.jacfwd(lambda q: (lambda f: (f, f))(gaps(q)), has_aux=True)(q)
    T = tangents(q)
    parts = [(grad @ kinematics)[:, None], T]
    if torsions is not None:
        parts.append(torsions(q)[:, None])
    nc = gap.shape[0]
    return Contacts(
        gap=gap,
        active=jnp.ones((nc,), bool) if contact_active is None else contact_active,
        mu=mu,
        restitution=restitution,
        index=jnp.arange(nc),
        overflow=jnp.zeros((), jnp.int32),
        rows=jnp.concatenate(parts, axis=1),
        nv=T.shape[-1],
        tangents=T.shape[1],
        torsion=torsions is not None,
    )
