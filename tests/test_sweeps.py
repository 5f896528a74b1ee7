"""The sparse solver `ContactSweeps`: the same answers, residuals and gradients as the dense step.

Physics is checked against the dense global Newton (exact on these sizes) and the
exact solutions of the reference problems; the local solver against Lemke.
"""

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd
from jaxrbd._small import inv3, matmul, matvec
from jaxrbd.complementarity._fb import fischer_burmeister_partials
from jaxrbd.cones import polygon_directions
from jaxrbd.stepping import AUTO_SIZE, AUTO_SIZE_COUPLED
from jaxrbd.stepping._coloring import color_contacts
from jaxrbd.stepping._local import enumerate_contact
from jaxrbd.stepping._sweeps import Blocks, _block_solver

jax.config.update("jax_enable_x64", True)

TOL = 1e-10  # the float64 solver tolerance


def _local_lcp(W, u, mu, S):
    k = S.shape[0]
    K = np.zeros((3, k + 2))
    K[0, 0] = 1.0
    K[1:, 1 : k + 1] = S.T
    L = np.zeros((k + 2, k + 2))
    L[1 : k + 1, k + 1] = 1.0
    L[k + 1, 0] = mu
    L[k + 1, 1 : k + 1] = -1.0
    return K, K.T @ W @ K + L, K.T @ u


def _natural_residual(A, b, z):
    """max |min(z, A z + b)| per LCP, computed here from the assembled (A, b)."""
    return np.abs(np.minimum(z, np.einsum("cmn,cn->cm", A, z) + b)).max(-1)


@pytest.mark.parametrize(
    "k, scales", [(8, (1.0, 1.0)), (5, (1.0, 1.0)), pytest.param(8, (1.0, 0.5), marks=pytest.mark.slow)]
)
def test_enumeration_solves_every_contact_lcp_as_lemke_does(k, scales):
    rng = np.random.default_rng(k)
    S = polygon_directions(k) * np.asarray(scales)
    X = rng.normal(size=(200, 3, 3))
    W = X @ np.swapaxes(X, 1, 2) + 0.05 * np.eye(3)
    u, mu = rng.normal(size=(200, 3)), rng.uniform(0.0, 1.5, size=200)
    K, A, b = (np.stack(x) for x in zip(*[_local_lcp(W[i], u[i], mu[i], S) for i in range(200)]))
    z, residual = jax.jit(jax.vmap(enumerate_contact, in_axes=(0, 0, 0, None)))(W, u, mu, S)
    # The residual it reports is that of the assembled LCP, up to round-off (w is formed in another order).
    np.testing.assert_allclose(residual, _natural_residual(A, b, z), rtol=0, atol=1e-13 * max(1.0, np.abs(b).max()))
    assert float(residual.max()) <= 1e-12 * max(1.0, np.abs(b).max())
    assert float(z.min()) >= -1e-12
    # A ball's contact (W diagonal in (n, t, o)) has a unique impulse: compare it with Lemke's.
    # (A general W couples normal and tangential slip and may admit several solutions.)
    W = np.einsum("ci,ij->cij", 0.1 + rng.uniform(size=(200, 3)), np.eye(3))
    K, A, b = (np.stack(x) for x in zip(*[_local_lcp(W[i], u[i], mu[i], S) for i in range(200)]))
    z, residual = jax.jit(jax.vmap(enumerate_contact, in_axes=(0, 0, 0, None)))(W, u, mu, S)
    assert float(_natural_residual(A, b, z).max()) <= 1e-12 * max(1.0, np.abs(b).max())
    lemke = jax.jit(jax.vmap(lambda A, b: rbd.solve_lcp(A, b, solver=rbd.Lemke()).z))(A, b)
    np.testing.assert_allclose(np.einsum("crm,cm->cr", K, z), np.einsum("crm,cm->cr", K, lemke), atol=1e-9)


def _adjoint_blocks(rng, nc, k=8):
    """Random contacts' (K, L, active, mu, W, da, db): FB partials at solutions' patterns (z > 0 = w, z = 0 < w,
    the kink z = w = 0) and off them, some contacts masked; W symmetric positive definite."""
    mu = jnp.asarray(rng.uniform(0.0, 1.5, size=nc))
    active = jnp.asarray((rng.uniform(size=nc) < 0.8).astype(float))
    X = rng.normal(size=(nc, 3, 3))
    W = jnp.asarray(X @ np.swapaxes(X, 1, 2) + 0.05 * np.eye(3))
    pattern = rng.integers(0, 4, size=(nc, k + 2))
    value = rng.uniform(0.1, 2.0, size=(2, nc, k + 2))
    z = np.where((pattern == 0) | (pattern == 3), value[0], 0.0)
    w = np.where((pattern == 1) | (pattern == 3), value[1], 0.0)
    return (*rbd.PolyhedralCone(k).contact_maps(mu, active), active, mu, W, *fischer_burmeister_partials(z, w))


@jax.jit
def _block_solve(K, L, active, mu, W, da, db, r):
    blocks = types.SimpleNamespace(K=K, L=L, active=active, mu=mu)
    blocks.diagonal = lambda W: Blocks.diagonal(blocks, W)
    solve, apply_Bt = _block_solver(blocks, W, da, db)
    Bt = jnp.swapaxes(da[:, :, None] * jnp.eye(da.shape[1]) + db[:, :, None] * blocks.diagonal(W), -1, -2)
    idx = np.arange(r.shape[0])
    return solve(r, idx), Bt, apply_Bt(r, idx)


def test_structured_block_solves_match_the_pseudo_inverse():
    """The adjoint's per-contact solve B^T u = r (Woodbury on the arrowhead C, refined) against NumPy's SVD
    pseudo-inverse, and B^T applied without forming it against the matrix; a singular block (no Delassus
    coupling and a normal row with da = 0) with r outside its range takes the SVD branch, the others keep
    theirs, and under `vmap` each lane gets its own answer."""
    rng = np.random.default_rng(5)
    draw = _adjoint_blocks(rng, 300)
    r = jnp.asarray(rng.normal(size=(300, 10)))
    u, Bt, Bt_r = _block_solve(*draw, r)
    np.testing.assert_allclose(Bt_r, np.einsum("cij,cj->ci", Bt, r), rtol=1e-13, atol=1e-13 * np.abs(Bt_r).max())
    expected = np.einsum("cij,cj->ci", np.linalg.pinv(np.asarray(Bt)), r)
    np.testing.assert_allclose(u, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    assert np.linalg.cond(np.asarray(Bt)).max() > 1e3  # the draw holds badly conditioned blocks too
    # Make contact 0 singular: W = 0 leaves its normal row as da_n e_n, and da_n = 0.
    K, L, active, mu, W, da, db = draw
    active = active.at[0].set(1.0)
    singular = (*rbd.PolyhedralCone(8).contact_maps(mu, active), active, mu, W.at[0].set(0.0), da.at[0, 0].set(0.0), db)
    u, Bt, _ = _block_solve(*singular, r)
    assert np.linalg.matrix_rank(np.asarray(Bt[0])) < Bt.shape[-1]
    expected = np.einsum("cij,cj->ci", np.linalg.pinv(np.asarray(Bt), rcond=1e-12), r)
    np.testing.assert_allclose(u, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    # A batch of the singular draw and a regular one: each lane as alone.
    lanes = [(*singular, r), (*_adjoint_blocks(rng, 300), r)]
    batched = jax.jit(jax.vmap(_block_solve))(*jax.tree_util.tree_map(lambda *x: jnp.stack(x), *lanes))[0]
    for lane, draw in enumerate(lanes):
        np.testing.assert_allclose(batched[lane], _block_solve(*draw)[0], rtol=0, atol=1e-10 * np.abs(batched).max())


def test_small_products_and_inverses_match_numpy_and_their_derivatives_match_einsum():
    """`jaxrbd._small`: the unrolled products and the 3 x 3 inverse against NumPy, with broadcast batch axes; their
    forward- and reverse-mode derivatives (custom JVP rules, `SymbolicZero` for an argument held fixed) against
    those of `jnp.einsum` to round-off, and a second derivative through them."""
    rng = np.random.default_rng(11)
    X, Y, y = (jnp.asarray(rng.normal(size=shape)) for shape in ((5, 3, 4), (1, 4, 2), (4,)))
    A = rng.normal(size=(50, 3, 3))
    A = jnp.asarray(A @ np.swapaxes(A, 1, 2) + 0.1 * np.eye(3))
    np.testing.assert_allclose(inv3(A), np.linalg.inv(np.asarray(A)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(matmul(X, Y), np.asarray(X) @ np.asarray(Y), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(matvec(X, y), np.asarray(X) @ np.asarray(y), rtol=1e-13, atol=1e-14)
    pairs = [
        (matmul, lambda X, Y: jnp.einsum("...ij,...jk->...ik", X, Y), (X, Y)),
        (matvec, lambda X, y: jnp.einsum("...ij,...j->...i", X, y), (X, y)),
    ]
    for ours, einsum, args in pairs:
        for argnums in (0, 1, (0, 1)):
            for mode in (jax.jacfwd, jax.jacrev):
                got, want = mode(ours, argnums)(*args), mode(einsum, argnums)(*args)
                for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)
    cubic = lambda f: lambda y: jnp.sum(f(X, y) ** 3)
    np.testing.assert_allclose(jax.hessian(cubic(matvec))(y), jax.hessian(cubic(pairs[1][1]))(y), rtol=1e-12)


def test_colouring_never_puts_two_contacts_of_a_body_together():
    a = np.array([0, 0, 1, 2, 3, 1, 4])
    b = np.array([5, 1, 2, 3, 5, 5, 5])  # 5 is the world
    colors = color_contacts(a, b, 5)
    assert sorted(c for color in colors for c in color) == list(range(7))
    for color in colors:
        bodies = [k for c in color for k in (a[c], b[c]) if k < 5]
        assert len(bodies) == len(set(bodies))
    # Contacts with the world only on distinct bodies: one colour, so one sweep is exact.
    assert len(color_contacts(np.arange(4), np.full(4, 4), 4)) == 1


def test_traced_colour_passes_visit_every_contact_once_colour_by_colour():
    """`Blocks.over_colors` with traced colours (a broad phase's slots): each pass gets chunks of nb lanes of its
    colour's contacts, lanes past its end index nc (dropped by a scatter), and colours run in order. Colour 0
    here holds 5 contacts with 2 moving bodies (as after an overflow of `MAX_COLORS`): three chunks."""
    color = jnp.array([0, 2, 0, 1, 0, 0, 1, 0])
    blocks = types.SimpleNamespace(colors=None, color=color, v_free=jnp.zeros((3, 6)))  # 2 moving bodies

    def visit(carry, idx, mask):
        visits, order, step, marked = carry
        assert idx.shape == mask.shape == (2,)
        visits = visits.at[idx].add(1)  # idx 8 (a lane past the colour's end) is dropped
        order = order.at[idx].set(step)
        return visits, order, step + 1, marked + jnp.sum(mask & (idx < 8), dtype=jnp.int32)

    start = (jnp.zeros(8, jnp.int32), jnp.full(8, -1), jnp.int32(0), jnp.int32(0))
    visits, order, passes, marked = jax.jit(lambda: Blocks.over_colors(blocks, visit, start))()
    assert np.asarray(visits).tolist() == [1] * 8 and int(marked) == 8  # the mask marks exactly the real lanes
    assert int(passes) == 3 + 1 + 1  # colour 0 in 3 chunks
    order = np.asarray(order)
    assert max(order[[0, 2, 4, 5, 7]]) < min(order[[3, 6]]) and max(order[[3, 6]]) < order[1]


@pytest.fixture(scope="module")
def rollout():
    return jax.jit(rbd.simulate, static_argnames=("dt", "steps", "solver"))


def _agree(rollout, scene, dt, steps, atol):
    dense = rollout(*scene, dt=dt, steps=steps, solver=rbd.SemismoothNewton())
    sparse = rollout(*scene, dt=dt, steps=steps, step_solver=rbd.ContactSweeps())
    assert bool(jnp.all(sparse.stats.converged))
    assert float(sparse.stats.residual.max()) <= TOL  # every step
    np.testing.assert_allclose(sparse.q, dense.q, atol=atol)
    np.testing.assert_allclose(sparse.v, dense.v, atol=atol)
    np.testing.assert_allclose(sparse.impulses.normal, dense.impulses.normal, atol=atol)
    return sparse


@pytest.mark.slow
def test_sphere_grid_matches_the_dense_step(rollout):
    traj = _agree(rollout, rbd.scenes.sphere_grid(8), 0.01, 60, 1e-12)
    np.testing.assert_allclose(traj.q[-1, 2::7], 0.1, atol=1e-12)  # at rest on the table


@pytest.mark.long
def test_four_balls_match_the_dense_step(rollout):
    """P2: seven contacts that share balls (several colours, 100 sweeps per step)."""
    traj = _agree(rollout, rbd.scenes.four_balls(), 0.005, 200, 1e-9)
    assert float(traj.q[-1, 7]) > 1.0  # the struck ball has moved in +x


@pytest.mark.slow
def test_cube_on_incline_does_not_creep(rollout):
    """mu > tan(theta), started at rest: less than 1e-10 m in 10 s (h = 0.01)."""
    scene = rbd.scenes.block_on_incline(math.radians(30.0), 0.8)
    traj = rollout(*scene, dt=0.01, steps=1000, step_solver=rbd.ContactSweeps())
    assert float(traj.stats.residual.max()) <= TOL
    assert float(jnp.max(jnp.linalg.norm(traj.q[:, :3] - traj.q[0, :3], axis=1))) < 1e-10


@pytest.mark.slow
def test_cube_slides_with_the_exact_acceleration(rollout):
    """mu < tan(theta), a direction along the slope: a = g (sin - mu cos) to 1e-6 relative."""
    angle, mu, h = math.radians(30.0), 0.3, 0.01
    traj = rollout(*rbd.scenes.block_on_incline(angle, mu), dt=h, steps=40, step_solver=rbd.ContactSweeps())
    assert float(traj.stats.residual.max()) <= TOL
    uphill = np.array([math.cos(angle), 0.0, math.sin(angle)])
    speed = -np.asarray(traj.v[:, :3]) @ uphill
    exact = 9.81 * (math.sin(angle) - mu * math.cos(angle))
    np.testing.assert_allclose(np.diff(speed) / h, exact, rtol=1e-6)


@pytest.mark.slow
def test_custom_directions_use_the_local_newton(rollout):
    """Directions that are not a regular polygon: local semismooth Newton, same answer as dense."""
    directions = np.array([[1.0, 0.0], [0.3, 1.0], [-1.0, 0.2], [-0.2, -1.0], [0.8, -0.6]])
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    b = rbd.SceneBuilder(mu=0.3, cone=rbd.PolyhedralCone(directions=directions), collide_bodies=False)
    b.add_static("table", rbd.Plane())
    for i in range(3):
        b.add_body(f"ball{i}", rbd.Sphere(0.1), mass=1.0, position=(0.5 * i, 0.0, 0.1), velocity=(1.0, 0.5 * i, 0.0))
    _agree(rollout, b.build(), 0.01, 30, 1e-10)


def _final_x(mu, v0, solver):
    system, state = rbd.scenes.block_on_incline(math.radians(20.0), mu, speed=v0)
    traj = rbd.simulate(system, state, dt=0.01, steps=20, step_solver=solver)
    return traj.q[-1, 0]


@pytest.mark.long  # ContactSweeps' exact derivative against central differences runs in the slow set in test_gradients.py (the ball on a tilting floor)
def test_gradients_match_central_differences():
    """d x / d mu and d x / d v0 of a cube sliding up the incline (it stops after 0.24 s; we run 0.2 s)."""
    solver = rbd.ContactSweeps()
    grad = jax.jit(jax.grad(_final_x, argnums=(0, 1)), static_argnums=2)(0.3, 1.5, solver)
    f = jax.jit(_final_x, static_argnums=2)
    eps = 1e-6
    fd = (
        (f(0.3 + eps, 1.5, solver) - f(0.3 - eps, 1.5, solver)) / (2 * eps),
        (f(0.3, 1.5 + eps, solver) - f(0.3, 1.5 - eps, solver)) / (2 * eps),
    )
    np.testing.assert_allclose(np.array(grad), np.array(fd), rtol=1e-4)
    assert abs(float(fd[0])) > 1e-3  # mu matters here


@pytest.mark.slow
def test_gradient_is_finite_at_rest_on_the_table():
    """Sticking and resting contacts (degenerate multipliers): the gradient stays finite."""

    def height(mu, v0):
        system, state = rbd.scenes.sphere_grid(4, mu=mu, height=0.1)
        state = rbd.State(state.t, state.q, state.v.at[0].set(v0))
        return rbd.simulate(system, state, dt=0.01, steps=20, step_solver=rbd.ContactSweeps()).q[-1].sum()

    grad = jax.jit(jax.grad(height, argnums=(0, 1)))(0.5, 0.0)
    assert all(np.isfinite(float(g)) for g in grad)


def test_large_body_scenes_pick_the_sparse_solver():
    small, large = rbd.scenes.sphere_grid(4), rbd.scenes.sphere_grid(9)
    choose = lambda scene: rbd.choose_solver(scene.system, scene.state, cone=rbd.PolyhedralCone(8))
    assert 4 * 10 <= AUTO_SIZE < 9 * 10
    assert isinstance(choose(small), rbd.DenseStep) and isinstance(choose(small).solver, rbd.SemismoothNewton)
    assert isinstance(choose(large), rbd.ContactSweeps)


@pytest.mark.slow
def test_coupled_scenes_stay_on_the_dense_step_up_to_the_coupled_size():
    """Contacts sharing bodies (a stack) take rounds of sweeps: the dense step runs them up to AUTO_SIZE_COUPLED rows."""
    rows = lambda scene: 10 * scene.system.ncontacts(scene.state.q)  # Stewart-Trinkle, 8 directions: 10 rows a contact
    stack, tall = rbd.scenes.box_stack(5), rbd.scenes.box_stack(14)
    assert AUTO_SIZE < rows(stack) <= AUTO_SIZE_COUPLED < rows(tall)
    assert isinstance(rbd.choose_solver(*stack), rbd.DenseStep)
    assert isinstance(rbd.choose_solver(*tall), rbd.ContactSweeps)


@pytest.mark.parametrize(
    "scene, options, message",
    [
        (lambda: rbd.scenes.falling_rod(), {}, "SceneBuilder"),
        (lambda: rbd.scenes.sphere_grid(2), {"impact": rbd.NewtonRestitution()}, "impact law"),
        (lambda: rbd.scenes.sphere_grid(2), {"cone": rbd.EllipticCone()}, "polyhedral cone"),
        (lambda: rbd.scenes.pendulum(), {}, "joints"),
    ],
)
def test_unsupported_settings_are_named(scene, options, message):
    with pytest.raises(ValueError, match=message):
        rbd.simulate(*scene(), dt=0.01, steps=2, step_solver=rbd.ContactSweeps(), **options)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="sweeps must be a positive integer"):
        rbd.ContactSweeps(sweeps=0)
    with pytest.raises(ValueError, match="iterations must be a positive integer"):
        rbd.ContactSweeps(iterations=1.5)
    with pytest.raises(ValueError, match="dense_rows must be a positive integer"):
        rbd.ContactSweeps(dense_rows=0)


@pytest.mark.slow
def test_dense_fallback_takes_problems_up_to_its_size_and_reports_the_rest_unsolved():
    """A 50 kg ball on a 2.5 g ball on the ground (mass ratio 2e4): the sweeps stall on it.

    The step problem has 3 contacts of 10 rows. With `dense_rows=30` the dense
    fallback solves every step; with 29 it is never assembled, and the steps the
    sweeps leave unsolved are reported so (`converged` False, the residual above
    the tolerance), with finite states.
    """
    b = rbd.SceneBuilder(dim=3, mu=0.5)
    b.add_static("ground", rbd.Plane())
    b.add_body("light", rbd.Sphere(0.1), mass=2.5e-3, position=(0.0, 0.0, 0.1))
    b.add_body("heavy", rbd.Sphere(0.1), mass=50.0, position=(0.01, 0.0, 0.3))
    scene = b.build()
    run = lambda rows: rbd.simulate(
        *scene, dt=0.01, steps=3, step_solver=rbd.ContactSweeps(max_sweeps=100, dense_rows=rows)
    )
    solved, capped = run(30), run(29)
    assert bool(jnp.all(solved.stats.converged)) and float(solved.stats.residual.max()) <= TOL
    converged, residual = np.asarray(capped.stats.converged), np.asarray(capped.stats.residual)
    assert not converged.all() and np.all(np.isfinite(residual))
    assert np.all(residual[~converged] > TOL)
    assert bool(jnp.all(jnp.isfinite(capped.q))) and bool(jnp.all(jnp.isfinite(capped.v)))
