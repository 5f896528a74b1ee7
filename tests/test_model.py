"""The derived terms of a System in generalized coordinates, against textbook mechanics."""

import jax.numpy as jnp
import numpy as np

import jaxrbd as rbd


def _free_system(mass_matrix, nv, kinematics=None):
    return rbd.System(
        params={},
        mu=jnp.zeros(0),
        mass_matrix=mass_matrix,
        potential=lambda q, p: 0.0,
        gaps=lambda q, p: jnp.zeros(0),
        tangents=lambda q, p: jnp.zeros((0, 2, nv)),
        kinematics=kinematics,
    )


def test_coriolis_polar_coordinates():
    """G = I, M = diag(m, m r^2): k = (m r thetadot^2, -2 m r rdot thetadot) (000 eq. (2))."""
    m = 2.0
    system = _free_system(lambda q, p: jnp.diag(jnp.stack([m, m * q[0] ** 2])), 2)
    q, v = jnp.array([1.5, 0.3]), jnp.array([0.4, 0.8])
    np.testing.assert_allclose(system.coriolis(q, v), [m * 1.5 * 0.8**2, -2 * m * 1.5 * 0.4 * 0.8], rtol=1e-14)


def test_coriolis_quaternion_gives_euler_equations():
    """q a unit quaternion, v the body angular velocity, dq/dt = q ⊗ (0, w) / 2 (000 §5): k = (I w) x w."""
    inertia = jnp.array([1.0, 2.0, 3.0])

    def G(q, p):
        w, x, y, z = q
        return 0.5 * jnp.array([[-x, -y, -z], [w, -z, y], [z, w, -x], [-y, x, w]])

    system = _free_system(lambda q, p: jnp.diag(inertia), 3, kinematics=G)
    q = jnp.array([0.9, 0.1, -0.3, 0.2])
    q = q / jnp.linalg.norm(q)
    w = jnp.array([0.3, -1.2, 0.7])
    np.testing.assert_allclose(system.coriolis(q, w), jnp.cross(inertia * w, w), rtol=1e-12, atol=1e-15)


def test_rod_normals_and_friction_directions():
    """003 §4.1: n+- = (0, 1, +-(l/2) cos theta); d = +-grad of the contact point's x."""
    system, state = rbd.scenes.falling_rod()
    q = state.q
    half, c, s = 0.25, jnp.cos(q[2]), jnp.sin(q[2])
    np.testing.assert_allclose(system.normals(q), jnp.array([[0, 0], [1, 1], [half * c, -half * c]]), atol=1e-15)
    prob = rbd.cones.PlanarCone().build(system.M(q), system.normals(q), system.contact_rows(q, 1), system.mu, q)
    D = prob.friction_lcp.D
    t_plus, t_minus = jnp.array([1, 0, -half * s]), jnp.array([1, 0, half * s])
    np.testing.assert_allclose(D, jnp.stack([t_plus, -t_plus, t_minus, -t_minus], axis=1), atol=1e-15)
