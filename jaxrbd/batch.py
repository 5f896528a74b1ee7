"""`sweep`: map a simulation over a batch of parameters with vmap, in chunks, sharded over devices."""

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._config import BATCH_COMPILER_OPTIONS


def sweep(
    fn: Callable[[Any], Any], params: Any, *, chunk_size: int | None = None, devices: Sequence[jax.Device] | None = None
) -> Any:
    """fn applied to every parameter set of a batch: `vmap`, chunked, sharded over devices.

    The batch is split into chunks of `chunk_size` sets (bounding memory: one
    chunk's rollouts live at a time), and each chunk is split across the devices
    along its batch axis with `jax.sharding` (one mesh axis, "batch"), so every
    device runs chunk_size / n_devices lanes. The result equals
    `jax.vmap(fn)(params)` (up to floating-point reassociation, none in practice).

    Several hosts: call `jax.distributed.initialize()` first on every process and
    pass the same full `params` everywhere; the default `devices` is then
    `jax.devices()`, which spans all hosts, and each process receives the whole
    result. No multiprocessing code is needed.

    Args:
        fn: a function of one parameter set (a pytree of arrays without the batch
            axis), returning a pytree of arrays.
        params: a pytree of arrays with a leading batch axis B (all leaves the same B).
        chunk_size: sets per chunk (rounded up to a multiple of the device count);
            default: the whole batch in one chunk.
        devices: the devices to shard over; default all devices (`jax.devices()`).

    Returns:
        The pytree of `fn`'s outputs, each with the leading batch axis B.
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
    chunk = batch if chunk_size is None else int(chunk_size)
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
    return jax.tree_util.tree_map(lambda y: y.reshape(padded, *y.shape[2:])[:batch], out)


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
