"""`fit(problem, params)`: the problem as an object (`Loss`, `LeastSquares`, `ManyExperiments`), the same fit as the
keyword forms; optimistix's least-squares solvers beside jaxrbd's Levenberg-Marquardt. On a linear model, so
that the exact least-squares answer is known and nothing compiles for long."""

import jax.numpy as jnp
import numpy as np
import optax
import optimistix as optx
import pytest

from jaxrbd.sysid import (
    Experiments,
    Free,
    LeastSquares,
    LevenbergMarquardt,
    Loss,
    ManyExperiments,
    Positive,
    fit,
)

T = np.linspace(0.0, 1.0, 21)
Y = 0.7 * T + 0.2 + 1e-3 * np.random.default_rng(0).standard_normal(T.shape)
EXACT = np.polyfit(T, Y, 1)  # (slope, intercept): the least-squares answer


def line(p, t):
    return p["a"] * t + p["b"]


def residuals(p, y):
    return line(p, jnp.asarray(T)) - y


def loss(p, y):
    return jnp.mean(residuals(p, y) ** 2)


START = {"a": 1.0, "b": 0.0}
BOUNDS = {"a": Positive(), "b": Free()}


@pytest.mark.parametrize(
    "optimizer",
    [LevenbergMarquardt(), optx.LevenbergMarquardt(rtol=1e-10, atol=1e-12), optx.GaussNewton(rtol=1e-10, atol=1e-12)],
    ids=["jaxrbd LevenbergMarquardt", "optimistix.LevenbergMarquardt", "optimistix.GaussNewton"],
)
def test_least_squares_object_and_solvers_find_the_exact_answer(optimizer):
    result = fit(LeastSquares(residuals, Y), START, bounds=BOUNDS, optimizer=optimizer, steps=50, noise=1e-3)
    np.testing.assert_allclose([result.params["a"], result.params["b"]], EXACT, rtol=1e-7)
    assert result.converged and result.uncertainty is not None
    lo, hi = result.interval["a"]
    assert lo < EXACT[0] < hi
    keyword = fit(residuals=residuals, data=Y, params=START, bounds=BOUNDS, optimizer=optimizer, steps=50)
    np.testing.assert_allclose(float(keyword.params["a"]), float(result.params["a"]), rtol=1e-12)


def test_loss_object_is_the_scalar_loss_form():
    args = dict(bounds=BOUNDS, optimizer=optax.adam(0.05), steps=30, progress=False)
    by_object = fit(Loss(loss, Y), START, **args)
    by_keyword = fit(loss, START, data=Y, **args)
    np.testing.assert_array_equal(by_object.loss_history, by_keyword.loss_history)
    assert by_object.loss_history[-1] < by_object.loss_history[0]


def test_many_experiments_object_shares_the_slope_and_fits_an_intercept_each():
    intercepts = np.array([0.1, 0.2, 0.3])
    observed = (0.7 * T[None, :] + intercepts[:, None])[..., None]  # (E, T, 1), exact

    def predict(p, inputs):
        return line({"a": p["a"], "b": p["b"]}, jnp.asarray(T))[:, None]

    problem = ManyExperiments(predict, Experiments(observed, {"e": np.arange(3.0)}), per_experiment=("b",))
    result = fit(problem, {"a": 1.0, "b": np.zeros(3)}, bounds={"a": Positive()}, optimizer=LevenbergMarquardt())
    np.testing.assert_allclose(float(result.params["a"]), 0.7, rtol=1e-8)
    np.testing.assert_allclose(np.asarray(result.params["b"]), intercepts, atol=1e-8)


def test_a_problem_object_with_keyword_data_is_an_error():
    with pytest.raises(TypeError, match="do not also give"):
        fit(LeastSquares(residuals, Y), START, data=Y, optimizer=LevenbergMarquardt())
    with pytest.raises(TypeError, match="needs residuals= or predict="):
        fit(Loss(loss, Y), START, optimizer=optx.LevenbergMarquardt(rtol=1e-8, atol=1e-8))


@pytest.mark.parametrize(
    "optimizer",
    [LevenbergMarquardt(), optax.adam(0.1), optx.LevenbergMarquardt(rtol=1e-8, atol=1e-8)],
    ids=["jaxrbd LevenbergMarquardt", "adam", "optimistix.LevenbergMarquardt"],
)
def test_a_non_finite_loss_stops_the_fit_with_the_parameters_named(optimizer):
    def broken(p, y):
        return jnp.log(p["a"] - 2.0) + 0.0 * y  # NaN for a < 2, where the fit starts

    with pytest.raises(FloatingPointError, match=r"non-finite loss or gradient at (step 0|the start) with parameters"):
        fit(LeastSquares(broken, Y), {"a": 1.0}, optimizer=optimizer, steps=5, progress=False)
