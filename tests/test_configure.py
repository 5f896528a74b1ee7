"""`import jaxrbd` changes no process-wide setting; `jaxrbd.configure()` turns the compilation cache and the CPU
settings on, unless told not to.

Each case runs in a fresh interpreter: these settings are made once per process.
"""

import json
import os
import subprocess
import sys

import pytest

# Prints the cache directory after `jaxrbd.configure()`; with an argument, also compiles one program (every
# program cached: the minimum compile time set to 0) and counts the persistent cache's hits; with "off",
# turns the cache off first.
PROGRAM = """
import json, sys
import jaxrbd, jax, jax.numpy as jnp
jaxrbd.configure()
hits = []
jax.monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None)
out = {"dir": jax.config.jax_compilation_cache_dir, "enabled": jax.config.jax_enable_compilation_cache}
if "off" in sys.argv[1:]:
    jax.config.update("jax_enable_compilation_cache", False)
if len(sys.argv) > 1:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.jit(lambda x: jnp.sin(x) * 3.0 + jnp.cos(x))(jnp.arange(7.0)).block_until_ready()
    out["hits"] = len(hits)
print(json.dumps(out))
"""


def _run(env, *args):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JAXRBD_CACHE", "JAX_COMPILATION_CACHE"))}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cache_is_on_by_default_and_a_second_process_loads_from_it(tmp_path):
    cache = tmp_path / "xla"
    first = _run({"JAXRBD_CACHE_DIR": str(cache)}, "compile")
    assert first["dir"] == str(cache) and first["enabled"]
    assert first["hits"] == 0
    assert any(cache.iterdir()), "nothing was written to the cache directory"
    second = _run({"JAXRBD_CACHE_DIR": str(cache)}, "compile")
    assert second["hits"] >= 1  # the program (and the eager ops before it, cached too at 0 s)


def test_turning_the_cache_off_after_configure_works(tmp_path):
    """`import jaxrbd` and `configure` compile nothing (JAX decides once per process, at the first compile, whether the
    cache is used), so `jax.config.update("jax_enable_compilation_cache", False)` after it still holds:
    `jaxrbd bench` does that to measure compile times. (A module-level jnp.array in `scenes` once compiled
    at import, and the benchmark's compile times came from the cache.)"""
    cache = tmp_path / "xla"
    _run({"JAXRBD_CACHE_DIR": str(cache)}, "compile", "off")
    assert not cache.exists() or not any(cache.iterdir()), "a program was written to the cache turned off"


def test_the_default_directory_is_under_the_home_directory(tmp_path):
    out = _run({"HOME": str(tmp_path)})
    assert out["dir"] == str(tmp_path / ".cache" / "jaxrbd" / "xla")


def test_jaxrbd_cache_0_leaves_it_off(tmp_path):
    assert _run({"JAXRBD_CACHE": "0", "JAXRBD_CACHE_DIR": str(tmp_path)})["dir"] is None


def test_a_directory_the_user_gave_jax_is_kept(tmp_path):
    mine = tmp_path / "mine"
    out = _run({"JAX_COMPILATION_CACHE_DIR": str(mine), "JAXRBD_CACHE_DIR": str(tmp_path / "ours")})
    assert out["dir"] == str(mine)


def test_entries_written_without_a_size_bound_do_not_break_the_next_write(tmp_path):
    """A cache directory filled by an unbounded cache (no `-atime` files): opening it dates those entries,
    so the bounded cache's eviction, which reads every entry's access time, writes without a warning."""
    cache = tmp_path / "xla"
    cache.mkdir()
    (cache / "jit_old-0123-cache").write_bytes(b"an entry an unbounded cache wrote")
    done = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", PROGRAM, "compile"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("JAXRBD_CACHE")},
            "JAXRBD_CACHE_DIR": str(cache),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Error writing persistent compilation cache entry" not in done.stderr
    assert (cache / "jit_old-0123-atime").exists()
    assert len(list(cache.glob("*-atime"))) == len(list(cache.glob("*-cache"))) >= 2


# What a library user's process holds before and after `import jaxrbd` (and, with "configure", after
# `jaxrbd.configure()`): XLA_FLAGS, the OpenBLAS thread counts, JAX's cache settings, whether a backend started.
SETTINGS = """
import json, os, sys
import jax, threadpoolctl
import scipy.linalg.cython_lapack  # the OpenBLAS that jaxlib calls, loaded before the first reading


def settings():
    return {
        "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
        "blas": sorted(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"),
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "cache_enabled": jax.config.jax_enable_compilation_cache,
        "min_compile_time": jax.config.jax_persistent_cache_min_compile_time_secs,
        "max_size": jax.config.jax_compilation_cache_max_size,
        "backend_started": jax._src.xla_bridge.backends_are_initialized(),
    }


before = settings()
import jaxrbd
after_import = settings()
out = {"before": before, "after_import": after_import}
if "configure" in sys.argv[1:]:
    import dataclasses
    out["configured"] = dataclasses.asdict(jaxrbd.configure())
    out["after_configure"] = settings()
print(json.dumps(out))
"""


def _settings(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAXRBD_CACHE", "JAX_COMPILATION_CACHE"))}
    env.pop("XLA_FLAGS", None)
    env.pop("OPENBLAS_NUM_THREADS", None)
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", SETTINGS, *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_jaxrbd_changes_no_process_wide_setting(tmp_path):
    out = _settings(tmp_path)
    assert out["after_import"] == out["before"]
    assert out["before"]["XLA_FLAGS"] is None and out["before"]["cache_dir"] is None
    assert not out["after_import"]["backend_started"]
    assert not (tmp_path / ".cache").exists(), "import jaxrbd wrote into the home directory"


def test_configure_applies_the_settings_it_names(tmp_path):
    out = _settings(tmp_path, "configure")
    after = out["after_configure"]
    assert "--xla_cpu_enable_concurrency_optimized_scheduler=false" in after["XLA_FLAGS"]
    assert after["blas"] and all(n == 1 for n in after["blas"])
    assert after["cache_dir"] == str(tmp_path / ".cache" / "jaxrbd" / "xla")
    assert after["min_compile_time"] == 1.0 and after["max_size"] == 2 * 1024**3
    assert out["configured"] == {"cache_dir": after["cache_dir"], "blas_threads": 1, "serial_scheduler": True}


def test_configure_refuses_a_bad_thread_count():
    import jaxrbd

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="blas_threads must be a positive int or None"):
            jaxrbd.configure(blas_threads=bad, compilation_cache=False, serial_scheduler=False)


def test_configure_after_the_backend_started_keeps_the_scheduler_and_says_so():
    """In this test process JAX's backend has started: the flag cannot take effect, and a warning names the fix."""
    import jax.numpy as jnp

    import jaxrbd

    jnp.zeros(1).block_until_ready()
    flags = os.environ.get("XLA_FLAGS")
    os.environ.pop("XLA_FLAGS", None)
    try:
        with pytest.warns(UserWarning, match="before the first JAX computation"):
            done = jaxrbd.configure(compilation_cache=False, blas_threads=None)
        assert done.serial_scheduler is False and "XLA_FLAGS" not in os.environ
    finally:
        if flags is not None:
            os.environ["XLA_FLAGS"] = flags
