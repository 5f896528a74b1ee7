"""Reference scenes (docs/reference-problems.md). Every physical parameter is an argument and may be traced.

Each builder returns a `Scene`, which unpacks to `(system, state)`:

    system, state = rbd.scenes.falling_rod(mu=0.6)
    traj = rbd.simulate(system, state, dt=0.0025, steps=400)
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from . import _rotation as rot
from ._validate import as_float as _float
from ._validate import check_value as _check
from ._validate import host_float, host_numpy, renamed
from .bodies import SceneBuilder
from .cones import EllipticCone, SoftFingerCone, is_cone, soft_finger_directions
from .geometry import Box, Capsule, Plane, Sphere
from .model import Scene, State, System

GRAVITY = 9.81


# ---------------------------------------------------------------------------------------------
# The planar rod of 003 §4.1: q = [x, y, theta], two rounded ends.


def _vector(*xs):
    """The numbers xs as a float vector, on the host with numpy where none is traced: building compiles nothing."""
    return host_numpy(*xs).stack([host_float(x) for x in xs])


def _broadcast(x, shape):
    """x as floats broadcast to `shape`, on the host with numpy where it is not traced."""
    return host_numpy(x).broadcast_to(host_float(x), shape)


def _rod_mass_matrix(q, p):
    return jnp.diag(jnp.stack([p["mass"], p["mass"], p["inertia"]]))


def _gravity_potential(q, p):
    """m g y for a planar body with q = [x, y, theta]."""
    return p["mass"] * p["gravity"] * q[1]


def _ends(x, half):
    """(x + half, x - half): the "+" end at angle theta, the "-" end opposite (no array built at import)."""
    return jnp.stack([x + half, x - half])


def _rod_gaps(q, p):
    """f+- = y +- (l/2) sin(theta) - r (003 §4.1)."""
    return _ends(q[1], 0.5 * p["length"] * jnp.sin(q[2])) - p["radius"]


def _rod_contact_x(q, p):
    return _ends(q[0], 0.5 * p["length"] * jnp.cos(q[2]))


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
        mu=_float(_broadcast(mu, (2,))),
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
    xp = host_numpy(theta)
    return radius + 0.5 * length * xp.abs(xp.sin(theta)) + 0.5 * gravity * impact_time**2


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
    """Reference problem P1 (003 §4.1): a spinning rod falls onto the table.

    The paper gives no release height; by default y0 puts the first impact of the
    free flight at `impact_time` (0.383 s: y0 = 0.9909 m). Pass y0 to override.
    """
    _check("impact_time", impact_time, positive=True)
    system = rod_system(mu=mu, mass=mass, inertia=inertia, length=length, radius=radius, gravity=gravity)
    if y0 is None:
        y0 = falling_rod_height(
            impact_time, theta0=theta0, omega0=omega0, length=length, radius=radius, gravity=gravity
        )
    q, v = _vector(x0, y0, theta0), _vector(0.0, 0.0, omega0)
    return Scene(system, State(_float(0.0), _float(q), _float(v)))


def painleve_rod(
    mu=1.0, *, mass=1.0, inertia=0.002, length=0.5, radius=0.05, theta0=math.pi / 3, speed=1.0, gravity=GRAVITY
):
    """Reference problem P5 (004 §1.3): the rod leans at theta0 with its lower end on the table, sliding.

    The lower ("-") end slides in -x at `speed` with no rotation. With
    1/m + (l^2/4J) cos(theta) (cos(theta) - mu sin(theta)) < 0 (see `painleve_margin`)
    the force-acceleration problem has no solution: a tangential impulse is needed.
    """
    _check("speed", speed)
    system = rod_system(mu=mu, mass=mass, inertia=inertia, length=length, radius=radius, gravity=gravity)
    y0 = radius + 0.5 * length * host_numpy(theta0).sin(theta0)
    q, v = _vector(0.0, y0, theta0), _vector(-host_float(speed), 0.0, 0.0)
    return Scene(system, State(_float(0.0), _float(q), _float(v)))


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
# Scenes of rigid bodies, declared with the SceneBuilder.

P2_POSITIONS = ((0.0, 0.0, 1.0), (1.0, 0.0, 0.1), (1.2 + 1e-5, 0.0, 0.1), (1.4 + 2e-5, 0.0, 0.1))


def four_balls(
    mu=0.4,
    *,
    mass=1.0,
    radius=0.1,
    inertia=None,
    velocity=(1.5, 0.1, 0.0),
    positions=P2_POSITIONS,
    directions=8,
    cone=None,
    restitution=0.0,
    gravity=GRAVITY,
    friction=None,
):
    """Reference problem P2 (003 §4.2): a ball thrown at a line of three balls on a table.

    Seven contacts as in the paper: each ball with the table, and each ball with
    its neighbour in the line (thrown-first, first-second, second-third).
    `mass` and `radius` are scalars or (4,); `inertia` defaults to the solid
    ball's (2/5) m r^2; `velocity` is the thrown ball's initial velocity.
    """
    cone = renamed("scenes.four_balls", "friction", friction, "cone", cone)
    b = SceneBuilder(
        dim=3,
        mu=mu,
        restitution=restitution,
        directions=directions,
        cone=cone,
        gravity=(0.0, 0.0, -gravity),
        collide_bodies=False,
    )
    b.add_static("table", Plane())
    mass, radius = _broadcast(mass, (4,)), _broadcast(radius, (4,))
    names = [f"ball{i}" for i in range(4)]
    for i, name in enumerate(names):
        b.add_body(
            name,
            Sphere(radius[i]),
            mass=mass[i],
            inertia=None if inertia is None else _broadcast(inertia, (4,))[i],
            position=positions[i],
            velocity=velocity if i == 0 else None,
        )
    for first, second in zip(names, names[1:]):
        b.include(first, second)
    return b.build()


def _incline(angle, heading):
    """Unit normal of the plane through the origin sloping up along (cos heading, sin heading) at `angle`."""
    _check("angle", angle)
    if not isinstance(angle, jax.core.Tracer) and not 0 <= float(angle) < math.pi / 2:
        raise ValueError(f"angle must be in [0, pi/2), got {angle!r}")
    a, phi = host_float(angle), host_float(heading)
    xp = host_numpy(a, phi)
    uphill = xp.stack([xp.cos(a) * xp.cos(phi), xp.cos(a) * xp.sin(phi), xp.sin(a)])
    n = xp.stack([-xp.sin(a) * xp.cos(phi), -xp.sin(a) * xp.sin(phi), xp.cos(a)])
    return uphill, n


def block_on_incline(
    angle=math.radians(30.0),
    mu=0.3,
    *,
    dim=3,
    mass=1.0,
    half_extents=0.05,
    heading=0.0,
    speed=0.0,
    distance=0.0,
    directions=8,
    cone=None,
    gravity=GRAVITY,
    friction=None,
):
    """A cube (dim=3: four corner contacts) or a planar box (dim=2: two) resting on an incline.

    Exact: with mu < tan(angle) it slides with acceleration g (sin(angle) - mu cos(angle));
    with mu >= tan(angle), started at rest, it never moves.

    Args:
        angle: slope in [0, pi/2).
        mu: friction coefficient, >= 0.
        dim: 3 for the cube on a tilted plane, 2 for the planar box on a line.
        half_extents: scalar or (3,) half sizes of the box (its z axis along the
            normal; in 2D its y axis is).
        heading: 3D only, the horizontal direction of the slope. The first
            friction direction of each contact lies at the angle `heading` from
            the slope line (0: aligned), which shows the bias of the polyhedral cone.
        speed: initial velocity along the slope (positive uphill).
        distance: initial position of the centre along the slope.
        directions: friction directions per contact (3D).
        cone: the friction cone (3D; default `PolyhedralCone(directions)`).
    """
    cone = renamed("scenes.block_on_incline", "friction", friction, "cone", cone)
    _check("heading", heading)
    _check("speed", speed)
    _check("distance", distance)
    h = _broadcast(half_extents, (3,))
    if dim == 2:
        uphill, n = _incline(angle, 0.0)
        uphill, n = uphill[np.array([0, 2, 1])], n[np.array([0, 2, 1])]  # the x-z slope drawn in x-y
        b = SceneBuilder(dim=2, mu=mu, gravity=(0.0, -gravity, 0.0))
        b.add_static("incline", Plane(n))
        centre = host_float(distance) * uphill + h[1] * n
        b.add_body(
            "block",
            Box(h),
            mass=mass,
            position=centre[:2],
            angle=angle,
            velocity=(host_float(speed) * uphill)[:2],
        )
        return b.build()
    uphill, n = _incline(angle, heading)
    b = SceneBuilder(dim=3, mu=mu, directions=directions, cone=cone, gravity=(0.0, 0.0, -gravity))
    b.add_static("incline", Plane(n))
    # The box frame: z along n, x along the slope line.
    tilt = rot.from_axis_angle(np.array([0.0, 1.0, 0.0]), -host_float(angle))
    turn = rot.from_axis_angle(np.array([0.0, 0.0, 1.0]), host_float(heading))
    b.add_body(
        "block",
        Box(h),
        mass=mass,
        position=host_float(distance) * uphill + h[2] * n,
        orientation=rot.multiply(turn, tilt),
        velocity=host_float(speed) * uphill,
    )
    return b.build()


def rolling_ball(v0=1.0, mu=0.3, *, mass=1.0, radius=0.1, directions=8, cone=None, gravity=GRAVITY, friction=None):
    """A ball launched sliding along +x at speed v0 without spin, on the table z = 0.

    Exact: it slides for 2 v0 / (7 mu g), then rolls at (5/7) v0 (the reference problems).
    """
    cone = renamed("scenes.rolling_ball", "friction", friction, "cone", cone)
    _check("v0", v0)
    b = SceneBuilder(dim=3, mu=mu, directions=directions, cone=cone, gravity=(0.0, 0.0, -gravity))
    b.add_static("table", Plane())
    b.add_body(
        "ball",
        Sphere(radius),
        mass=mass,
        position=_vector(0.0, 0.0, radius),
        velocity=_vector(v0, 0.0, 0.0),
    )
    return b.build()


def sphere_grid(n=64, *, mu=0.5, mass=1.0, radius=0.1, spacing=0.3, height=0.5, directions=8, gravity=GRAVITY):
    """n balls on a square grid at `height` above the table, falling onto it (a benchmark scene).

    The grid spacing exceeds the diameter and the balls fall straight down, so they
    never touch each other: only the n ball-table contacts are built (pass through
    `SceneBuilder` for all pairs).
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    _check("spacing", spacing, positive=True)
    if not isinstance(spacing, jax.core.Tracer) and not float(spacing) > 2 * float(np.max(radius)):
        raise ValueError(f"spacing must exceed the diameter 2 radius = {2 * float(np.max(radius))}, got {spacing!r}")
    b = SceneBuilder(dim=3, mu=mu, directions=directions, gravity=(0.0, 0.0, -gravity), collide_bodies=False)
    b.add_static("table", Plane())
    side = math.ceil(math.sqrt(n))
    for i in range(n):
        row, col = divmod(i, side)
        b.add_body(
            f"ball{i}",
            Sphere(radius),
            mass=mass,
            position=_vector(col * spacing, row * spacing, height),
        )
    return b.build()


def bouncing_ball(
    e=0.8,
    *,
    height=1.0,
    mass=1.0,
    radius=0.1,
    mu=0.0,
    velocity=(0.0, 0.0, 0.0),
    angular_velocity=(0.0, 0.0, 0.0),
    directions=8,
    gravity=GRAVITY,
):
    """A ball dropped onto the table z = 0 with restitution e; simulate it with `impact=jaxrbd.NewtonRestitution()`.

    `height` is the drop height of the centre above its resting height (the
    radius). Exact, with Newton's law: each apex is e^2 times the previous one
    (the reference problems); the first rebound apex is e^2 height.
    """
    _check("e", e, unit_interval=True)
    _check("height", height, nonnegative=True)
    b = SceneBuilder(dim=3, mu=mu, restitution=e, directions=directions, gravity=(0.0, 0.0, -gravity))
    b.add_static("table", Plane())
    b.add_body(
        "ball",
        Sphere(radius),
        mass=mass,
        position=_vector(0.0, 0.0, host_float(radius) + host_float(height)),
        velocity=velocity,
        angular_velocity=angular_velocity,
    )
    return b.build()


def pendulum(
    length=1.0,
    *,
    mass=1.0,
    radius=0.05,
    inertia=None,
    theta0=0.2,
    omega0=0.0,
    wall=False,
    restitution=0.0,
    wall_mu=0.0,
    joint="revolute",
    gravity=GRAVITY,
):
    """A ball of radius `radius` hanging from a hinge at distance `length` above its centre (3D).

    The hinge is at (0, 0, length + 1), its axis y; the pendulum swings in the x-z
    plane, theta0 is the initial angle from the downward vertical (towards +x) and
    omega0 = d theta / dt. The body is a solid ball (or has the given `inertia`
    about its centre, J), so the small-angle period is
    2 pi sqrt((m length^2 + J) / (m g length)), J = (2/5) m radius^2. A floor at z = 0 is never
    reached. With `wall=True` a wall x <= -radius (friction `wall_mu`, restitution
    `restitution`) is touched by the ball when the pendulum hangs vertically: it
    strikes the wall at the bottom of its swing. `joint` is "revolute" (5 rows) or
    "ball" (3 rows).
    """
    _check("length", length, positive=True)
    _check("radius", radius, positive=True)
    b = SceneBuilder(dim=3, mu=wall_mu, restitution=restitution, gravity=(0.0, 0.0, -gravity))
    b.add_static("floor", Plane())
    if wall:
        b.add_static("wall", Plane(normal=(1.0, 0.0, 0.0), offset=-_float(radius)))
    length, theta0 = _float(length), _float(theta0)
    pivot = jnp.stack([0.0, 0.0, length + 1.0])
    b.add_body(
        "bob",
        Sphere(radius),
        mass=mass,
        inertia=inertia,
        position=pivot + length * jnp.stack([jnp.sin(theta0), 0.0, -jnp.cos(theta0)]),
        orientation=rot.from_axis_angle(jnp.array([0.0, 1.0, 0.0]), -theta0),
        velocity=length * _float(omega0) * jnp.stack([jnp.cos(theta0), 0.0, jnp.sin(theta0)]),
        angular_velocity=jnp.stack([0.0, -_float(omega0), 0.0]),
    )
    b.add_joint("hinge", joint, "bob", anchor=pivot, axis=(0.0, 1.0, 0.0) if joint == "revolute" else None)
    return b.build()


def chain(links=5, *, link_length=0.2, radius=0.02, mass=0.1, mu=0.5, height=0.0, directions=8, gravity=GRAVITY):
    """A chain of capsule links joined end to end by ball joints, lying along x on the table z = 0.

    Each link is a capsule (axis along x) whose end centres are the joints with
    its neighbours; `height` lifts the chain above the table (0: resting on it).
    Joined links do not collide with each other; non-neighbours are not paired.
    """
    if not isinstance(links, int) or links < 2:
        raise ValueError(f"links must be an integer >= 2, got {links!r}")
    _check("link_length", link_length, positive=True)
    b = SceneBuilder(dim=3, mu=mu, directions=directions, gravity=(0.0, 0.0, -gravity), collide_bodies=False)
    b.add_static("table", Plane())
    half = 0.5 * _float(link_length)
    along_x = rot.from_axis_angle(jnp.array([0.0, 1.0, 0.0]), jnp.pi / 2)
    names = [f"link{i}" for i in range(links)]
    for i, name in enumerate(names):
        b.add_body(
            name,
            Capsule(radius, half),
            mass=mass,
            position=jnp.stack([(2 * i + 1) * half, 0.0, _float(radius) + _float(height)]),
            orientation=along_x,
        )
    for i, (a, c) in enumerate(zip(names, names[1:])):
        b.add_joint(
            f"joint{i}", "ball", a, c, anchor_a=jnp.stack([0.0, 0.0, half]), anchor_b=jnp.stack([0.0, 0.0, -half])
        )
    return b.build()


# ---------------------------------------------------------------------------------------------
# Soft-finger and anisotropic friction (002 §4).


def _soft_finger(cone, e_r):
    """The cone of the 002 problems: "exact" (default), "eq5", "eq6" or a cone object."""
    if cone is None or cone == "exact":
        return SoftFingerCone(1.0, 1.0, e_r)
    if isinstance(cone, str):
        return SoftFingerCone(1.0, 1.0, e_r, directions=soft_finger_directions(cone))
    if not is_cone(cone):
        raise TypeError(f"cone must be 'exact', 'eq5', 'eq6' or a jaxrbd.cones cone, got {cone!r}")
    return cone


def spinning_sphere(mu=0.2, e_r=0.4, *, omega=1.962, mass=1.0, radius=1.0, cone=None, gravity=GRAVITY, friction=None):
    """Reference problem P3 (002 §4.1-4.2): a solid sphere spinning about the vertical on the plane z = 0.

    Exact with the soft-finger cone (e_t = e_o = 1): the normal impulse per step
    is m g h, the frictional moment e_r mu m g, so omega_z falls linearly with
    slope -5 g e_r mu / (2 r^2) (-1.962 for the paper's data, stopping at
    t = 1.0) and every other velocity component stays 0.

    Args:
        mu: friction coefficient; e_r: the soft-finger torsion scale (a length).
        omega: initial spin about z.
        cone: "exact" (default: `SoftFingerCone(1, 1, e_r)`), "eq5" or "eq6"
            (the polyhedral direction sets of 002 eq. (5) and (6)), or any cone.
    """
    cone = renamed("scenes.spinning_sphere", "friction", friction, "cone", cone)
    _check("e_r", e_r, positive=True)
    _check("omega", omega)
    b = SceneBuilder(dim=3, mu=mu, cone=_soft_finger(cone, e_r), gravity=(0.0, 0.0, -gravity))
    b.add_static("table", Plane())
    b.add_body(
        "ball",
        Sphere(radius),
        mass=mass,
        position=_vector(0.0, 0.0, radius),
        angular_velocity=_vector(0.0, 0.0, omega),
    )
    return b.build()


SEAM_POSITION = (0.0, 6.62105263157895, 8.78417110772903)
SEAM_FORCE = (1.0, 2.6, -9.81)


def sphere_in_seam(mu=0.2, e_r=0.3, *, cone=None, position=SEAM_POSITION, force=SEAM_FORCE, friction=None):
    """Reference problem P4 (002 §4.3): a unit sphere driven along the seam between two fixed spheres.

    The fixed spheres have radius 10 (centre at the origin) and 9 (centre at
    (0, 11.4, 0)); the moving sphere (radius 1, mass 1, uniform) starts at rest
    touching both, and the constant force `force` (no gravity) drives it rolling
    and sliding along the seam until it leaves it (about t = 3.6 s in the paper).
    Two contacts. `cone` as for `spinning_sphere` (default: the exact
    soft-finger cone with e_t = e_o = 1 and e_r).
    """
    cone = renamed("scenes.sphere_in_seam", "friction", friction, "cone", cone)
    _check("e_r", e_r, positive=True)
    b = SceneBuilder(dim=3, mu=mu, cone=_soft_finger(cone, e_r), gravity=(0.0, 0.0, 0.0))
    b.add_static("big", Sphere(10.0, position=(0.0, 0.0, 0.0)))
    b.add_static("small", Sphere(9.0, position=(0.0, 11.4, 0.0)))
    b.add_body("ball", Sphere(1.0), mass=1.0, position=position, force=force)
    return b.build()


def skate(mu_along=0.02, mu_across=0.6, *, velocity=(1.0, 0.0, 0.0), mass=1.0, gravity=GRAVITY):
    """An ice skate: a low box, long along x (the blade), whose friction ellipse is short along it and long across.

    The cone is `EllipticCone(e_t=mu_along, e_o=mu_across)` with mu = 1 on the
    table z = 0, whose contact frames have t = x and o = y, so sliding along the
    blade decelerates at mu_along g and sliding across it at mu_across g (exactly,
    while the blade does not turn). The ellipse is fixed in the contact frame,
    which for a plane is fixed in the world: a skate that turns keeps the world's
    axes of friction.
    """
    _check("mu_along", mu_along, positive=True)
    _check("mu_across", mu_across, positive=True)
    half = np.array([0.15, 0.05, 0.01])  # low and wide, so that sideways friction does not tip it
    cone = EllipticCone(e_t=mu_along, e_o=mu_across)
    b = SceneBuilder(dim=3, mu=1.0, cone=cone, gravity=(0.0, 0.0, -gravity))
    b.add_static("ice", Plane())
    b.add_body("skate", Box(half), mass=mass, position=(0.0, 0.0, 0.01), velocity=velocity)
    return b.build()


# ---------------------------------------------------------------------------------------------
# Boxes on boxes.


def box_stack(
    n=5,
    *,
    mu=0.5,
    mass=1.0,
    half_extents=0.1,
    spacing=0.0,
    all_pairs=False,
    directions=8,
    cone=None,
    gravity=GRAVITY,
    friction=None,
):
    """n boxes stacked on the table z = 0, each resting on the one below (exactly, at rest).

    Box i has its centre at z = (2 i + 1) h_z + i spacing (spacing > 0: dropped by
    that much). With `all_pairs=False` (default) only neighbours in the stack
    touch each other and only the bottom box touches the table (4 contacts with
    the table, 8 per pair of boxes: 8 n - 4 in all); `all_pairs=True` pairs
    every box with every other and with the table.

    Args:
        n: number of boxes (an integer >= 1).
        mu: friction coefficient of every contact, >= 0.
        mass: scalar or (n,) masses.
        half_extents: scalar, (3,) or (n, 3) half sizes.
        spacing: the initial gap between neighbours (m, >= 0).
    """
    cone = renamed("scenes.box_stack", "friction", friction, "cone", cone)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    _check("spacing", spacing, nonnegative=True)
    h = _broadcast(half_extents, (n, 3))
    mass = _broadcast(mass, (n,))
    b = SceneBuilder(
        dim=3,
        mu=mu,
        directions=directions,
        cone=cone,
        gravity=(0.0, 0.0, -gravity),
        collide_bodies=all_pairs,
    )
    b.add_static("table", Plane())
    names = [f"box{i}" for i in range(n)]
    z = host_float(0.0)
    for i, name in enumerate(names):
        z = z + h[i, 2] + (host_float(spacing) if i > 0 else 0.0)
        b.add_body(name, Box(h[i]), mass=mass[i], position=_vector(0.0, 0.0, z))
        z = z + h[i, 2]
        if not all_pairs and i > 0:
            b.include(names[i - 1], name)
            b.exclude(name, "table")
    return b.build()


def cube_toss(
    v0=(1.0, 0.0, 0.0),
    w0=(0.0, 3.0, 5.0),
    *,
    mu=0.5,
    mass=1.0,
    half_extents=0.05,
    height=0.3,
    orientation=(0.9238795325112867, 0.0, 0.3826834323650898, 0.0),
    table_half_extents=(1.0, 1.0, 0.05),
    directions=8,
    cone=None,
    gravity=GRAVITY,
    friction=None,
):
    """A cube thrown spinning onto a table that is itself a box (box-box contact).

    The table is a static box whose top face is z = 0; the cube starts with its
    centre at `height` above z = 0 (its lowest point at height - its extent
    below the centre), velocity v0 and angular velocity w0 (world frame), and
    the given orientation (default: tilted 45 degrees about y, landing on an
    edge). height = h_z, identity orientation and w0 = 0 give a box sliding on a
    box: with v0 along x it decelerates at mu g (exactly, with the default cone).
    """
    cone = renamed("scenes.cube_toss", "friction", friction, "cone", cone)
    _check("height", height)
    th = _broadcast(table_half_extents, (3,))
    b = SceneBuilder(dim=3, mu=mu, directions=directions, cone=cone, gravity=(0.0, 0.0, -gravity))
    b.add_static("table", Box(th, position=_vector(0.0, 0.0, -th[2])))
    b.add_body(
        "cube",
        Box(half_extents),
        mass=mass,
        position=_vector(0.0, 0.0, height),
        orientation=orientation,
        velocity=v0,
        angular_velocity=w0,
    )
    return b.build()


def box_push(
    force=8.0,
    *,
    mu=0.3,
    mass=1.0,
    pushed_mass=1.0,
    half_extents=0.05,
    distance=0.05,
    directions=8,
    cone=None,
    gravity=GRAVITY,
    friction=None,
):
    """A box on the table z = 0 pushed along +x by a constant force into a second box resting ahead of it.

    The pusher (centre at the origin) and the pushed box (at x = 2 h_x +
    distance) are cubes of the same size; with force > mu m g the pusher
    accelerates, closes the distance and then pushes the other box. Once they
    slide together the exact acceleration is (force - mu g (m + m_pushed)) /
    (m + m_pushed) when it is positive.
    """
    cone = renamed("scenes.box_push", "friction", friction, "cone", cone)
    _check("force", force)
    _check("distance", distance, nonnegative=True)
    h = _broadcast(half_extents, (3,))
    b = SceneBuilder(dim=3, mu=mu, directions=directions, cone=cone, gravity=(0.0, 0.0, -gravity))
    b.add_static("table", Plane())
    b.add_body(
        "pusher",
        Box(h),
        mass=mass,
        position=_vector(0.0, 0.0, h[2]),
        force=_vector(force, 0.0, 0.0),
    )
    b.add_body("pushed", Box(h), mass=pushed_mass, position=_vector(2 * h[0] + host_float(distance), 0.0, h[2]))
    return b.build()
