"""Products of many small matrices, written as sums of broadcast products.

On the CPU, XLA turns an `einsum` or `@` of a stack of 3 x 6 or 6 x 6 matrices into
one batched GEMM, which runs each tiny product through a general kernel (about
0.6 us per 3 x 6 x 6 x 3 congruence, sphere_grid(64) under `vmap`). The same
product written as a sum over the inner index of broadcast products is elementwise
work that XLA fuses with its neighbours and vectorizes across the stack: 15x
faster there. Use these where the inner dimension is small and static.
"""


def matmul(X, Y):
    """(..., p, q) @ (..., q, r), unrolled over q."""
    return sum(X[..., :, j, None] * Y[..., None, j, :] for j in range(X.shape[-1]))


def matvec(X, y):
    """(..., p, q) @ (..., q), unrolled over q."""
    return sum(X[..., :, j] * y[..., None, j] for j in range(X.shape[-1]))
