"""Small problems with known solutions, mixed and nonlinear problems, and bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

TOL = 1e-10
SOLVERS = [rbd.SemismoothNewton(), rbd.SemismoothNewton(fallback=False), rbd.Lemke()]


@pytest.mark.parametrize("solver", SOLVERS, ids=["ssn", "ssn-nofallback", "lemke"])
def test_known_lcp(solver):
    # A = [[2, 1], [1, 2]], b = [-5, -6]: both rows active, z solves A z = -b.
    A = jnp.array([[2.0, 1.0], [1.0, 2.0]])
    b = jnp.array([-5.0, -6.0])
    sol = rbd.solve_lcp(A, b, solver=solver)
    np.testing.assert_allclose(sol.z, np.linalg.solve(A, -b), atol=TOL)
    assert bool(sol.converged) and float(sol.residual) <= TOL
    # b = [-1, 3]: z = [0.5, 0], w = [0, 3.5].
    sol = rbd.solve_lcp(A, jnp.array([-1.0, 3.0]), solver=solver)
    np.testing.assert_allclose(sol.z, [0.5, 0.0], atol=TOL)
    np.testing.assert_allclose(sol.w, [0.0, 3.5], atol=TOL)


@pytest.mark.parametrize("solver", SOLVERS, ids=["ssn", "ssn-nofallback", "lemke"])
def test_mixed_lcp(solver):
    # Equality row x + z - 1 = 0 with x free; 0 <= z ⊥ x + 2 z - 3 >= 0 => x = -1, z = 2.
    A = jnp.array([[1.0, 1.0], [1.0, 2.0]])
    b = jnp.array([-1.0, -3.0])
    sol = rbd.solve_lcp(A, b, n_free=1, solver=solver)
    np.testing.assert_allclose(sol.z, [-1.0, 2.0], atol=TOL)
    assert bool(sol.converged)


def test_ncp_hook_and_its_gradient():
    # 0 <= z ⊥ z^3 + a z - c >= 0, solution z = 1 for a = 1, c = 2 (z > 0 branch).
    def fn(z, args):
        a, c = args
        return z**3 + a * z - c

    def root(a, c):
        return rbd.solve_ncp(fn, (a, c), 1).z[0]

    sol = rbd.solve_ncp(fn, (1.0, jnp.array(2.0)), 1)
    np.testing.assert_allclose(sol.z, [1.0], atol=TOL)
    # Implicit function theorem: dz/da = -z / (3 z^2 + a) = -1/4, dz/dc = 1/4.
    ga, gc = jax.grad(root, argnums=(0, 1))(1.0, 2.0)
    np.testing.assert_allclose([ga, gc], [-0.25, 0.25], rtol=1e-10)


def test_lemke_reports_a_ray():
    # w = -z - 1 can never be >= 0 with z >= 0: no solution exists.
    sol = rbd.solve_lcp(jnp.array([[-1.0]]), jnp.array([-1.0]), solver=rbd.Lemke())
    assert not bool(sol.converged)
    assert int(sol.status) == rbd.Status.RAY


def test_default_solver_reports_unsolvable():
    sol = rbd.solve_lcp(jnp.array([[-1.0]]), jnp.array([-1.0]))
    assert not bool(sol.converged)
    assert int(sol.status) != rbd.Status.SUCCESS


@pytest.mark.parametrize(
    "A, b, match",
    [
        (jnp.ones((2, 3)), jnp.ones(2), "A must be a square"),
        (jnp.ones(3), jnp.ones(3), "A must be a square"),
        (jnp.eye(2), jnp.ones(3), "b must have shape"),
        (jnp.array([[1.0, jnp.nan], [0.0, 1.0]]), jnp.ones(2), "A contains NaN"),
        (jnp.eye(2), jnp.array([1.0, jnp.inf]), "b contains NaN or inf"),
    ],
)
def test_bad_input_raises(A, b, match):
    with pytest.raises(ValueError, match=match):
        rbd.solve_lcp(A, b)


@pytest.mark.parametrize("kwargs", [{"iterations": 0}, {"iterations": -3}, {"line_search_steps": 0}])
def test_bad_iteration_count_raises(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        rbd.SemismoothNewton(**kwargs)


def test_bad_lemke_and_options_raise():
    with pytest.raises(ValueError, match="max_pivots"):
        rbd.Lemke(max_pivots=0)
    with pytest.raises(ValueError, match="z0 must have shape"):
        rbd.solve_lcp(jnp.eye(2), jnp.ones(2), z0=jnp.ones(3))
    with pytest.raises(ValueError, match="n_free"):
        rbd.solve_lcp(jnp.eye(2), jnp.ones(2), n_free=3)
    with pytest.raises(ValueError, match="grad_smoothing"):
        rbd.solve_lcp(jnp.eye(2), jnp.ones(2), grad_smoothing=-1.0)


@pytest.mark.parametrize("solver", SOLVERS, ids=["ssn", "ssn-nofallback", "lemke"])
def test_nan_under_jit_is_not_converged(solver):
    f = jax.jit(lambda A, b: rbd.solve_lcp(A, b, solver=solver))
    sol = f(jnp.array([[1.0, jnp.nan], [0.0, 1.0]]), jnp.array([-1.0, 1.0]))
    assert not bool(sol.converged)
    assert int(sol.status) == rbd.Status.NONFINITE


def test_friction_lcp_layout_and_checks():
    M = jnp.diag(jnp.array([1.0, 1.0, 0.5]))
    N = jnp.array([[0.0], [1.0], [0.0]])
    D = jnp.array([[1.0, -1.0], [0.0, 0.0], [0.2, -0.2]])
    # Block sliding right at 1 m/s, pressed down at 2 m/s: c_n = 2 m, friction mu c_n opposes.
    prob = rbd.friction_lcp(M, N, D, jnp.array([0.1]), (2,), jnp.array([1.0, -2.0, 0.0]))
    assert prob.lcp.A.shape == (4, 4)
    sol = rbd.solve_lcp(prob.lcp.A, prob.lcp.b)
    c_n, beta, lam = prob.split(sol.z)
    np.testing.assert_allclose(c_n, [2.0], atol=TOL)
    np.testing.assert_allclose(beta, [0.0, 0.2], atol=TOL)
    v_plus = jnp.array([1.0, -2.0, 0.0]) + jnp.linalg.solve(M, prob.impulse(sol.z))
    np.testing.assert_allclose(v_plus[1], 0.0, atol=TOL)
    np.testing.assert_allclose(lam, [v_plus[0] + 0.2 * v_plus[2]], atol=TOL)  # sliding speed
    with pytest.raises(ValueError, match="counts"):
        rbd.friction_lcp(M, N, D, jnp.array([0.1]), (3,), jnp.zeros(3))


def test_eager_calls_reuse_the_compiled_solve():
    """A repeated eager call runs the cached compiled solve, gives the same answer, and differentiates."""
    from jaxrbd.complementarity._solve import _solve_checked

    cache_size = getattr(getattr(_solve_checked, "_cached", None), "_cache_size", None)  # private jax.jit API
    A = jnp.array([[2.0, 1.0], [1.0, 2.0]])
    b = jnp.array([-1.0, 3.0])
    first = rbd.solve_lcp(A, b)
    compiled = cache_size() if cache_size else None
    second = rbd.solve_lcp(A, b)
    if cache_size:
        assert cache_size() == compiled
    np.testing.assert_array_equal(first.z, second.z)
    np.testing.assert_allclose(second.z, [0.5, 0.0], atol=TOL)
    # z_0 = -b_0 / 2 while row 0 is active and row 1 is not: dz_0/db = [-1/2, 0].
    np.testing.assert_allclose(jax.grad(lambda b: rbd.solve_lcp(A, b).z[0])(b), [-0.5, 0.0], atol=TOL)
