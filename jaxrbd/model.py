"""Mechanical systems in generalized coordinates (000 §2 and §5, 003 §2).

A `System` holds the user's functions (mass matrix, potential, external force,
kinematic map G, gaps, tangential velocity maps) as static fields and every
physical parameter as an array leaf in `params` and `mu`, so that a parameter can
be traced under `grad` and `vmap`. jaxrbd derives the rest by autodiff: the
contact normals n_j = G^T grad f_j, the Coriolis/centrifugal term k(q, v) and
the polyhedral friction directions.
"""

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._contacts import Contacts, from_gaps
from ._validate import check_inertia, check_value, is_traced


class State(eqx.Module):
    """Time, generalized coordinates q (nq,) and velocities v (nv,)."""

    t: jax.Array
    q: jax.Array
    v: jax.Array


def _no_force(t, q, v, params):
    return jnp.zeros_like(v)


class System(eqx.Module):
    """A mechanical system with unilateral frictional contacts, in generalized coordinates.

    The equations of motion are M(q) dv/dt = k(q, v) - G(q)^T grad V(q) + F_ext(t, q, v)
    + contact forces, with dq/dt = G(q) v (000 eq. (2), (36)).

    Attributes:
        params: a pytree of arrays, the physical parameters; passed to every function.
        mu: (nc,) friction coefficients, one per contact.
        mass_matrix: ``(q, params) -> (nv, nv)`` symmetric positive definite M(q).
        potential: ``(q, params) -> ()`` potential energy V(q).
        gaps: ``(q, params) -> (nc,)`` gap functions f_j(q); f_j >= 0 is admissible.
        tangents: ``(q, params) -> (nc, m, nv)`` the tangential velocity map of each
            contact, with m = 1 (planar: one tangent direction) or m = 2 (spatial:
            two orthogonal tangent directions t, o). Its rows are the velocity
            Jacobians of the contact point along the tangents.
        external_force: ``(t, q, v, params) -> (nv,)`` generalized external force.
        kinematics: ``(q, params) -> (nq, nv)`` the map G(q) in dq/dt = G(q) v; None
            means G = I (q and v of the same size).
        velocity_map: ``(q, v, params) -> (nq,)`` the product G(q) v without forming
            G (rigid bodies: per body, O(nb) where G is O(nb^2)); None uses
            `kinematics`.
        directions: with two tangents and no `friction` cone, the number k >= 3 of
            equally spaced directions of the default `PolyhedralCone(k)`.
        coriolis_force: ``(q, v, params) -> (nv,)`` the Coriolis/centrifugal force in
            closed form (rigid bodies: the gyroscopic term); None derives it from M
            and G by autodiff (`coriolis`).
        free_flight: ``(q, v, p, h, params) -> (v_free, q0, shift, solved)``: the motion
            over a step of length h after the impulse p = h F of every force but the
            Coriolis one, which it integrates implicitly (rigid bodies: the
            energy-momentum rotation, `jaxrbd.bodies._model.free_flight`). The step then
            integrates q+ = normalize(q0 + h G(q0) v+) with M(q0), and shift (nv,)
            is the displacement from q to q0 in velocity coordinates; solved () says
            whether the implicit equations were solved. None: the
            Coriolis force is explicit, v_free = v + h M(q)^-1 F, q0 = q.
        passive: ``(q, params) -> (A, B)``, (nv, nv) symmetric positive semidefinite
            each (rigid bodies: the joints' armature and dampers and the free-body
            dampers, `jaxrbd.bodies._model.passive`). A is the part of M that `free_flight` leaves
            out; B a damping whose force -B v every step takes at v+ (implicitly:
            the step's mass matrix is M + h B). None: neither.
        normalize: ``q -> q`` applied after every step (rigid bodies: unit
            quaternions, 000 §5); None leaves q as the step makes it.
        contact_active: ``(q, params) -> (nc,) bool`` candidate contacts to keep in
            the step (the geometry's active mask); None keeps all.
        restitution: (nc,) restitution coefficients in [0, 1], one per contact, used
            by the impact laws (`jaxrbd.NewtonRestitution`, `jaxrbd.PoissonRestitution`); None means 0.
        constraints: ``(q, params) -> (ng,)`` bilateral joint constraints g(q) = 0
            (000 eq. (15)); their velocity rows J = (dg/dq) G(q) enter the step as
            equality rows. None: no joints.
        torsions: ``(q, params) -> (nc, nv)`` the relative spin of each contact about
            its normal (the torsional row J_r), needed by soft-finger cones. None:
            no torsional friction.
        friction: the friction cone (`jaxrbd.cones`), a pytree whose scales are
            array leaves; None uses `PolyhedralCone(directions)` (two tangents) or
            `PlanarCone()` (one tangent).
        bodies: for scenes of rigid bodies, the static `jaxrbd.bodies.BodyModel`
            whose per-body structure the sparse solver `ContactSweeps` uses; None
            for systems given by their functions.
        bias_force: ``(q, v, params) -> (nv,)`` the Coriolis, centrifugal and
            gravitational force together, k(q, v) - G^T grad V(q), in one pass
            (kinematic trees: recursive Newton-Euler, `jaxrbd.bodies._tree.bias_force`);
            None derives it from `coriolis_force` (or M) and `potential`, which
            stays the energy's potential either way.
        advance: ``(q, v, h, params) -> q+``: the configuration after moving at the
            constant velocity v for h (kinematic trees: MuJoCo's `mj_integratePos`,
            quaternions turned by the exact rotation exp(h w / 2)); None:
            normalize(q + h G(q) v).
        collide: ``(q, params, mu, restitution) -> Contacts``: the whole contact
            record in one call (rigid bodies: the collision driver, which also picks
            the broad phase's slots and their mu and restitution). None derives the
            record from `gaps`, `tangents`, `torsions` and `contact_active`.
    """

    params: Any
    mu: jax.Array
    mass_matrix: Callable = eqx.field(static=True)
    potential: Callable = eqx.field(static=True)
    gaps: Callable = eqx.field(static=True)
    tangents: Callable = eqx.field(static=True)
    external_force: Callable = eqx.field(static=True, default=_no_force)
    kinematics: Callable | None = eqx.field(static=True, default=None)
    velocity_map: Callable | None = eqx.field(static=True, default=None)
    directions: int = eqx.field(static=True, default=2)
    coriolis_force: Callable | None = eqx.field(static=True, default=None)
    free_flight: Callable | None = eqx.field(static=True, default=None)
    passive: Callable | None = eqx.field(static=True, default=None)
    normalize: Callable | None = eqx.field(static=True, default=None)
    contact_active: Callable | None = eqx.field(static=True, default=None)
    restitution: jax.Array | None = None
    constraints: Callable | None = eqx.field(static=True, default=None)
    torsions: Callable | None = eqx.field(static=True, default=None)
    friction: Any = None
    bodies: Any = eqx.field(static=True, default=None)
    collide: Callable | None = eqx.field(static=True, default=None)
    bias_force: Callable | None = eqx.field(static=True, default=None)
    advance: Callable | None = eqx.field(static=True, default=None)

    def G(self, q):
        if self.kinematics is None:
            return jnp.eye(q.shape[-1], dtype=q.dtype)
        return self.kinematics(q, self.params)

    def M(self, q):
        return self.mass_matrix(q, self.params)

    def qdot(self, q, v):
        """dq/dt = G(q) v."""
        if self.velocity_map is not None:
            return self.velocity_map(q, v, self.params)
        return self.G(q) @ v

    def contacts(self, q) -> Contacts:
        """The contact record at q (`jaxrbd.Contacts`): collision runs once for all of it."""
        mu, e = self.mu, self.epsilon
        if self.collide is not None:
            return self.collide(q, self.params, mu, e)
        active = None if self.contact_active is None else self.contact_active(q, self.params)
        torsions = None if self.torsions is None else (lambda q: self.torsions(q, self.params))
        return from_gaps(
            lambda q: self.gaps(q, self.params),
            lambda q: self.tangents(q, self.params),
            torsions,
            self.G(q),
            active,
            mu,
            e,
            q,
        )

    # Single questions about the contacts, for users; the step reads `contacts(q)` once.

    def gap(self, q):
        """(nc,) the gaps f_j(q)."""
        return self.contacts(q).gap

    def normals(self, q):
        """(nv, nc) contact normals in velocity space, n_j = G(q)^T grad f_j(q) (000 §5)."""
        return self.contacts(q).J_n.T

    def contact_rows(self, q, d):
        """(nc, d, nv) the contact rows along t (d = 1), t and o (d = 2), or t, o and the torsion r (d = 3)."""
        return self.contacts(q).friction_rows(d)

    def coriolis(self, q, v):
        """k(q, v): the Coriolis and centrifugal generalized force.

        From the Lagrangian T = v^T M(q) v / 2 with dq/dt = G(q) v (Hamel's equations):
        k = G^T grad_q T - (dM/dt) v - sum_l v_l C_l^T (M v), where the columns of
        C_l are the coefficients of the Lie brackets [g_l, g_i] = G c_li of the
        columns g of G. With G = I this is 000 eq. (2).
        """
        if self.coriolis_force is not None:
            return self.coriolis_force(q, v, self.params)
        G = self.G(q)
        qdot = G @ v
        kinetic = lambda q_: 0.5 * v @ self.M(q_) @ v
        dM = jax.jvp(self.M, (q,), (qdot,))[1]
        k = G.T @ jax.grad(kinetic)(q) - dM @ v
        if self.kinematics is not None:
            # Lie brackets [G v, g_i] = (dg_i/dq) G v - (d(G v)/dq) g_i, written as G C.
            dG_along = jax.jvp(self.G, (q,), (qdot,))[1]
            dGv = jax.jacfwd(lambda q_: self.G(q_) @ v)(q)
            C = jnp.linalg.lstsq(G, dG_along - dGv @ G)[0]
            k = k + C.T @ (self.M(q) @ v)
        return k

    def generalized_force(self, t, q, v, *, coriolis=True):
        """k(q, v) - G^T grad V(q) + F_ext(t, q, v): everything but the contact forces (without k: coriolis=False)."""
        if coriolis and self.bias_force is not None:
            return self.external_force(t, q, v, self.params) + self.bias_force(q, v, self.params)
        grad_v = jax.grad(lambda q_: self.potential(q_, self.params))(q)
        if self.velocity_map is None:
            gravity = self.G(q).T @ grad_v
        else:  # G^T y as the transpose of the linear map v -> G(q) v
            gravity = jax.linear_transpose(lambda u: self.qdot(q, u), v)(grad_v)[0]
        F = self.external_force(t, q, v, self.params) - gravity
        return F + self.coriolis(q, v) if coriolis else F

    def project_q(self, q):
        """q mapped back to the configuration manifold (unit quaternions); identity by default."""
        return q if self.normalize is None else self.normalize(q)

    def active(self, q):
        """(nc,) bool: the candidate contacts the geometry keeps at q."""
        return self.contacts(q).active

    def ncontacts(self, q):
        """The number nc of contacts in a step (static)."""
        return self.contact_shapes(q).gap.shape[0]

    def contact_shapes(self, q):
        """The shapes and dtypes of the contact record at a q of q's type (`jax.eval_shape` of `contacts`).

        Traced once per system and type of q: `simulate`'s checks, its options and its
        solver choice read it, before the step traces the contacts themselves.
        """
        key = jax.typeof(q)
        if key not in self._contact_shapes:
            self._contact_shapes[key] = jax.eval_shape(self.contacts, q)
        return self._contact_shapes[key]

    @functools.cached_property
    def _contact_shapes(self):  # not a field: a rebuilt or transformed system starts without it
        return {}

    def coefficients(self, q):
        """((nc,) mu, (nc,) restitution) of the contacts at q (restitution 0 when none was given)."""
        c = self.contacts(q)
        return c.mu, c.restitution

    def overflow(self, q):
        """() int: the broad phase's candidate pairs left without a slot at q (0 without one)."""
        return self.contacts(q).overflow

    @property
    def epsilon(self):
        """(nc,) the restitution coefficients of the candidates (zeros when none were given)."""
        if self.restitution is None:
            return jnp.zeros_like(self.mu)
        return jnp.broadcast_to(self.restitution, self.mu.shape)

    def constraint(self, q):
        """(ng,) the joint constraints g(q); empty without joints."""
        if self.constraints is None:
            return jnp.zeros((0,), q.dtype)
        return self.constraints(q, self.params)

    def constraint_jacobian(self, q):
        """(ng, nv) the joint rows in velocity space, J = (dg/dq) G(q)."""
        return jax.jacfwd(self.constraint)(q) @ self.G(q)

    def energy(self, q, v):
        """Kinetic plus potential energy."""
        return 0.5 * v @ self.M(q) @ v + self.potential(q, self.params)


class Scene(eqx.Module):
    """A system and its initial state; unpacks to `(system, state)`.

    Attributes:
        system: the `System`.
        state: the initial `State`.
        bodies: for scenes of rigid bodies, the `jaxrbd.bodies.BodyModel` with the
            per-body views of q and v and the contact geometry; None otherwise.
    """

    system: System
    state: State
    bodies: Any = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_system(self.system, self.state)

    def __iter__(self):
        return iter((self.system, self.state))


def check_system(system, state):
    """ValueError naming the function whose output shape does not fit the state, or the out-of-range value.

    Concrete values are checked on the host: a finite state (nonzero quaternions in
    a scene of spatial bodies), mu >= 0, restitution in [0, 1] and, in a scene of
    rigid bodies, positive masses and positive definite inertias.
    """
    if not isinstance(system, System):
        raise TypeError(f"system must be a jaxrbd.System, got {type(system).__name__}")
    if not isinstance(state, State):
        raise TypeError(f"state must be a jaxrbd.State, got {type(state).__name__}")
    q, v = jnp.asarray(state.q), jnp.asarray(state.v)
    if q.ndim != 1 or v.ndim != 1:
        raise ValueError(f"state.q and state.v must be vectors, got shapes {q.shape} and {v.shape}")
    check_value("state.t", state.t, shape=())
    check_value("state.q", q)
    check_value("state.v", v)
    if getattr(system.bodies, "shapes_by_construction", False):  # a `jaxrbd.bodies.Tree`: no tracing to check
        check_value("system.mu", system.mu, nonnegative=True)
        system.bodies.check(system.params, q)
        return
    # A system with `collide` derives its gaps and tangents from the contact record, traced once here; for the
    # others they are the user's functions, each checked.
    record = None if system.collide is None else system.contact_shapes(q)
    nc = system.mu.shape[-1] if record is None else record.gap.shape[0]
    shapes = {
        "mass_matrix": (jax.eval_shape(system.M, q).shape, (v.shape[0], v.shape[0])),
        "kinematics": (jax.eval_shape(system.G, q).shape, (q.shape[0], v.shape[0])),
        "potential": (jax.eval_shape(lambda q: system.potential(q, system.params), q).shape, ()),
        "external_force": (
            jax.eval_shape(lambda t, q, v: system.external_force(t, q, v, system.params), state.t, q, v).shape,
            v.shape,
        ),
    }
    if record is None:
        shapes["gaps"] = (jax.eval_shape(lambda q: system.gaps(q, system.params), q).shape, (nc,))
    for name, (got, want) in shapes.items():
        if got != want:
            raise ValueError(
                f"system.{name} returns shape {got}, expected {want} (nq = {q.shape[0]}, nv = {v.shape[0]}, nc = {nc})"
            )
    if system.constraints is not None:
        g = jax.eval_shape(system.constraint, q).shape
        if len(g) != 1:
            raise ValueError(f"system.constraints returns shape {g}, expected a vector (ng,)")
    check_value("system.mu", system.mu, nonnegative=True)
    if system.restitution is not None:
        e = jnp.shape(system.restitution)
        if e not in ((), system.mu.shape):
            raise ValueError(f"system.restitution has shape {e}, expected {system.mu.shape} (that of system.mu)")
        check_value("system.restitution", system.restitution, unit_interval=True)
    if system.bodies is not None:
        system.bodies.check(system.params, q)
    if record is None:
        T = jax.eval_shape(lambda q: system.tangents(q, system.params), q).shape
    else:
        T = (nc, record.tangents, v.shape[0])
    if len(T) != 3 or T[0] != nc or T[1] not in (1, 2) or T[2] != v.shape[0]:
        raise ValueError(f"system.tangents returns shape {T}, expected ({nc}, 1 or 2, {v.shape[0]})")
    if T[1] == 2 and system.friction is None and system.directions < 3:
        raise ValueError(f"system.directions must be >= 3 with two tangent directions, got {system.directions}")


def check_bodies(bodies, params, q):
    """The leaves of a scene of rigid bodies (`BodyParams`) and its quaternions, by body name."""
    check_value("system.params.mass", params.mass, shape=(bodies.nbodies,), positive=True)
    if not is_traced(params.inertia):
        for name, inertia in zip(bodies.names, np.asarray(params.inertia)):
            check_inertia(f"system.params.inertia of body {name!r}", inertia)
    if bodies.dim == 3 and not is_traced(q):
        for name, quat in zip(bodies.names, bodies.orientations(np.asarray(q))):
            check_value(f"the quaternion of body {name!r} in state.q", quat, nonzero=True)
