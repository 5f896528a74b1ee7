"""Implicit gradients against central finite differences, and at degenerate points."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

GRAD_RTOL = 1e-5  # acceptance: 1e-5 relative on unique, strictly complementary problems
FD_STEP = 1e-6
STRICT_MARGIN = 1e-2


def _central_fd(f, x, step=FD_STEP):
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = step
        g[idx] = (f(x + e) - f(x - e)) / (2 * step)
    return g


def _unique_problem(seed, n=8):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    X = jax.random.normal(k1, (n, n))
    A = X @ X.T / n + 0.5 * jnp.eye(n) + 0.3 * (X - X.T) / n  # positive definite: unique solution
    b = jax.random.normal(k2, (n,))
    return A, b


def _check_grads(solver, seed):
    A, b = _unique_problem(seed)
    c = jnp.linspace(0.5, 1.5, b.shape[0])
    f = jax.jit(lambda A, b: jnp.dot(c, rbd.solve_lcp(A, b, solver=solver).z))
    sol = rbd.solve_lcp(A, b, solver=solver)
    assert float(jnp.min(jnp.maximum(sol.z, sol.w))) > STRICT_MARGIN  # strictly complementary
    gA, gb = jax.grad(f, argnums=(0, 1))(A, b)
    fd_b = _central_fd(lambda x: float(f(A, jnp.asarray(x))), b)
    fd_A = _central_fd(lambda x: float(f(jnp.asarray(x), b)), A)
    np.testing.assert_allclose(gb, fd_b, rtol=GRAD_RTOL, atol=GRAD_RTOL * np.abs(fd_b).max())
    np.testing.assert_allclose(gA, fd_A, rtol=GRAD_RTOL, atol=GRAD_RTOL * np.abs(fd_A).max())


@pytest.mark.slow
def test_gradients_match_finite_differences_ssn():
    for seed in range(3):
        _check_grads(rbd.SemismoothNewton(), seed)


@pytest.mark.slow
def test_gradients_match_finite_differences_lemke():
    _check_grads(rbd.Lemke(), 0)


def test_gradient_at_degenerate_point_is_finite():
    # A = I, b = 0: z = w = 0 in every row (the FB kink).
    A, b = jnp.eye(3), jnp.zeros(3)
    for eps in (0.0, 1e-3):
        g = jax.grad(lambda A, b: jnp.sum(rbd.solve_lcp(A, b, grad_smoothing=eps).z), argnums=(0, 1))(A, b)
        assert all(bool(jnp.all(jnp.isfinite(x))) for x in g)
    # With smoothing the kink gets a blend: d z / d b = -1/2 per row (FB_eps at a = b = 0).
    gb = jax.grad(lambda b: jnp.sum(rbd.solve_lcp(A, b, grad_smoothing=1e-3).z))(b)
    np.testing.assert_allclose(gb, -0.5 * np.ones(3), rtol=1e-6)


@pytest.mark.slow
def test_impulse_gradient_with_non_unique_multipliers():
    """A body held by more contacts than it has degrees of freedom: lam and beta are
    not unique, the generalized impulse is, and so is its derivative."""
    M = jnp.diag(jnp.array([2.0, 2.0, 0.1]))
    # Planar block with two corner contacts at x = +-0.5: normal (0, 1, +-0.5), tangent (1, 0, 0).
    N = jnp.array([[0.0, 0.0], [1.0, 1.0], [0.5, -0.5]])
    D = jnp.array([[1.0, -1.0, 1.0, -1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mu = jnp.array([0.8, 0.8])

    def impulse(b):
        prob = rbd.friction_lcp(M, N, D, mu, (2, 2), b)
        return prob.impulse(rbd.solve_lcp(prob.lcp.A, prob.lcp.b).z)

    b0 = jnp.array([0.3, -1.0, 0.0])  # pressed down, sliding slowly: sticks (0.3 < 0.8 * 1)
    z = rbd.solve_lcp(*_lcp_arrays(M, N, D, mu, b0)).z
    assert float(z[-2:].max()) < 1e-12  # sticking: lam = 0
    jac = jax.jacrev(impulse)(b0)
    fd = np.stack([_central_fd(lambda x, i=i: float(impulse(jnp.asarray(x))[i]), b0) for i in range(3)])
    assert bool(jnp.all(jnp.isfinite(jac)))
    np.testing.assert_allclose(jac, fd, rtol=GRAD_RTOL, atol=1e-8)


def _lcp_arrays(M, N, D, mu, b):
    prob = rbd.friction_lcp(M, N, D, mu, (2, 2), b)
    return prob.lcp.A, prob.lcp.b


@pytest.mark.slow
def test_gradient_through_friction_builder_wrt_mu():
    """A sliding contact: the friction impulse is mu c_n, so d impulse_x / d mu = -c_n."""
    M = jnp.eye(2)
    N = jnp.array([[0.0], [1.0]])
    D = jnp.array([[1.0, -1.0], [0.0, 0.0]])

    def friction_x(mu):
        prob = rbd.friction_lcp(M, N, D, jnp.array([mu]), (2,), jnp.array([2.0, -1.0]))
        return prob.impulse(rbd.solve_lcp(prob.lcp.A, prob.lcp.b).z)[0]

    np.testing.assert_allclose(friction_x(0.3), -0.3, rtol=1e-12)
    np.testing.assert_allclose(jax.grad(friction_x)(0.3), -1.0, rtol=1e-10)


def test_reverse_pass_does_not_run_the_solver_again():
    """`simulate` rematerializes its step in the reverse pass but keeps each solve's result: the compiled
    gradient recomputes the step's geometry and arithmetic, never the solver's loops, and is the exact one.

    Rolling ball: angular momentum about the contact point is conserved, v_f = (5 v0 + 2 r w_y0) / 7.
    """
    r = 0.1
    scene = rbd.scenes.rolling_ball(1.0, 0.3, radius=r)

    def final_speed(w_y0):
        state = rbd.State(scene.state.t, scene.state.q, scene.state.v.at[4].set(w_y0))
        return rbd.simulate(scene.system, state, dt=0.01, steps=30).v[-1, 0]

    gradient = jax.jit(jax.grad(final_speed)).lower(0.0).compile()
    ops = re.findall(r'op_name="([^"]*)"', gradient.as_text())
    recomputed = [op for op in ops if "rematted_computation" in op]
    assert recomputed  # the step is rematerialized in the reverse pass
    assert any("_solve_checked" in op for op in ops)  # the solve, in the forward pass
    assert not [op for op in recomputed if "_solve_checked" in op]
    np.testing.assert_allclose(float(gradient(0.0)), 2 * r / 7, rtol=1e-9)


def _ball_on_a_tilted_floor(tilt):
    """A 1 kg ball of radius 0.1 at rest on the floor n . x = 0, n = (tilt, 0, 1) / |(tilt, 0, 1)| (mu = 0.5)."""
    b = rbd.SceneBuilder(dim=3, mu=0.5, gravity=(0.0, 0.0, -9.81))
    b.add_static("floor", rbd.Plane(normal=jnp.stack([tilt, 0.0, 1.0])))
    b.add_body("ball", rbd.Sphere(0.1), mass=1.0, position=(0.0, 0.0, 0.1))
    return b.build()


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({}, id="stewart_trinkle"),
        pytest.param({"scheme": rbd.AnitescuPotra()}, id="anitescu_potra", marks=pytest.mark.slow),
        pytest.param({"step_solver": rbd.ContactSweeps()}, id="contact_sweeps", marks=pytest.mark.slow),
    ],
)
def test_a_ball_at_rest_rolls_in_the_derivative_when_its_floor_tilts(options):
    """At rest on a level floor every friction row is biactive (no load along it, no slip). Tilting the floor by
    t makes the ball roll (it sticks: mu = 0.5 > 2/7 t), at 5/7 g t: after n steps of h, dv_x/dt = 5/7 g n h
    and dw_y/dt = 5/7 g n h / r, exactly, as central differences give. With the biactive friction rows on
    their inactive branch the derivative slid instead, without friction (g n h, and no spin)."""
    steps, h, r = 20, 0.01, 0.1
    velocities = jax.jit(
        lambda t: rbd.simulate(*_ball_on_a_tilted_floor(t), dt=h, steps=steps, **options).v[jnp.array([1, -1])]
    )
    derivative = np.asarray(jax.jacrev(lambda t: velocities(t)[:, 0::4])(0.0))  # v_x and w_y after 1 and n steps
    exact = 5.0 / 7.0 * 9.81 * h * np.array([[1.0, 1.0 / r], [steps, steps / r]])
    np.testing.assert_allclose(derivative, exact, rtol=1e-8)  # the step solves and their adjoints to 1e-8
    fd = (np.asarray(velocities(FD_STEP)) - np.asarray(velocities(-FD_STEP))) / (2 * FD_STEP)
    np.testing.assert_allclose(derivative, fd[:, 0::4], rtol=1e-6)
