"""Predicates over a whole `vmap` batch, so that a `lax.cond` on them stays a branch under `vmap`."""

import jax
import jax.numpy as jnp


@jax.custom_batching.custom_vmap
def every_lane(pred):
    """jnp.all(pred), and under `vmap` the same over every lane of the batch (an unbatched result).

    `lax.cond(p, fast, slow)` with a batched p becomes a `select` that runs both
    branches for every lane. Where `slow` falls back to `fast`'s result lane by lane
    (it keeps each lane for which p holds), `lax.cond(every_lane(p), fast, slow)`
    gives the same answers and runs `slow` only in the calls where some lane needs it.
    Nested `vmap`s reduce over all their lanes.
    """
    return jnp.all(pred)


@every_lane.def_vmap
def _every_lane_rule(axis_size, in_batched, pred):
    del axis_size, in_batched
    return every_lane(pred), False
