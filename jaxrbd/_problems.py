"""Complementarity problem types: the (mixed) LCP, the generic NCP hook, and the friction LCP."""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._validate import check_value


def _symmetric(dM):
    return 0.5 * (dM + jnp.matrix_transpose(dM))


def _transposed(A, x):
    """A^T x, contracting A's first axis in place: `A.T @ x` copied the (nv, n) matrix A in each line-search step."""
    return jnp.tensordot(A, x, axes=(0, 0))


# The Delassus part U M^{-1} U^T z and v+ are evaluated from the cached X = L^{-1} U^T and
# L^{-1}, and differentiated with respect to U^T and M directly, by rules that ignore the
# caches' tangents: d(M^{-1} r) = M^{-1} (dr - dM M^{-1} r). The reverse pass then takes
# rank-one products in place of transposing X = L^{-1} U^T and the Cholesky factor
# (two dense (nv, n) products and the factor's triangular solves in every reverse step).
# The rules read the caches as functions of M and U^T, so higher derivatives are exact.


@jax.custom_jvp
def _delassus_product(Ut, M, L_inv, X, z):
    """U M^{-1} U^T z = X^T (X z); its derivative with respect to U^T, M and z (not the caches L_inv, X)."""
    del Ut, M, L_inv
    return _transposed(X, X @ z)


@_delassus_product.defjvp
def _delassus_product_jvp(primals, tangents):
    Ut, _, L_inv, X, z = primals
    dUt, dM, _, _, dz = tangents
    Xz = X @ z
    s = L_inv.T @ Xz  # M^{-1} U^T z
    dr = dUt @ z + Ut @ dz - _symmetric(dM) @ s
    return _transposed(X, Xz), _transposed(dUt, s) + _transposed(X, L_inv @ dr)


@jax.custom_jvp
def _inverse_apply(M, L_inv, r):
    """M^{-1} r = L_inv^T (L_inv r); its derivative with respect to M and r (not the cache L_inv)."""
    del M
    return L_inv.T @ (L_inv @ r)


@_inverse_apply.defjvp
def _inverse_apply_jvp(primals, tangents):
    _, L_inv, r = primals
    dM, _, dr = tangents
    s = L_inv.T @ (L_inv @ r)
    return s, L_inv.T @ (L_inv @ (dr - _symmetric(dM) @ s))


class Delassus(eqx.Module):
    """The structure of a friction LCP's matrix: A = C + U M^{-1} U^T = C + X^T X.

    U M^{-1} U^T is the Delassus part, of rank at most nv (the velocities); C holds
    the rows of the friction cone (the lam column of the friction rows and the cone
    rows mu c_n - E^T beta, 004 §3.2), the unit diagonal of the masked rows and, with
    a compliant load split (`friction_lcp(compliance=)`), the normal rows' compliance. The
    Newton direction of `SemismoothNewton` uses it to solve an (nv, nv) system
    instead of an (n, n) one (`_newton.delassus_direction`), and the solvers apply A
    as C z + X^T (X z) without forming either part: the (n, n) product X^T X cost 8 us
    of the four balls' 62 us float32 step, about what a Newton iteration's solve costs,
    and C has O(n) nonzeros, read from the layout (a dense C z took nine tenths of the
    humanoid's product). `matrix` forms A where a solver needs the entries: Lemke, the
    Levenberg-Marquardt steps, the pseudo-inverse.

    Attributes:
        Ut: (nv, n) U^T, where U (n, nv) holds the rows [J, N, D]^T of the kept rows,
            zero on the cone rows and the masked rows (stored transposed: the Newton
            steps' products U^T Y are then plain row-major products).
        M: (nv, nv) mass matrix.
        mu: (nc,) friction coefficients.
        keep: (n,) 1 on the kept rows, 0 on the masked ones (`friction_lcp(row_active=)`).
        L_inv: (nv, nv) L^{-1}, with M = L L^T, and
        X: (nv, n) L^{-1} U^T: U M^{-1} U^T = X^T X. Both are caches: `apply` is
            differentiated with respect to U^T and M by its own rule (`matrix` through X).
        scale: (n,) the solvers' row scaling s_i = 1 / max(W_ii, max_j |C_ij|)
            (`inverse_row_sizes`: 1 for a zero row, bounded on round-off rows),
            W = X^T X: the row scaling of `_newton.row_scale` with W's diagonal
            in place of its row maxima, which would take W itself. W is
            positive semidefinite, so |W_ij| <= sqrt(W_ii W_jj), and its entries
            couple only contacts on common bodies: the two agree within the ratio of
            the rows' sizes on a shared body.
        n_free: static number of leading equality rows (ng).
        counts: static number of friction directions of each contact.
        compliance: (nc,) the diagonal of C on the normal rows, or None (rigid contacts).
    """

    Ut: jax.Array
    M: jax.Array
    mu: jax.Array
    keep: jax.Array
    L_inv: jax.Array
    X: jax.Array
    scale: jax.Array
    n_free: int = eqx.field(static=True)
    counts: tuple[int, ...] = eqx.field(static=True)
    compliance: jax.Array | None = None

    @property
    def U(self):
        """(n, nv) the rows [J, N, D]^T."""
        return self.Ut.T

    def _rows(self, x):
        return split_rows(x, self.n_free, len(self.counts), sum(self.counts))

    def _cone(self, z, sign):
        """C z (sign = 1) or C^T z (sign = -1), from the layout: the lam column E of the friction rows, the
        cone rows mu c_n - E^T beta, the masked rows' unit diagonal and the normal rows' compliance, each entry
        times the rows' keep."""
        k = self.keep
        _, kn, kb, kl = self._rows(k)
        zg, zn, zb, zl = self._rows(z)
        compliant = jnp.zeros_like(zn) if self.compliance is None else kn * self.compliance * zn
        if sign > 0:  # friction rows: E lam; cone rows: mu c_n - E^T beta
            parts = (jnp.zeros_like(zg), compliant, kb * spread(self.counts, kl * zl))
            parts += (kl * (self.mu * kn * zn - gather_sum(self.counts, kb * zb)),)
        else:  # normal columns: mu y_l; friction columns: -E y_l; lam columns: E^T y_b
            ylk = kl * zl
            parts = (jnp.zeros_like(zg), kn * self.mu * ylk + compliant, -kb * spread(self.counts, ylk))
            parts += (kl * gather_sum(self.counts, kb * zb),)
        return jnp.concatenate(parts) + (1.0 - k) * z

    def cone_matrix(self):
        """(..., n, n) C, formed (with the leading axes of a batch of problems, as `matrix`)."""
        if self.keep.ndim > 1:
            return jax.vmap(type(self).cone_matrix)(self)
        n, dtype = self.keep.shape[-1], self.keep.dtype
        return jax.vmap(lambda e: self._cone(e, 1), out_axes=1)(jnp.eye(n, dtype=dtype))

    def matrix(self):
        """(..., n, n) A = C + X^T X, formed."""
        return self.cone_matrix() + jnp.matrix_transpose(self.X) @ self.X

    def apply(self, z):
        """A z = C z + X^T (X z), for z (n,)."""
        return self._cone(z, 1) + _delassus_product(self.Ut, self.M, self.L_inv, self.X, z)

    def apply_transposed(self, y):
        """A^T y = C^T y + X^T (X y)."""
        return self._cone(y, -1) + _transposed(self.X, self.X @ y)

    def magnitude_transposed(self, y):
        """|C|^T |y| + |X|^T (|X| |y|): a bound on the terms of `apply_transposed(y)`, for its round-off."""
        y, X = jnp.abs(y), jnp.abs(self.X)
        return jnp.abs(self._cone(y, -1)) + _transposed(X, X @ y)


class LCP(eqx.Module):
    """The mixed linear complementarity problem.

    Find z with w = A z + b, where the first `n_free` rows are equalities
    (z_i free, w_i = 0) and the others complementarity rows 0 <= z_i ⊥ w_i >= 0.
    With `n_free = 0` this is the plain LCP of 004 §3.2; equality rows carry
    bilateral joints (000 eq. (15)).

    `LCP(A, b, n_free, counts, delassus)`; A may be None when `delassus` is given,
    and is then formed from it where it is read (`A`). The stored matrix is the
    field `dense`.

    Attributes:
        A: (n, n) matrix.
        b: (n,) vector.
        n_free: static number of leading equality rows.
        counts: static layout of a friction LCP (`friction_lcp`): the number of
            friction directions of each contact, whose rows follow the equalities
            as [normal (nc), friction (sum(counts)), cone (nc)]; None for any other
            LCP. The solvers' fallback uses it (`SemismoothNewton`).
        delassus: A's structure (`Delassus`) where `friction_lcp` built it, else
            None. It must describe A exactly; the Newton direction relies on it.
    """

    dense: jax.Array | None
    b: jax.Array
    n_free: int = eqx.field(static=True, default=0)
    counts: tuple[int, ...] | None = eqx.field(static=True, default=None)
    delassus: Delassus | None = None

    def __init__(self, dense, b, n_free=0, counts=None, delassus=None):
        if dense is None and delassus is None:
            raise ValueError("LCP: A is None, and there is no Delassus structure to form it from")
        self.dense, self.b, self.n_free, self.counts, self.delassus = dense, b, n_free, counts, delassus

    def __check_init__(self):
        shape = getattr(self.b, "shape", None)
        if self.counts is not None and shape:
            rows = self.n_free + 2 * len(self.counts) + sum(self.counts)
            if rows != shape[-1]:
                raise ValueError(
                    f"LCP: counts {self.counts} with n_free = {self.n_free} give {rows} rows, but b has {shape[-1]}"
                )

    @property
    def A(self):
        """(n, n) the matrix: the stored one, or formed from `delassus`."""
        return self.dense if self.dense is not None else self.delassus.matrix()

    @property
    def size(self) -> int:
        return self.b.shape[-1]

    def product(self, z):
        """A z."""
        return self.dense @ z if self.dense is not None else self.delassus.apply(z)

    def F(self, z):
        """w(z) = A z + b."""
        return self.product(z) + self.b

    def jac(self, z):
        """dw/dz = A."""
        del z
        return self.A


class NCP(eqx.Module):
    """The nonlinear (mixed) complementarity problem: 0 <= z ⊥ w = fn(z, args) >= 0.

    The hook for smooth friction cones. `fn` must be smooth in z and in `args`; its
    Jacobian is taken by forward-mode autodiff, and gradients with respect to the
    array leaves of `args` come from the same implicit rule as for the LCP.

    Attributes:
        fn: static callable (z, args) -> w, both of shape (n,).
        args: pytree of arrays (the differentiable parameters).
        n: static problem size.
        n_free: static number of leading equality rows.
    """

    fn: Callable[[jax.Array, Any], jax.Array] = eqx.field(static=True)
    args: Any
    n: int = eqx.field(static=True)
    n_free: int = eqx.field(static=True, default=0)

    @property
    def size(self) -> int:
        return self.n

    def F(self, z):
        return self.fn(z, self.args)

    def jac(self, z):
        return jax.jacfwd(self.fn)(z, self.args)


def inverse_row_sizes(m):
    """The row scaling 1 / m_i of the rows of sizes m >= 0: 1 for a zero row, and no more than 1 / (eps max m).

    A row below the machine epsilon of the largest is round-off (a contact whose
    Jacobian cancels to a few ulps): scaled by 1 / m_i it would weigh its round-off
    like a whole row, and s_i w_i would overflow in float32 (a hopper contact row of
    2e-23 gave s = 5e22, whose square made the Fischer-Burmeister function of a
    wrong impulse of -5e9 round to 0).
    """
    floor = jnp.finfo(m.dtype).eps * jnp.max(m, axis=-1, keepdims=True, initial=0.0)
    return jnp.where(m > 0, 1.0 / jnp.where(m > 0, jnp.maximum(m, floor), 1.0), 1.0)


def natural_residual(z, w, n_free=0):
    """Max-norm of the natural map: |w_i| on equality rows, |min(z_i, w_i)| on the others."""
    n = z.shape[-1]
    free = jnp.arange(n) < n_free
    r = jnp.where(free, jnp.abs(w), jnp.abs(jnp.minimum(z, w)))
    return jnp.max(r, axis=-1)


class FrictionLCP(eqx.Module):
    """The polyhedral-cone friction LCP of one time step (004 §3.2) and its layout.

    z = [c_g (ng), c_n (nc), beta (nd), lam (nc)], with
    w = [J^T v+, N^T v+, D^T v+ + E lam, mu c_n - E^T beta], where
    v+ = b + M^{-1}(J c_g + N c_n + D beta) is the velocity after the step. The ng
    joint rows lead and are equalities (000 eq. (15)); without joints ng = 0.

    Attributes:
        lcp: the LCP.
        M: (nv, nv) mass matrix.
        b: (nv,) free velocity.
        N: (nv, nc) contact normals.
        D: (nv, nd) friction directions, grouped by contact.
        J: (nv, ng) joint rows (transposed); ng may be 0.
        L_inv: (nv, nv) the inverse of M's lower Cholesky factor L: M^{-1} = L_inv^T L_inv (a cache:
            `velocity` is differentiated with respect to M by its own rule).
        counts: static number of directions of each contact.
    """

    lcp: LCP
    M: jax.Array
    b: jax.Array
    N: jax.Array
    D: jax.Array
    J: jax.Array
    L_inv: jax.Array
    counts: tuple[int, ...] = eqx.field(static=True)

    def split(self, z):
        """(c_n, beta, lam) from z."""
        ng, nc, nd = self.J.shape[-1], self.N.shape[-1], self.D.shape[-1]
        z = z[..., ng:]
        return z[..., :nc], z[..., nc : nc + nd], z[..., nc + nd :]

    def joint(self, z):
        """(ng,) the joint impulses c_g."""
        return z[..., : self.J.shape[-1]]

    def impulse(self, z):
        """The generalized impulse J c_g + N c_n + D beta, unique even when z is not."""
        c_n, beta, _ = self.split(z)
        return self.J @ self.joint(z) + self.N @ c_n + self.D @ beta

    def velocity(self, z):
        """The velocity after the step, v+ = b + M^{-1}(N c_n + D beta)."""
        return self.b + _inverse_apply(self.M, self.L_inv, self.impulse(z))


def multiplicity(Un, kept):
    """(nc,) for each contact, the number of kept contacts whose normal row Un (nc, nv) equals its own (1 where
    not kept).

    A manifold with fewer distinct points than slots repeats some (`jaxrbd.geometry`'s box-box clip), and equal
    boxes stacked face to face give coincident points: their rows are equal, and a rule that weighs the contact
    points (the least-norm impulse, the compliant load split) counts them as one.
    """
    kept = kept > 0
    size = 1e-9 * jnp.max(jnp.abs(Un), initial=0.0)
    same = jnp.max(jnp.abs(Un[:, None, :] - Un[None, :, :]), axis=-1, initial=0.0) <= size
    return jnp.where(kept, jnp.sum(same & kept[None, :], axis=1), 1).astype(Un.dtype)


def _direction_incidence(counts):
    """E (nd, nc): E[j, i] = 1 when direction j belongs to contact i."""
    owner = np.repeat(np.arange(len(counts)), counts)
    return (owner[:, None] == np.arange(len(counts))[None, :]).astype(np.float64)


def _uniform(counts):
    """The one number of directions of every contact, or None where they differ (or there are none)."""
    return counts[0] if counts and all(k == counts[0] for k in counts) else None


# E x and E^T y with the layout's static indices (a repeat and a reshaped sum where every contact has
# k directions, gathers otherwise), not products with the (nd, nc) matrix E: the humanoid's 116 x 151
# E took a quarter of its Newton iterations' time in the block solves alone.


def split_rows(x, ng, nc, nd):
    """The equality, normal, friction and cone rows of a friction LCP's x (ng, nc, nd and nc of them)."""
    return x[:ng], x[ng : ng + nc], x[ng + nc : ng + nc + nd], x[ng + nc + nd :]


def spread(counts, x):
    """E x: each contact's row of x (nc, ...) on each of its friction directions (nd, ...)."""
    k = _uniform(counts)
    if k is not None:
        return jnp.repeat(x, k, axis=0, total_repeat_length=len(counts) * k)
    return x[np.repeat(np.arange(len(counts)), counts)]


def gather_sum(counts, y):
    """E^T y: each contact's sum of the rows of y (nd, ...) on its friction directions (nc, ...)."""
    k = _uniform(counts)
    if k is not None:
        return jnp.sum(jnp.reshape(y, (len(counts), k) + y.shape[1:]), axis=1)
    nd, width = sum(counts), max(counts, default=0)
    if width == 0:
        return jnp.zeros((len(counts),) + y.shape[1:], y.dtype)
    # Row j of `index` lists contact j's directions, padded with nd: the zero row appended to y.
    starts = np.cumsum((0,) + tuple(counts[:-1]))
    index = np.where(np.arange(width) < np.asarray(counts)[:, None], starts[:, None] + np.arange(width), nd)
    padded = jnp.concatenate([y, jnp.zeros((1,) + y.shape[1:], y.dtype)])
    return jnp.sum(padded[index], axis=1)


def friction_lcp(M, N, D, mu, counts, b, *, bn=None, row_active=None, J=None, bj=None, bl=None, compliance=0.0):
    """Build the friction LCP of one velocity-level time step (004 §3.2, 000 eq. (14)).

    Args:
        M: (nv, nv) symmetric positive definite mass matrix.
        N: (nv, nc) contact normals, one column per contact.
        D: (nv, nd) friction directions, grouped by contact (nd = sum(counts)).
        mu: (nc,) friction coefficients, >= 0.
        counts: static sequence of the number of directions per contact.
        b: (nv,) free velocity: the velocity at the end of the step without contact
            impulses (v + h M^{-1} k).
        bn: optional (nc,) offset added to the normal rows: f/h for the
            position-level Stewart-Trinkle constraint (003 eq. (13)), or a
            restitution term.
        row_active: optional (nc + nd + nc,) boolean mask; masked-out rows and
            columns are replaced by the decoupled row z_i + 1 >= 0 ⊥ z_i, whose only
            solution is z_i = 0. Gives fixed shapes with a variable number of contacts
            and directions.
        J: optional (nv, ng) joint rows, transposed: equality rows J^T v+ + bj = 0
            that lead z (the mixed LCP of 000 eq. (15)); always active.
        bj: optional (ng,) offset of the joint rows.
        bl: optional (nc,) offsets of the cone rows, mu c_n - e^T beta + bl >= 0: a
            friction bound that does not scale with c_n (a joint's dry friction,
            its frictionloss f times h, on a contact whose normal row is masked).
        compliance: rho >= 0, the relative compliance of the contact points (static). rho > 0 adds
            kappa_i c_n,i to each normal row, kappa_i = rho m_i max_j W_jj: every contact point a spring of
            the same compliance rho max_j W_jj (W = N^T M^{-1} N, the largest over the kept normal rows), its
            m_i coincident copies sharing it (`multiplicity`). Where more normal rows act than the
            velocities they move (a face on four corners) the rigid problem has a whole set of solutions,
            among them different velocities once the face slides and spins; the compliant one is unique,
            near the split of equal springs. 0: the rigid rows.

    Returns:
        A `FrictionLCP`.
    """
    counts = tuple(int(k) for k in counts)
    nc, nd = N.shape[-1], D.shape[-1]
    if len(counts) != nc:
        raise ValueError(f"counts has {len(counts)} entries, but N has {nc} contact columns")
    if sum(counts) != nd:
        raise ValueError(f"sum(counts) = {sum(counts)} must equal the {nd} columns of D")
    if M.shape[-2:] != (N.shape[-2], N.shape[-2]) or D.shape[-2] != N.shape[-2] or b.shape[-1] != N.shape[-2]:
        raise ValueError(f"inconsistent shapes: M {M.shape}, N {N.shape}, D {D.shape}, b {b.shape}")
    check_value("mu", mu, shape=((), (nc,)), nonnegative=True)
    for name, x in (("M", M), ("N", N), ("D", D), ("b", b), ("bn", bn), ("J", J), ("bj", bj)):
        check_value(name, x)
    dtype = jnp.result_type(M, N, D, b)
    J = jnp.zeros((N.shape[-2], 0), dtype) if J is None else J
    ng = J.shape[-1]
    G = jnp.concatenate([J, N, D], axis=-1)
    mu = jnp.broadcast_to(jnp.asarray(mu, dtype), (nc,))
    q = jnp.concatenate([G.T @ b, jnp.zeros((nc,), dtype)])
    if bj is not None:
        q = q.at[:ng].add(bj)
    if bn is not None:
        q = q.at[ng : ng + nc].add(bn)
    if bl is not None:
        q = q.at[ng + nc + nd :].add(bl)
    keep = jnp.ones(q.shape, dtype)
    if row_active is not None:
        keep = jnp.concatenate([jnp.ones((ng,), dtype), row_active.astype(dtype)])
        q = q * keep + (1.0 - keep)
    Ut = jnp.concatenate([G, jnp.zeros((G.shape[0], nc), dtype)], axis=1) * keep
    # U M^{-1} U^T = X^T X with X = L^{-1} U^T, not formed (`Delassus`). For these small
    # matrices the explicit inverse of L and a product cost less than triangular solves with U^T.
    L_inv = jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(M), jnp.eye(M.shape[-1], dtype=dtype), lower=True)
    X = L_inv @ Ut
    # C's row maxima from the layout (a reduction over C would form it again inside the reduction).
    kn, kb, kl = keep[ng : ng + nc], keep[ng + nc : ng + nc + nd], keep[ng + nc + nd :]
    kb_any = (gather_sum(counts, kb) > 0).astype(dtype)  # a contact with a kept friction row
    c_max = jnp.concatenate(
        [
            jnp.zeros((ng,), dtype),
            1.0 - kn,
            kb * spread(counts, kl) + 1.0 - kb,
            kl * jnp.maximum(mu * kn, kb_any) + 1.0 - kl,
        ]
    )
    W = jnp.sum(X * X, axis=0)
    scale = inverse_row_sizes(jnp.maximum(W, c_max))
    kappa = None
    if compliance and nc:
        Wn = W[ng : ng + nc] * kn
        kappa = compliance * jnp.max(Wn) * kn * multiplicity(Ut[:, ng : ng + nc].T, kn)
    lcp = LCP(None, q, ng, counts, Delassus(Ut, M, mu, keep, L_inv, X, scale, ng, counts, kappa))
    return FrictionLCP(lcp, M, b, N, D, J, L_inv, counts)
