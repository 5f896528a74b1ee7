"""`rbd.sweep` tells which lanes did not converge, and bounds a chunk's memory by default.

The lanes are falling rods released at different heights, stepped by a Newton solver held to 3 iterations
with no fallback: a rod still in flight at the end converges at every step, a rod that reaches the table
within the 0.4 s does not. Which lanes fail is therefore known from the physics, not from a run.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import batch

IMPACT_TIMES = jnp.array([0.1, 0.5, 0.2, 0.9, 0.35])  # s; the rollouts last 0.4 s
LANDS = [0, 2, 4]


def _rods(impact_time):
    scene = rbd.scenes.falling_rod(impact_time=impact_time)
    traj = rbd.simulate(*scene, dt=0.01, steps=40, solver=rbd.SemismoothNewton(iterations=3, fallback=False))
    return traj.q[-1], traj.stats


def test_a_sweep_warns_naming_the_lanes_whose_steps_did_not_converge():
    with pytest.warns(RuntimeWarning, match=r"sweep: 3 of 5 lanes hold a step that did not converge \(lanes 0, 2, 4\)"):
        q, stats = rbd.sweep(_rods, IMPACT_TIMES)
    np.testing.assert_array_equal(rbd.unconverged_lanes(stats), LANDS)
    np.testing.assert_array_equal(rbd.unconverged_lanes((q, stats)), LANDS)
    assert q.shape == (5, 3)
    with pytest.raises(rbd.UnconvergedLanes, match="3 of 5 lanes") as raised:
        rbd.sweep(_rods, IMPACT_TIMES, throw=True)
    np.testing.assert_array_equal(raised.value.lanes, LANDS)


@pytest.mark.slow
def test_a_converged_sweep_is_silent_and_a_result_without_stats_has_no_lane_to_report():
    def rods(impact_time):
        traj = rbd.simulate(*rbd.scenes.falling_rod(impact_time=impact_time), dt=0.01, steps=40)
        return traj

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        traj = rbd.sweep(rods, IMPACT_TIMES, throw=True)
    assert rbd.unconverged_lanes(traj).size == 0
    assert rbd.unconverged_lanes(traj.q).size == 0
    with pytest.raises(ValueError, match="no batch axis"):
        rbd.unconverged_lanes(jax.tree_util.tree_map(lambda x: x[0, 0], traj.stats))  # one step of one lane


def test_the_default_chunk_bounds_the_memory_of_a_chunks_outputs(monkeypatch):
    def wide(x):
        return jnp.full((1000,), x)  # 8,000 bytes a lane in float64

    params = jnp.arange(100.0)
    assert batch._default_chunk(wide, params, 100) == 100
    monkeypatch.setattr(batch, "CHUNK_BYTES", 80_000)
    monkeypatch.setattr(batch, "_LANE_BYTES", {})
    assert batch._default_chunk(wide, params, 100) == 10
    np.testing.assert_array_equal(rbd.sweep(wide, params), jax.vmap(wide)(params))
    monkeypatch.setattr(batch, "DEFAULT_CHUNK", 4)
    assert batch._default_chunk(lambda x: x, params, 100) == 4
