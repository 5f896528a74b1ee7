"""Acceptance on random friction LCPs: the default solver, Lemke, cold and warm."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

RESIDUAL_TOL = 1e-8  # acceptance: residual <= 1e-8 in float64
IMPULSE_RTOL = 1e-8  # acceptance: N c_n + D beta agrees to 1e-8 relative
FLOAT32_TOL = 1e-5  # the default float32 tolerance of the solvers
MODE_TOL = 1e-9
CERTIFIED_RESIDUAL = 1e-10  # both solutions of a non-unique problem must be this exact
DISTINCT = 1e-4  # ... and differ by far more than solver round-off


def random_batch(n, seed=0, dtype=jnp.float64):
    """n random friction LCPs (the solver's acceptance distribution), stacked."""
    keys = jax.random.split(jax.random.PRNGKey(seed), n)
    return jax.vmap(lambda k: rbd.random_friction_lcp(k, dtype=dtype))(keys)


@jax.jit
def solve_batch_ssn(A, b, z0):
    return jax.vmap(lambda A, b, z0: rbd.solve_lcp(A, b, z0=z0))(A, b, z0)


@jax.jit
def solve_batch_lemke(A, b):
    return jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=rbd.Lemke()))(A, b)


@pytest.fixture(scope="module")
def batch100():
    """100 random friction LCPs with their default-solver and Lemke solutions."""
    probs = random_batch(100, seed=1)
    A, b = probs.lcp.A, probs.lcp.b
    return probs, solve_batch_ssn(A, b, jnp.zeros_like(b)), solve_batch_lemke(A, b)


def _impulses(probs, z):
    return jax.vmap(lambda p, z: p.impulse(z))(probs, z)


def _relative_difference(probs, x, y):
    """|x - y| relative to the larger of |y| and the momentum scale |M b| of the problem."""
    momentum = jnp.linalg.norm(jnp.einsum("...ij,...j->...i", probs.M, probs.b), axis=-1)
    return jnp.linalg.norm(x - y, axis=-1) / jnp.maximum(jnp.linalg.norm(y, axis=-1), momentum)


def _contact_modes(probs, z):
    """Counts of (separating, sticking, sliding) active contacts."""
    c_n, _, lam = jax.vmap(lambda p, z: p.split(z))(probs, z)
    active = jnp.any(probs.N != 0, axis=-2)
    sep = active & (c_n <= MODE_TOL)
    slide = active & (c_n > MODE_TOL) & (lam > MODE_TOL)
    stick = active & (c_n > MODE_TOL) & (lam <= MODE_TOL)
    return int(sep.sum()), int(stick.sum()), int(slide.sum())


def _check_impulses(probs, sol, ref):
    """The generalized impulse agrees with Lemke's, or the LCP provably has two solutions.

    With friction the impulse of the Stewart-Trinkle LCP need not be unique: like
    Painlevé's problem (004 §1.3), a few random problems with several contacts
    admit distinct solutions. Such a problem passes only with a certificate: both
    solutions have residual <= 1e-10 and their impulses differ by more than 1e-4
    relative, four orders above the agreement asked of a unique one. Returns the
    number of such problems.
    """
    rel = np.asarray(_relative_difference(probs, _impulses(probs, sol.z), _impulses(probs, ref.z)))
    agree = rel <= IMPULSE_RTOL
    certified = (rel > DISTINCT) & (np.asarray(sol.residual) <= CERTIFIED_RESIDUAL)
    certified &= np.asarray(ref.residual) <= CERTIFIED_RESIDUAL
    assert np.all(agree | certified), rel[~(agree | certified)]
    return int((~agree).sum())


def _check_batch(probs, cold, warm, lemke):
    assert bool(jnp.all(cold.converged)) and bool(jnp.all(warm.converged)) and bool(jnp.all(lemke.converged))
    assert float(cold.residual.max()) <= RESIDUAL_TOL
    assert float(warm.residual.max()) <= RESIDUAL_TOL
    assert float(lemke.residual.max()) <= RESIDUAL_TOL
    non_unique = _check_impulses(probs, cold, lemke), _check_impulses(probs, warm, lemke)
    assert max(non_unique) <= 0.05 * probs.lcp.b.shape[0]
    return non_unique


@pytest.mark.slow
def test_batch_has_every_contact_mode(batch100):
    probs, _, lemke = batch100
    sep, stick, slide = _contact_modes(probs, lemke.z)
    total = sep + stick + slide
    for count in (sep, stick, slide):
        assert count >= 0.1 * total, (sep, stick, slide)


@pytest.mark.slow
def test_default_solver_and_lemke_on_100(batch100):
    probs, cold, lemke = batch100
    warm = solve_batch_ssn(probs.lcp.A, probs.lcp.b, jnp.roll(lemke.z, 1, axis=0))
    _check_batch(probs, cold, warm, lemke)


@pytest.mark.slow
def test_newton_alone_reports_its_stalls(batch100):
    """Without the fallback, a stalled lane is flagged, never passed off as a solution."""
    probs, _, _ = batch100
    solver = rbd.SemismoothNewton(fallback=False)
    sol = jax.jit(jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=solver)))(probs.lcp.A, probs.lcp.b)
    np.testing.assert_array_equal(np.asarray(sol.converged), np.asarray(sol.residual <= 1e-10))
    np.testing.assert_array_equal(np.asarray(sol.status == rbd.Status.SUCCESS), np.asarray(sol.converged))
    assert int((~sol.converged).sum()) > 0  # the hard problems are in the batch


def _check_loop(probs, batched):
    """One jitted solve per problem gives what the vmapped batch gave.

    Not z to round-off: the friction LCP's z is often not unique (the beta of a
    sticking contact, the lam of a separating one), and vmap compiles other fusions,
    so Newton may stop at another point of the solution set (seen: 1.8e-8 apart in
    beta). The solve status, the residual bound and the generalized impulse, which
    the dynamics use, must agree, as `_check_impulses` asks of Lemke's solution.
    """
    solve_one = jax.jit(lambda A, b: rbd.solve_lcp(A, b))
    loop = [solve_one(probs.lcp.A[i], probs.lcp.b[i]) for i in range(probs.lcp.b.shape[0])]
    loop = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *loop)
    np.testing.assert_array_equal(np.asarray(loop.converged), np.asarray(batched.converged))
    assert float(loop.residual.max()) <= RESIDUAL_TOL
    _check_impulses(probs, loop, batched)


@pytest.mark.slow
def test_vmap_matches_python_loop(batch100):
    probs, cold, _ = batch100
    _check_loop(probs, cold)


@pytest.mark.long  # test_vmap_matches_python_loop's check on 256 problems
def test_vmap_matches_python_loop_256():
    probs = random_batch(256, seed=7)
    _check_loop(probs, solve_batch_ssn(probs.lcp.A, probs.lcp.b, jnp.zeros_like(probs.lcp.b)))


@pytest.mark.long
def test_acceptance_1000_problems():
    """1,000 problems, cold and warm from another problem's solution, against Lemke."""
    probs = random_batch(1000, seed=2026)
    A, b = probs.lcp.A, probs.lcp.b
    lemke = solve_batch_lemke(A, b)
    cold = solve_batch_ssn(A, b, jnp.zeros_like(b))
    warm = solve_batch_ssn(A, b, jnp.roll(lemke.z, 1, axis=0))
    non_unique = _check_batch(probs, cold, warm, lemke)
    print(
        f"\n1000 problems: worst residual cold {float(cold.residual.max()):.2e}, warm {float(warm.residual.max()):.2e}, "
        f"Lemke {float(lemke.residual.max()):.2e}; Lemke fallback used cold {int(cold.fallback.sum())}, "
        f"warm {int(warm.fallback.sum())}; modes (sep, stick, slide) {_contact_modes(probs, lemke.z)}; "
        f"problems with two certified solutions (cold, warm) {non_unique}"
    )


@pytest.mark.slow
def test_float32_residuals():
    """float32: report the residual distribution; a lane flagged converged really is solved.

    The float64 problems are rounded to float32 and solved there. Single precision
    does not reach 1e-5 on every one of these problems (mass matrices spanning
    three decades, up to 10 contacts on 3 degrees of freedom): Lemke's pivoting
    loses the path in round-off on a few percent of them. The quantiles are
    printed for the record. Asserted: the `converged` flag is exactly
    `residual <= 1e-5 max(1, max|z|)` (`within_tolerance`), and every lane flagged
    converged solves the float64 problem, evaluated in float64, to that tolerance
    plus the round-off of storing z in float32 (4 eps32 |A| |z| + |b|).
    """
    probs = random_batch(200, seed=5)
    A, b = probs.lcp.A, probs.lcp.b
    sol = jax.jit(jax.vmap(lambda A, b: rbd.solve_lcp(A, b)))(A.astype(jnp.float32), b.astype(jnp.float32))
    assert sol.z.dtype == jnp.float32
    res = np.asarray(sol.residual)
    q = np.quantile(res, [0.5, 0.9, 0.95, 0.99, 1.0])
    converged = np.asarray(sol.converged)
    print(f"\nfloat32 residual quantiles (50, 90, 95, 99, 100%): {q}; converged {int(converged.sum())}/200")
    tol = FLOAT32_TOL * np.maximum(1.0, np.abs(np.asarray(sol.z)).max(axis=-1))
    np.testing.assert_array_equal(converged, res <= tol)
    z = sol.z.astype(jnp.float64)
    w = jnp.einsum("...ij,...j->...i", A, z) + b
    res64 = np.asarray(jax.vmap(rbd.natural_residual)(z, w))
    scale = np.abs(A).max(axis=(-1, -2)) * np.abs(z).max(axis=-1) + np.abs(b).max(axis=-1)
    bound = tol + 4 * np.finfo(np.float32).eps * np.asarray(scale)
    assert np.all(res64[converged] <= bound[converged]), (res64 - bound)[converged].max()


@pytest.mark.slow
def test_slow_lanes_of_a_batch_go_on_alone(batch100):
    """Under vmap every lane gets `lane_iterations` Newton steps, and the lanes still open go on
    `lane_chunk` at a time, in blocks of `lane_block` lanes (`SemismoothNewton.run_lanes`): with 1
    step and 7 lanes per pass, most of the 100 cold starts (4 blocks of 32, the last one filled up)
    take several passes, and each ends as the batch and the loop do."""
    probs, cold, _ = batch100
    A, b = probs.lcp.A, probs.lcp.b
    solver = rbd.SemismoothNewton(lane_iterations=1, lane_chunk=7)
    sol = jax.jit(jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=solver)))(A, b)
    assert int((sol.iterations > 1).sum()) > 3 * 7  # several passes ran
    np.testing.assert_array_equal(np.asarray(sol.converged), np.asarray(cold.converged))
    assert bool(sol.converged.all()) and float(sol.residual.max()) <= RESIDUAL_TOL
    _check_impulses(probs, sol, cold)
    # A batch of batches, and a batch whose b is shared by every lane.
    nested = jax.jit(jax.vmap(jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=solver))))(
        A[:20].reshape(4, 5, *A.shape[1:]), b[:20].reshape(4, 5, -1)
    )
    np.testing.assert_array_equal(np.asarray(nested.converged).ravel(), np.asarray(cold.converged[:20]))
    assert float(nested.residual.max()) <= RESIDUAL_TOL
    # Another problem's b need not have a solution: those lanes fail as they fail alone.
    shared = jax.jit(jax.vmap(lambda A: rbd.solve_lcp(A, b[0], solver=solver)))(A[:10])
    loop = [rbd.solve_lcp(A[i], b[0]) for i in range(10)]
    np.testing.assert_array_equal(np.asarray(shared.status), [int(s.status) for s in loop])
    solved = np.asarray(shared.converged)
    assert solved.any() and float(shared.residual[solved].max()) <= RESIDUAL_TOL


@pytest.mark.slow
def test_only_the_failed_lanes_of_a_batch_go_to_lemke(batch100):
    """Under vmap the lanes that Newton leaves unsolved go to Lemke `lane_chunk` at a time, and the others
    keep Newton's answer: with 10 Newton steps per start, 62 of the 100 lanes need Lemke and 38 do not, and
    every lane ends solved, its impulse Lemke's (or one of two certified solutions)."""
    probs, _, lemke = batch100
    A, b = probs.lcp.A, probs.lcp.b
    solver = rbd.SemismoothNewton(iterations=10, lane_iterations=1, lane_chunk=3)
    sol = jax.jit(jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=solver)))(A, b)
    used = int(sol.fallback.sum())
    assert 3 < used < 97, used  # several trips of the Lemke loop, and lanes that need none
    assert bool(sol.converged.all()) and float(sol.residual.max()) <= RESIDUAL_TOL
    _check_impulses(probs, sol, lemke)
