"""A fixed-capacity broad phase: the nearest shape pairs of a kind pair, by bounding spheres.

A scene in which every body may touch every other has O(n^2) shape pairs. Only a
few of them are near at any time, so carrying all of them into the step's
complementarity problem wastes rows (and, for the dense step, cubes of them). The
broad phase bounds each shape by a sphere about its centre, computes the
bounding gap |p_a - p_b| - (r_a + r_b) of every pair (O(n^2) subtractions, no
narrow phase), and keeps the `slots` pairs with the smallest bounding gaps
(`lax.top_k`); only those go through the closed-form narrow phase and into the
step. Shapes stay static: the number of slots is fixed, the pairs in them change
from step to step.

A pair whose bounding spheres are within `distance` of each other but that got no
slot is an overflow: it could touch and is not simulated. The step reports the
count in `traj.stats.overflow`; raise `slots` when it is not zero.
"""

import dataclasses

import jax
import jax.numpy as jnp

from ._convex import mesh_radius


@dataclasses.dataclass(frozen=True)
class BroadPhase:
    """Fixed-capacity broad phase of a `SceneBuilder` (static configuration).

    Every kind pair (sphere-sphere, sphere-capsule, ...) with more than `slots`
    shape pairs and no plane keeps only its `slots` nearest pairs in each step;
    pairs with a plane are never filtered (there is one per body and plane).

    Attributes:
        slots: shape pairs kept per kind pair (an integer >= 1).
        distance: bounding gap (m, >= 0) below which a pair left without a slot
            counts as an overflow.
    """

    slots: int
    distance: float = 0.0

    def __post_init__(self):
        if not isinstance(self.slots, int) or isinstance(self.slots, bool) or self.slots < 1:
            raise ValueError(f"BroadPhase: slots must be an integer >= 1, got {self.slots!r}")
        if not float(self.distance) >= 0:
            raise ValueError(f"BroadPhase: distance must be >= 0 (metres), got {self.distance!r}")


def bounding_radius(kind, arrays):
    """(n,) the radius about each shape's centre that contains it (world arrays of one kind)."""
    if kind == "sphere":
        return arrays["radius"]
    if kind == "capsule":
        return arrays["radius"] + arrays["half_length"]
    if kind == "box":
        return jnp.linalg.norm(arrays["half_extents"], axis=-1)
    if kind == "mesh":
        return mesh_radius(arrays["vertices"])
    raise ValueError(f"the broad phase has no bound for a {kind}")


def bounding_gaps(kind_a, world_a, index_a, kind_b, world_b, index_b):
    """(P,) the bounding-sphere gaps of the shape pairs (index_a[i], index_b[i])."""
    d = world_a["p"][index_a] - world_b["p"][index_b]
    dist = jnp.sqrt(jnp.sum(d * d, -1))  # not differentiated: the selection is discrete
    return dist - bounding_radius(kind_a, world_a)[index_a] - bounding_radius(kind_b, world_b)[index_b]


def select(bound, slots, distance):
    """The `slots` pairs with the smallest bounding gaps, and the overflow.

    Args:
        bound: (P,) bounding gaps, P > slots.
        slots: static number of pairs to keep.
        distance: the overflow distance.

    Returns:
        (pairs (slots,) int32 in increasing order, overflow () int32: the pairs within
        `distance` left without a slot).
    """
    bound = jax.lax.stop_gradient(bound)
    _, pairs = jax.lax.top_k(-bound, slots)
    near = jnp.sum(bound <= distance, dtype=jnp.int32)
    overflow = jnp.maximum(near - slots, 0).astype(jnp.int32)
    return jnp.sort(pairs).astype(jnp.int32), overflow
