"""`rbd.sweep` over two processes with JAX's own multi-process runtime (`jax.distributed`, gloo collectives on
CPU): each process runs its half of every chunk's lanes and receives the whole result, equal to one process's.
Two fresh interpreters import JAX and compile the sweep, so the test runs with the slow set.
"""

import os
import pathlib
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

WORKER = pathlib.Path(__file__).with_name("_multihost_worker.py")
sys.path.insert(0, str(WORKER.parent))
from _multihost_worker import MUS, final_state  # noqa: E402


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_sweep_over_two_processes_equals_one_process(tmp_path):
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    outs = [tmp_path / f"rank{rank}.npz" for rank in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(port), str(outs[rank])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    said = []
    for w in workers:
        try:
            said.append(w.communicate(timeout=600)[0])
        finally:
            w.kill()
    assert all(w.returncode == 0 for w in workers), "\n".join(s[-3000:] for s in said)

    q, stats = rbd.sweep(final_state, jnp.asarray(MUS), chunk_size=4)
    for out in outs:
        got = np.load(out)
        assert int(got["devices"]) == 2
        np.testing.assert_allclose(got["q"], np.asarray(q), rtol=0.0, atol=1e-10)
        np.testing.assert_array_equal(got["converged"], np.asarray(stats.converged))
    assert jax.process_count() == 1
