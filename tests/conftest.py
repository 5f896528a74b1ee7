"""Shared test set-up: float64 everywhere, compiled code freed before it exhausts the memory maps, and a persistent
compilation cache only where `JAXRBD_TEST_CACHE` names one."""

import gc
import os

# The notebooks call `jaxrbd.configure()`, which turns JAX's persistent compilation cache on; the tests leave it
# off (their notebook kernels and subprocesses inherit this), so that no run depends on what an earlier one left on
# disk. CI names a fresh directory in JAXRBD_TEST_CACHE: the processes of one CI run (the test workers, the
# notebook kernels, the documentation's interpreters, the slow set after the default set) share the programs
# that more than one of them compiles. test_configure.py checks the cache itself.
TEST_CACHE = os.environ.get("JAXRBD_TEST_CACHE")
if TEST_CACHE:
    os.environ["JAXRBD_CACHE"] = "1"
    os.environ["JAXRBD_CACHE_DIR"] = TEST_CACHE
else:
    os.environ["JAXRBD_CACHE"] = "0"

import jax  # noqa: E402

import jaxrbd  # noqa: E402

# One OpenBLAS thread and XLA's serial CPU scheduler, as the command line and the notebooks run.
jaxrbd.configure(compilation_cache=bool(TEST_CACHE))
jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402

# The default set is bound by compilation, so its processes compile with LLVM's optimizations off; runs of the slow
# or the long set compile as users' programs do (docs/testing.md gives the measured effect of each).
FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"


def _selects_slow_or_long_tests(markexpr):
    """Whether the `-m` expression keeps a test marked `slow` or one marked `long` (the default selection, 'not slow
    and not long', keeps neither)."""
    from _pytest.mark.expression import Expression

    if not markexpr:
        return False
    expression = Expression.compile(markexpr)
    return any(expression.evaluate(lambda name, marker=marker, **_: name == marker) for marker in ("slow", "long"))


def pytest_configure(config):
    """Compile with `FAST_COMPILE_FLAG` unless the run selects slow or long tests or XLA_FLAGS sets the level itself.

    Runs before the first JAX computation starts XLA's backend (which reads XLA_FLAGS once); the worker processes,
    notebook kernels and subprocesses of the run inherit the flag.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if _selects_slow_or_long_tests(config.getoption("markexpr")) or "xla_backend_optimization_level" in flags:
        return
    from jax._src import xla_bridge

    assert not xla_bridge.backends_are_initialized(), "XLA's backend started before the tests' flags were set"
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE_FLAG}".strip()


def _memory_maps():
    """(maps this process holds, the kernel's limit), or None where /proc does not tell (not Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            held = sum(1 for _ in maps)
        with open("/proc/sys/vm/max_map_count") as limit:
            return held, int(limit.read())
    except (OSError, ValueError):
        return None


# The most maps one module added in a default run was about 11,000 (test_cones.py; a rollout's gradient program
# holds about 5,000); clearing once a third of the limit is held leaves every module two thirds of it.
MAP_SHARE = 1 / 3


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_code():
    """Drop every compiled executable after a test module once the process holds many memory maps.

    Each XLA:CPU executable keeps memory mappings alive (thousands for a rollout
    with its gradient); one process that keeps every program of the suite crosses
    Linux's vm.max_map_count (65530 by default), after which the next compile
    aborts or segfaults inside XLA. Tests share compiled functions within a
    module (module-scoped fixtures, cached jitted closures), and modules share
    the small programs of eager calls, so the cache is kept across modules until
    MAP_SHARE of the limit is held (and always cleared where /proc cannot say).
    """
    yield
    maps = _memory_maps()
    if maps is None or maps[0] > MAP_SHARE * maps[1]:
        jax.clear_caches()
        gc.collect()


# Runs each Python expression given in a fresh process (eager jax.numpy compiles once per process, so a warm test
# process would hide it) and prints, per expression, the XLA compilations while it ran.
_COUNT_COMPILES = """
import logging, sys, warnings
import jax, jax.numpy as jnp
import jaxrbd as rbd
jax.config.update("jax_enable_x64", True)
compiled = []
handler = logging.Handler()
handler.emit = lambda record: compiled.append(record.getMessage()) if record.getMessage().startswith("Compiling") else None
logging.getLogger("jax").addHandler(handler)
with jax.log_compiles(True):
    for expression in sys.argv[1:]:
        compiled.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eval(expression)
        print(len(compiled), compiled[:3])
    compiled.clear()
    jnp.sin(jnp.arange(7.0)).block_until_ready()  # the counter sees a compilation
    print(len(compiled))
"""


@pytest.fixture(scope="session")
def compilations():
    """f(*expressions) -> {expression: (XLA compilations while it ran in a fresh process, the first few)}."""
    return _compilations


def _compilations(*expressions):
    import subprocess
    import sys

    lines = subprocess.run(
        [sys.executable, "-c", _COUNT_COMPILES, *expressions], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert int(lines[-1]) >= 1, lines  # the counter works
    return {e: (int(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for e, line in zip(expressions, lines[:-1])}
