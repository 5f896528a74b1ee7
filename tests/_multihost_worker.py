"""One process of the two-process sweep in `test_multihost.py`: python _multihost_worker.py RANK PORT OUT.npz."""

import sys

import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_collectives_implementation", "gloo")


def final_state(mu):
    """The falling rod's final (x, y, theta) after 0.7 s and its stats, for one mu."""
    import jaxrbd as rbd

    traj = rbd.simulate(*rbd.scenes.falling_rod(mu=mu), dt=0.01, steps=70)
    return traj.q[-1], traj.stats


MUS = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.1, 1.25, 1.4)  # 10 sets: chunks of 4 lanes, the last one padded

if __name__ == "__main__":
    import numpy as np

    rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=rank)
    import jax.numpy as jnp

    import jaxrbd as rbd

    assert jax.process_count() == 2 and len(jax.devices()) == 2 and len(jax.local_devices()) == 1
    q, stats = rbd.sweep(final_state, jnp.asarray(MUS), chunk_size=4)
    np.savez(out, q=np.asarray(q), converged=np.asarray(stats.converged), devices=len(jax.devices()))
    jax.distributed.shutdown()
