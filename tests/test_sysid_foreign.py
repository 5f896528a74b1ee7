"""Identification on data jaxrbd did not make: trajectories from MuJoCo's C engine (issue 18).

MuJoCo's contact is soft, so its trajectories show slightly different coefficients
from the ones it was given; `jaxrbd.foreign` measures those from MuJoCo's own clean
trajectory (the box's deceleration, the ball's crossing speeds) and the fits are
compared with both.
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd import foreign

pytest.importorskip("mujoco", reason="the foreign-data tests need MuJoCo (pip install jaxrbd[test])")


def test_the_spring_damper_that_cannot_pull_bounces_with_the_e_it_was_given():
    for e in (0.14, 0.3, 0.6, 0.8, 0.95):
        zeta = foreign.damping_ratio(e)
        assert 0 < zeta < 1 and foreign.spring_damper_restitution(zeta) == pytest.approx(e, abs=1e-12)
        # It cannot pull, so it lets go earlier and faster than the linear oscillator's e^(-pi zeta / sqrt(1 - zeta^2)).
        assert e > math.exp(-math.pi * zeta / math.sqrt(1 - zeta**2))
    with pytest.raises(ValueError, match=r"e must be in \(0.1353, 1\)"):
        foreign.damping_ratio(0.1)  # beyond critical damping


def test_mujoco_shows_the_coefficients_it_was_given_within_its_soft_contact():
    """The box decelerates at mu g to 0.5%; the ball's fast bounces rebound at e to 1%."""
    for mu in (0.2, 0.6):
        data = foreign.mujoco_sliding_box(mu=mu, speed=1.5, heading=0.3)
        assert data.effective == pytest.approx(mu, rel=5e-3)
        assert data.observed.shape == (101, 2) and np.std(data.observed - data.clean) == pytest.approx(1e-3, rel=0.2)
        assert np.linalg.norm(data.clean[-1] - data.clean[-10]) <= 1e-6  # at rest by the end
    for e in (0.3, 0.6, 0.8):
        data = foreign.mujoco_bouncing_ball(e=e, duration=1.2)
        assert data.effective == pytest.approx(e, rel=0.03)
        assert data.ratios[0] == pytest.approx(e, rel=0.03)


def test_foreign_data_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="mu"):
        foreign.mujoco_sliding_box(mu=-0.1)
    with pytest.raises(ValueError, match="cone"):
        foreign.mujoco_sliding_box(cone="round")
    with pytest.raises(ValueError, match="e must be in"):
        foreign.mujoco_bouncing_ball(e=1.0)
    with pytest.raises(ValueError, match="substeps"):
        foreign.mujoco_bouncing_ball(e=0.5, substeps=2)
    with pytest.raises(ValueError, match="observe it longer"):
        foreign.mujoco_bouncing_ball(e=0.5, duration=0.2)


def _box_residuals(p, observed, half_extents, dt):
    speed, heading = jnp.hypot(p["vx"], p["vy"]), jnp.arctan2(p["vy"], p["vx"])
    scene = rbd.scenes.block_on_incline(
        angle=0.0, mu=p["mu"], speed=speed, heading=heading, half_extents=half_extents, friction=rbd.EllipticCone()
    )
    return rbd.simulate(*scene, dt=dt, steps=observed.shape[0] - 1).q[:, :2] + p["x0"] - observed


@pytest.mark.slow
@pytest.mark.parametrize("mu", [0.2, 0.6])
def test_mu_of_a_box_that_mujoco_slid_to_rest(mu):
    """Fitted with the start position and velocity: within 2% of MuJoCo's mu, the 95% interval holding the mu
    MuJoCo's trajectory shows."""
    data = foreign.mujoco_sliding_box(mu=mu, speed=1.5, heading=0.3, noise=1e-3, seed=1)
    v0 = (data.observed[2] - data.observed[0]) / (2 * data.dt)
    result = rbd.sysid.fit(
        residuals=lambda p, obs: _box_residuals(p, obs, jnp.array(data.start["half_extents"]), data.dt),
        params={"mu": 0.4, "vx": v0[0], "vy": v0[1], "x0": jnp.asarray(data.observed[0])},
        data=jnp.asarray(data.observed),
        bounds={"mu": rbd.sysid.Positive()},
        optimizer=rbd.sysid.LevenbergMarquardt(),
        steps=30,
        noise=1e-3,
        progress=False,
    )
    fitted, (lo, hi) = float(result.params["mu"]), result.interval["mu"]
    print(f"\nMuJoCo mu {mu}, shows {data.effective:.5f}; fitted {fitted:.5f}, 95% [{float(lo):.5f}, {float(hi):.5f}]")
    assert fitted == pytest.approx(mu, rel=0.02)
    assert lo <= data.effective <= hi
    assert result.uncertainty.rms <= 1.5e-3 and bool(result.uncertainty.identified["mu"])
