"""The rule that picks a step solver, and the differentiable rollout `simulate`."""

import warnings
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .. import dynamics
from .._validate import is_traced, renamed
from ..bodies._flight import FLIGHT
from ..complementarity import Solver
from ..complementarity._implicit import SOLUTION
from ..cones import Cone
from ..model import State, System, check_system
from ._dense import DenseStep
from ._impacts import ImpactLaw
from ._options import StepOptions
from ._schemes import Scheme
from ._solver import StepSolver
from ._status import StepStatus, parameter_status, step_status
from ._sweeps import ContactSweeps
from ._types import Trajectory


def _split_solver(where, solver, step_solver):
    """(solver, step_solver) with a step solver given as `solver=` moved to `step_solver` and a
    DeprecationWarning attributed to the caller of `where` (called from `simulate` or `choose_solver`)."""
    if not isinstance(solver, StepSolver):
        return solver, step_solver
    warnings.warn(
        f"{where}(solver=<a step solver>) is deprecated: pass {type(solver).__name__}(...) as step_solver=; "
        "solver= names the complementarity solver of the dense step",
        DeprecationWarning,
        stacklevel=3,
    )
    if step_solver is not None:
        raise TypeError(f"{where}: give the step solver as step_solver= only")
    return None, solver


def _step_solver(where, solver, step_solver):
    """The step solver asked for: `step_solver` (a `StepSolver`), or the dense step of the complementarity
    `solver`, or None."""
    if solver is not None and not isinstance(solver, Solver):
        raise TypeError(
            f"solver must be None or a complementarity solver (jaxrbd.SemismoothNewton(), jaxrbd.Lemke()), got {solver!r}"
        )
    if step_solver is not None and not isinstance(step_solver, StepSolver):
        raise TypeError(
            f"step_solver must be None or a step solver (jaxrbd.DenseStep(...), jaxrbd.ContactSweeps()), got {step_solver!r}"
        )
    if solver is not None and step_solver is not None:
        raise TypeError(f"{where}: give solver= (the dense step's) or step_solver=, not both")
    return DenseStep(solver) if solver is not None else step_solver


def choose_solver(
    system: System,
    state: State,
    options: StepOptions | None = None,
    *,
    solver: Solver | None = None,
    step_solver: StepSolver | None = None,
    scheme: Scheme | None = None,
    cone: Cone | None = None,
    impact: ImpactLaw | None = None,
    grad_smoothing: float | ArrayLike = 0.0,
    friction: Cone | None = None,
    restitution: ImpactLaw | None = None,
) -> StepSolver:
    """The step solver `simulate` runs with these options: one rule for `simulate`, `jaxrbd bench` and the tests.

    - A step solver that was given (`step_solver=`) runs, or a ValueError says why
      it cannot (`StepSolver.supports`); a complementarity solver given (`solver=`)
      runs the dense step.
    - Without one: a scene of rigid bodies that `ContactSweeps` supports, whose
      dense step problem has more rows than `ContactSweeps.auto_size` (`AUTO_SIZE`
      when no two contacts share a moving body, else `AUTO_SIZE_COUPLED`), runs on
      `ContactSweeps`;
      everything else on the dense step with `SemismoothNewton()`.

    Args:
        system: the `System`.
        state: its `State`.
        options: a `StepOptions` (`StepOptions.resolve`); or None, and the options as
            keywords: scheme, cone, impact, grad_smoothing (as in `simulate`).
        solver: None or a complementarity solver (as in `simulate`).
        step_solver: None or a step solver (as in `simulate`).
        scheme: see `simulate`.
        cone: see `simulate`.
        impact: see `simulate`.
        grad_smoothing: see `simulate`.
        friction: the deprecated name of `cone`.
        restitution: the deprecated name of `impact`.

    Returns:
        A `StepSolver` (its `name` says which).
    """
    cone = renamed("choose_solver", "friction", friction, "cone", cone)
    impact = renamed("choose_solver", "restitution", restitution, "impact", impact)
    if options is None:
        options = StepOptions.resolve(
            system, state, scheme=scheme, cone=cone, impact=impact, grad_smoothing=grad_smoothing
        )
    elif not isinstance(options, StepOptions):
        raise TypeError(f"options must be a jaxrbd.stepping.StepOptions or None, got {options!r}")
    elif scheme is not None or cone is not None or impact is not None or grad_smoothing:
        raise TypeError("choose_solver: give options= or the option keywords, not both")
    solver, step_solver = _split_solver("choose_solver", solver, step_solver)
    chosen = _step_solver("choose_solver", solver, step_solver)
    if chosen is not None:
        reason = chosen.supports(system, options)
        if reason is not None:
            raise ValueError(f"step solver {chosen.name}: {reason}")
        return chosen
    sweeps = ContactSweeps()
    if sweeps.supports(system, options) is None:
        ng = jax.eval_shape(system.constraint, state.q).shape[0]
        if options.cone.size(system.ncontacts(state.q), ng) > sweeps.auto_size(system):
            return sweeps
    return DenseStep()


# What a step keeps for its reverse pass: the results of the linear algebra (one
# LAPACK call each, or a loop of them) and the complementarity solves' results
# (`SOLUTION`). Everything else (matrix products, slices, elementwise arithmetic, the
# contact geometry) is recomputed there, where XLA fuses it into the transposed
# operations. Stored instead, each value is a buffer of the scan of its own, written
# by a thunk of its own in every step; on this CPU such a write costs about three
# times a small product's recomputation. Keeping the products as well made the
# gradient of a 1-second rollout cost 4.2x its forward pass on the double pendulum and
# 2.2x on the hopper, against 2.8x and 2.0x recomputed (`benchmarks/bench_robots.py`).
_KEPT_PRIMITIVES = frozenset(
    ("lu", "lu_pivots_to_permutation", "cholesky", "triangular_solve", "qr", "householder_product")
    + ("geqrf", "geqp3", "ormqr", "eigh", "svd", "tridiagonal_solve")
)


def _kept(primitive, *_, **params):
    if primitive.name == "name":
        return params["name"] in (SOLUTION, FLIGHT)
    return primitive.name in _KEPT_PRIMITIVES


def _rollout(step_fn, state, z0, steps, xs=None):
    step_fn = jax.checkpoint(step_fn, policy=_kept, prevent_cse=False)

    def body(carry, x):
        state, z = carry
        state, z, impulses, stats = step_fn(state, z, x)
        return (state, z), (state, impulses, stats)

    _, (states, impulses, stats) = jax.lax.scan(body, (state, z0), xs, length=steps)
    cat = lambda x0, xs: jnp.concatenate([x0[None], xs])
    return Trajectory(cat(state.t, states.t), cat(state.q, states.q), cat(state.v, states.v), impulses, stats)


def _warn_inelastic(system, impact):
    """Warn when the contacts carry restitution but no impact law will use it."""
    if impact is not None:
        return
    e = [] if system.restitution is None or is_traced(system.restitution) else [np.ravel(system.restitution)]
    model = system.bodies
    stops = model.stop_restitution(system.params) if model is not None and model.limits else None
    if stops is not None and not is_traced(stops):
        e.append(np.asarray(stops))  # the range stops
    e = np.concatenate(e) if e else np.zeros(0)
    if not np.any(e != 0):
        return
    warnings.warn(
        f"simulate: the contacts have restitution coefficients up to {e.max():.3g}, but without an "
        "impact law every contact is inelastic; pass impact=rbd.NewtonRestitution() or rbd.PoissonRestitution() to make "
        "them bounce",
        UserWarning,
        stacklevel=3,
    )


def _raise_on_bad_status(traj):
    """`traj`, with an `equinox.error_if` that raises the first bad step's `StepStatus` message."""
    status = traj.stats.status
    bad = status != StepStatus.SUCCESS
    first = status[jnp.argmax(bad)]
    messages = [f"simulate: a step failed (StepStatus.{code.name}): {StepStatus.message(code)}" for code in StepStatus]
    return eqx.branched_error_if(traj, jnp.any(bad), first, messages)


def _check_steps(dt, steps):
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps!r}")
    if not isinstance(dt, jax.core.Tracer):
        dt_value = np.asarray(dt)
        if dt_value.shape != () or not np.isfinite(dt_value) or not dt_value > 0:
            raise ValueError(f"dt must be a finite scalar > 0, got {dt!r}")


def _check_controls(system, state, controls, steps):
    """The controls as an array (steps, nu) or a function, checked against the system's motors (ValueError naming `controls`)."""
    if controls is None:
        return None
    model = system.bodies
    if model is None or not model.motors:
        raise ValueError(
            "controls: the system has no motors to drive; declare them with SceneBuilder.add_motor (nu = their number)"
        )
    nu = len(model.motors)
    if callable(controls):
        try:
            out = jax.eval_shape(controls, state.t, state)
        except Exception as err:
            raise ValueError(f"controls: the function u(t, state) failed on the initial state: {err}") from err
        if not hasattr(out, "shape") or out.shape != (nu,):
            got = getattr(out, "shape", type(out).__name__)
            raise ValueError(f"controls: the function u(t, state) must return shape ({nu},) (nu motors), got {got}")
        return controls
    u = jnp.asarray(controls)
    if u.shape != (steps, nu):
        raise ValueError(
            f"controls must be an array of shape (steps, nu) = ({steps}, {nu}) or a function u(t, state) -> ({nu},), "
            f"got shape {u.shape}"
        )
    return u


def simulate(
    system: System,
    state: State,
    *,
    dt: float | ArrayLike,
    steps: int,
    scheme: Scheme | None = None,
    solver: Solver | None = None,
    cone: Cone | None = None,
    grad_smoothing: float | ArrayLike = 0.0,
    impact: ImpactLaw | None = None,
    project_joints: bool = True,
    throw: bool = False,
    controls: ArrayLike | Callable | None = None,
    friction: Cone | None = None,
    restitution: ImpactLaw | None = None,
    step_solver: StepSolver | None = None,
) -> Trajectory:
    """Roll the system forward `steps` steps of size `dt` in a `lax.scan`.

    The solution of each step warm-starts the next. The rollout is `jit`-,
    `vmap`- and `grad`-compatible; gradients flow through every step's implicit
    differentiation rule.

    Args:
        system: a `System`.
        state: the initial `State`.
        dt: step size h > 0.
        steps: number of steps (static int >= 1).
        scheme: `StewartTrinkle()` (default) or `AnitescuPotra(...)`.
        solver: the complementarity solver of the dense step (`SemismoothNewton()`,
            `Lemke()`). None, with no `step_solver`: `choose_solver`
            picks one.
        cone: the friction cone (`jaxrbd.cones`); None uses `system.friction`
            or, without one, the polyhedral (or planar) default.
        grad_smoothing: passed to `solve_lcp` for the backward pass.
        impact: the impact law: None (inelastic, the papers' schemes),
            `NewtonRestitution()` or `PoissonRestitution(...)`; the coefficients are
            `system.restitution`.
        project_joints: move q back to g(q) = 0 after every step and before the
            first (`jaxrbd.dynamics.project_to_joints`); without it the joints drift.
        throw: raise (through `equinox.error_if`, so also under `jit`) when a step's
            status is not SUCCESS, with the first bad step's `StepStatus` message.
            False (default): the status is only reported, so that one bad lane of a
            `vmap`ped batch does not stop the others.
        controls: the control input of the scene's motors (`SceneBuilder.add_motor`),
            held constant over each step: an array (steps, nu), row k applied in
            step k (replayed logs; an array leaf, so `jax.grad` flows to it), or a
            function u(t, state) -> (nu,) of the state at the start of the step.
            None: `system.params.control` (zeros as built) in every step.
        friction: the deprecated name of `cone`.
        restitution: the deprecated name of `impact`.
        step_solver: the step solver: `DenseStep(...)` or `ContactSweeps()` (sparse
            block Gauss-Seidel for scenes of rigid bodies); None: the dense step of
            `solver`, or what `choose_solver` picks.

    The options are resolved and checked once (`StepOptions.resolve`) and given to
    the step solver as one record. Concrete inputs are checked on the host (`check_system`); a scene whose
    contacts carry restitution, simulated without an impact law, gives one warning.

    Returns:
        A `Trajectory`; check `traj.stats.converged` (every step reports its
        residual) and `traj.stats.status` (a `StepStatus` per step: why it failed).
        The impulses of the joint ranges' stops are `traj.impulses.limit`
        (`scene.bodies.limit_rows()` says which is which).
    """
    _check_steps(dt, steps)
    if not isinstance(throw, bool):
        raise TypeError(f"throw must be True or False, got {throw!r}")
    cone = renamed("simulate", "friction", friction, "cone", cone)
    impact = renamed("simulate", "restitution", restitution, "impact", impact)
    solver, step_solver = _split_solver("simulate", solver, step_solver)
    check_system(system, state)
    dtype = jnp.result_type(state.q, state.v, float)
    state = State(jnp.asarray(state.t, dtype), jnp.asarray(state.q, dtype), jnp.asarray(state.v, dtype))
    options = StepOptions.resolve(
        system,
        state,
        dt=dt,
        scheme=scheme,
        cone=cone,
        impact=impact,
        grad_smoothing=grad_smoothing,
        project_joints=project_joints,
    )
    _warn_inelastic(system, impact)
    controls = _check_controls(system, state, controls, steps)
    step_solver = choose_solver(system, state, options, solver=solver, step_solver=step_solver)
    if project_joints:
        state = State(state.t, dynamics.project_to_joints(system, state.q), state.v)
    parameters = parameter_status(system, dt)

    def step_fn(state, z, u):
        stepped = system
        if controls is not None:  # the motors' forces enter through external_force (`jaxrbd.bodies._model.motor_force`)
            u = controls(state.t, state) if callable(controls) else u
            stepped = eqx.tree_at(lambda s: s.params.control, system, jnp.asarray(u, dtype))
        new_state, z, impulses, stats = step_solver.step(stepped, state, z, options)
        return new_state, z, impulses, step_status(parameters, state, new_state, impulses, stats)

    xs = controls if controls is not None and not callable(controls) else None
    traj = _rollout(step_fn, state, step_solver.init(system, state, options.cone), steps, xs)
    return _raise_on_bad_status(traj) if throw else traj
