"""Trajectories made by another simulator (MuJoCo's C engine), for testing identification on data jaxrbd did not make.

    data = rbd.foreign.mujoco_sliding_box(mu=0.35, speed=1.5, noise=1e-3, seed=0)
    data.t, data.observed            # (T,), (T, 2): the box's x, y at 100 Hz with 1 mm noise
    data.set_value, data.effective   # mu given to MuJoCo, and the mu its trajectory shows

    data = rbd.foreign.mujoco_bouncing_ball(e=0.6, noise=1e-3, seed=0)
    data.observed                    # (T, 1): the ball's height z at 240 Hz

MuJoCo's contact is soft: a contact force follows a spring-damper reference
(`solref`, `solimp`), so what MuJoCo's trajectory shows differs a little from the
coefficient it was given. Each generator measures that value from its own
noise-free trajectory and returns it as `effective`, beside `set_value`:

- sliding box: MuJoCo is given mu on both geoms (MuJoCo takes the larger of a pair's
  coefficients). While the box slides it decelerates at a constant rate; a
  least-squares parabola through the clean positions of the middle of the sliding
  phase gives the deceleration a, and mu_effective = a / g.
- bouncing ball: MuJoCo has no restitution coefficient. Its contact follows
  a'' = -d (b z' + k z) + (1 - d) a0 in the penetration z, with b = 2 / (d tc) and
  k = d / (d^2 tc^2 zeta^2) (solref = (tc, zeta), solimp = (d, d, ...)), while
  that force pushes: a linear spring-damper of damping ratio zeta that cannot
  pull, which bounces with a restitution `spring_damper_restitution(zeta)`. The
  ball gets the zeta that gives the target e (`damping_ratio(e)`) and the tc of
  a contact lasting about `contact_time`. MuJoCo's bounces scatter about that e:
  its contact force starts at the first step the ball is found below the plane,
  so each bounce's ratio depends on where in a step the contact begins (a
  sawtooth of +-8e-4 at e = 0.6 with 384 steps per contact), and gravity during
  the contact lowers the slow bounces' ratios. `ratios` holds each bounce's
  ratio of the speeds at which the ball crosses the height of first touch
  (z = radius) going down and coming up, exact from the clean states at
  MuJoCo's step since the ball is ballistic out of contact. `effective` is the
  restitution of the rigid model that reproduces MuJoCo's clean trajectory best:
  exact piecewise parabolas with instantaneous bounces, fitted by least squares
  to the clean heights at the observation times, with the start height and
  speed free (`rigid_equivalent`). It weighs the bounces as a fit of the
  noisy data does, and it takes in the time MuJoCo spends in each contact,
  which a rigid model can only take out of the flights.

Needs the optional `mujoco` package (`pip install jaxrbd[mjcf]`).
"""

import dataclasses
import math

import numpy as np

from ._validate import check_value
from .mjcf import _mujoco


@dataclasses.dataclass(frozen=True)
class ForeignData:
    """A trajectory from another simulator, with the coefficient it was given and the one it shows.

    Attributes:
        t: (T,) observation times from 0 (seconds).
        observed: (T, n) the observed coordinates with noise.
        clean: (T, n) the same without noise.
        dt: the observation interval (seconds).
        noise: the standard deviation of the added Gaussian noise (metres).
        set_value: the coefficient given to the other simulator (mu, or the target e).
        effective: the coefficient its clean trajectory shows (see the module docstring).
        columns: the names of the n observed coordinates.
        start: dict of the initial conditions (position, speed, ...).
        ratios: per-event measurements behind `effective` (each bounce's speed ratio), or ().
        engine: which simulator and version made it.
    """

    t: np.ndarray
    observed: np.ndarray
    clean: np.ndarray
    dt: float
    noise: float
    set_value: float
    effective: float
    columns: tuple
    start: dict
    ratios: tuple = ()
    engine: str = ""


def _check_positive(**values):
    for name, value in values.items():
        check_value(name, value, shape=(), positive=True)


def _check_rate(rate, substeps):
    check_value("rate", rate, shape=(), positive=True)
    if not isinstance(substeps, int) or isinstance(substeps, bool) or substeps < 1:
        raise ValueError(f"substeps must be an integer >= 1, got {substeps!r}")


def _noisy(clean, noise, seed):
    check_value("noise", noise, shape=(), nonnegative=True)
    return clean + noise * np.random.default_rng(seed).standard_normal(clean.shape)


def _run(xml, qvel, steps, substeps, columns):
    """Step MuJoCo `steps` observation intervals of `substeps` steps each; qpos[columns] and qvel[columns], each
    (steps + 1, len(columns)), and the engine's name."""
    mujoco = _mujoco()
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    data.qvel[:] = qvel
    mujoco.mj_forward(model, data)
    columns = list(columns)
    q, v = [data.qpos[columns].copy()], [data.qvel[columns].copy()]
    for _ in range(steps):
        mujoco.mj_step(model, data, nstep=substeps)
        q.append(data.qpos[columns].copy())
        v.append(data.qvel[columns].copy())
    return np.array(q), np.array(v), f"MuJoCo {mujoco.__version__}"


def _box_on_plane_xml(mu, half_extents, mass, timestep, gravity=9.81, cone="elliptic"):
    """MuJoCo's model of a box (free joint) resting flat on a plane, both geoms with friction mu."""
    hx, hy, hz = (float(h) for h in half_extents)
    return f"""
<mujoco>
  <option timestep="{float(timestep)!r}" gravity="0 0 {-gravity!r}" cone="{cone}"/>
  <worldbody>
    <geom type="plane" size="0 0 1" friction="{mu!r} 0 0"/>
    <body pos="0 0 {hz!r}">
      <freejoint/>
      <geom type="box" size="{hx!r} {hy!r} {hz!r}" mass="{mass!r}" friction="{mu!r} 0 0"/>
    </body>
  </worldbody>
</mujoco>"""


def mujoco_sliding_box(
    mu=0.35,
    speed=1.5,
    *,
    heading=0.0,
    duration=1.0,
    rate=100.0,
    substeps=10,
    noise=1e-3,
    seed=0,
    half_extents=(0.1, 0.1, 0.02),
    mass=1.0,
    gravity=9.81,
    cone="elliptic",
):
    """A box launched across a plane in MuJoCo, sliding to rest; observed: its centre's x, y.

    Args:
        mu: the friction coefficient given to both geoms, > 0.
        speed: the launch speed (m/s), > 0, along `heading` (radians from +x).
        duration: the observed time (s).
        rate: observations per second; MuJoCo steps `substeps` times per
            observation (timestep = 1 / (rate substeps)).
        noise: standard deviation of the Gaussian noise on each coordinate (m).
        seed: the noise's random seed.
        half_extents: the box's half extents (m).
        mass: the box's mass (kg).
        gravity: g (m/s^2).
        cone: MuJoCo's friction cone, "elliptic" or "pyramidal".

    Returns:
        `ForeignData` with columns ("x", "y"); `effective` is MuJoCo's mu from the
        box's deceleration (module docstring).
    """
    _check_positive(mu=mu, speed=speed, duration=duration, mass=mass, gravity=gravity)
    check_value("half_extents", half_extents, shape=(3,), positive=True)
    _check_rate(rate, substeps)
    if cone not in ("elliptic", "pyramidal"):
        raise ValueError(f"cone must be 'elliptic' or 'pyramidal', got {cone!r}")
    hx, hy, hz = (float(h) for h in half_extents)
    xml = _box_on_plane_xml(mu, (hx, hy, hz), mass, 1.0 / (rate * substeps), gravity, cone)
    steps = round(duration * rate)
    qvel = np.zeros(6)
    qvel[:2] = speed * math.cos(heading), speed * math.sin(heading)
    clean, _, engine = _run(xml, qvel, steps, substeps, (0, 1))
    t = np.arange(steps + 1) / rate
    # The sliding phase: until the speed would reach zero at mu g; its middle half is free of the start and the stop.
    stop = speed / (mu * gravity)
    window = (t > 0.25 * stop) & (t < 0.75 * stop)
    if window.sum() < 5:
        raise ValueError(f"the box slides for {stop:.3g} s: observe it at a higher rate (rate = {rate})")
    distance = np.linalg.norm(clean[window] - clean[0], axis=1)
    curvature = np.polyfit(t[window], distance, 2)[0]
    return ForeignData(
        t=t,
        observed=_noisy(clean, noise, seed),
        clean=clean,
        dt=1.0 / rate,
        noise=float(noise),
        set_value=float(mu),
        effective=float(-2.0 * curvature / gravity),
        columns=("x", "y"),
        start={"speed": float(speed), "heading": float(heading), "half_extents": (hx, hy, hz), "mass": float(mass)},
        engine=engine,
    )


def _bisect(f, lo, hi, iterations=100):
    """The root of f in [lo, hi], f(lo) > 0 > f(hi)."""
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) > 0 else (lo, mid)
    return 0.5 * (lo + hi)


def spring_damper_restitution(zeta):
    """The restitution of a linear spring-damper of damping ratio zeta in (0, 1) that cannot pull.

    x'' = -2 zeta x' - x (unit natural frequency) from x = 0, x' = -1 while the
    force -2 zeta x' - x pushes; the body leaves when it stops pushing, at the
    speed it has then (a tensile force would bring it back to e^(-pi zeta / sqrt(1 - zeta^2))).
    """
    wd = math.sqrt(1.0 - zeta * zeta)

    def x(t):
        return -math.exp(-zeta * t) * math.sin(wd * t) / wd

    def v(t):
        return -math.exp(-zeta * t) * (math.cos(wd * t) - zeta * math.sin(wd * t) / wd)

    leave = _bisect(lambda t: -2.0 * zeta * v(t) - x(t), 0.0, math.pi / wd)  # the push falls to zero once
    return v(leave)


def damping_ratio(e):
    """The damping ratio of a linear spring-damper that cannot pull and bounces with restitution e.

    Underdamped (zeta < 1), so e lies in (e_c, 1), e_c = `spring_damper_restitution(1)`
    = 0.1353 (critical damping).
    """
    check_value("e", e, shape=(), positive=True)
    lowest = spring_damper_restitution(1.0 - 1e-9)
    if not lowest < e < 1.0:
        raise ValueError(f"e must be in ({lowest:.4f}, 1) (an underdamped MuJoCo contact), got {e!r}")
    return _bisect(lambda zeta: spring_damper_restitution(zeta) - e, 1e-9, 1.0 - 1e-9)


def mujoco_bouncing_ball(
    e=0.6,
    *,
    height=0.5,
    duration=1.5,
    rate=240.0,
    substeps=16000,
    contact_time=1e-4,
    impedance=0.99,
    noise=1e-3,
    seed=0,
    radius=0.1,
    mass=1.0,
    gravity=9.81,
):
    """A ball dropped onto a plane in MuJoCo, bouncing; observed: its centre's height z.

    Args:
        e: the target restitution in (0.1353, 1); MuJoCo gets the solref that
            gives it (module docstring).
        height: the drop height of the ball's lowest point above the plane (m), > 0.
        duration: the observed time (s).
        rate: observations per second.
        substeps: MuJoCo steps per observation;
            MuJoCo's timestep must resolve the contact: at most contact_time / 20.
        contact_time: how long one contact lasts in MuJoCo (s). A rigid model
            cannot spend time in contact: a fit of it takes that time out of the
            flights, which moves its e up (by about 3e-3 at 2 ms, e = 0.6, 0.4 s
            flights); `effective` includes that. The default 0.1 ms with 16,000
            substeps (384 MuJoCo steps per contact) takes about 10 s per second observed.
        impedance: MuJoCo's solimp d, the same at every depth, in (0, 1): the
            share of gravity the contact takes up (module docstring).
        noise: the Gaussian noise on z (m).
        seed: the noise's seed.
        radius: the ball's radius (m).
        mass: the ball's mass (kg).
        gravity: g (m/s^2).

    Returns:
        `ForeignData` with columns ("z",); `effective` is the restitution of
        the rigid model closest to the clean heights (`rigid_equivalent`),
        `ratios` each completed bounce's ratio of its crossing speeds (module docstring).
    """
    zeta = damping_ratio(e)
    _check_positive(
        height=height,
        duration=duration,
        contact_time=contact_time,
        radius=radius,
        mass=mass,
        gravity=gravity,
        impedance=impedance,
    )
    if not impedance < 1.0:
        raise ValueError(f"impedance must be in (0, 1), got {impedance!r}")
    _check_rate(rate, substeps)
    timestep = 1.0 / (rate * substeps)
    if not timestep <= contact_time / 20:
        raise ValueError(
            f"MuJoCo's timestep 1 / (rate substeps) = {timestep:.3g} s must be at most contact_time / 20 = "
            f"{contact_time / 20:.3g} s: raise substeps"
        )
    # The spring-damper: natural frequency omega = 1 / (tc zeta), damped half period contact_time.
    omega = math.pi / (contact_time * math.sqrt(1.0 - zeta**2))
    sol = f'solref="{1.0 / (zeta * omega)!r} {zeta!r}" solimp="{impedance!r} {impedance!r} 0.001"'
    xml = f"""
<mujoco>
  <option timestep="{timestep!r}" gravity="0 0 {-gravity!r}"/>
  <worldbody>
    <geom type="plane" size="0 0 1" {sol}/>
    <body pos="0 0 {radius + height!r}">
      <freejoint/>
      <geom type="sphere" size="{radius!r}" mass="{mass!r}" {sol}/>
    </body>
  </worldbody>
</mujoco>"""
    steps = round(duration * rate)
    # The clean trajectory in chunks of MuJoCo steps shorter than an eighth of a contact, for the crossing
    # speeds (every contact has states below z = radius, and the state above it on either side is ballistic
    # to the crossing); then sampled at the rate.
    chunk = max(k for k in range(1, substeps + 1) if substeps % k == 0 and k * timestep <= contact_time / 8)
    fine, speeds, engine = _run(xml, np.zeros(6), steps * (substeps // chunk), chunk, (2,))
    clean = fine[:: substeps // chunk]
    ratios, rises = _crossing_ratios(fine[:, 0], speeds[:, 0], radius, gravity)
    if not any(rise >= 10 * noise for rise in rises):
        raise ValueError(f"the ball completes no bounce that rises 10 noise levels in {duration} s: observe it longer")
    t = np.arange(steps + 1) / rate
    effective, *_ = rigid_equivalent(t, clean[:, 0], radius=radius, gravity=gravity, e0=e)
    return ForeignData(
        t=t,
        observed=_noisy(clean, noise, seed),
        clean=clean,
        dt=1.0 / rate,
        noise=float(noise),
        set_value=float(e),
        effective=effective,
        columns=("z",),
        start={"height": float(height), "radius": float(radius), "mass": float(mass)},
        ratios=tuple(ratios),
        engine=engine,
    )


def _crossing_ratios(z, vz, radius, gravity):
    """Per completed bounce, the upward over the downward speed where the ball crosses z = radius, and the
    height its rebound rises to above that.

    Out of contact the motion is ballistic, so the speed at the crossing follows
    from the nearest state above it: v^2 = v_s^2 + 2 g (z_s - radius).
    """
    above = z > radius
    ratios, rises = [], []
    down = None
    for i in range(1, len(z) - 1):
        if above[i] and not above[i + 1]:  # the last state above before touching
            down = math.sqrt(vz[i] ** 2 + 2 * gravity * (z[i] - radius))
        elif down is not None and above[i] and not above[i - 1]:  # the first state above after the bounce
            up = math.sqrt(vz[i] ** 2 + 2 * gravity * (z[i] - radius))
            ratios.append(up / down)
            rises.append(up * up / (2 * gravity))
            down = None
    return ratios, rises


def rigid_bounces(t, e, z0, vz0, *, radius, gravity):
    """Exact heights of a rigid ball's centre at times t (from 0): from z0, vz0, it falls onto z = radius and
    bounces with restitution e, instantly, each rebound leaving at e times the speed it arrived with.

    The bounces shorten geometrically and end at t1 + 2 e v1 / (g (1 - e)), after
    which the ball rests at z = radius (t1 and v1 the first landing's time and speed).
    """
    t = np.asarray(t, float)
    z = np.full_like(t, float(radius))
    drop = z0 - radius
    if drop < 0:
        raise ValueError(f"z0 must be at least the radius {radius}, got {z0}")
    land = (vz0 + math.sqrt(vz0 * vz0 + 2 * gravity * drop)) / gravity
    falling = t < land
    z[falling] = z0 + vz0 * t[falling] - 0.5 * gravity * t[falling] ** 2
    start, up = land, e * (gravity * land - vz0)
    while up > 1e-12 and start < t.max():
        flight = 2 * up / gravity
        inside = (t >= start) & (t < start + flight)
        s = t[inside] - start
        z[inside] = radius + up * s - 0.5 * gravity * s * s
        start, up = start + flight, e * up
    return z


def rigid_equivalent(t, z, *, radius, gravity, e0=0.5):
    """The restitution of the rigid model (`rigid_bounces`) closest to heights z observed at times t.

    Least squares over (e, z0, vz0), started at (e0, z[0], 0); returns (e, z0,
    vz0, RMS residual).
    """
    from scipy.optimize import least_squares

    t, z = np.asarray(t, float), np.asarray(z, float)

    def residuals(p):
        return rigid_bounces(t, p[0], max(p[1], radius), p[2], radius=radius, gravity=gravity) - z

    fit = least_squares(
        residuals,
        [e0, z[0], 0.0],
        bounds=([0.0, radius, -np.inf], [1.0, np.inf, np.inf]),
        x_scale=[0.1, 0.01, 0.1],
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    e, z0, vz0 = (float(x) for x in fit.x)
    return e, z0, vz0, float(np.sqrt(np.mean(fit.fun**2)))


ARM_JOINT_DEFAULTS = {"armature": 0.02, "damping": 0.3, "frictionloss": 0.15}


def arm_xml(*, j1=None, j2=None, link1_mass=1.0, link2_mass=0.6, timestep=0.01):
    """A two-link arm swinging in the vertical x-z plane: hinges j1 (shoulder) and j2 (elbow) about y, motors u1
    and u2 (gear 1) on them, 0.3 m capsule links of the given masses (MuJoCo computes their inertias from the
    shapes), MuJoCo's Euler integrator, no contact.

    Args:
        j1: a dict of the shoulder's armature, damping and frictionloss (kg m^2, N m s, N m); missing entries
            take `ARM_JOINT_DEFAULTS`.
        j2: the same for the elbow.
        link1_mass: the upper link's mass (kg).
        link2_mass: the forearm's mass (kg).
        timestep: MuJoCo's timestep (s).
    """
    _check_positive(link1_mass=link1_mass, link2_mass=link2_mass, timestep=timestep)

    def joint(name, given):
        values = ARM_JOINT_DEFAULTS | dict(given or {})
        unknown = sorted(set(values) - set(ARM_JOINT_DEFAULTS))
        if unknown:
            raise ValueError(f"{name}: unknown joint parameters {unknown}; accepted: {sorted(ARM_JOINT_DEFAULTS)}")
        for k, v in values.items():
            check_value(f"{name}[{k!r}]", v, shape=(), nonnegative=True)
        attrs = " ".join(f'{k}="{float(v)!r}"' for k, v in values.items())
        return f'<joint name="{name}" type="hinge" axis="0 1 0" {attrs}/>'

    return f"""<mujoco model="arm">
  <option timestep="{float(timestep)!r}" integrator="Euler"/>
  <worldbody>
    <body name="link1" pos="0 0 1">
      {joint("j1", j1)}
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="{float(link1_mass)!r}" contype="0" conaffinity="0"/>
      <body name="link2" pos="0.3 0 0">
        {joint("j2", j2)}
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.025" mass="{float(link2_mass)!r}" contype="0"
              conaffinity="0"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="u1" joint="j1" gear="1"/>
    <motor name="u2" joint="j2" gear="1"/>
  </actuator>
  <keyframe><key name="rest" qpos="0 0"/></keyframe>
</mujoco>"""


def pendulum_xml(*, max_torque=1.0, mass=1.0, length=0.5, damping=0.05, timestep=0.01):
    """A pendulum hanging from a hinge about y (angle 0 hanging down, pi upright): one capsule link of the given
    mass and length, a motor "torque" on the hinge whose control in [-1, 1] is the torque in units of max_torque,
    joint damping, MuJoCo's Euler integrator, no contact. With max_torque below m g length / 2 the motor cannot
    lift it straight up: a swing-up has to pump.

    Args:
        max_torque: the motor's gear (N m at control 1).
        mass: the link's mass (kg).
        length: the link's length (m).
        damping: the hinge's damping (N m s).
        timestep: MuJoCo's timestep (s).
    """
    _check_positive(max_torque=max_torque, mass=mass, length=length, timestep=timestep)
    check_value("damping", damping, shape=(), nonnegative=True)
    return f"""<mujoco model="pendulum">
  <option timestep="{float(timestep)!r}" integrator="Euler"/>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="{float(damping)!r}"/>
      <geom type="capsule" fromto="0 0 0 0 0 {-float(length)!r}" size="0.02" mass="{float(mass)!r}" contype="0"
            conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="torque" joint="hinge" gear="{float(max_torque)!r}" ctrllimited="true" ctrlrange="-1 1"/>
  </actuator>
</mujoco>"""


@dataclasses.dataclass(frozen=True)
class ControlledLog:
    """A robot's log from another simulator: its controls, the observed joint coordinates, the state it started in.

    Attributes:
        t: (T,) observation times from 0 (seconds).
        controls: (T - 1, nu) the control held over each observation interval (MuJoCo's ctrl).
        observed: (T, n) the observed qpos entries `columns` with noise.
        clean: (T, n) the same without noise.
        qvel: (T, nv) MuJoCo's joint velocities (not observed; for checks).
        qpos0, qvel0: the start state.
        dt: the observation interval (seconds), one MuJoCo step.
        noise: the standard deviation of the noise (rad or m).
        columns: the names of the observed coordinates.
        engine: which simulator and version made it.
    """

    t: np.ndarray
    controls: np.ndarray
    observed: np.ndarray
    clean: np.ndarray
    qvel: np.ndarray
    qpos0: np.ndarray
    qvel0: np.ndarray
    dt: float
    noise: float
    columns: tuple
    engine: str = ""


def excitation(steps, nu, *, amplitude=1.0, frequencies=(0.5, 3.0), waves=4, seed=0):
    """Random excitation controls, (steps, nu): per control a sum of `waves` sines with frequencies drawn uniformly
    in `frequencies` (Hz), random phases and amplitudes, scaled to a peak of `amplitude`; sampled every step of
    0.01 s."""
    check_value("amplitude", amplitude, shape=(), nonnegative=True)
    rng = np.random.default_rng(seed)
    t = 0.01 * np.arange(steps)[:, None, None]
    f = rng.uniform(*frequencies, size=(1, nu, waves))
    a = rng.uniform(0.5, 1.0, size=(1, nu, waves))
    u = np.sum(a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi, size=(1, nu, waves))), axis=-1)
    return amplitude * u / np.max(np.abs(u), axis=0, keepdims=True)


def mujoco_log(xml, controls, *, qpos0=None, qvel0=None, noise=1e-3, seed=0):
    """Step MuJoCo's C engine on a model file with logged controls; observe every qpos entry with noise.

    Args:
        xml: the MJCF model as a string; one observation per MuJoCo step.
        controls: (T - 1, nu) the control of each step.
        qpos0: the start configuration (default: the model's qpos0).
        qvel0: the start velocity (default: at rest).
        noise: the standard deviation of the Gaussian noise added to qpos.
        seed: the noise's seed.

    Returns:
        A `ControlledLog` with columns q0 .. q(nq-1).
    """
    mujoco = _mujoco()
    model = mujoco.MjModel.from_xml_string(xml)
    controls = np.asarray(controls, float)
    if controls.ndim != 2 or controls.shape[1] != model.nu:
        raise ValueError(f"controls must have shape (steps, {model.nu}) for this model, got {controls.shape}")
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0 if qpos0 is None else qpos0
    data.qvel[:] = 0.0 if qvel0 is None else qvel0
    mujoco.mj_forward(model, data)
    start = data.qpos.copy(), data.qvel.copy()
    q, v = [data.qpos.copy()], [data.qvel.copy()]
    for u in controls:
        data.ctrl[:] = u
        mujoco.mj_step(model, data)
        q.append(data.qpos.copy())
        v.append(data.qvel.copy())
    clean = np.array(q)
    return ControlledLog(
        t=model.opt.timestep * np.arange(len(clean)),
        controls=controls,
        observed=_noisy(clean, noise, seed),
        clean=clean,
        qvel=np.array(v),
        qpos0=start[0],
        qvel0=start[1],
        dt=float(model.opt.timestep),
        noise=float(noise),
        columns=tuple(f"q{i}" for i in range(model.nq)),
        engine=f"MuJoCo {mujoco.__version__}",
    )
