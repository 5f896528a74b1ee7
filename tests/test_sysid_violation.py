"""The complementarity-violation loss: minimised at the true mu, exact gradients, fits.

Synthetic data: the planar block sliding to rest (block_on_incline, dim=2, PlanarCone) and P2's four
balls with the elliptic cone (a thrown ball lands, slides and strikes the line). Noise-free unless a test
says otherwise; float64 (conftest).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrbd as rbd
from jaxrbd.cones import EllipticCone

DT = 0.01
STEPS = 40
MU_TRUE = 0.3
MU_START = 0.15
FIT_RTOL = 1e-3  # the brief: recover mu to 1e-3 relative without noise
GRAD_RTOL = 1e-6  # analytic vs central finite differences (float64)
FD_EPS = 1e-6
ZERO_LOSS = 1e-20  # the loss at the truth on noise-free data (round-off)


def block(mu):
    return rbd.scenes.block_on_incline(angle=0.0, mu=mu, speed=1.5, dim=2)


TRAJ = rbd.simulate(*block(MU_TRUE), dt=DT, steps=STEPS)
DATA = {"q": TRAJ.q, "v": TRAJ.v}


def violation(p, d):
    return rbd.sysid.violation_residuals(block(p["mu"]).system, d["q"], d["v"], dt=DT)


def violation_from_positions(p, d):
    return rbd.sysid.violation_residuals(block(p["mu"]).system, d["q"], dt=DT)


def rollout(p, d):
    return rbd.simulate(*block(p["mu"]), dt=DT, steps=STEPS).q - d["q"]


LOSS = jax.jit(lambda mu, d: rbd.sysid.violation_loss(block(mu).system, d["q"], d["v"], dt=DT))
GRAD = jax.jit(jax.grad(lambda mu, d: rbd.sysid.violation_loss(block(mu).system, d["q"], d["v"], dt=DT)))


def lm_fit(fn, data, start=MU_START, steps=40):
    return rbd.sysid.fit(
        residuals=fn,
        params={"mu": start},
        data=data,
        bounds={"mu": rbd.sysid.Positive()},
        optimizer=rbd.sysid.LevenbergMarquardt(),
        steps=steps,
        progress=False,
    )


def test_violation_loss_is_zero_at_the_true_mu_and_grows_away_from_it():
    losses = {mu: float(LOSS(mu, DATA)) for mu in (0.2, 0.29, MU_TRUE, 0.31, 0.5)}
    assert losses[MU_TRUE] < ZERO_LOSS
    assert losses[0.2] > losses[0.29] > losses[MU_TRUE] < losses[0.31] < losses[0.5]


def test_violation_gradient_matches_central_differences():
    for mu in (0.25, 0.35):
        g = float(GRAD(mu, DATA))
        fd = (float(LOSS(mu + FD_EPS, DATA)) - float(LOSS(mu - FD_EPS, DATA))) / (2 * FD_EPS)
        assert g == pytest.approx(fd, rel=GRAD_RTOL), (mu, g, fd)
        assert g != 0.0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_levenberg_marquardt_on_the_violation_residuals_recovers_mu():
    result = lm_fit(violation, DATA)
    assert abs(float(result.params["mu"]) - MU_TRUE) / MU_TRUE < FIT_RTOL, result.params


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_velocities_from_positions_recover_mu_without_observed_velocities():
    # the planar block's coordinates integrate linearly: the scheme's own update gives v exactly
    v = rbd.sysid.velocities_from_positions(block(MU_TRUE).system, TRAJ.q, DT)
    np.testing.assert_allclose(v, TRAJ.v[1:], atol=1e-12)
    result = lm_fit(violation_from_positions, {"q": TRAJ.q, "v": None})
    assert abs(float(result.params["mu"]) - MU_TRUE) / MU_TRUE < FIT_RTOL, result.params


def test_violation_needs_two_observed_states():
    with pytest.raises(ValueError, match="K >= 1"):
        rbd.sysid.violation_residuals(block(MU_TRUE).system, TRAJ.q[:1], TRAJ.v[:1], dt=DT)


def balls(mu):
    return rbd.scenes.four_balls(mu, cone=EllipticCone())


@pytest.mark.long  # the violation loss, its fit and its gradient against central differences run in the default set
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_four_balls_violation_loss_recovers_mu_with_exact_gradients():
    """Three dimensions, several contacts: the loss is zero at the truth, its gradient equals central differences,
    and L-BFGS recovers mu.

    The steps are scored one after another (`lax.map`), not `vmap`ped: under `vmap` their batched dense solves
    deadlocked jaxlib 0.10.2's CPU thread pool here, every time (see `violation_residuals`).
    """
    mu_true, steps = 0.4, 100  # the thrown ball lands at t = 0.43 s, slides and strikes the line
    traj = rbd.simulate(*balls(mu_true), dt=DT, steps=steps)
    assert bool(traj.stats.converged.all())
    data = {"q": traj.q, "v": traj.v}
    loss = jax.jit(lambda mu, d: rbd.sysid.violation_loss(balls(mu).system, d["q"], d["v"], dt=DT))
    grad = jax.jit(jax.grad(lambda mu, d: rbd.sysid.violation_loss(balls(mu).system, d["q"], d["v"], dt=DT)))
    assert float(loss(mu_true, data)) < ZERO_LOSS
    for mu in (0.3, 0.45):
        fd = (float(loss(mu + FD_EPS, data)) - float(loss(mu - FD_EPS, data))) / (2 * FD_EPS)
        assert float(grad(mu, data)) == pytest.approx(fd, rel=GRAD_RTOL)

    def scalar(p, d):
        return rbd.sysid.violation_loss(balls(p["mu"]).system, d["q"], d["v"], dt=DT)

    result = rbd.sysid.fit(
        scalar,
        {"mu": 0.25},
        data=data,
        bounds={"mu": rbd.sysid.Positive()},
        optimizer=optax.lbfgs(),
        steps=30,
        param_rtol=1e-10,
        progress=False,
    )
    assert abs(float(result.params["mu"]) - mu_true) / mu_true < FIT_RTOL, result.params


def _seconds_per_evaluation(fn, data, repeats=20):
    value_and_grad = jax.jit(jax.value_and_grad(lambda mu, d: jnp.mean(fn({"mu": mu}, d) ** 2)))
    jax.block_until_ready(value_and_grad(0.2, data))
    start = time.perf_counter()
    for _ in range(repeats):
        jax.block_until_ready(value_and_grad(0.2, data))
    return (time.perf_counter() - start) / repeats


@pytest.mark.long
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_violation_loss_beside_the_rollout_loss(capsys):
    """Accuracy and cost after compilation of both losses on the same block data (printed; the identification guide quotes them)."""
    rng = np.random.default_rng(0)
    noisy = {"q": TRAJ.q + 1e-4 * rng.standard_normal(TRAJ.q.shape), "v": None}
    noisy_v = {"q": TRAJ.q, "v": TRAJ.v + 1e-3 * rng.standard_normal(TRAJ.v.shape)}
    rows = []
    for name, fn, clean, with_noise in (
        ("violation (q, v observed)", violation, DATA, noisy_v),
        ("violation (v from q)", violation_from_positions, {"q": TRAJ.q, "v": None}, noisy),
        ("rollout", rollout, DATA, noisy),
    ):
        lm_fit(fn, clean)  # compile
        start = time.perf_counter()
        exact = lm_fit(fn, clean)
        seconds = time.perf_counter() - start
        noisy_fit = lm_fit(fn, with_noise)
        per_eval = _seconds_per_evaluation(fn, clean)
        rows.append((name, float(exact.params["mu"]), exact.steps, seconds, float(noisy_fit.params["mu"]), per_eval))
        assert abs(float(exact.params["mu"]) - MU_TRUE) / MU_TRUE < FIT_RTOL
    with capsys.disabled():
        print(f"\nblock sliding to rest, {STEPS} steps of {DT} s, true mu {MU_TRUE}, LM from {MU_START}")
        print("loss | mu (no noise) | LM steps | fit s | mu (noisy) | value+grad ms")
        for name, mu, steps, seconds, mu_noisy, per_eval in rows:
            print(f"{name} | {mu:.7f} | {steps} | {seconds:.3f} | {mu_noisy:.5f} | {1e3 * per_eval:.2f}")
