"""The collision driver: every shape pair of a scene through the collision table, once per configuration.

Shape pairs are grouped by kind pair (`PairGroup`); each group runs its closed form
(`COLLIDERS`) vmapped over its pairs and contributes its capacity of candidate
contacts per pair, in group order. A group with a broad phase keeps only its
nearest pairs, in fixed slots (`jaxrbd.BroadPhase`).
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._broadphase import bounding_gaps, select
from ._pairs import collider, contact_frame, planar_tangent, world_pose


@dataclasses.dataclass(frozen=True)
class PairGroup:
    """All shape pairs of one kind pair: indices into the two kinds' stacks (static).

    slots: None, every pair is in the step; else the broad phase keeps this many
    (the nearest, `jaxrbd.BroadPhase`).
    """

    kind_a: str
    kind_b: str
    index_a: tuple
    index_b: tuple
    capacity: int
    slots: int | None = None

    @property
    def pairs(self):
        """The number of shape pairs in the step."""
        return len(self.index_a) if self.slots is None else self.slots


class Collision(eqx.Module):
    """The candidate contacts of a configuration, as the driver finds them.

    Attributes:
        gap: (nc,) signed distances.
        normal: (nc, 3) unit normals from shape a to shape b.
        point: (nc, 3) contact points (midpoints of the witness points).
        tangent, bitangent: (nc, 3) the frame (t, o) with t x o = n (planar: o = e_z).
        body_a, body_b: (nc,) int, the bodies carrying shapes a and b (numpy for a
            static layout, traced with a broad phase).
        index: (nc,) int, each contact's place among the candidates of every pair.
        overflow: () int32, pairs within the broad phase's distance left without a slot.
    """

    gap: jax.Array
    normal: jax.Array
    point: jax.Array
    tangent: jax.Array
    bitangent: jax.Array
    body_a: jax.Array | np.ndarray
    body_b: jax.Array | np.ndarray
    index: jax.Array | np.ndarray
    overflow: jax.Array


def take(x, idx):
    """x[idx]; for a static idx that repeats one index (sphere_grid's floor, paired with every ball) a broadcast,
    whose reverse pass is a sum, where a gather's is a scatter. (A slice for a static run of consecutive indices
    made the four balls' forward 8% faster and their gradient 3-5% slower, and did nothing for sphere_grid.)"""
    if isinstance(idx, np.ndarray) and idx.ndim == 1 and idx.size and np.all(idx == idx[0]):
        return jnp.broadcast_to(x[int(idx[0])], (idx.size,) + x.shape[1:])
    return x[idx]


def collide(groups, shape_bodies, shapes, p, R, dim, overflow_distance=0.0):
    """Run every pair group's closed form: the scene's `Collision` at the body poses (p, R).

    Args:
        groups: the static `PairGroup`s, in the order of the contacts.
        shape_bodies: ((kind, (body index of each shape of that kind)), ...).
        shapes: {kind: stacked shape arrays} (`BodyParams.shapes`).
        p: (nb + 1, 3) body positions, R: (nb + 1, 3, 3) rotations; the last is the world.
        dim: 3 (spatial) or 2 (planar: the frame is (t, e_z)).
        overflow_distance: the broad phase's overflow distance.
    """
    world = {}
    for kind, bodies in shape_bodies:
        idx = np.array(bodies, int)
        world[kind] = jax.vmap(world_pose)(shapes[kind], take(p, idx), take(R, idx))
    bodies = dict(shape_bodies)
    dynamic = any(g.slots is not None for g in groups)
    parts = {key: [] for key in ("gap", "n", "x", "a", "b", "index")}
    if not groups:  # a scene with no contact pairs (free bodies, joints): no candidates
        parts = {key: [jnp.zeros((0, 3)[: 1 + (key != "gap")], p.dtype)] for key in ("gap", "n", "x")}
        parts.update({key: [np.zeros(0, int)] for key in ("a", "b", "index")})
    overflow, offset = jnp.zeros((), jnp.int32), 0
    for g in groups:
        fn, _ = collider(g.kind_a, g.kind_b)
        ia, ib = np.array(g.index_a), np.array(g.index_b)
        pairs = np.arange(len(ia))
        if g.slots is not None:
            bound = bounding_gaps(g.kind_a, world[g.kind_a], ia, g.kind_b, world[g.kind_b], ib)
            pairs, over = select(bound, g.slots, overflow_distance)
            overflow = overflow + over
            ia, ib = jnp.asarray(ia)[pairs], jnp.asarray(ib)[pairs]
        A = jax.tree_util.tree_map(lambda x: take(x, ia), world[g.kind_a])
        B = jax.tree_util.tree_map(lambda x: take(x, ib), world[g.kind_b])
        gap, n, x = jax.vmap(functools.partial(fn, dim=dim))(A, B)
        if gap.shape[1] != g.capacity:  # mesh-mesh's count follows the meshes' padded vertex count
            raise ValueError(
                f"the {g.kind_a}-{g.kind_b} pairs give {gap.shape[1]} contacts where the scene was built with "
                f"{g.capacity}: pad meshes (geometry.pad_meshes) before building the scene, not after"
            )
        parts["gap"].append(gap.reshape(-1))
        parts["n"].append(n.reshape(-1, 3))
        parts["x"].append(x.reshape(-1, 3))
        xp = jnp if g.slots is not None else np
        parts["a"].append(xp.repeat(xp.asarray(bodies[g.kind_a])[ia], g.capacity))
        parts["b"].append(xp.repeat(xp.asarray(bodies[g.kind_b])[ib], g.capacity))
        slot = offset + g.capacity * xp.asarray(pairs)[:, None] + np.arange(g.capacity)
        parts["index"].append(slot.reshape(-1))
        offset += len(g.index_a) * g.capacity
    xp = jnp if dynamic else np
    out = {key: (xp if key in ("a", "b", "index") else jnp).concatenate(v) for key, v in parts.items()}
    n = out["n"]
    if dim == 3:
        t, o = contact_frame(n)
    else:
        t = planar_tangent(n)
        o = jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0], n.dtype), n.shape)
    return Collision(
        gap=out["gap"],
        normal=n,
        point=out["x"],
        tangent=t,
        bitangent=o,
        body_a=out["a"],
        body_b=out["b"],
        index=out["index"],
        overflow=overflow,
    )
