"""One impulse where many solve: a flat rest carries the same load at every corner, whatever the warm start.

A cube on a face has four corner contacts on three normal directions, so the step's LCP has a whole set of
solutions; with `least_norm=True` the solver returns the least-norm one (`jaxrbd.complementarity._select`), in which
a symmetric rest loads its corners equally. Coincident contacts (a manifold's repeated slots, the corners of equal boxes stacked face to
face) count as one point: their loads are summed.
"""

import functools
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrbd as rbd

H = 0.01
EQUAL = 1e-8  # relative
SOLVER = rbd.SemismoothNewton(least_norm=True)
# The contacts of one state (of a batch of states) as one compiled program, not operation by operation.
_contacts = eqx.filter_jit(lambda system, q: system.contacts(q))
_batch_contacts = eqx.filter_jit(lambda system, q: jax.vmap(system.contacts)(q))


def _flat_cube_on_plane():
    return rbd.scenes.block_on_incline(angle=0.0)


def _flat_cube_on_table():
    return rbd.scenes.cube_toss(v0=(0.0, 0.0, 0.0), w0=(0.0, 0.0, 0.0), height=0.05, orientation=(1.0, 0.0, 0.0, 0.0))


SCENES = {"cube on a plane": _flat_cube_on_plane, "cube on a table": _flat_cube_on_table, "box_stack(3)": None}


@functools.cache
def _scene(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SCENES[name]() if SCENES[name] is not None else rbd.scenes.box_stack(3)


def _point_loads(contacts, normal):
    """{(body a, body b): the normal impulse at each distinct contact point}, coincident contacts summed."""
    points = np.round(np.asarray(contacts.point), 9)
    a, b, cn = np.asarray(contacts.body_a), np.asarray(contacts.body_b), np.asarray(normal)
    loads = {}
    for i in range(len(cn)):
        at = loads.setdefault((int(a[i]), int(b[i])), {})
        at[tuple(points[i])] = at.get(tuple(points[i]), 0.0) + cn[i]
    return {pair: np.array(list(at.values())) for pair, at in loads.items()}


def _spread(loads):
    """The largest relative difference between the point loads of one body pair."""
    return max(float((x.max() - x.min()) / x.mean()) for x in loads.values())


@pytest.mark.parametrize(  # the cube on a table in the default set, the plane and the stack in the slow set
    "name", [pytest.param(name, marks=[pytest.mark.slow] if name != "cube on a table" else []) for name in SCENES]
)
def test_a_flat_rest_loads_its_corners_equally_from_any_warm_start(name):
    scene = _scene(name)
    system, state = scene
    cone = rbd.stepping.default_cone(system, jax.eval_shape(system.contacts, state.q))
    problem, _ = rbd.stepping.step_problem_at(system, state, H, scheme=rbd.StewartTrinkle(), cone=cone)
    lcp = problem.problem
    contacts = _contacts(system, state.q)
    ng, nc = lcp.n_free, len(lcp.counts)
    cold = rbd.complementarity.solve(lcp, solver=SOLVER)
    rng = np.random.default_rng(0)
    starts = {
        "zero": None,
        "the previous step": cold.z,
        "random": jnp.asarray(rng.uniform(0.0, 2.0 * float(jnp.max(cold.z)), cold.z.shape)),
    }
    for start, z0 in starts.items():
        sol = rbd.complementarity.solve(lcp, solver=SOLVER, z0=z0)
        assert bool(sol.converged), (name, start, float(sol.residual))
        loads = _point_loads(contacts, sol.z[ng : ng + nc])
        assert all(len(x) == 4 for x in loads.values()), (name, start, loads)
        assert _spread(loads) <= EQUAL, (name, start, loads)
        assert float(jnp.max(jnp.abs(sol.z - cold.z))) <= EQUAL * float(jnp.max(jnp.abs(cold.z))), (name, start)


def test_a_rest_held_by_friction_along_no_cone_direction_has_one_impulse():
    """A 10 cm cube resting on a plane under gravity (1, 2, -9.81): its friction holds a load 18 degrees from the
    nearest of the cone's 8 directions. The least-norm impulses among the non-negative ones (the projection alone
    split the friction over opposite directions, one negative, and was refused) are the same from a zero, the
    previous and a random warm start, and the corner loads vary linearly across the face (no twist component,
    which is what the least norm removes from a square's four corners)."""
    b = rbd.SceneBuilder(gravity=(1.0, 2.0, -9.81), mu=0.8)
    b.add_static("floor", rbd.Plane())
    b.add_body("cube", rbd.Box((0.05, 0.05, 0.05)), mass=1.0, position=(0.0, 0.0, 0.05))
    system, state = b.build()
    cone = rbd.stepping.default_cone(system, jax.eval_shape(system.contacts, state.q))
    problem, _ = rbd.stepping.step_problem_at(system, state, H, scheme=rbd.StewartTrinkle(), cone=cone)
    lcp, contacts = problem.problem, _contacts(system, state.q)
    ng, nc = lcp.n_free, len(lcp.counts)
    cold = rbd.complementarity.solve(lcp, solver=SOLVER)
    rng = np.random.default_rng(0)
    for z0 in (None, cold.z, jnp.asarray(rng.uniform(0.0, 2.0 * float(jnp.max(cold.z)), cold.z.shape))):
        sol = rbd.complementarity.solve(lcp, solver=SOLVER, z0=z0)
        assert bool(sol.converged) and float(jnp.min(sol.z[ng:-nc])) >= 0.0  # c_n and beta
        assert float(jnp.max(jnp.abs(sol.z - cold.z))) <= EQUAL * float(jnp.max(jnp.abs(cold.z)))
    xy = np.asarray(contacts.point)[:, :2]
    loads = np.asarray(cold.z[ng : ng + nc])
    assert len(np.unique(np.round(xy, 9), axis=0)) == 4 and loads.min() > 0.0
    plane = np.linalg.lstsq(np.c_[np.ones(4), xy], loads, rcond=None)[0]
    np.testing.assert_allclose(np.c_[np.ones(4), xy] @ plane, loads, rtol=EQUAL)


def test_least_norm_is_a_checked_switch():
    with pytest.raises(TypeError, match="least_norm must be True or False"):
        rbd.SemismoothNewton(least_norm=1)
    with pytest.raises(TypeError, match="least_norm must be True or False"):
        rbd.Lemke(least_norm="yes")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCENES))
def test_a_flat_rest_loads_its_corners_equally_at_every_step_of_a_second(name):
    system, state = _scene(name)
    traj = jax.jit(lambda s: rbd.simulate(system, s, dt=H, steps=100, solver=SOLVER))(state)
    assert bool(traj.stats.converged.all())
    assert float(jnp.max(jnp.abs(traj.q - traj.q[0]))) <= 1e-12  # it stays at rest
    points = _batch_contacts(system, traj.q[:-1])
    for k in range(100):
        loads = _point_loads(jax.tree.map(lambda x: x[k], points), traj.impulses.normal[k])
        assert _spread(loads) <= EQUAL, (name, k, loads)


COMPLIANT = rbd.StewartTrinkle(compliance=1e-4)


@pytest.mark.slow  # the compliant split of a sliding, spinning cube stays in the default set
def test_a_compliant_split_loads_a_flat_rest_equally_at_every_step_of_a_second():
    """With `compliance` every contact point is a spring of one small compliance, and the split is that of equal
    springs: a cube resting on a box table (a box-box manifold that repeats one corner in its spare slots) carries
    a quarter of its weight at each corner, at every step of 1 s, with the default solver. It rests at a depth of
    h kappa c_n (a tenth of a micrometre here). The rigid rows load two of its corners 1.67 times as much as the
    other two."""
    system, state = _scene("cube on a table")
    traj = jax.jit(lambda s: rbd.simulate(system, s, dt=H, steps=100, scheme=COMPLIANT))(state)
    assert bool(traj.stats.converged.all())
    points = _batch_contacts(system, traj.q[:-1])
    for k in range(100):
        loads = _point_loads(jax.tree.map(lambda x: x[k], points), traj.impulses.normal[k])
        assert all(len(x) == 4 for x in loads.values()) and _spread(loads) <= EQUAL, (k, loads)
    assert 0.0 < -float(jnp.min(traj.q[:, 2] - state.q[2])) <= 1e-6
    rigid = rbd.simulate(system, state, dt=H, steps=1)
    assert _spread(_point_loads(_contacts(system, state.q), rigid.impulses.normal[0])) > 0.4


def _spinning_toss(mu, throw):
    """50 steps of a cube thrown sliding and spinning from 1 cm above the table, with the compliant split."""
    v0, w0 = throw
    scene = rbd.scenes.cube_toss(v0=v0, w0=w0, mu=mu, height=0.06, orientation=(1.0, 0.0, 0.0, 0.0))
    return rbd.simulate(*scene, dt=H, steps=50, scheme=COMPLIANT)


def test_a_compliant_split_gives_a_sliding_spinning_cube_one_velocity():
    """A cube sliding and spinning on a face: its corners slide in different directions, and the rigid step's LCP
    has a family of solutions whose friction torques, and so velocities, differ with the load split (at this state
    the rigid rows' velocities from the cold and the random warm start below differ by 2e-4). The compliant problem
    has one: the same new velocity from a zero, the cold solution's and a random warm start."""
    system, state = rbd.scenes.cube_toss(
        v0=(1.46, -0.23, 0.0), w0=(0.0, 0.0, -9.18), mu=0.5, height=0.05, orientation=(1.0, 0.0, 0.0, 0.0)
    )  # on its face on the table
    cone = rbd.stepping.default_cone(system, jax.eval_shape(system.contacts, state.q))
    problem, _ = rbd.stepping.step_problem_at(system, state, H, scheme=COMPLIANT, cone=cone)
    cold = rbd.complementarity.solve(problem.problem)
    rng = np.random.default_rng(0)
    speed = float(jnp.max(jnp.abs(problem.velocity(cold.z))))
    for z0 in (cold.z, jnp.asarray(rng.uniform(0.0, 2.0 * float(jnp.max(cold.z)), cold.z.shape))):
        sol = rbd.complementarity.solve(problem.problem, z0=z0)
        assert bool(sol.converged)
        assert float(jnp.max(jnp.abs(problem.velocity(sol.z) - problem.velocity(cold.z)))) <= 1e-8 * speed


@pytest.mark.parametrize(
    "throw",
    [
        pytest.param(((1.46, -0.23, 0.0), (0.0, 0.0, -9.18)), marks=pytest.mark.slow),
        pytest.param(((0.52, 0.31, 0.0), (0.0, 0.0, 8.26)), marks=pytest.mark.long),
    ],
)
def test_the_gradient_of_a_spinning_toss_with_a_compliant_split_matches_central_differences(throw):
    """d(final pose)/d(mu) of a cube thrown sliding and spinning onto a table (50 steps) equals central differences
    to 1e-6 under the compliant split (`benchmarks/toss_gradients.py`, throws 0 and 1). With the rigid rows the
    derivative follows a load split that the solver's path chose, and differs by 1e-3 on these throws."""
    pose = jax.jit(lambda mu: _spinning_toss(mu, throw).q[-1])
    ad = np.asarray(jax.jacrev(pose)(0.5))
    step = 1e-5
    fd = (np.asarray(pose(0.5 + step)) - np.asarray(pose(0.5 - step))) / (2 * step)
    assert np.max(np.abs(ad - fd)) <= 1e-6 * np.max(np.abs(fd)), (ad, fd)


def test_compliance_is_checked_where_the_scheme_and_the_step_are_built():
    with pytest.raises(ValueError, match=r"compliance must be a number in \[0, 0.01\]"):
        rbd.StewartTrinkle(compliance=-1e-4)
    with pytest.raises(ValueError, match=r"compliance must be a number in \[0, 0.01\]"):
        rbd.AnitescuPotra(compliance=0.5)
    system, state = _scene("cube on a plane")
    with pytest.raises(ValueError, match="needs a polyhedral or planar cone"):
        rbd.simulate(system, state, dt=H, steps=1, scheme=COMPLIANT, cone=rbd.EllipticCone())
    with pytest.raises(ValueError, match="rigid normal rows"):
        rbd.simulate(system, state, dt=H, steps=1, scheme=COMPLIANT, step_solver=rbd.ContactSweeps())
