"""The free rotation of rigid bodies over a step (the energy-momentum step) and its reverse-mode derivative.

`free_rotation` is the rotational part of `BodyModel.free_flight`. Its forward pass
solves each body's midpoint equation (`midpoint_rate`, a damped Newton loop, with
`SUBSTEPS` substeps for the bodies that need them). Its reverse pass is written
for rollouts, where it runs once per step:

- the forward pass's results and midpoint rate W carry the name `FLIGHT`
  (`jax.ad_checkpoint.checkpoint_name`), which the rollout's checkpoint policy
  keeps, so the reverse pass does not run the Newton loop again;
- the derivative of the step is taken on the same arithmetic written per
  component (a quaternion is 4 arrays, a 3 x 3 matrix 9), from the saved W
  through the implicit function theorem. On (nb, 4) and (nb, 3, 3) arrays, every
  component read by a slice costs a pad in the transposed program, and the
  automatic derivative of one step was about 80 small XLA operations; per component,
  forward and transpose are elementwise arithmetic that fuses;
- a step in which some body took substeps (rare: fast spins of elongated bodies)
  is differentiated automatically, in a branch that runs only then (`every_lane`).
"""

import functools

import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from .. import _rotation as rot
from .._lanes import every_lane
from .._small import cramer3, matmul, matvec, solve3

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


def _rotate(quat, inertia, L, h, substeps):
    """`substeps` energy-momentum steps of h / substeps: (quat+, body rate+, solved, the last midpoint rate)."""

    def substep(_, carry):
        quat, L, solved, _ = carry
        W, ok = midpoint_rate(inertia, L, h / substeps)
        L = 2.0 * matvec(inertia, W) - L  # L+ = 2 I W - L, in the turned body frame
        return rot.multiply(quat, rot.cayley(h / substeps * W)), L, solved & ok, W

    carry = quat, L, jnp.ones(L.shape[:-1], bool), jnp.zeros_like(L)
    quat, L, solved, W = jax.lax.fori_loop(0, substeps, substep, carry)
    return quat, solve3(inertia, L), solved, W


def _energy_momentum(quat, inertia, L, h):
    """`energy_momentum_rotation`'s results, then the one-step midpoint rate and whether every body (of every
    lane) took the one step."""
    single = _rotate(quat, inertia, L, h, 1)
    one_step = every_lane(single[2])

    def substepped(_):
        sub = _rotate(quat, inertia, L, h, SUBSTEPS)
        pick = lambda one, many: jnp.where(single[2][:, None], one, many)
        return jax.tree.map(pick, single[:2], sub[:2]) + (single[2] | sub[2],)

    return jax.lax.cond(one_step, lambda _: single[:3], substepped, None) + (single[3], one_step)


def energy_momentum_rotation(quat, inertia, L, h):
    """((nb, 4) quat+, (nb, 3) body rate+, (nb,) solved): the free rotation of each body over a step.

    The energy-momentum step (`BodyModel.free_flight`); the bodies whose midpoint
    equation is not solved in one step (`midpoint_rate`) take `SUBSTEPS` steps of
    h / SUBSTEPS instead, which keep the same invariants. `solved` is False for a
    body that neither solves. Under `vmap` the substeps run only in the steps where
    some lane of the batch needs them (`every_lane`).
    """
    return _energy_momentum(quat, inertia, L, h)[:3]


def _rotation_arrays(quat, w, p, inertia, h):
    """`free_rotation` on arrays: its results, the one-step midpoint rate and whether every body took one step."""
    quat = rot.normalize(quat)
    Rt = jnp.swapaxes(rot.to_matrix(quat), -1, -2)
    L = matvec(inertia, matvec(Rt, w)) + matvec(Rt, p)
    quat_next, rate_next, solved, W, one_step = _energy_momentum(quat, inertia, L, h)
    w_next = matvec(rot.to_matrix(quat_next), rate_next)
    quat0 = rot.multiply(rot.cayley(-h * w_next), quat_next)
    turn = rot.cayley_vector(rot.multiply(quat0, rot.conjugate(quat)))
    return (w_next, quat0, turn, solved), W, one_step


@jax.custom_vjp
def free_rotation(quat, w, p, inertia, h):
    """Each body's rotation over a step of length h, without contact (`BodyModel.free_flight`).

    Args:
        quat: (nb, 4) the orientations (normalized here).
        w: (nb, 3) the angular velocities, world frame.
        p: (nb, 3) the angular impulses of the forces over the step, world frame.
        inertia: (nb, 3, 3) the inertia tensors, body frame.
        h: () the step length.

    Returns:
        (w_next (nb, 3), quat0 (nb, 4), turn (nb, 3), solved (nb,)): the angular
        velocity at the end of the step, the orientation the step integrates from
        (`BodyModel.free_flight`), the Cayley vector from quat to quat0 and whether
        each body's midpoint equation was solved (`energy_momentum_rotation`).
    """
    return _rotation_arrays(quat, w, p, inertia, h)[0]


def _free_rotation_fwd(quat, w, p, inertia, h):
    results, W, one_step = jax.tree.map(lambda x: checkpoint_name(x, FLIGHT), _rotation_arrays(quat, w, p, inertia, h))
    return results, (quat, w, p, inertia, h, W, one_step)


def _free_rotation_bwd(residuals, cotangents):
    quat, w, p, inertia, h, W, one_step = residuals
    arguments = quat, w, p, inertia, h
    cotangents = cotangents[:3]  # `solved` has none

    def single():
        return jax.vjp(functools.partial(_one_step_arrays, W=W), *arguments)[1](cotangents)

    def substepped():
        return jax.vjp(lambda *a: _rotation_arrays(*a)[0][:3], *arguments)[1](cotangents)

    return jax.lax.cond(every_lane(one_step), single, substepped)


def _one_step_arrays(quat, w, p, inertia, h, W):
    quat = rot.normalize(quat)
    Rt = jnp.swapaxes(rot.to_matrix(quat), -1, -2)
    L = matvec(inertia, matvec(Rt, w)) + matvec(Rt, p)
    W = _root_arrays(W, inertia, L, h)
    L_next = 2.0 * matvec(inertia, W) - L
    quat_next = rot.multiply(quat, rot.cayley(h * W))
    w_next = matvec(rot.to_matrix(quat_next), solve3(inertia, L_next))
    quat0 = rot.multiply(rot.cayley(-h * w_next), quat_next)
    turn = rot.cayley_vector(rot.multiply(quat0, rot.conjugate(quat)))
    return w_next, quat0, turn


@jax.custom_jvp
def _root_arrays(W, inertia, L, h):
    del inertia, L, h
    return W


@_root_arrays.defjvp
def _root_arrays_jvp(primals, tangents):
    (W, inertia, _, h), (_, d_inertia, dL, dh) = primals, tangents
    IW, dI_W = matvec(inertia, W), matvec(d_inertia, W)
    dr = dI_W + 0.5 * h * jnp.cross(W, dI_W) + 0.5 * dh * jnp.cross(W, IW) - dL
    J = inertia + 0.5 * h * (matmul(rot.skew(W), inertia) - rot.skew(IW))
    return W, -solve3(J, dr)


free_rotation.defvjp(_free_rotation_fwd, _free_rotation_bwd)


# The same step per component: vectors are 3-tuples, quaternions 4-tuples (w, x, y, z)
# and matrices 3-tuples of rows, of (nb, 1) arrays.


def _rotation_components(q, w, p, inertia, h, W):
    """`free_rotation`'s first three results, per component, with the one-step midpoint rate W (from its forward
    pass) as the root of the midpoint equation (`_midpoint_root`)."""
    norm = jnp.sqrt(sum(c * c for c in q))
    q = tuple(c / norm for c in q)
    R = _to_matrix(q)
    L = _add(_matvec(inertia, _matvec_t(R, w)), _matvec_t(R, p))
    W = _midpoint_root(W, inertia, L, h)
    L_next = tuple(2.0 * a - b for a, b in zip(_matvec(inertia, W), L, strict=True))
    q_next = _multiply(q, _cayley(tuple(h * c for c in W)))
    numerators, det = cramer3(inertia, L_next)
    w_next = _matvec(_to_matrix(q_next), tuple(n / det for n in numerators))
    q0 = _multiply(_cayley(tuple(-h * c for c in w_next)), q_next)
    conjugate = (q[0], -q[1], -q[2], -q[3])
    turn = _multiply(q0, conjugate)
    turn = tuple(2.0 * c / turn[0] for c in turn[1:])
    return w_next, q0, turn


@jax.custom_jvp
def _midpoint_root(W, inertia, L, h):
    """W, the root of r = I W + (h/2) W x I W - L, with the derivative dW = -J^-1 dr of the root (J = dr/dW)."""
    del inertia, L, h
    return W


@_midpoint_root.defjvp
def _midpoint_root_jvp(primals, tangents):
    (W, inertia, _, h), (_, d_inertia, dL, dh) = primals, tangents
    IW, dI_W = _matvec(inertia, W), _matvec(d_inertia, W)
    dr = _add(_add(dI_W, _scale(0.5 * h, _cross(W, dI_W))), _scale(0.5 * dh, _cross(W, IW)))
    dr = tuple(a - b for a, b in zip(dr, dL, strict=True))
    # J = I + (h/2) (W^ I - (I W)^): J x = I x + (h/2) (W x I x - I W x x).
    skew_W, skew_IW = _skew(W), _skew(IW)
    W_I = tuple(tuple(sum(skew_W[r][k] * inertia[k][c] for k in range(3)) for c in range(3)) for r in range(3))
    J = tuple(tuple(inertia[r][c] + 0.5 * h * (W_I[r][c] - skew_IW[r][c]) for c in range(3)) for r in range(3))
    numerators, det = cramer3(J, dr)
    return W, tuple(-n / det for n in numerators)


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _scale(s, a):
    return tuple(s * x for x in a)


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _skew(a):
    zero = jnp.zeros_like(a[0])
    return ((zero, -a[2], a[1]), (a[2], zero, -a[0]), (-a[1], a[0], zero))


def _matvec(M, v):
    return tuple(sum(row[c] * v[c] for c in range(3)) for row in M)


def _matvec_t(M, v):
    return tuple(sum(M[r][c] * v[r] for r in range(3)) for c in range(3))


def _multiply(a, b):
    """The Hamilton product (`jaxrbd._rotation.multiply`)."""
    av, bv = a[1:], b[1:]
    scalar = a[0] * b[0] - sum(x * y for x, y in zip(av, bv, strict=True))
    vector = _add(_add(_scale(a[0], bv), _scale(b[0], av)), _cross(av, bv))
    return (scalar,) + vector


def _to_matrix(q):
    """`jaxrbd._rotation.to_matrix`."""
    w, x, y, z = q
    return (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )


def _cayley(a):
    """`jaxrbd._rotation.cayley`: (1, a / 2) normalized."""
    scale = jax.lax.rsqrt(1.0 + 0.25 * sum(c * c for c in a))
    return (scale,) + tuple(0.5 * scale * c for c in a)
