"""System identification and sweeps: fits from noisy simulated data, sweeps against loops.

The data are simulated with the true parameters and perturbed with Gaussian
noise; a fit must recover the true value within the issue's tolerance.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrbd as rbd
from jaxrbd.sysid import Free, Interval, Positive, fit, trajectory_loss

NOISE = 1e-3  # 1 mm


def _noisy(x, seed=0):
    return x + NOISE * jax.random.normal(jax.random.PRNGKey(seed), x.shape)


def _block_xy(mu):
    scene = rbd.scenes.block_on_incline(
        angle=0.0, mu=mu, speed=1.0, heading=0.3, half_extents=jnp.array([0.1, 0.1, 0.02]), cone=rbd.EllipticCone()
    )
    return rbd.simulate(*scene, dt=0.01, steps=60).q[:, :2]


@pytest.mark.slow
@pytest.mark.parametrize("mu0", [0.05, 0.5, 1.5])
def test_fit_friction_of_sliding_block(mu0):
    """From 1 mm noisy positions of a sliding (then sticking) block, mu = 0.3 within 1% in <= 200 steps."""
    observed = _noisy(_block_xy(0.3))
    result = fit(
        lambda p: trajectory_loss(_block_xy(p["mu"]), observed),
        {"mu": mu0},
        bounds={"mu": Positive()},
        steps=200,
        param_rtol=1e-5,
    )
    print(f"\nmu0 = {mu0}: mu = {float(result.params['mu']):.6f} after {result.steps} steps, {result.seconds:.1f} s")
    assert abs(float(result.params["mu"]) / 0.3 - 1) <= 0.01
    assert result.steps <= 200
    assert result.loss_history[-1] < result.loss_history[0]
    assert np.all(np.isfinite(result.grad_norms))


def _rod(mu, omega0):
    scene = rbd.scenes.falling_rod(mu=mu, omega0=omega0)
    return rbd.simulate(*scene, dt=0.005, steps=160).q


@pytest.mark.long  # the sliding block's, the ball's and the spinning sphere's fits are in the slow set
def test_fit_falling_rod_mu_and_spin_jointly():
    """mu and the initial angular velocity of the falling rod, together, within 2%."""
    observed = _noisy(_rod(0.6, 4.0), seed=1)
    result = fit(
        lambda p: trajectory_loss(_rod(p["mu"], p["omega0"]), observed),
        {"mu": 0.3, "omega0": 2.5},
        bounds={"mu": Positive(), "omega0": Free()},
        optimizer=optax.lbfgs(),  # mu and omega0 are coupled: a quasi-Newton method needs ~25 steps
        steps=100,
        param_rtol=1e-5,
    )
    print(
        f"\nrod: mu = {float(result.params['mu']):.5f}, omega0 = {float(result.params['omega0']):.5f}, {result.steps} steps"
    )
    assert abs(float(result.params["mu"]) / 0.6 - 1) <= 0.02
    assert abs(float(result.params["omega0"]) / 4.0 - 1) <= 0.02


def _ball_height(e):
    scene = rbd.scenes.bouncing_ball(e, height=0.5)
    return rbd.simulate(*scene, dt=2e-3, steps=600, impact=rbd.Newton()).q[:, 2:3]


@pytest.mark.slow
def test_fit_restitution_of_bouncing_ball():
    """From noisy heights of a ball bouncing with e = 0.7, e within 1%."""
    observed = _noisy(_ball_height(0.7), seed=2)
    result = fit(
        lambda p: trajectory_loss(_ball_height(p["e"]), observed),
        {"e": 0.4},
        bounds={"e": Interval(0.0, 1.0)},
        steps=200,
        param_rtol=1e-5,
    )
    print(f"\nrestitution: e = {float(result.params['e']):.6f} after {result.steps} steps")
    assert abs(float(result.params["e"]) / 0.7 - 1) <= 0.01


def _spin(e_r):
    return rbd.simulate(*rbd.scenes.spinning_sphere(e_r=e_r), dt=0.05, steps=16).v[:, 5:6]


@pytest.mark.slow
def test_fit_torsional_friction_of_spinning_sphere():
    """From noisy spin measurements of P3, e_r = 0.4 within 1%."""
    observed = _noisy(_spin(0.4), seed=3)
    result = fit(
        lambda p: trajectory_loss(_spin(p["e_r"]), observed),
        {"e_r": 0.1},
        bounds={"e_r": Positive()},
        steps=200,
        param_rtol=1e-6,
        progress=False,
    )
    assert abs(float(result.params["e_r"]) / 0.4 - 1) <= 0.01


def test_trajectory_loss_masks_and_missing_values():
    pred = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    obs = jnp.array([[1.5, jnp.nan], [3.0, 0.0]])
    assert float(trajectory_loss(pred, obs)) == pytest.approx((0.25 + 0 + 16.0) / 3)
    assert float(trajectory_loss(pred, obs, mask=jnp.array([1.0, 0.0]))) == pytest.approx(0.25 / 2)
    with pytest.raises(ValueError, match="shape"):
        trajectory_loss(pred, obs[:1])


def test_fit_bad_input():
    loss = lambda p: (p["a"] - 1.0) ** 2
    with pytest.raises(ValueError, match="must start > 0"):
        fit(loss, {"a": -1.0}, bounds={"a": Positive()}, progress=False)
    with pytest.raises(ValueError, match="strictly inside"):
        fit(loss, {"a": 1.0}, bounds={"a": Interval(0.0, 1.0)}, progress=False)
    with pytest.raises(ValueError, match="not fitted"):
        fit(loss, {"a": 0.5}, bounds={"b": Positive()}, progress=False)
    with pytest.raises(FloatingPointError, match="non-finite"):
        fit(lambda p: jnp.log(p["a"] - 2.0), {"a": 0.5}, progress=False)
    result = fit(loss, {"a": 0.5}, optimizer=None, steps=500, grad_tol=1e-8, progress=False)
    assert abs(float(result.params["a"]) - 1.0) < 1e-3 and result.converged


# -------------------------------------------------------------------------------------------
# Sweeps


def _rod_final(p):
    scene = rbd.scenes.falling_rod(mu=p["mu"], theta0=p["theta0"])
    traj = rbd.simulate(*scene, dt=0.01, steps=70)
    return traj.q[-1], jnp.all(traj.stats.converged)


def _rod_params(n):
    mu = jnp.linspace(0.05, 1.5, 64)
    theta = jnp.linspace(0.2, 1.3, n // 64)
    M, T = jnp.meshgrid(mu, theta, indexing="ij")
    return {"mu": M.reshape(-1), "theta0": T.reshape(-1)}


@pytest.mark.slow
def test_sweep_4096_rods_equals_a_loop():
    """4,096 parameter sets of the falling rod, in chunks: identical to single runs of a sample."""
    params = _rod_params(4096)
    q, ok = rbd.sweep(_rod_final, params, chunk_size=1024)
    assert q.shape == (4096, 3) and bool(jnp.all(ok))
    single = jax.jit(_rod_final)
    for i in np.random.default_rng(0).choice(4096, 16, replace=False):
        q_i, _ = single({k: v[i] for k, v in params.items()})
        np.testing.assert_allclose(q[i], q_i, rtol=1e-12, atol=1e-12)


def test_sweep_pads_and_chunks():
    params = {"a": jnp.arange(10.0), "b": jnp.ones((10, 2))}
    out = rbd.sweep(lambda p: p["a"] * p["b"], params, chunk_size=4)
    np.testing.assert_allclose(out, np.arange(10.0)[:, None] * np.ones((10, 2)))
    with pytest.raises(ValueError, match="same leading batch axis"):
        rbd.sweep(lambda p: p, {"a": jnp.ones(3), "b": jnp.ones(4)})


SHARDED = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, numpy as np, jaxrbd as rbd
    assert len(jax.devices()) == 4, jax.devices()

    def final(p):
        scene = rbd.scenes.falling_rod(mu=p["mu"], theta0=p["theta0"])
        return rbd.simulate(*scene, dt=0.01, steps=70).q[-1]

    params = {"mu": jnp.linspace(0.05, 1.5, 64), "theta0": jnp.linspace(0.2, 1.3, 64)}
    q = rbd.sweep(final, params, chunk_size=32)
    ref = jax.jit(jax.vmap(final))(params)
    # Agreement to the solver's tolerance (1e-10), not to 1e-12: the two layouts batch the
    # lanes in blocks of other shapes, and XLA's round-off differs with the shape. The Delassus
    # Newton steps are exact to about sqrt(eps), so the converged impulses, and after 70 steps
    # the positions, differ by up to 1.4e-12 between layouts (7e-12 relative).
    np.testing.assert_allclose(q, ref, rtol=1e-10, atol=1e-10)
    print("OK", q.shape)
    """
)


@pytest.mark.long  # test_multihost.py shards a sweep over two processes in the slow set
def test_sweep_sharded_over_four_devices():
    """With --xla_force_host_platform_device_count=4 the sweep runs on 4 devices and agrees with vmap."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OK (64, 3)" in out.stdout
