"""Random friction LCPs with fixed capacity, for tests, benchmarks and solver studies."""

import jax
import jax.numpy as jnp

from ._problems import FrictionLCP, friction_lcp


def random_friction_lcp(
    key,
    *,
    max_dofs: int = 30,
    max_contacts: int = 10,
    max_directions: int = 16,
    min_dofs: int = 3,
    min_contacts: int = 1,
    min_directions: int = 4,
    mu_range: tuple[float, float] = (0.05, 2.0),
    mass_condition: float = 1e3,
    dtype=None,
) -> FrictionLCP:
    """Draw one random friction LCP (004 §3.2) inside a fixed capacity.

    The number of degrees of freedom, of contacts and of directions per contact are
    drawn uniformly between their bounds; the unused capacity is masked out (see
    `friction_lcp(row_active=...)`), so problems of every size share one shape and
    one compilation. Each contact has a random 3 x nv velocity map whose rows give
    the normal and two tangents; its k directions are equally spaced in the tangent
    plane with a random phase. M is symmetric positive definite with eigenvalues
    log-uniform in [1, mass_condition]. The free velocity b is standard normal, so a
    contact is separating, sticking or sliding depending on the draw.

    Args:
        key: a JAX PRNG key.
        dtype: float dtype (default: JAX's default float).

    Returns:
        A `FrictionLCP` of size 2 max_contacts + max_contacts max_directions.
    """
    dtype = dtype or jnp.zeros(()).dtype
    nv_cap, nc_cap, k_cap = max_dofs, max_contacts, max_directions
    keys = jax.random.split(key, 10)
    nv = jax.random.randint(keys[0], (), min_dofs, max_dofs + 1)
    nc = jax.random.randint(keys[1], (), min_contacts, max_contacts + 1)
    k = jax.random.randint(keys[2], (nc_cap,), min_directions, max_directions + 1)

    dof_on = jnp.arange(nv_cap) < nv
    contact_on = jnp.arange(nc_cap) < nc
    dir_on = (jnp.arange(k_cap)[None, :] < k[:, None]) & contact_on[:, None]

    Q, _ = jnp.linalg.qr(jax.random.normal(keys[3], (nv_cap, nv_cap), dtype))
    eig = jnp.exp(jax.random.uniform(keys[4], (nv_cap,), dtype) * jnp.log(mass_condition))
    M = (Q * eig) @ Q.T
    on = dof_on.astype(dtype)
    M = M * on[:, None] * on[None, :] + jnp.diag(1.0 - on)
    M = 0.5 * (M + M.T)

    frame = jax.random.normal(keys[5], (nc_cap, 3, nv_cap), dtype) * on
    n, t, o = frame[:, 0], frame[:, 1], frame[:, 2]
    phase = jax.random.uniform(keys[6], (nc_cap, 1), dtype) * 2 * jnp.pi
    theta = phase + 2 * jnp.pi * jnp.arange(k_cap)[None, :] / k[:, None]
    d = jnp.cos(theta)[..., None] * t[:, None, :] + jnp.sin(theta)[..., None] * o[:, None, :]
    d = d * dir_on[..., None]

    N = (n * contact_on[:, None]).T
    D = d.reshape(nc_cap * k_cap, nv_cap).T
    lo, hi = mu_range
    mu = lo + (hi - lo) * jax.random.uniform(keys[7], (nc_cap,), dtype)
    b = jax.random.normal(keys[8], (nv_cap,), dtype) * on
    row_active = jnp.concatenate([contact_on, dir_on.reshape(-1), contact_on])
    return friction_lcp(M, N, D, mu, (k_cap,) * nc_cap, b, row_active=row_active)
