"""Products and 3 x 3 solves of many small matrices, written as elementwise arithmetic.

On the CPU, XLA turns an `einsum` or `@` of a stack of 3 x 6 or 6 x 6 matrices into
one batched GEMM, which runs each tiny product through a general kernel (about
0.6 us per 3 x 6 x 6 x 3 congruence, sphere_grid(64) under `vmap`). The same
product written as a sum over the inner index of broadcast products is elementwise
work that XLA fuses with its neighbours and vectorizes across the stack: 15x
faster there. Use these where the inner dimension is small and static. A 3 x 3 solve by
Cramer's rule is elementwise too, where a batched LAPACK solve is a call per system.
"""

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero


@jax.custom_jvp
def matmul(X, Y):
    """(..., p, q) @ (..., q, r), unrolled over q."""
    return sum(X[..., :, j, None] * Y[..., None, j, :] for j in range(X.shape[-1]))


@jax.custom_jvp
def matvec(X, y):
    """(..., p, q) @ (..., q), unrolled over q."""
    return sum(X[..., :, j] * y[..., None, j] for j in range(X.shape[-1]))


# The tangents as broadcast products summed over the inner index. Their transposes
# are broadcast products and sums too, one fusion each; the transpose of the
# unrolled form would pad every slice X[..., :, j] back to its place and add the
# pads, a fusion per index in every reverse pass.
def _matmul_jvp(primals, tangents):
    (X, Y), (dX, dY) = primals, tangents
    product = lambda A, B: jnp.sum(A[..., :, :, None] * B[..., None, :, :], -2)
    return matmul(X, Y), _sum_present(((dX, lambda: product(dX, Y)), (dY, lambda: product(X, dY))))


def _matvec_jvp(primals, tangents):
    (X, y), (dX, dy) = primals, tangents
    product = lambda A, b: jnp.sum(A * b[..., None, :], -1)
    return matvec(X, y), _sum_present(((dX, lambda: product(dX, y)), (dy, lambda: product(X, dy))))


def _sum_present(terms):
    """The sum of the terms whose tangent is not a symbolic zero (the rule runs only when one is not)."""
    present = [term() for tangent, term in terms if not isinstance(tangent, SymbolicZero)]
    return sum(present[1:], present[0])


matmul.defjvp(_matmul_jvp, symbolic_zeros=True)
matvec.defjvp(_matvec_jvp, symbolic_zeros=True)


def det3(r0, r1, r2):
    """The determinant of the 3 x 3 matrix with rows r0, r1, r2 (sequences of 3 arrays)."""
    return (
        r0[0] * (r1[1] * r2[2] - r1[2] * r2[1])
        - r0[1] * (r1[0] * r2[2] - r1[2] * r2[0])
        + r0[2] * (r1[0] * r2[1] - r1[1] * r2[0])
    )


def cramer3(rows, rhs):
    """(numerators, det) of the x with rows . x = rhs (3 sequences of 3 arrays, and 3 arrays): x_i = numerators[i] / det."""

    def replaced(i):
        return [[rhs[r] if c == i else rows[r][c] for c in range(3)] for r in range(3)]

    return tuple(det3(*replaced(i)) for i in range(3)), det3(*rows)


def inv3(A):
    """(..., 3, 3) A^-1: the columns r1 x r2, r2 x r0, r0 x r1 of the rows r0, r1, r2, over det A = r0 . (r1 x r2)."""
    r0, r1, r2 = A[..., 0, :], A[..., 1, :], A[..., 2, :]
    columns = jnp.cross(r1, r2), jnp.cross(r2, r0), jnp.cross(r0, r1)
    return jnp.stack(columns, -1) / jnp.sum(r0 * columns[0], -1)[..., None, None]


def solve3(A, b):
    """A^-1 b for (..., 3, 3) A and (..., 3) b by Cramer's rule."""
    numerators, det = cramer3([[A[..., r, c] for c in range(3)] for r in range(3)], [b[..., r] for r in range(3)])
    return jnp.stack(numerators, -1) / det[..., None]
