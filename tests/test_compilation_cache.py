"""`import jaxrbd` turns JAX's persistent compilation cache on, unless told not to.

Each case runs in a fresh interpreter: the cache is configured at import, once per process.
"""

import json
import os
import subprocess
import sys

# Prints the cache directory after `import jaxrbd`; with an argument, also compiles one program (every
# program cached: the minimum compile time set to 0) and counts the persistent cache's hits; with "off",
# turns the cache off first.
PROGRAM = """
import json, sys
import jaxrbd, jax, jax.numpy as jnp
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


def test_turning_the_cache_off_after_import_works(tmp_path):
    """`import jaxrbd` compiles nothing (JAX decides once per process, at the first compile, whether the
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
