"""The free rotation of rigid bodies over a step (the energy-momentum step) and its reverse-mode derivative.

`free_rotation` is the rotational part of `jaxrbd.bodies._model.free_flight`. Its forward pass
solves each body's midpoint equation (`midpoint_rate`, a damped Newton loop, with
`SUBSTEPS` substeps for the bodies that need them). Its reverse pass is written
for rollouts, where it runs once per step:

- the forward pass's results and midpoint rate W carry the name `FLIGHT`
  (`jax.ad_checkpoint.checkpoint_name`), which the rollout's checkpoint policy
  keeps: the reverse pass neither runs the Newton loop again nor carries the
  residuals of the `cond` between one step and the substeps, which automatic
  differentiation of the forward pass took out of both branches;
- a step where every body took one step (every lane, `every_lane`) is
  differentiated through the one step from the saved W, whose derivative is the
  implicit-function derivative of the midpoint equation (`_at_root`). Against
  automatic differentiation of the same forward pass this takes a tenth off
  sphere_grid(64)'s gradient (17.3 against 19.2 ms, float32, one process);
- a step in which some body took substeps (rare: fast spins of elongated bodies)
  is differentiated, in a branch that runs only then, through each of its substeps
  from their saved midpoint rates in the same way, the other bodies through their
  one step. Neither branch holds a Newton loop, so the reverse pass of a rollout
  compiles without one (`cube_toss()`'s gradient program: 19,733 lines of
  StableHLO against 23,807 when this branch differentiated the whole forward pass).
"""

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from .. import _rotation as rot
from .._lanes import every_lane
from .._small import matmul, matvec, solve3

MIDPOINT_ITERATIONS = 12
ROUND_OFF = 4  # a body's damped steps stop at |r| <= ROUND_OFF eps |L|
LINE_SEARCH = 8
SUBSTEPS = 8
FLIGHT = "jaxrbd.free_flight"  # the name of what `free_rotation`'s reverse pass needs


def midpoint_rate(inertia, L, h):
    """((..., 3) W, (...,) solved): the midpoint rate of the energy-momentum step, I W + (h/2) W x (I W) = L.

    Damped Newton from W = I^-1 L: at most `MIDPOINT_ITERATIONS` steps (none for a
    body whose residual is round-off, `ROUND_OFF`), each the longest
    of 1, 1/2, ..., 2^-(LINE_SEARCH - 1) that decreases |r| (all trials evaluated
    at once), outside the autodiff graph; then one differentiable Newton step at
    the root, whose derivative is the implicit-function derivative -J^-1 dr/dtheta.
    The equation is a perturbation of size h |W| / 2 of I W = L; for large h |W|
    on elongated bodies this iteration can miss the root (on random spins, some
    from h |W| ~ 3 at principal moments 1 : 10, ~1 at 1 : 100, ~0.3 at 1 : 1000),
    and `solved` says whether |r| <= 1000 eps |L|.
    """

    def residual(W, inertia, L, h):
        IW = matvec(inertia, W)
        return IW + 0.5 * h * jnp.cross(W, IW) - L

    def direction(W, inertia, L, h):
        IW = matvec(inertia, W)
        J = inertia + 0.5 * h * (matmul(rot.skew(W), inertia) - rot.skew(IW))
        return -solve3(J, residual(W, inertia, L, h))

    inertia_c, L_c, h_c = jax.lax.stop_gradient((inertia, L, h))
    steps = 0.5 ** jnp.arange(LINE_SEARCH, dtype=L.dtype)

    def damped(_, W):
        d = direction(W, inertia_c, L_c, h_c)
        trials = W[..., None, :] + steps[:, None] * d[..., None, :]  # (..., LINE_SEARCH, 3)
        norms = jnp.linalg.norm(residual(trials, inertia_c[..., None, :, :], L_c[..., None, :], h_c), axis=-1)
        better = norms < jnp.linalg.norm(residual(W, inertia_c, L_c, h_c), axis=-1)[..., None]
        first = jnp.argmax(better, axis=-1)
        step = jnp.where(jnp.any(better, -1), steps[first], 0.0)
        return W + step[..., None] * d

    eps, tiny = jnp.finfo(L.dtype).eps, jnp.finfo(L.dtype).tiny
    size = jnp.linalg.norm(L_c, axis=-1)

    def open_(W):  # bodies whose residual is above round-off
        return jnp.linalg.norm(residual(W, inertia_c, L_c, h_c), axis=-1) > ROUND_OFF * eps * size + tiny

    def going(c):
        k, W = c
        return (k < MIDPOINT_ITERATIONS) & jnp.any(open_(W))

    def step(c):
        k, W = c
        return k + 1, jnp.where(open_(W)[..., None], damped(k, W), W)

    # From W = I^-1 L, exact for a body with equal principal moments (a sphere, a
    # cube): no damped step at all then.
    _, W = jax.lax.while_loop(going, step, (jnp.array(0), solve3(inertia_c, L_c)))
    W = W + direction(W, inertia, L, h)  # differentiable at the root
    error = jnp.linalg.norm(residual(W, inertia_c, L_c, h_c), axis=-1)
    return W, error <= 1e3 * eps * size + tiny


def _turn(quat, inertia, L, h, W):
    """The energy-momentum step of length h at the midpoint rate W: (quat+, L+ = 2 I W - L, in the turned body
    frame)."""
    return rot.multiply(quat, rot.cayley(h * W)), 2.0 * matvec(inertia, W) - L


def _rotate(quat, inertia, L, h, substeps):
    """`substeps` energy-momentum steps of h / substeps: (quat+, body rate+, solved, (substeps, nb, 3) the midpoint
    rates)."""

    def substep(carry, _):
        quat, L, solved = carry
        W, ok = midpoint_rate(inertia, L, h / substeps)
        return (*_turn(quat, inertia, L, h / substeps, W), solved & ok), W

    carry = quat, L, jnp.ones(L.shape[:-1], bool)
    (quat, L, solved), Ws = jax.lax.scan(substep, carry, None, length=substeps)
    return quat, solve3(inertia, L), solved, Ws


def _energy_momentum(quat, inertia, L, h):
    """`energy_momentum_rotation`'s results, then what the reverse pass reads: the one-step midpoint rate, whether
    every body (of every lane) took the one step, the substeps' midpoint rates (zeros where every body took the
    one step) and which bodies took the one step."""
    single = _rotate(quat, inertia, L, h, 1)
    one_step = every_lane(single[2])

    def substepped(_):
        sub = _rotate(quat, inertia, L, h, SUBSTEPS)
        pick = lambda one, many: jnp.where(single[2][:, None], one, many)
        return jax.tree.map(pick, single[:2], sub[:2]) + (single[2] | sub[2], sub[3])

    def stepped(_):
        return single[:3] + (jnp.zeros((SUBSTEPS,) + L.shape, L.dtype),)

    quat_next, rate_next, solved, Ws = jax.lax.cond(one_step, stepped, substepped, None)
    return quat_next, rate_next, solved, single[3][0], one_step, Ws, single[2]


def energy_momentum_rotation(quat, inertia, L, h):
    """((nb, 4) quat+, (nb, 3) body rate+, (nb,) solved): the free rotation of each body over a step.

    The energy-momentum step (`jaxrbd.bodies._model.free_flight`); the bodies whose midpoint
    equation is not solved in one step (`midpoint_rate`) take `SUBSTEPS` steps of
    h / SUBSTEPS instead, which keep the same invariants. `solved` is False for a
    body that neither solves. Under `vmap` the substeps run only in the steps where
    some lane of the batch needs them (`every_lane`).
    """
    return _energy_momentum(quat, inertia, L, h)[:3]


def _rotation_arrays(quat, w, p, inertia, h, rotate=None):
    """`free_rotation`, then the one-step midpoint rate and whether every body took one step; `rotate(quat, inertia,
    L, h) -> (quat+, body rate+, ...)` in place of `_energy_momentum` (the rest of its results are returned)."""
    quat = rot.normalize(quat)
    Rt = jnp.swapaxes(rot.to_matrix(quat), -1, -2)
    L = matvec(inertia, matvec(Rt, w)) + matvec(Rt, p)
    quat_next, rate_next, *rest = (_energy_momentum if rotate is None else rotate)(quat, inertia, L, h)
    w_next = matvec(rot.to_matrix(quat_next), rate_next)
    quat0 = rot.multiply(rot.cayley(-h * w_next), quat_next)
    turn = rot.cayley_vector(rot.multiply(quat0, rot.conjugate(quat)))
    return (w_next, quat0, turn), rest


@jax.custom_vjp
def free_rotation(quat, w, p, inertia, h):
    """Each body's rotation over a step of length h, without contact (`jaxrbd.bodies._model.free_flight`).

    Args:
        quat: (nb, 4) the orientations (normalized here).
        w: (nb, 3) the angular velocities, world frame.
        p: (nb, 3) the angular impulses of the forces over the step, world frame.
        inertia: (nb, 3, 3) the inertia tensors, body frame.
        h: () the step length.

    Returns:
        (w_next (nb, 3), quat0 (nb, 4), turn (nb, 3), solved (nb,)): the angular
        velocity at the end of the step, the orientation the step integrates from
        (`jaxrbd.bodies._model.free_flight`), the Cayley vector from quat to quat0 and whether
        each body's midpoint equation was solved (`energy_momentum_rotation`).
    """
    (w_next, quat0, turn), (solved, *_) = _rotation_arrays(quat, w, p, inertia, h)
    return w_next, quat0, turn, solved


def _free_rotation_fwd(quat, w, p, inertia, h):
    (w_next, quat0, turn), (solved, *roots) = jax.tree.map(
        lambda x: checkpoint_name(x, FLIGHT), _rotation_arrays(quat, w, p, inertia, h)
    )
    return (w_next, quat0, turn, solved), (quat, w, p, inertia, h, *roots)


def _free_rotation_bwd(residuals, cotangents):
    *arguments, W, one_step_taken, Ws, single = residuals
    cotangents = cotangents[:3]  # `solved` has none

    def one_step(quat, inertia, L, h):
        quat_next, L_next = _turn(quat, inertia, L, h, _at_root(W, inertia, L, h))
        return quat_next, solve3(inertia, L_next)

    def substeps(quat, inertia, L, h):  # the bodies that did not take one step, through their saved substeps
        def substep(carry, W):
            quat, L = carry
            return _turn(quat, inertia, L, h / SUBSTEPS, _at_root(W, inertia, L, h / SUBSTEPS)), None

        many, _ = jax.lax.scan(substep, (quat, L), Ws)
        one = _turn(quat, inertia, L, h, _at_root(W, inertia, L, h))
        quat_next, L_next = jax.tree.map(lambda one, many: jnp.where(single[:, None], one, many), one, many)
        return quat_next, solve3(inertia, L_next)

    def differentiated(rotate):
        return lambda: jax.vjp(lambda *a: _rotation_arrays(*a, rotate=rotate)[0], *arguments)[1](cotangents)

    return jax.lax.cond(every_lane(one_step_taken), differentiated(one_step), differentiated(substeps))


@jax.custom_jvp
def _at_root(W, inertia, L, h):
    """W, a root of the midpoint equation r = I W + (h/2) W x I W - L = 0 (`midpoint_rate`), with its derivative
    dW = -J^-1 dr as a function of (I, L, h) (implicit function theorem; J = dr/dW)."""
    del inertia, L, h
    return W


@_at_root.defjvp
def _at_root_jvp(primals, tangents):
    (W, inertia, _, h), (_, d_inertia, dL, dh) = primals, tangents
    IW, dI_W = matvec(inertia, W), matvec(d_inertia, W)
    dr = dI_W + 0.5 * h * jnp.cross(W, dI_W) + 0.5 * dh * jnp.cross(W, IW) - dL
    J = inertia + 0.5 * h * (matmul(rot.skew(W), inertia) - rot.skew(IW))
    return W, -solve3(J, dr)


free_rotation.defvjp(_free_rotation_fwd, _free_rotation_bwd)
