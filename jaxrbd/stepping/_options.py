"""`StepOptions`: the options of a time step, resolved and checked once, then given to every step solver."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._validate import check_value
from ..cones import Cone, PolyhedralCone
from ._impacts import ImpactLaw
from ._rows import default_cone
from ._schemes import Scheme, StewartTrinkle


class StepOptions(eqx.Module):
    """What a step is asked to do, beside the system and the state: one record for `choose_solver`,
    `StepSolver.supports` and `StepSolver.step`.

    Build it with `StepOptions.resolve`, which fills the defaults and checks every
    option once; `simulate` does that from its keywords.

    Attributes:
        dt: the step size h > 0 (None while only choosing a solver).
        scheme: the time-stepping scheme, `StewartTrinkle` or `AnitescuPotra`.
        cone: the friction cone (`jaxrbd.cones`).
        impact: the impact law (`NewtonRestitution`, `PoissonRestitution`) or None
            (inelastic, the papers' schemes).
        grad_smoothing: the smoothing of the backward pass (`solve_lcp`).
        project_joints: whether q is moved back to g(q) = 0 after every step.
    """

    dt: object
    scheme: Scheme
    cone: Cone
    impact: ImpactLaw | None
    grad_smoothing: object
    project_joints: bool = eqx.field(static=True)

    @classmethod
    def resolve(
        cls,
        system,
        state,
        *,
        dt=None,
        scheme=None,
        cone=None,
        impact=None,
        grad_smoothing=0.0,
        project_joints=True,
    ) -> "StepOptions":
        """The options with their defaults, checked against the system.

        Args:
            system: the `System` to step.
            state: its `State` (the contacts' shapes are read at state.q).
            dt: the step size, or None when the options only choose a solver.
            scheme: None (`StewartTrinkle()`) or a `Scheme`.
            cone: None (`system.friction`, else the polyhedral or planar default) or a cone.
            impact: None or an `ImpactLaw`.
            grad_smoothing: >= 0.
            project_joints: True or False.

        Raises:
            TypeError: an option of the wrong kind.
            ValueError: grad_smoothing < 0, a cone whose dimension does not fit the contacts, or a scheme's
                compliance with a cone that is not polyhedral.
        """
        scheme = StewartTrinkle() if scheme is None else scheme
        if not isinstance(scheme, Scheme):
            raise TypeError(f"scheme must be jaxrbd.StewartTrinkle(...) or jaxrbd.AnitescuPotra(...), got {scheme!r}")
        if cone is not None and not isinstance(cone, Cone):
            raise TypeError(f"cone must be a jaxrbd.cones cone, got {cone!r}")
        if impact is not None and not isinstance(impact, ImpactLaw):
            raise TypeError(
                f"impact must be None, jaxrbd.NewtonRestitution() or jaxrbd.PoissonRestitution(), got {impact!r}"
            )
        if not isinstance(project_joints, bool):
            raise TypeError(f"project_joints must be True or False, got {project_joints!r}")
        check_value("grad_smoothing", grad_smoothing, shape=(), nonnegative=True)
        cone = system.friction if cone is None else cone
        if cone is None:  # the default fits the contacts' tangents by construction
            cone = default_cone(system, system.contact_shapes(state.q))
        else:
            jax.eval_shape(lambda q: system.contacts(q).friction_rows(cone.dim), state.q)  # a clear error on a mismatch
        if scheme.compliance and not isinstance(cone, PolyhedralCone):
            raise ValueError(
                f"scheme.compliance = {scheme.compliance} needs a polyhedral or planar cone (an LCP step), "
                f"got {type(cone).__name__}"
            )
        # The cone's coefficients in the state's precision: float64 scales would promote a float32 step.
        dtype = jnp.result_type(state.q, float)
        cone = jax.tree_util.tree_map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, cone)
        return cls(dt, scheme, cone, impact, grad_smoothing, project_joints)
