"""Identification as researchers do it: uncertainty, identifiability, many experiments, best iterate, no recompiles.

Two models. An analytic sliding block (x = v0 tau - mu g tau^2 / 2, tau = min(t,
v0 / (mu g))) is cheap enough to fit 100 noisy data sets for the coverage of
the intervals. The simulated planar box (`block_on_incline(dim=2)`) is fitted
through `Experiments`: one compiled function (10 experiments; fewer are
selected by the mask) serves the 1, 3 and 10 throws, the sticking block (its
slope is an input) and the no-recompile check.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxrbd as rbd
from jaxrbd.sysid import Experiments, LevenbergMarquardt, Positive, fit, uncertainty

G = 9.81
NOISE = 1e-3  # 1 mm
MU = 0.3
DT, STEPS = 0.01, 60
T = DT * np.arange(STEPS + 1)


# -------------------------------------------------------------------------------------------
# The analytic block: coverage of the intervals


def _slide(mu, v0):
    a = mu * G
    tau = jnp.minimum(jnp.asarray(T), v0 / a)
    return v0 * tau - 0.5 * a * tau**2


def _slide_residuals(p, x_obs):
    return _slide(p["mu"], p["v0"]) - x_obs


COVERAGE_SETS = 100
GN_ITERATIONS = 10


def test_interval_coverage_over_100_noisy_data_sets():
    """The nominal 95% interval of mu (fitted with v0) contains the truth 90-99 times in 100 data sets.

    Each data set is fitted to its exact optimum by a vmapped Gauss-Newton (the
    model is cheap), then `uncertainty` gives the interval there; it is compiled
    once and reused for the 100 sets.
    """
    truth = jnp.array([MU, 1.0])
    noise = NOISE * jax.random.normal(jax.random.PRNGKey(18), (COVERAGE_SETS, STEPS + 1))
    x_obs = _slide(*truth) + noise
    r_of = lambda theta, x: _slide(theta[0], theta[1]) - x

    @jax.jit
    @jax.vmap
    def gauss_newton(x):
        def step(_, theta):
            J = jax.jacfwd(r_of)(theta, x)
            return theta - jnp.linalg.solve(J.T @ J, J.T @ r_of(theta, x))

        return jax.lax.fori_loop(0, GN_ITERATIONS, step, jnp.array([0.25, 1.1]))

    thetas = np.asarray(gauss_newton(x_obs))
    covered_mu = covered_v0 = 0
    widths = []
    for theta, x in zip(thetas, x_obs):
        u = uncertainty(_slide_residuals, {"mu": theta[0], "v0": theta[1]}, x, noise=NOISE)
        lo, hi = u.interval["mu"]
        covered_mu += int(lo <= MU <= hi)
        lo_v, hi_v = u.interval["v0"]
        covered_v0 += int(lo_v <= 1.0 <= hi_v)
        widths.append(float(hi - lo))
        assert u.identified["mu"] and u.identified["v0"]
    print(
        f"\ncoverage of the 95% interval: mu {covered_mu}/100, v0 {covered_v0}/100; mean width of mu {np.mean(widths):.3e}"
    )
    assert 90 <= covered_mu <= 99
    assert 90 <= covered_v0 <= 99
    # The same interval through fit(residuals=...), at a data set's optimum.
    result = fit(
        params={"mu": 0.25, "v0": 1.1},
        residuals=_slide_residuals,
        data=x_obs[0],
        bounds={"mu": Positive()},
        optimizer=LevenbergMarquardt(),
        steps=30,
        param_rtol=1e-12,
        progress=False,
    )
    np.testing.assert_allclose(result.params["mu"], thetas[0][0], rtol=1e-6)
    assert result.interval["mu"][1] - result.interval["mu"][0] == pytest.approx(widths[0], rel=1e-4)
    assert result.uncertainty.rms == pytest.approx(NOISE, rel=0.25)
    assert result.uncertainty.singular_values.shape == (2,)


def _slide_of_throw(p, inputs):
    return _slide(p["mu"], p["v0"])[:, None] + inputs["x0"]


def test_per_experiment_nuisance_parameters():
    """Five throws with unknown initial speeds: mu shared, v0 per throw, all recovered within their intervals."""
    v0 = jnp.array([0.8, 0.9, 1.0, 1.1, 1.2])
    x0 = jnp.arange(5.0)[:, None]
    clean = jax.vmap(lambda v, x: _slide_of_throw({"mu": MU, "v0": v}, {"x0": x}))(v0, x0)
    observed = clean + NOISE * jax.random.normal(jax.random.PRNGKey(5), clean.shape)
    result = fit(
        params={"mu": 0.5, "v0": jnp.ones(5)},
        predict=_slide_of_throw,
        experiments=Experiments(observed, {"x0": x0}),
        per_experiment=("v0",),
        bounds={"mu": Positive()},
        optimizer=LevenbergMarquardt(),
        steps=50,
        param_rtol=1e-12,
        progress=False,
    )
    u = result.uncertainty
    print(f"\nmu = {result.params['mu']:.5f} +- {u.std['mu']:.1e}; v0 = {np.round(result.params['v0'], 4)}")
    assert u.p == 6 and u.m == 5 * (STEPS + 1)
    assert abs(result.params["mu"] / MU - 1) < 0.01
    assert np.all(u.identified["v0"]) and u.identified["mu"]
    assert u.interval["mu"][0] <= MU <= u.interval["mu"][1]
    np.testing.assert_allclose(result.params["v0"], v0, atol=5 * np.max(u.std["v0"]))


def _product_residuals(p, x_obs):
    return p["a"] * p["b"] * jnp.asarray(T) - x_obs


def test_a_product_of_two_parameters_is_named_unidentified():
    """Only a * b is in the data: J has a zero singular value, and both a and b are named."""
    x_obs = 0.6 * jnp.asarray(T) + NOISE * jax.random.normal(jax.random.PRNGKey(9), T.shape)
    with pytest.warns(UserWarning, match=r"not identified.*a \(a near-zero singular value.*b \(a near-zero"):
        u = uncertainty(_product_residuals, {"a": 2.0, "b": 0.3}, x_obs)
    assert not u.identified["a"] and not u.identified["b"]
    assert u.singular_values[1] < 1e-8 * u.singular_values[0]
    # With b held at 0.3 the data pin a down: its range is a narrow band around 2.
    lo, hi = u.range["a"]
    assert 1.9 < lo < 2.0 < hi < 2.1


# -------------------------------------------------------------------------------------------
# The simulated planar box: many throws, sticking, no recompiles

THROWS = 10
TRACES = {"predict": 0}


def _box(p, inputs):
    """x of a planar box thrown with `speed` along a line at `angle` from `distance`."""
    TRACES["predict"] += 1  # runs only when jax traces: counts (re)compilations
    scene = rbd.scenes.block_on_incline(
        angle=inputs["angle"],
        mu=p["mu"],
        speed=inputs["speed"],
        distance=inputs["distance"],
        dim=2,
        half_extents=jnp.array([0.1, 0.1, 0.02]),
    )
    return rbd.simulate(*scene, dt=DT, steps=STEPS).q[:, :1]


def _throw_inputs():
    """Ten throws, different starts and directions, the same speed (so the same information each)."""
    return {
        "angle": jnp.zeros(THROWS),
        "speed": jnp.where(jnp.arange(THROWS) % 2 == 0, 1.0, -1.0),
        "distance": jnp.linspace(-2.0, 2.0, THROWS),
    }


_SIMULATE_THROWS = jax.jit(jax.vmap(_box, (None, 0)))


@pytest.fixture(scope="module")
def throws():
    inputs = _throw_inputs()
    clean = _SIMULATE_THROWS({"mu": MU}, inputs)
    data = [clean + NOISE * jax.random.normal(jax.random.PRNGKey(seed), clean.shape) for seed in (0, 1)]
    return inputs, data


def _fit_throws(inputs, observed, n, start=0.5, **kw):
    mask = (jnp.arange(THROWS) < n).astype(float)
    return fit(
        params={"mu": start},
        predict=_box,
        experiments=Experiments(observed, inputs, mask=mask),
        bounds={"mu": Positive()},
        optimizer=LevenbergMarquardt(),
        steps=30,
        param_rtol=1e-9,
        progress=False,
        **kw,
    )


WIDTH_BAND = (0.7, 1.3)


def _assert_widths_shrink_as_one_over_sqrt_n(label, widths, mus):
    """The 95% widths of 1, 3 and 10 throws: w_n sqrt(n) / w_1 within WIDTH_BAND; mu of 10 throws within 1%."""
    print(
        f"\n{label}, mu: {mus}; 95% widths: {widths}; w_n sqrt(n) / w_1: "
        f"{[round(widths[n] * math.sqrt(n) / widths[1], 3) for n in (3, 10)]}"
    )
    for n in (3, 10):
        assert WIDTH_BAND[0] <= widths[n] * math.sqrt(n) / widths[1] <= WIDTH_BAND[1]
    assert abs(mus[10] / MU - 1) <= 0.01


@pytest.mark.slow
def test_ten_throws_interval_shrinks_as_one_over_sqrt_n(throws):
    """mu from 1, 3 and 10 throws fitted together (1 mm noise): the width times sqrt(n) is constant.

    Every throw has the same speed, so each carries the same information and the
    expected width is w_1 / sqrt(n), up to t_{m-p} (2.00 for one throw, 1.96 for
    ten) and the estimate of sigma, whose relative standard error is
    1 / sqrt(2 (m - p)) = 9% for one throw (61 samples): w_n sqrt(n) / w_1 within
    [0.7, 1.3] is about 3 standard errors.
    """
    inputs, (observed, _) = throws
    widths, mus = {}, {}
    for n in (1, 3, 10):
        result = _fit_throws(inputs, observed, n, noise=NOISE)
        lo, hi = result.interval["mu"]
        widths[n], mus[n] = float(hi - lo), float(result.params["mu"])
        assert result.uncertainty.m == n * (STEPS + 1)
        print(
            f"\n{n} throws: mu = {float(result.params['mu']):.6f} in [{lo:.6f}, {hi:.6f}], {result.steps} steps, "
            f"RMS residual {result.uncertainty.rms:.2e} (noise {NOISE})"
        )
    _assert_widths_shrink_as_one_over_sqrt_n("planar box", widths, mus)


def _cube(p, inputs):
    """x, y of a cube thrown across a plane with `speed` at `heading` from `distance` (four corner contacts)."""
    scene = rbd.scenes.block_on_incline(
        angle=0.0,
        mu=p["mu"],
        speed=inputs["speed"],
        heading=inputs["heading"],
        distance=inputs["distance"],
        half_extents=jnp.array([0.1, 0.1, 0.1]),
    )
    return rbd.simulate(*scene, dt=DT, steps=STEPS).q[:, :2]


@pytest.mark.long  # the ten throws' interval (test_ten_throws_interval_shrinks_as_one_over_sqrt_n) is in the slow set
def test_ten_throws_of_a_cube_in_three_dimensions():
    """Ten throws of one cube in ten directions, fitted together: mu within 1% and the width times sqrt(n)
    constant (the band and its reason as for the planar throws).

    The experiments are fitted one after another: in a `vmap` this fit deadlocked jaxlib 0.10.2's CPU thread
    pool every time (gdb: both pool threads in batched `dtrsm`, each waiting for the other's share).
    """
    inputs = {
        "speed": jnp.full(THROWS, 1.0),
        "heading": jnp.linspace(0.0, 2.5, THROWS),
        "distance": jnp.linspace(-1.0, 1.0, THROWS),
    }
    clean = jax.jit(jax.vmap(_cube, (None, 0)))({"mu": MU}, inputs)
    observed = clean + NOISE * jax.random.normal(jax.random.PRNGKey(3), clean.shape)
    widths, mus = {}, {}
    for n in (1, 3, 10):
        result = fit(
            params={"mu": 0.5},
            predict=_cube,
            experiments=Experiments(observed, inputs, mask=(jnp.arange(THROWS) < n).astype(float)),
            bounds={"mu": Positive()},
            optimizer=LevenbergMarquardt(),
            steps=30,
            param_rtol=1e-9,
            noise=NOISE,
            progress=False,
        )
        lo, hi = result.interval["mu"]
        widths[n], mus[n] = float(hi - lo), float(result.params["mu"])
        assert result.uncertainty.m == 2 * n * (STEPS + 1) and result.uncertainty.rms <= 1.2 * NOISE
    _assert_widths_shrink_as_one_over_sqrt_n("cube", widths, mus)


@pytest.mark.slow
def test_second_fit_on_new_data_does_not_recompile(throws):
    """A fit on new data of the same shapes (other noise, other mask) traces nothing and compiles nothing."""
    inputs, (first, second) = throws
    _fit_throws(inputs, first, 3)
    traces = TRACES["predict"]
    with _CountCompiles() as compiles:
        result = _fit_throws(inputs, second, 10)
    assert TRACES["predict"] == traces
    assert compiles.count == 0, compiles.count
    assert abs(result.params["mu"] / MU - 1) <= 0.01


@pytest.mark.slow
def test_sticking_block_is_reported_unidentified_with_a_one_sided_bound(throws):
    """A box at rest on a 20 degree slope with mu = 0.5 never moves: mu >= tan(20 deg) is all the data say."""
    inputs, _ = throws
    angle = math.radians(20.0)
    stuck = dict(inputs, angle=inputs["angle"].at[0].set(angle), speed=inputs["speed"].at[0].set(0.0))
    clean = _SIMULATE_THROWS({"mu": 0.5}, stuck)
    observed = clean + NOISE * jax.random.normal(jax.random.PRNGKey(7), clean.shape)
    with pytest.warns(UserWarning, match=r"not identified.*mu \(.*zero gradient") as record:
        result = _fit_throws(stuck, observed, 1, start=0.6)
    print(f"\n{record[0].message}")
    u = result.uncertainty
    lo, hi = u.range["mu"]
    assert not u.identified["mu"]
    assert u.std["mu"] == np.inf
    assert hi == np.inf
    # The bound is where sliding would move the box by about the noise: just below tan(20 deg).
    assert math.tan(angle) * (1 - 1e-3) <= lo <= math.tan(angle)


# -------------------------------------------------------------------------------------------
# Best iterate, sweeps


def test_fit_returns_the_best_iterate():
    """Gradient descent whose step grows past 1 / L after 3 steps diverges: fit returns step 3, not the last."""
    schedule = optax.piecewise_constant_schedule(0.4, {3: 3.0})  # 0.4 contracts by 0.2, 1.2 expands by 1.4
    result = fit(lambda p: (p["a"] - 1.0) ** 2, {"a": 0.0}, optimizer=optax.sgd(schedule), steps=20, progress=False)
    assert result.best_step == 3
    assert result.loss == result.loss_history.min() < result.loss_history[-1]
    assert result.params["a"] == result.param_history["a"][3]
    assert abs(result.params["a"] - 1.0) == pytest.approx(0.2**3)


def _slide_loss(p, x_obs):
    TRACES["loss"] = TRACES.get("loss", 0) + 1
    return jnp.mean((_slide(p["mu"], 1.0) - x_obs) ** 2)


def test_second_optax_fit_on_new_data_does_not_recompile():
    """fit(loss, data=...) with the default Adam: new data of the same shape reuse the compiled step."""
    data = [_slide(MU, 1.0) + NOISE * jax.random.normal(jax.random.PRNGKey(seed), (STEPS + 1,)) for seed in (3, 4)]
    run = lambda x: fit(_slide_loss, {"mu": 0.5}, data=x, bounds={"mu": Positive()}, steps=300, progress=False)
    first = run(data[0])
    traces = TRACES["loss"]
    with _CountCompiles() as compiles:
        second = run(data[1])
    assert TRACES["loss"] == traces
    assert compiles.count == 0, compiles.count
    for result in (first, second):
        assert abs(result.params["mu"] / MU - 1) < 0.01
        assert result.uncertainty is None  # a scalar loss: no residuals, no intervals


def _double(p):
    TRACES["sweep"] = TRACES.get("sweep", 0) + 1
    return p["a"] * 2.0 + p["b"]


def test_second_sweep_does_not_recompile():
    params = {"a": jnp.arange(6.0), "b": jnp.ones(6)}
    rbd.sweep(_double, params, chunk_size=4)
    traces = TRACES["sweep"]
    new = {"a": jnp.arange(6.0) + 1, "b": jnp.zeros(6)}
    with _CountCompiles() as compiles:
        out = rbd.sweep(_double, new, chunk_size=4)
    assert TRACES["sweep"] == traces
    assert compiles.count == 0, compiles.count
    np.testing.assert_allclose(out, 2 * (np.arange(6.0) + 1))


class _CountCompiles:
    """Counts XLA compilations (jax.monitoring's backend-compile event) inside a `with` block."""

    EVENT = "/jax/core/compile/backend_compile_duration"
    _active = []
    _registered = False

    def __enter__(self):
        if not _CountCompiles._registered:
            jax.monitoring.register_event_duration_secs_listener(_CountCompiles._listen)
            _CountCompiles._registered = True
        self.count = 0
        _CountCompiles._active.append(self)
        return self

    def __exit__(self, *exc):
        _CountCompiles._active.remove(self)

    @staticmethod
    def _listen(event, duration, **kwargs):
        if event == _CountCompiles.EVENT:
            for counter in _CountCompiles._active:
                counter.count += 1


def test_compile_counter_sees_a_compile():
    """The counter used above is live: a new jitted function counts one compile."""
    with _CountCompiles() as compiles:
        jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(3)).block_until_ready()
    assert compiles.count >= 1
