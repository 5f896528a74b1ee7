"""The exact local solve of one contact's polygon-cone LCP, for `ContactSweeps`.

Written for the CPU's vector units: every quantity of a contact is a scalar or a
short vector over the candidates, the sums over the 3 rows and the k directions
are unrolled, and the best candidate is picked by chains of selects. Under the
`vmap`s over contacts and environments each of these becomes an elementwise
operation on whole arrays, which XLA fuses; products and reductions over axes of
size 3 or 8 would instead run as slow batched kernels (`jaxrbd._small`).
"""

import functools

import jax.numpy as jnp

from .._small import cramer3


def _solve3(rows, rhs):
    """x with rows . x = rhs (`cramer3`). A singular system gives the numerators (finite): a candidate built
    from it is rejected by its residual."""
    numerators, det = cramer3(rows, rhs)
    det = jnp.where(det != 0, det, 1.0)
    return tuple(x / det for x in numerators)


def enumerate_contact(W, u, mu, S):
    """Exact solution of one contact's polyhedral-cone LCP by enumerating its pieces.

    The impulse p = (c_n, c_t) of a contact with Delassus block W, free relative
    velocity u (normal offset included) and a convex polygon of directions S (k, 2),
    ordered by angle, is one of: zero (separation); W p = -u (sticking, c_t inside
    the polygon, written on the two directions around it); c_t = mu c_n s_j on a
    vertex (sliding against s_j); or on an edge between s_j and s_j+1. Each of those
    2k + 2 candidates is a closed-form solve of at most 3 x 3; the one with the
    smallest natural residual of the contact's LCP in z = [c_n, beta (k), lam],
    w = [v_n, s_i . v_t + lam, mu c_n - sum beta] with v = W p + u, is returned.

    Args (one contact; vmap for many): W (3, 3), u (3,), mu (), S (k, 2).

    Returns:
        (z (k + 2,), its natural residual).
    """
    k, dtype = S.shape[0], W.dtype
    zero = jnp.zeros((), dtype)
    Wr = [[W[r, c] for c in range(3)] for r in range(3)]
    s0, s1 = S[:, 0], S[:, 1]  # (k,) each
    n0, n1 = jnp.roll(s0, -1), jnp.roll(s1, -1)  # s_j+1

    # Each candidate is (c_n, b_j, b_j+1) on its direction j and lam: beta is b_j on j and b_j+1 on j + 1 (mod k).
    # Sticking: W p = -u; c_t = b_j s_j + b_j+1 s_j+1 on the sector j whose smaller coefficient is largest.
    p = _solve3(Wr, (-u[0], -u[1], -u[2]))
    det = s0 * n1 - s1 * n0
    det = jnp.where(det != 0, det, 1.0)
    coef0, coef1 = (n1 * p[1] - n0 * p[2]) / det, (s0 * p[2] - s1 * p[1]) / det  # (k,)
    sector, largest = 0, jnp.minimum(coef0[0], coef1[0])
    for j in range(1, k):
        here = jnp.minimum(coef0[j], coef1[j])
        sector, largest = jnp.where(here > largest, j, sector), jnp.maximum(here, largest)
    pick = lambda x: sum(jnp.where(sector == j, x[j], zero) for j in range(k))
    stick = (p[0], pick(coef0), pick(coef1))

    # Sliding on vertex j: p = c_n (1, mu s_j), normal velocity zero.
    c_n = -u[0] / (Wr[0][0] + mu * (Wr[0][1] * s0 + Wr[0][2] * s1))  # (k,)
    vertex = (c_n, mu * c_n, jnp.zeros((k,), dtype))

    # Sliding on edge (j, j+1): x = (c_n, b_j, b_j+1) with v_n = 0, equal slip along s_j and s_j+1
    # ((s_j - s_j+1) . v_t = 0), and b_j + b_j+1 = mu c_n.
    d0, d1 = s0 - n0, s1 - n1
    Wp = lambda r: (Wr[r][0], Wr[r][1] * s0 + Wr[r][2] * s1, Wr[r][1] * n0 + Wr[r][2] * n1)  # row r of W P, (k,)
    Wp0, Wp1, Wp2 = Wp(0), Wp(1), Wp(2)
    slip = tuple(d0 * Wp1[c] + d1 * Wp2[c] for c in range(3))
    ones = jnp.ones((k,), dtype)
    edge = _solve3((Wp0, slip, (mu * ones, -ones, -ones)), (-u[0] * ones, -(d0 * u[1] + d1 * u[2]), 0.0 * ones))

    # The candidates side by side, (2k + 2,) each: separation, sticking, the vertices, the edges.
    sides = lambda sep, st, vx, ed: jnp.concatenate([jnp.stack([sep, st]), vx, ed])
    c_n = sides(zero, stick[0], vertex[0], edge[0])
    j = sides(0, sector, jnp.arange(k), jnp.arange(k))
    b0 = sides(zero, stick[1], vertex[1], edge[1])
    b1 = sides(zero, stick[2], vertex[2], edge[2])
    # The friction impulse b_j s_j + b_j+1 s_j+1 of each candidate (the vertices' b_j+1 is zero).
    pt = sides(zero, stick[1] * pick(s0) + stick[2] * pick(n0), vertex[1] * s0, edge[1] * s0 + edge[2] * n0)
    po = sides(zero, stick[1] * pick(s1) + stick[2] * pick(n1), vertex[1] * s1, edge[1] * s1 + edge[2] * n1)
    v = [Wr[r][0] * c_n + Wr[r][1] * pt + Wr[r][2] * po + u[r] for r in range(3)]
    slips = [S[i, 0] * v[1] + S[i, 1] * v[2] for i in range(k)]  # s_i . v_t
    lam = jnp.maximum(-functools.reduce(jnp.minimum, slips), 0.0)  # the smallest lam that makes every w_i >= 0
    # Sticking has no slip: lam = 0, by a select (`.at[1].set` was 13% of a batch).
    lam = jnp.where(jnp.arange(2 * k + 2) == 1, 0.0, lam)

    natural = lambda z, w: jnp.abs(jnp.minimum(z, w))
    beta = lambda i: jnp.where(j == i, b0, 0.0) + jnp.where((j + 1) % k == i, b1, 0.0)
    residual = functools.reduce(
        jnp.maximum,
        [natural(c_n, v[0]), natural(lam, mu * c_n - b0 - b1)] + [natural(beta(i), slips[i] + lam) for i in range(k)],
    )
    residual = jnp.where(jnp.isfinite(residual), residual, jnp.inf)

    # The smallest residual, then the first candidate that has it. A running selection carrying both was
    # split by XLA into several fusions, each computing every candidate's residual again (five times over
    # in the forward pass of a gradient); each of these two chains stays one fusion.
    smallest = functools.reduce(jnp.minimum, [residual[n] for n in range(2 * k + 2)])
    best = functools.reduce(lambda best, n: jnp.where(residual[n] == smallest, n, best), range(2 * k + 1, -1, -1), 0)
    chosen = lambda x: sum(jnp.where(best == n, x[n], 0) for n in range(2 * k + 2))
    c_n, j, b0, b1, lam = chosen(c_n), chosen(j), chosen(b0), chosen(b1), chosen(lam)
    directions = jnp.arange(k)
    beta = jnp.where(directions == j, b0, 0.0) + jnp.where(directions == (j + 1) % k, b1, 0.0)
    return jnp.concatenate([c_n[None], beta, lam[None]]), smallest
