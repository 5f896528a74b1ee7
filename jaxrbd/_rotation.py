"""Unit quaternions (w, x, y, z) and rotation matrices, safe under autodiff.

A quaternion q rotates body-frame vectors into the world frame, x_w = R(q) x_b.
With the angular velocity w in the world frame, dq/dt = (0, w) * q / 2 (000 §5).
"""

import jax.numpy as jnp

from ._validate import host_numpy


def multiply(a, b):
    """The Hamilton product a * b of (..., 4) quaternions."""
    xp = host_numpy(a, b)
    a, b = xp.asarray(a), xp.asarray(b)
    aw, av = a[..., :1], a[..., 1:]
    bw, bv = b[..., :1], b[..., 1:]
    w = aw * bw - xp.sum(av * bv, -1, keepdims=True)
    v = aw * bv + bw * av + xp.cross(av, bv)
    return xp.concatenate([w, v], -1)


def to_matrix(q):
    """(..., 3, 3) the rotation matrix of a unit quaternion (..., 4); numpy for concrete q (`host_numpy`)."""
    xp = host_numpy(q)
    q = xp.asarray(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.stack(
        [
            xp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            xp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            xp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def rate_matrix(q):
    """(..., 4, 3) the map E(q) with dq/dt = E(q) w for the world-frame angular velocity w.

    E(q) w = (0, w) * q / 2 (000 §5: the block of G(q) for the orientation).
    """
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    E = jnp.stack(
        [
            jnp.stack([-x, -y, -z], -1),
            jnp.stack([w, z, -y], -1),
            jnp.stack([-z, w, x], -1),
            jnp.stack([y, -x, w], -1),
        ],
        -2,
    )
    return 0.5 * E


def normalize(q):
    """q / |q|; |q| is bounded away from 0 for every quaternion a step produces (numpy for concrete q)."""
    xp = host_numpy(q)
    q = xp.asarray(q)
    return q / xp.linalg.norm(q, axis=-1, keepdims=True)


def conjugate(q):
    """The inverse rotation of a unit quaternion (..., 4)."""
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], q.dtype)


def cayley(a):
    """(..., 4) the unit quaternion of the Cayley rotation cay(a^) = (I - a^/2)^-1 (I + a^/2) of a (..., 3).

    It rotates about a by 2 atan(|a| / 2): the rotation of a step of length h at
    the angular velocity w is cay(h w), which is what q + h E(q) w, normalised,
    applies to q (000 §5).
    """
    return normalize(jnp.concatenate([jnp.ones_like(a[..., :1]), 0.5 * a], -1))


def cayley_vector(q):
    """(..., 3) the a with cayley(a) = q, for a unit quaternion q (..., 4) of a rotation by less than pi."""
    return 2.0 * q[..., 1:] / q[..., :1]


def skew(a):
    """(..., 3, 3) the cross-product matrix a^ of (..., 3): a^ x = a x x."""
    x, y, z = a[..., 0], a[..., 1], a[..., 2]
    zero = jnp.zeros_like(x)
    return jnp.stack([jnp.stack([zero, -z, y], -1), jnp.stack([z, zero, -x], -1), jnp.stack([-y, x, zero], -1)], -2)


def from_axis_angle(axis, angle):
    """The unit quaternion of a rotation by `angle` about the unit vector `axis`."""
    xp = host_numpy(axis, angle)
    axis = xp.asarray(axis)
    half = 0.5 * xp.asarray(angle)
    return xp.concatenate([xp.cos(half)[..., None], xp.sin(half)[..., None] * axis], -1)


def rotation_angle(a, b):
    """The angle in [0, pi] of the rotation from unit quaternion a to b (sign-invariant)."""
    d = multiply(a, conjugate(b))
    return 2 * jnp.arctan2(jnp.linalg.norm(d[..., 1:], axis=-1), jnp.abs(d[..., 0]))


def rotation_z(theta):
    """(..., 3, 3) the rotation by theta about the z axis (planar bodies; numpy for concrete theta)."""
    xp = host_numpy(theta)
    theta = xp.asarray(theta)
    c, s = xp.cos(theta), xp.sin(theta)
    zero, one = xp.zeros_like(c), xp.ones_like(c)
    return xp.stack([xp.stack([c, -s, zero], -1), xp.stack([s, c, zero], -1), xp.stack([zero, zero, one], -1)], -2)
