"""Reference scenes (BENCHMARKS.md). Every physical parameter is an argument and may be traced.

Each builder returns a `Scene`, which unpacks to `(system, state)`:

    system, state = rbd.scenes.falling_rod(mu=0.6)
    traj = rbd.simulate(system, state, dt=0.0025, steps=400)
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .model import State, System, check_system

GRAVITY = 9.81


class Scene(eqx.Module):
    """A system and its initial state; unpacks to `(system, state)`."""

    system: System
    state: State

    def __check_init__(self):
        check_system(self.system, self.state)

    def __iter__(self):
        return iter((self.system, self.state))


def _check(name, value, *, positive=False, nonnegative=False):
    """ValueError naming the argument when a concrete value is out of range (traced values pass)."""
    if isinstance(value, jax.core.Tracer):
        return
    x = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not np.all(x > 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if nonnegative and not np.all(x >= 0):
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def _float(x):
    return jnp.asarray(x, dtype=jnp.result_type(float))


# ---------------------------------------------------------------------------------------------
# The planar rod of 003 §4.1: q = [x, y, theta], two rounded ends.


def _rod_mass_matrix(q, p):
    return jnp.diag(jnp.stack([p["mass"], p["mass"], p["inertia"]]))


def _gravity_potential(q, p):
    """m g y for a planar body with q = [x, y, theta]."""
    return p["mass"] * p["gravity"] * q[1]


_ENDS = jnp.array([1.0, -1.0])  # the "+" end at angle theta, the "-" end opposite


def _rod_gaps(q, p):
    """f+- = y +- (l/2) sin(theta) - r (003 §4.1)."""
    return q[1] + _ENDS * 0.5 * p["length"] * jnp.sin(q[2]) - p["radius"]


def _rod_contact_x(q, p):
    return q[0] + _ENDS * 0.5 * p["length"] * jnp.cos(q[2])


def _rod_tangents(q, p):
    """The tangent row of each end: the gradient of its contact point's x coordinate, (2, 1, 3)."""
    return jax.jacfwd(_rod_contact_x)(q, p)[:, None, :]


def rod_system(*, mu, mass, inertia, length, radius, gravity=GRAVITY):
    """The planar rod of 003 §4.1 on the table y = 0, one contact per end."""
    for name, value in (("mass", mass), ("inertia", inertia), ("length", length), ("radius", radius)):
        _check(name, value, positive=True)
    _check("mu", mu, nonnegative=True)
    _check("gravity", gravity)
    params = {
        k: _float(v) for k, v in dict(mass=mass, inertia=inertia, length=length, radius=radius, gravity=gravity).items()
    }
    return System(
        params=params,
        mu=jnp.broadcast_to(_float(mu), (2,)),
        mass_matrix=_rod_mass_matrix,
        potential=_gravity_potential,
        gaps=_rod_gaps,
        tangents=_rod_tangents,
    )


def falling_rod_height(impact_time, *, theta0, omega0, length, radius, gravity=GRAVITY):
    """Release height y0 of the centre that brings the lower end to the table at `impact_time`.

    In free flight y = y0 - g t^2 / 2 and theta = theta0 + omega0 t; the lower end
    touches when y - (l/2)|sin theta| = r.
    """
    theta = theta0 + omega0 * impact_time
    return radius + 0.5 * length * jnp.abs(jnp.sin(theta)) + 0.5 * gravity * impact_time**2


def falling_rod(
    mu=0.6,
    *,
    mass=1.0,
    inertia=0.002,
    length=0.5,
    radius=0.05,
    theta0=math.radians(30.0),
    omega0=4.0,
    x0=0.0,
    y0=None,
    impact_time=0.383,
    gravity=GRAVITY,
):
    """BENCHMARKS.md P1 (003 §4.1): a spinning rod falls onto the table.

    The paper gives no release height; by default y0 puts the first impact of the
    free flight at `impact_time` (0.383 s: y0 = 0.9909 m). Pass y0 to override.
    """
    _check("impact_time", impact_time, positive=True)
    system = rod_system(mu=mu, mass=mass, inertia=inertia, length=length, radius=radius, gravity=gravity)
    if y0 is None:
        y0 = falling_rod_height(
            impact_time, theta0=theta0, omega0=omega0, length=length, radius=radius, gravity=gravity
        )
    q = jnp.stack([_float(x0), _float(y0), _float(theta0)])
    v = jnp.stack([_float(0.0), _float(0.0), _float(omega0)])
    return Scene(system, State(_float(0.0), q, v))


def painleve_rod(
    mu=1.0, *, mass=1.0, inertia=0.002, length=0.5, radius=0.05, theta0=math.pi / 3, speed=1.0, gravity=GRAVITY
):
    """BENCHMARKS.md P5 (004 §1.3): the rod leans at theta0 with its lower end on the table, sliding.

    The lower ("-") end slides in -x at `speed` with no rotation. With
    1/m + (l^2/4J) cos(theta) (cos(theta) - mu sin(theta)) < 0 (see `painleve_margin`)
    the force-acceleration problem has no solution: a tangential impulse is needed.
    """
    _check("speed", speed)
    system = rod_system(mu=mu, mass=mass, inertia=inertia, length=length, radius=radius, gravity=gravity)
    y0 = radius + 0.5 * length * jnp.sin(theta0)
    q = jnp.stack([_float(0.0), _float(y0), _float(theta0)])
    v = jnp.stack([-_float(speed), _float(0.0), _float(0.0)])
    return Scene(system, State(_float(0.0), q, v))


def painleve_margin(system, theta):
    """n^T M^{-1} (n - mu t) of the "-" end sliding in -x: negative means Painlevé's paradox.

    It is the normal acceleration per unit normal force when friction opposes the
    slip (004 §1.3); with free normal acceleration -g < 0 and a negative margin no
    normal force N >= 0 keeps the contact.
    """
    p, mu = system.params, system.mu[1]
    c, s = jnp.cos(theta), jnp.sin(theta)
    return 1.0 / p["mass"] + 0.25 * p["length"] ** 2 * c * (c - mu * s) / p["inertia"]


# ---------------------------------------------------------------------------------------------
# A planar block on an incline: q = [x, y, theta] of its centre, the two bottom corners in contact.


def _incline_frame(angle):
    t = jnp.stack([jnp.cos(angle), jnp.sin(angle)])
    n = jnp.stack([-jnp.sin(angle), jnp.cos(angle)])
    return t, n


def _block_corners(q, p):
    """World positions of the two bottom corners, (2, 2)."""
    c, s = jnp.cos(q[2]), jnp.sin(q[2])
    R = jnp.stack([jnp.stack([c, -s]), jnp.stack([s, c])])
    local = jnp.stack(
        [jnp.stack([p["half_width"], -p["half_height"]]), jnp.stack([-p["half_width"], -p["half_height"]])]
    )
    return q[:2] + local @ R.T


def _block_gaps(q, p):
    _, n = _incline_frame(p["angle"])
    return _block_corners(q, p) @ n


def _block_tangents(q, p):
    t, _ = _incline_frame(p["angle"])
    return jax.jacfwd(lambda q: _block_corners(q, p) @ t)(q)[:, None, :]


def _block_mass_matrix(q, p):
    inertia = p["mass"] * (p["half_width"] ** 2 + p["half_height"] ** 2) / 3.0
    return jnp.diag(jnp.stack([p["mass"], p["mass"], inertia]))


def block_on_incline(
    angle=math.radians(30.0),
    mu=0.3,
    *,
    mass=1.0,
    half_width=0.1,
    half_height=0.05,
    speed=0.0,
    distance=0.0,
    gravity=GRAVITY,
):
    """A planar box resting on an incline of `angle` through the origin, two corner contacts.

    Exact: with mu < tan(angle) it slides with acceleration g (sin(angle) - mu cos(angle));
    with mu >= tan(angle), started at rest, it never moves. `speed` is the initial
    velocity along the slope (positive uphill), `distance` the position of the
    centre along it.
    """
    _check("angle", angle)
    if not isinstance(angle, jax.core.Tracer) and not 0 <= float(angle) < math.pi / 2:
        raise ValueError(f"angle must be in [0, pi/2), got {angle!r}")
    for name, value in (("mass", mass), ("half_width", half_width), ("half_height", half_height)):
        _check(name, value, positive=True)
    _check("mu", mu, nonnegative=True)
    _check("speed", speed)
    _check("distance", distance)
    p = {
        k: _float(v)
        for k, v in dict(
            angle=angle, mass=mass, half_width=half_width, half_height=half_height, gravity=gravity
        ).items()
    }
    system = System(
        params=p,
        mu=jnp.broadcast_to(_float(mu), (2,)),
        mass_matrix=_block_mass_matrix,
        potential=_gravity_potential,
        gaps=_block_gaps,
        tangents=_block_tangents,
    )
    t, n = _incline_frame(p["angle"])
    centre = _float(distance) * t + p["half_height"] * n
    q = jnp.concatenate([centre, p["angle"][None]])
    v = jnp.concatenate([_float(speed) * t, jnp.zeros(1, q.dtype)])
    return Scene(system, State(_float(0.0), q, v))
