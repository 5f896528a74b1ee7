"""Impact laws: Newton's inside the step, Poisson's by compression and decompression (004, 000 §4)."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from .. import dynamics
from .._validate import check_value
from ..complementarity import SemismoothNewton, solve
from ._rows import default_cone, step_problem


class Impact(eqx.Module):
    """What an impact law hands the step.

    Attributes:
        v: (nv,) the velocity the step starts from (after Poisson's impact; v for Newton's).
        normal, friction, joint: the impact's impulses, (nc,), (nc, d) and (ng,).
        residual, converged: of the impact's solves (0 and True when it solves none).
        colliding: (nc,) bool, contacts whose normal row is Newton's (or None).
        offset: (nc,) the offset of those rows, e_j n_j^T v (located: see
            `NewtonRestitution`), or None.
        time: (nv,) per velocity coordinate, when in the step the first colliding
            contact it takes part in closes (0 where none does), or None when the
            impact time is not located.
    """

    v: jax.Array
    normal: jax.Array
    friction: jax.Array
    joint: jax.Array
    residual: jax.Array
    converged: jax.Array
    colliding: jax.Array | None = None
    offset: jax.Array | None = None
    time: jax.Array | None = None


class ImpactLaw(eqx.Module):
    """An impact law: how the contacts that collide in a step bounce.

    A contact j collides in the step when it is closing (n^T v < 0) and its
    predicted gap f(q) + h n^T v_free (v_free: the velocity the step reaches
    without contact forces) is below `distance` (Anitescu-Potra: below its delta,
    when larger). Its restitution coefficient is `system.restitution[j]`.
    """

    distance: eqx.AbstractVar[float]

    def __check_init__(self):
        check_value(f"{type(self).__name__}: distance", self.distance, nonnegative=True)

    def window(self, scheme):
        """The predicted gap below which a contact takes part in an impact."""
        return self.distance if scheme.position_level else max(scheme.delta, self.distance)

    @abc.abstractmethod
    def resolve(self, system, contacts, motion, J, state, *, dt, scheme, solver, cone) -> Impact:
        """The impact at the start of the step from `state`, with the step's record, free motion and joint rows."""


def colliding_contacts(contacts, motion, v, dt, window):
    """((nc,) colliding, (nc,) touching, (nc,) n^T v) from the record and the free motion at v.

    touching: predicted gap f + h n^T v_free below the window (and active);
    colliding: touching and closing (n^T v < 0).
    """
    J_n = contacts.J_n
    vn = J_n @ v
    predicted = contacts.gap + dt * (J_n @ motion.v_free)
    touching = (predicted < window) & contacts.active
    return touching & (vn < 0), touching, vn


class NewtonRestitution(ImpactLaw):
    """Newton's impact law inside the step (004 eq. (3.11)); `jaxrbd.Newton` is this class.

    A colliding contact (see `ImpactLaw`) takes the normal row
    0 <= c_n ⊥ n^T (v+ + e_j v) >= 0 instead of the scheme's own row; its
    position-level offset is kept only where the contact already penetrates.
    Other contacts keep the scheme's rows. By default the impact time is not
    located: the bounce starts in the step in which the contact would close, so
    the bounce point is off by up to h |n^T v|, and a loss over the trajectory
    jumps where a bounce moves to the next step.

    `locate=True` locates it: a colliding contact with gap f (at q0) and free normal
    velocity n^T v_free < 0 closes at tau = f / (-n^T v_free), clipped to [0, h].
    The velocity coordinates it moves (its nonzero columns of J_n) travel with
    v_free until the first such tau and with v+ for the rest of the step,
    q+ = q0 (+) tau v_free (+) (h - tau) v+, instead of q0 (+) h v+, and the
    contact bounces from its normal velocity at the impact. The semi-implicit
    step's velocity is the mean over the step it closes (q+ = q0 + h v+), the
    velocity of mid-step: v is that of t0 - h/2 and v_free that of t0 + h/2, so
    the impact at t0 + tau sees n^T v + (s + 1/2) n^T (v_free - v), s = tau / h,
    and v+ is the rebound's velocity at t0 + h/2, the free change (1/2 - s)
    n^T (v_free - v) after the impact:
    n^T v+ >= max(-e (n^T v + (s + 1/2) n^T (v_free - v)) + (1/2 - s) n^T (v_free - v), 0).
    The bounce then starts where the contact closes, and the trajectory is
    continuous in e, the drop height and the initial state where a bounce
    crosses a step (tau = h gives the free step and then the bounce at the start
    of the next). Under constant forces each flight and bounce is then second
    order in h; a start velocity given at t = 0 rather than -h/2 leaves a
    first-order offset (`tests/test_impacts.py`).

    Energy: at a single frictionless contact the normal velocity is reversed and
    scaled by e, and the kinetic energy does not increase. With friction it can
    (004 §1.1), and so can several simultaneous contacts (untested here): when
    the normal impulse reverses the slip of the contact point, as for a spinning
    rod striking the table, see the impacts guide (docs/guides/impacts.md).

    Attributes:
        distance: the detection distance (metres).
        locate: locate the impact time within the step (see above).
    """

    distance: float = eqx.field(static=True, default=1e-6)
    locate: bool = eqx.field(static=True, default=False)

    def resolve(self, system, contacts, motion, J, state, *, dt, scheme, solver, cone):
        v = state.v
        colliding, _, vn = colliding_contacts(contacts, motion, v, dt, self.window(scheme))
        nc, dtype = contacts.size, v.dtype
        zero = jnp.zeros((), dtype)
        offset, time = contacts.restitution * vn, None
        if self.locate:
            vn_free = contacts.J_n @ motion.v_free
            gap = contacts.gap if motion.shift is None else contacts.gap + contacts.J_n @ motion.shift  # at q0
            closing = colliding & (vn_free < 0)
            speed = jnp.where(closing, -vn_free, 1.0)  # double where: finite gradients where not closing
            tau = jnp.where(closing, jnp.clip(gap / speed, 0.0, dt), 0.0)
            # vn is the velocity of t0 - h/2 and vn_free of t0 + h/2 (the step's means): at the impact, t0 + tau,
            # the normal velocity is vn + (s + 1/2) (vn_free - vn); v+ is the rebound's at t0 + h/2.
            # At most 0: a rebound slower than the rest of that change leaves with n^T v+ >= 0, not into the surface.
            s = tau / dt
            offset = jnp.minimum(
                contacts.restitution * (vn + (s + 0.5) * (vn_free - vn)) - (0.5 - s) * (vn_free - vn), 0.0
            )
            moves = colliding[:, None] & (contacts.J_n != 0)  # (nc, nv)
            first = jnp.min(jnp.where(moves, tau[:, None], dt), axis=0)
            time = jnp.where(moves.any(axis=0), first, 0.0)
        return Impact(
            v=v,
            normal=jnp.zeros((nc,), dtype),
            friction=jnp.zeros((nc, cone.dim), dtype),
            joint=jnp.zeros((J.shape[0],), dtype),
            residual=zero,
            converged=jnp.ones((), bool),
            colliding=colliding,
            offset=offset,
            time=time,
        )


class PoissonRestitution(ImpactLaw):
    """Poisson's impact law: compression, then decompression (000 eq. (27)-(28)); `jaxrbd.Poisson` is this class.

    At the start of a step the contacts that collide in it (see `ImpactLaw`) and
    the contacts touching them are resolved by two impulsive problems at q with no
    external force: compression (eq. (27), n^T v^c >= 0) gives v^c and the impulses
    (c_n^c, beta^c); decompression (eq. (28)) adds the restitution impulse
    I_r = e_j n_j c_nj^c + e_T D_j beta_j^c and solves again for v+. The step then
    proceeds from v+. The impact time is not located: the impact happens at the
    start of the step in which the contact would close, so its position is off by
    at most h |n^T v|.

    Energy: with e_T = e_j (the default) and one e for the contacts of an impact,
    the kinetic energy never increases across it (for e <= 1): the decompression
    starts from (1 + e) v^c - e v^-, which never has more kinetic energy than v^-
    (000 §4), and its own impulses only dissipate. With e_T = 0 (I_r = e c_n^c
    alone, the simplest reading of 000 eq. (28)) it can gain energy when the
    normal impulse reverses the slip; see the impacts guide (docs/guides/impacts.md).

    Attributes:
        tangential: the tangential restitution e_T in [0, 1] (a scalar leaf); None
            (default) uses each contact's normal coefficient e_j.
        expedient: skip the decompression LCP: v+ = v^c + M^{-1} I_r with the joint
            rows kept, which is (1 + e) v^c - e v^- (000 §4).
        distance: the detection distance, as for `NewtonRestitution`.
    """

    tangential: float | None = None
    expedient: bool = eqx.field(static=True, default=False)
    distance: float = eqx.field(static=True, default=1e-6)

    def __check_init__(self):
        check_value("Poisson tangential restitution", self.tangential, unit_interval=True)
        if self.expedient and self.tangential is not None:
            raise ValueError("Poisson(expedient=True) uses e_T = e: leave tangential=None")

    def resolve(self, system, contacts, motion, J, state, *, dt, scheme, solver, cone):
        v = state.v
        _, touching, _ = colliding_contacts(contacts, motion, v, dt, self.window(scheme))
        M = system.M(state.q)  # the impact happens at q (the step's problem is at motion.q0)
        comp = step_problem(cone, contacts, M, J, v, active=touching)
        sol_c = solve(comp.problem, solver=solver)
        v_c = comp.velocity(sol_c.z)
        c_n, c_f = comp.normal(sol_c.z), comp.friction(sol_c.z)
        e = contacts.restitution
        e_t = (e if self.tangential is None else jnp.broadcast_to(self.tangential, e.shape))[:, None]
        I_r = comp.N @ (e * c_n) + jnp.einsum("cdv,cd->v", comp.T, e_t * c_f)
        decompress = touching & (not self.expedient)
        decomp = step_problem(cone, contacts, M, J, v_c + jnp.linalg.solve(M, I_r), active=decompress)
        sol_d = solve(decomp.problem, solver=solver)
        return Impact(
            v=decomp.velocity(sol_d.z),
            normal=(1 + e) * c_n + decomp.normal(sol_d.z),
            friction=(1 + e_t) * c_f + decomp.friction(sol_d.z),
            joint=comp.joint(sol_c.z) + decomp.joint(sol_d.z),
            residual=jnp.maximum(sol_c.residual, sol_d.residual),
            converged=sol_c.converged & sol_d.converged,
        )


def resolve_impact(system, state, *, dt, scheme, law, solver=None, cone=None):
    """The impact of `law` at `state` alone, as the dense step starts it: an `Impact`.

    For tests and analysis; `simulate(impact=law)` runs it in every step.
    """
    contacts = system.contacts(state.q)
    cone = default_cone(system, contacts) if cone is None else cone
    motion = dynamics.free_motion(system, state.t, state.q, state.v, dt)
    J = system.constraint_jacobian(state.q)
    solver = SemismoothNewton() if solver is None else solver
    return law.resolve(system, contacts, motion, J, state, dt=dt, scheme=scheme, solver=solver, cone=cone)


# The names the papers use, kept for users' code.
Newton = NewtonRestitution
Poisson = PoissonRestitution
