"""The exact local solve of one contact's polygon-cone LCP, for `ContactSweeps`."""

import jax
import jax.numpy as jnp


def _inverse3(A):
    """(..., 3, 3) inverses by the adjugate (closed form: no pivoting loop, vectorizes everywhere)."""
    c = jnp.stack(
        [
            jnp.cross(A[..., 1, :], A[..., 2, :]),
            jnp.cross(A[..., 2, :], A[..., 0, :]),
            jnp.cross(A[..., 0, :], A[..., 1, :]),
        ],
        -1,
    )
    det = jnp.sum(A[..., 0, :] * c[..., :, 0], -1)
    safe = jnp.where(det != 0, det, 1.0)
    return c / safe[..., None, None]


def enumerate_contact(W, u, mu, S, A, b):
    """Exact solution of one contact's polyhedral-cone LCP by enumerating its pieces.

    The impulse p = (c_n, c_t) of a contact with Delassus block W, free relative
    velocity u (normal offset included) and a convex polygon of directions S (k, 2),
    ordered by angle, is one of: zero (separation); W p = -u (sticking, c_t inside
    the polygon, written on the two directions around it); c_t = mu c_n s_j on a
    vertex (sliding against s_j); or on an edge between s_j and s_j+1. Each of those
    2k + 2 candidates is a closed-form solve of at most 3 x 3; the one with the
    smallest natural residual of the LCP (A, b) in z = [c_n, beta, lam] is returned.

    Args (one contact; vmap for many): W (3, 3), u (3,), mu (), S (k, 2), A (m, m), b (m,).

    Returns:
        (z (m,), its natural residual).
    """
    k = S.shape[0]
    dtype = W.dtype
    e_n = jnp.array([1.0, 0.0, 0.0], dtype)
    Sn = jnp.concatenate([jnp.zeros((k, 1), dtype), S], 1)  # (k, 3): the directions in (n, t, o)
    Sn1 = jnp.roll(Sn, -1, axis=0)
    idx = jnp.arange(k)

    def lam_of(p):
        vt = (W @ p + u)[1:]
        return jnp.maximum(-jnp.min(S @ vt), 0.0)

    def z_of(c_n, beta, lam):
        return jnp.concatenate([c_n[None], beta, lam[None]])

    # Sticking: W p = -u, c_t on the two directions of its sector.
    p = -_inverse3(W) @ u
    pair = jnp.stack([S, jnp.roll(S, -1, axis=0)], -1)  # (k, 2, 2): columns s_j, s_j+1
    det = pair[:, 0, 0] * pair[:, 1, 1] - pair[:, 0, 1] * pair[:, 1, 0]
    inv = jnp.stack(
        [jnp.stack([pair[:, 1, 1], -pair[:, 0, 1]], -1), jnp.stack([-pair[:, 1, 0], pair[:, 0, 0]], -1)], -2
    )
    coef = jnp.einsum("kij,j->ki", inv, p[1:]) / det[:, None]  # (k, 2)
    j = jnp.argmax(jnp.min(coef, -1))
    beta = jnp.zeros((k,), dtype).at[j].add(coef[j, 0]).at[(j + 1) % k].add(coef[j, 1])
    stick = z_of(p[0], beta, jnp.zeros((), dtype))

    # Sliding on vertex j: p = c_n (e_n + mu s_j), normal velocity zero.
    d = e_n[None] + mu * Sn  # (k, 3)
    c_n = -u[0] / jnp.einsum("kj,kj->k", d @ W.T, jnp.broadcast_to(e_n, d.shape))
    vertex = jax.vmap(lambda c, jj: z_of(c, mu * c * (idx == jj).astype(dtype), lam_of(c * (e_n + mu * Sn[jj]))))(
        c_n, idx
    )

    # Sliding on edge (j, j+1): x = (c_n, beta_j, beta_j+1) with w_n = 0, equal slip along s_j and s_j+1,
    # and beta_j + beta_j+1 = mu c_n.
    def edge(jj):
        P = jnp.stack([e_n, Sn[jj], Sn1[jj]], -1)  # (3, 3)
        WP = W @ P
        diff = Sn[jj] - Sn1[jj]
        M = jnp.stack([WP[0], diff @ WP, jnp.stack([mu, -1.0, -1.0]).astype(dtype)])
        rhs = -jnp.stack([u[0], diff @ u, jnp.zeros((), dtype)])
        x = _inverse3(M) @ rhs
        beta = jnp.zeros((k,), dtype).at[jj].add(x[1]).at[(jj + 1) % k].add(x[2])
        return z_of(x[0], beta, lam_of(P @ x))

    edges = jax.vmap(edge)(idx)
    separate = jnp.zeros((k + 2,), dtype).at[-1].set(lam_of(jnp.zeros((3,), dtype)))
    candidates = jnp.concatenate([separate[None], stick[None], vertex, edges])
    candidates = jnp.where(jnp.isfinite(candidates), candidates, jnp.inf)
    w = candidates @ A.T + b
    residual = jnp.max(jnp.abs(jnp.minimum(candidates, w)), -1)
    best = jnp.argmin(residual)
    return candidates[best], residual[best]
