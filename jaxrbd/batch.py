"""`sweep`: map a simulation over a batch of parameters with vmap, in chunks, sharded over devices.

A sweep that returns the trajectories (or their `StepStats`) is checked on the host:
its lanes with a step that did not converge are counted and named in a warning, or
raised with `throw=True`, and `unconverged_lanes(result)` gives their indices.
"""

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._config import BATCH_COMPILER_OPTIONS
from .stepping import StepStats

DEFAULT_CHUNK = 1024  # sets per chunk by default ...
CHUNK_BYTES = 256 * 2**20  # ... and fewer where one chunk's outputs would pass this
SHOWN_LANES = 20  # the lane indices a warning or an error lists


class UnconvergedLanes(RuntimeError):
    """Raised by `sweep(..., throw=True)` when lanes hold steps that did not converge; `lanes` holds their indices."""

    def __init__(self, message, lanes):
        super().__init__(message)
        self.lanes = lanes


def unconverged_lanes(result) -> np.ndarray:
    """The indices of the lanes of a batched result that hold a step that did not converge.

    Every `StepStats` in the pytree `result` (the stats of batched trajectories, with a
    leading batch axis) is read; a lane is unconverged where any of its steps has
    `converged` False. A result without `StepStats` has no lane to report: an empty array.
    """
    stats = [x for x in jax.tree_util.tree_leaves(result, is_leaf=_is_stats) if _is_stats(x)]
    bad = None
    for s in stats:
        converged = np.asarray(s.converged)
        if converged.ndim == 0:
            raise ValueError("unconverged_lanes: the StepStats in result have no batch axis")
        lane_bad = ~converged.reshape(converged.shape[0], -1).all(axis=1)
        bad = lane_bad if bad is None else bad | lane_bad
    return np.zeros(0, int) if bad is None else np.flatnonzero(bad)


def _is_stats(x):
    return isinstance(x, StepStats)


def _lanes_text(lanes):
    shown = ", ".join(str(int(i)) for i in lanes[:SHOWN_LANES])
    return shown + (f", ... ({len(lanes) - SHOWN_LANES} more)" if len(lanes) > SHOWN_LANES else "")


_LANE_BYTES = {}


def _default_chunk(fn, params, batch):
    """DEFAULT_CHUNK sets, or fewer where one chunk's outputs (one lane's, by `jax.eval_shape`, cached per function
    and shapes) pass CHUNK_BYTES."""
    one = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], jnp.asarray(x).dtype), params)
    key = (fn, jax.tree_util.tree_structure(one), tuple((x.shape, x.dtype) for x in jax.tree_util.tree_leaves(one)))
    if key not in _LANE_BYTES:
        if len(_LANE_BYTES) >= _MAPPED_SIZE:
            _LANE_BYTES.pop(next(iter(_LANE_BYTES)))
        out = jax.eval_shape(fn, one)
        _LANE_BYTES[key] = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree_util.tree_leaves(out))
    return max(1, min(batch, DEFAULT_CHUNK, CHUNK_BYTES // max(_LANE_BYTES[key], 1)))


def sweep(
    fn: Callable[[Any], Any],
    params: Any,
    *,
    chunk_size: int | None = None,
    devices: Sequence[jax.Device] | None = None,
    throw: bool = False,
) -> Any:
    """fn applied to every parameter set of a batch: `vmap`, chunked, sharded over devices.

    The batch is split into chunks of `chunk_size` sets (bounding memory: one
    chunk's rollouts live at a time), and each chunk is split across the devices
    along its batch axis with `jax.sharding` (one mesh axis, "batch"), so every
    device runs chunk_size / n_devices lanes. The result equals
    `jax.vmap(fn)(params)` (up to floating-point reassociation, none in practice).

    Several processes or hosts: call `jax.distributed.initialize(...)` first on
    every process (on CPUs with `jax_cpu_collectives_implementation="gloo"`) and
    pass the same full `params` everywhere; the default `devices` is then
    `jax.devices()`, which spans all processes, each runs its share of every
    chunk's lanes, and each receives the whole result (gathered by
    `jax.experimental.multihost_utils.process_allgather`). No multiprocessing
    code is needed.

    Args:
        fn: a function of one parameter set (a pytree of arrays without the batch
            axis), returning a pytree of arrays.
        params: a pytree of arrays with a leading batch axis B (all leaves the same B).
        chunk_size: sets per chunk (rounded up to a multiple of the device count);
            default: 1,024 sets, or fewer where one chunk's outputs would pass
            256 MiB (one lane's outputs measured by `jax.eval_shape`).
        devices: the devices to shard over; default all devices (`jax.devices()`).
        throw: where the outputs hold `StepStats` (return the trajectory, or its
            `stats`, from `fn`) and some lanes hold a step that did not converge:
            False warns on the host, naming how many and which lanes; True raises
            `UnconvergedLanes` (a RuntimeError whose `lanes` are their indices).

    Returns:
        The pytree of `fn`'s outputs, each with the leading batch axis B;
        `unconverged_lanes(result)` gives the indices of the lanes whose steps did
        not all converge.

    Raises:
        UnconvergedLanes: with throw=True, as above.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of one parameter set, got {fn!r}")
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError("params must hold at least one array with a leading batch axis")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1:
        raise ValueError(f"every leaf of params needs the same leading batch axis, got sizes {sizes}")
    (batch,) = sizes
    if batch == 0:
        raise ValueError("params has an empty batch (leading axis of size 0): the batch must have at least one element")
    if chunk_size is not None and (not isinstance(chunk_size, (int, np.integer)) or isinstance(chunk_size, bool)):
        raise TypeError(f"chunk_size must be None or an integer >= 1, got {chunk_size!r}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be None or an integer >= 1, got {chunk_size!r}")
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must name at least one device")
    ndev = len(devices)
    chunk = _default_chunk(fn, params, batch) if chunk_size is None else int(chunk_size)
    chunk = ndev * math.ceil(min(chunk, batch) / ndev)
    nchunks = math.ceil(batch / chunk)
    padded = nchunks * chunk

    def pad(x):
        x = jnp.asarray(x)
        fill = jnp.broadcast_to(x[-1:], (padded - batch, *x.shape[1:]))  # repeat a real set: no NaN lanes
        return jnp.concatenate([x, fill]).reshape(nchunks, chunk, *x.shape[1:])

    mesh = Mesh(np.array(devices), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec(None, "batch"))
    stacked = jax.tree_util.tree_map(lambda x: jax.device_put(pad(x), sharding), params)
    out = _mapped(fn, sharding)(stacked)
    if any(d.process_index != jax.process_index() for d in devices):  # several processes: each gets the whole result
        out = jax.tree_util.tree_map(jnp.asarray, multihost_utils.process_allgather(out, tiled=True))
    result = jax.tree_util.tree_map(lambda y: y.reshape(padded, *y.shape[2:])[:batch], out)
    lanes = unconverged_lanes(result)
    if lanes.size:
        message = (
            f"sweep: {lanes.size} of {batch} lanes hold a step that did not converge (lanes {_lanes_text(lanes)}); "
            "their stats.status says why (StepStatus.message)"
        )
        if throw:
            raise UnconvergedLanes(message, lanes)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return result


_MAPPED = {}
_MAPPED_SIZE = 32


def _mapped(fn, sharding):
    """The jitted chunked map of `fn`, one per (fn, sharding): a second sweep of the same fn does not recompile.

    jax.jit caches compiled code per function object; a fresh closure per call
    (as before) was a new function each time, so every sweep retraced and
    recompiled. The cache holds the last `_MAPPED_SIZE` functions.
    """
    key = (fn, sharding)
    if key not in _MAPPED:
        if len(_MAPPED) >= _MAPPED_SIZE:
            _MAPPED.pop(next(iter(_MAPPED)))

        def run(stacked):
            return jax.lax.map(jax.vmap(fn), stacked)

        _MAPPED[key] = jax.jit(run, in_shardings=sharding, compiler_options=BATCH_COMPILER_OPTIONS)
    return _MAPPED[key]
