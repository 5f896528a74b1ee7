"""`configure`: the process-wide settings that jaxrbd's own programs want, applied only when asked.

`import jaxrbd` changes nothing outside jaxrbd. The command line, the notebooks and
the benchmarks call `configure()` first; a library user calls it (or not) once, before
the first JAX computation.
"""

import dataclasses
import os
import time
import warnings

SERIAL_SCHEDULER_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"
_SCHEDULER_OPTION = "xla_cpu_enable_concurrency_optimized_scheduler"
# The compile options of jaxrbd's own batched programs (`sweep`, the identification's mapped experiments): the
# serial scheduler for that one executable, whatever the process's XLA_FLAGS say (see `configure`).
BATCH_COMPILER_OPTIONS = {_SCHEDULER_OPTION: False}


@dataclasses.dataclass(frozen=True)
class Configuration:
    """What `configure` applied.

    Attributes:
        cache_dir: the persistent compilation cache's directory, or None when the cache was left alone.
        blas_threads: the OpenBLAS thread count set, or None when it was left alone.
        serial_scheduler: whether XLA's CPU scheduler was switched to serial (False also when the backend
            had started already, or when XLA_FLAGS named the option).
    """

    cache_dir: str | None
    blas_threads: int | None
    serial_scheduler: bool


def configure(
    *,
    compilation_cache: bool | str = True,
    blas_threads: int | None = 1,
    serial_scheduler: bool = True,
) -> Configuration:
    """Apply the process-wide settings under which jaxrbd's programs run best on CPU.

    Call it once, before the first JAX computation (the scheduler flag is read when
    JAX starts its CPU backend). `import jaxrbd` applies none of these; the `jaxrbd`
    command line, the notebooks and the benchmarks call `configure()`.

    Args:
        compilation_cache: True turns JAX's persistent compilation cache on in
            `$JAXRBD_CACHE_DIR` (default `~/.cache/jaxrbd/xla`), bounded to 2 GiB with
            the least recently used entries evicted first, keeping programs that took
            over a second to compile; a directory (str) puts it there; False leaves the
            cache as it is. A cache directory already given to JAX
            (`JAX_COMPILATION_CACHE_DIR` or `jax.config`) is kept, and `JAXRBD_CACHE=0`
            in the environment leaves the cache off. A fit or a sweep compiles for
            20-100 s; with the cache the next process building the same program loads it.
        blas_threads: the thread count of the OpenBLAS that jaxlib's LAPACK kernels
            call (None leaves it alone; so does `OPENBLAS_NUM_THREADS` in the
            environment). A step's matrices have 10-100 rows, too small to split, and
            idle OpenBLAS threads spin: with one other busy process on a 2-core machine
            the four-ball rollout ran at 63 steps/s with two threads and 4,149 with one.
        serial_scheduler: switch off XLA's concurrency-optimized CPU scheduler
            (`XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false`) unless
            XLA_FLAGS names the option. On jaxlib 0.10.2 a vmapped batch of dense solves
            (B >= 512) can deadlock when two thunks run batched LAPACK kernels at once,
            each waiting for tasks of the same thread pool. A backend that has started
            already keeps its scheduler, and a warning says so.

    Returns:
        A `Configuration` saying what was applied.

    Raises:
        ValueError: `blas_threads` is not a positive int or None.
    """
    if blas_threads is not None and (
        isinstance(blas_threads, bool) or not isinstance(blas_threads, int) or blas_threads < 1
    ):
        raise ValueError(f"blas_threads must be a positive int or None, got {blas_threads!r}")
    scheduler = _serial_scheduler() if serial_scheduler else False
    threads = _limit_blas(blas_threads) if blas_threads is not None else None
    cache = _compilation_cache(compilation_cache) if compilation_cache is not False else None
    return Configuration(cache_dir=cache, blas_threads=threads, serial_scheduler=scheduler)


def _serial_scheduler():
    import jax._src.xla_bridge as xla_bridge

    flags = os.environ.get("XLA_FLAGS", "")
    if _SCHEDULER_OPTION in flags:
        return False
    if xla_bridge.backends_are_initialized():
        warnings.warn(
            "jaxrbd.configure: JAX's backend has started, so its CPU scheduler stays as it is; batched dense "
            f"solves may deadlock on jaxlib 0.10.2 CPU. Call configure() (or set XLA_FLAGS={SERIAL_SCHEDULER_FLAG}) "
            "before the first JAX computation.",
            stacklevel=3,
        )
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {SERIAL_SCHEDULER_FLAG}".strip()
    return True


def _limit_blas(threads):
    if "OPENBLAS_NUM_THREADS" in os.environ:
        return None
    import scipy.linalg.cython_lapack  # noqa: F401  (loads the OpenBLAS that jaxlib calls)
    import threadpoolctl

    threadpoolctl.threadpool_limits(threads, user_api="blas")
    return threads


def _compilation_cache(where):
    import jax

    if os.environ.get("JAXRBD_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
        return None
    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    if isinstance(where, str):
        path = where
    else:
        path = os.environ.get("JAXRBD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxrbd", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_compilation_cache_max_size", 2 * 1024**3)
    _date_unbounded_entries(path)
    return path


def _date_unbounded_entries(path):
    """Give every entry of the cache directory the access-time file that a bounded cache keeps beside it.

    JAX's size-bounded cache reads `KEY-atime` for every `KEY-cache` when it
    evicts; an entry written without a bound (JAX with this directory and no size
    limit) has none, and then every write fails with a warning. Such entries are
    dated now, once, when the cache is opened.
    """
    try:
        names = set(os.listdir(path))
    except OSError:  # not created yet, or not readable: JAX reports what it cannot do itself
        return
    stamp = time.time_ns().to_bytes(8, "little")
    for name in names:
        if name.endswith("-cache") and name[: -len("-cache")] + "-atime" not in names:
            try:
                with open(os.path.join(path, name[: -len("-cache")] + "-atime"), "wb") as f:
                    f.write(stamp)
            except OSError:
                return
