"""Identification on data jaxrbd did not make: trajectories from MuJoCo's C engine.

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
    for e in (0.3, 0.6, 0.8):  # a 0.5 ms contact, 96 MuJoCo steps per contact: 1 s of MuJoCo instead of 10
        data = foreign.mujoco_bouncing_ball(e=e, duration=1.2, contact_time=5e-4, substeps=800)
        assert data.effective == pytest.approx(e, rel=0.03)
        assert data.ratios[0] == pytest.approx(e, rel=0.03)


def test_the_rigid_equivalent_restitution_of_exact_rigid_bounces_is_their_e():
    t = np.arange(289) / 240
    for e, z0, vz0 in ((0.3, 0.6, 0.0), (0.75, 0.45, 0.4), (0.9, 0.3, -1.0)):
        # The first landing, the first two apexes (each rebound rises e^2 times as high as the one before) and
        # the second landing.
        v1 = math.sqrt(vz0**2 + 2 * 9.81 * (z0 - 0.1))
        t1 = (vz0 + v1) / 9.81
        times = np.array([t1, t1 + e * v1 / 9.81, t1 + 2 * e * v1 / 9.81 + e * e * v1 / 9.81, t1 + 2 * e * v1 / 9.81])
        apex = (e * v1) ** 2 / (2 * 9.81)
        np.testing.assert_allclose(
            foreign.rigid_bounces(times, e, z0, vz0, radius=0.1, gravity=9.81),
            [0.1, 0.1 + apex, 0.1 + e * e * apex, 0.1],
            atol=1e-12,
        )
        z = foreign.rigid_bounces(t, e, z0, vz0, radius=0.1, gravity=9.81)
        fitted = foreign.rigid_equivalent(t, z, radius=0.1, gravity=9.81, e0=0.5)
        np.testing.assert_allclose(fitted[:3], (e, z0, vz0), atol=1e-9)
        assert fitted[3] <= 1e-12
    with pytest.raises(ValueError, match="z0 must be at least the radius"):
        foreign.rigid_bounces(t, 0.5, 0.05, 0.0, radius=0.1, gravity=9.81)


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
        angle=0.0, mu=p["mu"], speed=speed, heading=heading, half_extents=half_extents, cone=rbd.EllipticCone()
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


def _ball_heights(e, z0, vz0, observations, substeps):
    """The ball's height at each observation (240 Hz), `substeps` located Newton steps per observation."""
    scene = rbd.scenes.bouncing_ball(e, height=z0 - 0.1, radius=0.1, velocity=jnp.stack([0.0, 0.0, vz0]))
    traj = rbd.simulate(*scene, dt=1 / 240 / substeps, steps=observations * substeps, impact=rbd.Newton(locate=True))
    return traj.q[::substeps, 2:3]


# Long: notebooks/08_foreign_data.ipynb fits a ball that MuJoCo bounced in the slow set.
@pytest.mark.parametrize("e", [pytest.param(0.3, marks=pytest.mark.long), pytest.param(0.8, marks=pytest.mark.long)])
def test_e_of_a_ball_that_mujoco_bounced(e):
    """Fitted with the start height and speed, 4 located steps per observation: within 2% of the e MuJoCo was
    given, the 95% interval holding the e its trajectory shows (the rigid model closest to it); on the clean
    data the fit is that e (jaxrbd's step, second order in flight, is not what is left)."""
    data = foreign.mujoco_bouncing_ball(e=e, duration=1.2, noise=1e-3, seed=0)

    def fit(observed):
        return rbd.sysid.fit(
            residuals=lambda p, obs: _ball_heights(p["e"], p["z0"], p["vz0"], obs.shape[0] - 1, 4) - obs,
            params={"e": 0.5, "z0": float(data.observed[0, 0]), "vz0": 0.0},
            data=jnp.asarray(observed),
            bounds={"e": rbd.sysid.Interval(0.0, 1.0)},
            optimizer=rbd.sysid.LevenbergMarquardt(),
            steps=30,
            noise=1e-3,
            progress=False,
        )

    noisy, clean = fit(data.observed), fit(data.clean)
    fitted, (lo, hi) = float(noisy.params["e"]), (float(x) for x in noisy.interval["e"])
    print(
        f"\nMuJoCo e {e}: per bounce {np.round(data.ratios[:3], 5)}, rigid equivalent {data.effective:.6f}; "
        f"fitted {fitted:.6f}, 95% [{lo:.6f}, {hi:.6f}], RMS {noisy.uncertainty.rms * 1e3:.3f} mm; "
        f"on clean data {float(clean.params['e']):.6f}"
    )
    assert fitted == pytest.approx(e, rel=0.02)
    assert lo <= data.effective <= hi
    assert noisy.uncertainty.rms <= 1.1e-3
    assert float(clean.params["e"]) == pytest.approx(data.effective, abs=1e-5)
