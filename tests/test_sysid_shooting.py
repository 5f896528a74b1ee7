"""Multiple shooting: `rbd.sysid.MultipleShooting` on a chaotic and on a contact trajectory.

Two models. The Lorenz system (sigma 10, beta 8/3, rho 28; RK4, h = 0.01, 10 time
units) is chaotic: over the whole horizon the rollout loss in rho is rugged, and
a fit from a start 15% off ends in a local minimum; cut into segments it is
smooth. The planar block sliding to rest (`block_on_incline(dim=2)`) fits mu
through the simulator's implicit gradients, vmapped over the segments (slow: its
fit and its Jacobian compile for a minute or more each on two cores).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd.sysid import Interval, LevenbergMarquardt, MultipleShooting, Positive, fit

# -------------------------------------------------------------------------------------------
# Lorenz

SIGMA, BETA, RHO = 10.0, 8.0 / 3.0, 28.0
H, SEGMENTS, SEGMENT_STEPS = 0.01, 50, 20  # 1,000 steps: 10 time units, about 13 Lyapunov times
NOISE = 1e-3
X0 = jnp.array([1.0, 1.0, 20.0])


def _lorenz_step(rho, x):
    def f(x):
        return jnp.array([SIGMA * (x[1] - x[0]), x[0] * (rho - x[2]) - x[1], x[0] * x[1] - BETA * x[2]])

    k1 = f(x)
    k2 = f(x + 0.5 * H * k1)
    k3 = f(x + 0.5 * H * k2)
    k4 = f(x + H * k3)
    return x + H / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def _lorenz(rho, x0, steps):
    """(steps + 1, 3): the states at steps 0 .. steps."""

    def body(x, _):
        y = _lorenz_step(rho, x)
        return y, y

    _, xs = jax.lax.scan(body, x0, None, length=steps)
    return jnp.concatenate([x0[None], xs])


def _lorenz_segment(p, node):
    xs = _lorenz(p["rho"], node, SEGMENT_STEPS)
    return xs[:SEGMENT_STEPS], xs[SEGMENT_STEPS]


def _lorenz_single(p, observed):
    return (_lorenz(p["rho"], X0, SEGMENTS * SEGMENT_STEPS - 1) - observed).reshape(-1)


LORENZ = MultipleShooting(_lorenz_segment, SEGMENT_STEPS, continuity=1.0)


@pytest.fixture(scope="module")
def lorenz_data():
    exact = _lorenz(RHO, X0, SEGMENTS * SEGMENT_STEPS - 1)
    return exact + NOISE * jax.random.normal(jax.random.PRNGKey(1), exact.shape)


def test_single_shooting_over_the_chaotic_horizon_ends_in_a_local_minimum(lorenz_data):
    """The premise: from rho = 24, one rollout of 10 time units fitted by Levenberg-Marquardt does not reach 28."""
    result = fit(
        residuals=_lorenz_single,
        data=lorenz_data,
        params={"rho": 24.0},
        bounds={"rho": Positive()},
        optimizer=LevenbergMarquardt(),
        steps=30,
        progress=False,
    )
    print(f"\nsingle shooting from 24: rho = {float(result.params['rho']):.4f}, rms {result.uncertainty.rms:.3g}")
    assert abs(float(result.params["rho"]) - RHO) > 0.5
    assert result.uncertainty.rms > 100 * NOISE


def test_multiple_shooting_recovers_rho_with_its_interval(lorenz_data):
    """From the same start, 50 segments of 20 steps whose nodes start at the noisy observations: rho within
    1e-4 relative, the 95% interval holds 28, the defects at the noise level, the RMS residual at the noise."""
    nodes = LORENZ.nodes_from(lorenz_data)
    assert nodes.shape == (SEGMENTS, 3)
    result = fit(
        residuals=LORENZ,
        data=lorenz_data,
        params={"rho": 24.0, "nodes": nodes},
        bounds={"rho": Positive()},
        optimizer=LevenbergMarquardt(),
        steps=30,
        progress=False,
        noise=NOISE,
    )
    rho = float(result.params["rho"])
    lo, hi = result.interval["rho"]
    defects = np.abs(np.asarray(LORENZ.defects(result.params))).max()
    print(
        f"\nmultiple shooting from 24: rho = {rho:.6f} [{lo:.6f}, {hi:.6f}], max defect {defects:.2e}, "
        f"rms {result.uncertainty.rms:.3g}, {result.steps} steps"
    )
    assert abs(rho / RHO - 1) < 1e-4
    assert lo <= RHO <= hi
    assert defects < 5 * NOISE
    assert result.uncertainty.rms < 1.5 * NOISE


def test_the_residuals_are_the_prediction_errors_then_the_weighted_defects(lorenz_data):
    """Exact nodes and rho on noise-free data: every residual is 0; a node moved by d moves its segment's errors
    and the defect before it by -d times the weight."""
    exact = _lorenz(RHO, X0, SEGMENTS * SEGMENT_STEPS - 1)
    nodes = LORENZ.nodes_from(exact)
    shooting = MultipleShooting(_lorenz_segment, SEGMENT_STEPS, continuity=3.0)
    r, valid = shooting({"rho": RHO, "nodes": nodes}, exact)
    assert r.shape == valid.shape == (SEGMENTS * SEGMENT_STEPS * 3 + (SEGMENTS - 1) * 3,)
    assert float(jnp.abs(r).max()) < 1e-9 and bool(jnp.all(valid == 1))
    d = jnp.array([1e-3, -2e-3, 0.5e-3])
    moved = nodes.at[7].add(d)
    r, _ = shooting({"rho": RHO, "nodes": moved}, exact)
    fit_rows = r[: SEGMENTS * SEGMENT_STEPS * 3].reshape(SEGMENTS, SEGMENT_STEPS, 3)
    np.testing.assert_allclose(fit_rows[7, 0], d, atol=1e-12)  # the node's own observation
    np.testing.assert_allclose(np.asarray(shooting.defects({"rho": RHO, "nodes": moved})[6]), -d, atol=1e-9)
    gaps = r[SEGMENTS * SEGMENT_STEPS * 3 :].reshape(SEGMENTS - 1, 3)
    np.testing.assert_allclose(gaps[6], -3.0 * d, atol=1e-9)
    assert float(jnp.abs(fit_rows[:7]).max()) < 1e-9 and float(jnp.abs(fit_rows[8:]).max()) < 1e-9
    missing = exact.at[5, 1].set(jnp.nan)  # a missing observation: its row is 0 and not valid
    r, valid = shooting({"rho": RHO, "nodes": nodes}, missing)
    assert float(r[5 * 3 + 1]) == 0.0 and float(valid[5 * 3 + 1]) == 0.0 and bool(jnp.all(jnp.isfinite(r)))


# -------------------------------------------------------------------------------------------
# The planar block, through the simulator

DT, BLOCK_SEGMENTS, BLOCK_STEPS = 0.01, 3, 20
MU, V0, X0_BLOCK = 0.3, 1.5, 0.5  # a start away from x = 0: `fit` judges identifiability relative to each value


def _block_segment(p, node):
    scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=node[1], distance=node[0], dim=2)
    traj = rbd.simulate(*scene, dt=DT, steps=BLOCK_STEPS)
    return traj.q[:BLOCK_STEPS, :1], jnp.stack([traj.q[BLOCK_STEPS, 0], traj.v[BLOCK_STEPS, 0]])


BLOCK = MultipleShooting(_block_segment, BLOCK_STEPS)


@pytest.fixture(scope="module")
def block_data():
    traj = rbd.simulate(
        *rbd.scenes.block_on_incline(angle=0.0, mu=MU, speed=V0, distance=X0_BLOCK, dim=2),
        dt=DT,
        steps=BLOCK_SEGMENTS * BLOCK_STEPS,
    )
    states = jnp.stack([traj.q[:, 0], traj.v[:, 0]], axis=1)[: BLOCK_SEGMENTS * BLOCK_STEPS]
    return states[:, :1], states


@pytest.mark.long  # the shooting Jacobian against central differences runs in the slow set
def test_multiple_shooting_fits_the_friction_of_a_block_through_the_simulator(block_data):
    """mu = 0.3 from 0.15, the nodes' speeds guessed from differences of the observed positions: mu within 1e-6,
    the fitted nodes the block's states (1.5 m/s at the start), the defects below 1e-8.

    (Speeds guessed 0 are a degenerate start: a block at rest sticks whatever mu, so the residuals do not
    depend on mu or on a small start speed there, and the fit cannot move.)"""
    observed, states = block_data
    speeds = jnp.gradient(observed[:, 0], DT)
    nodes = BLOCK.nodes_from(jnp.stack([observed[:, 0], speeds], axis=1))
    result = fit(
        residuals=BLOCK,
        data=observed,
        params={"mu": 0.15, "nodes": nodes},
        bounds={"mu": Interval(0.0, 1.0)},
        optimizer=LevenbergMarquardt(),
        steps=40,
        progress=False,
    )
    mu = float(result.params["mu"])
    print(f"\nblock: mu = {mu:.8f}, start speed {float(result.params['nodes'][0, 1]):.8f}, {result.steps} steps")
    assert abs(mu / MU - 1) < 1e-6
    np.testing.assert_allclose(np.asarray(result.params["nodes"]), np.asarray(BLOCK.nodes_from(states)), atol=1e-6)
    assert float(jnp.abs(BLOCK.defects(result.params)).max()) < 1e-8


@pytest.mark.slow
def test_the_shooting_jacobian_matches_central_differences(block_data):
    """d(residuals)/d(mu) and d(residuals)/d(nodes) through the simulator's implicit rule, against central
    differences in float64, at mu = 0.25 (the block slides through every segment)."""
    observed, states = block_data
    nodes = BLOCK.nodes_from(states)
    r_of = jax.jit(lambda mu, nodes: BLOCK({"mu": mu, "nodes": nodes}, observed)[0])
    J_mu, J_nodes = jax.jacrev(r_of, argnums=(0, 1))(0.25, nodes)
    eps = 1e-6
    fd_mu = (r_of(0.25 + eps, nodes) - r_of(0.25 - eps, nodes)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(J_mu), np.asarray(fd_mu), rtol=1e-6, atol=1e-8)
    for k, j in ((0, 1), (1, 0), (2, 1)):
        e = jnp.zeros_like(nodes).at[k, j].set(eps)
        fd = (r_of(0.25, nodes + e) - r_of(0.25, nodes - e)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(J_nodes[:, k, j]), np.asarray(fd), rtol=1e-6, atol=1e-8)


# -------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"segment_steps": 0}, ValueError, "segment_steps must be an integer >= 1, got 0"),
        ({"segment_steps": 2.5}, ValueError, "segment_steps must be an integer >= 1, got 2.5"),
        ({"continuity": -1.0}, ValueError, "continuity"),
        ({"continuity": float("nan")}, ValueError, "continuity"),
        ({"nodes": 3}, TypeError, "nodes must be the name of a parameter"),
        ({"run": "lorenz"}, TypeError, "run must be a function"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        MultipleShooting(**{"run": _lorenz_segment, "segment_steps": SEGMENT_STEPS, **kwargs})


def test_bad_data_and_parameters_are_named(lorenz_data):
    nodes = LORENZ.nodes_from(lorenz_data)
    with pytest.raises(ValueError, match=r"observed must have shape \(K L, n\) = \(1000, 3\).*got \(999, 3\)"):
        LORENZ({"rho": RHO, "nodes": nodes}, lorenz_data[:-1])
    with pytest.raises(KeyError, match="no entry 'nodes'"):
        LORENZ({"rho": RHO}, lorenz_data)
    with pytest.raises(ValueError, match=r"must have shape \(K, m\)"):
        LORENZ({"rho": RHO, "nodes": nodes[0]}, lorenz_data)
    wrong_end = MultipleShooting(lambda p, node: (_lorenz_segment(p, node)[0], node[:2]), SEGMENT_STEPS)
    with pytest.raises(ValueError, match="end state in the node's shape"):
        wrong_end({"rho": RHO, "nodes": nodes}, lorenz_data)
    wrong_pred = MultipleShooting(lambda p, node: (_lorenz_segment(p, node)[0][:-1], node), SEGMENT_STEPS)
    with pytest.raises(ValueError, match=r"prediction of shape \(L, n\) = \(20, n\)"):
        wrong_pred({"rho": RHO, "nodes": nodes}, lorenz_data)
    with pytest.raises(ValueError, match="T >= L = 20"):
        LORENZ.nodes_from(lorenz_data[:10])
