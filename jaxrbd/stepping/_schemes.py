"""Time-stepping schemes: which normal rows a step has and which contacts it keeps (003 §3, 000 §2)."""

import abc

import equinox as eqx

from .._validate import check_value

MAX_COMPLIANCE = 1e-2  # a selection among the rigid solutions, not a soft contact model


class Scheme(eqx.Module):
    """A time-stepping scheme: the form of the normal rows and the contacts in the step.

    A scheme says whether its normal rows are position-level (f(q) + h n^T v+ >= 0)
    or velocity-level (n^T v+ >= 0), the activation distance `delta` (None:
    every contact the geometry keeps) and the normal rows' `compliance`. The step
    solvers read these; the scheme holds no dynamics of its own.
    """

    compliance: float = eqx.field(static=True, default=0.0, kw_only=True)

    def __check_init__(self):
        rho = self.compliance
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 <= rho <= MAX_COMPLIANCE:
            raise ValueError(f"compliance must be a number in [0, {MAX_COMPLIANCE}], got {rho!r}")

    @property
    @abc.abstractmethod
    def position_level(self) -> bool:
        """Whether the normal rows carry the gap offset f / h."""

    @property
    def fixed_point_iterations(self) -> int:
        """Re-solves with the geometry at the estimate of q+ (003 §3.4); 0: linearized."""
        return 0

    @property
    def projects(self) -> bool:
        """Whether the drift is projected back to the admissible set after each step."""
        return False


class StewartTrinkle(Scheme):
    """Stewart-Trinkle: the position-level constraint f(q) + h n^T v+ >= 0 (003 eq. (13)-(20)).

    Attributes:
        fixed_point_iterations: 0 gives the linearized scheme of 003 §3.1-3.2, with
            n, D, M and F at q. k > 0 gives the nonlinear version of 003 §3.4: the
            step is re-solved k times with the geometry re-evaluated at the last
            estimate q^ of q+, using the constraint f(q^) + grad f(q^)^T (q+ - q^) >= 0.
        delta: contacts whose gap f(q + h G v) exceeds delta are left out of the
            LCP (masked rows); None keeps every contact.
        compliance: rho >= 0 (keyword only), the contact points' relative compliance: the
            compliant load split of the step's LCP (`jaxrbd.friction_lcp`; the
            simulating guide, "One load split where many solve"). 0: rigid rows.
    """

    fixed_point_iterations: int = eqx.field(static=True, default=0)
    delta: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        k = self.fixed_point_iterations
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"fixed_point_iterations must be an integer >= 0, got {k!r}")
        if self.delta is not None:
            check_value("delta", self.delta, shape=(), nonnegative=True, finite=False)

    @property
    def position_level(self):
        return True


class AnitescuPotra(Scheme):
    """Anitescu-Potra: the velocity-level constraint n^T v+ >= 0 on the active set (000 eq. (14), 003 §3.3).

    The LCP is solvable for every configuration. A contact is active when its
    predicted gap f(q + h G v) is below delta.

    Attributes:
        delta: the activation distance, >= 0.
        compliance: as `StewartTrinkle`'s.
        project: project the drift back to the admissible set after each step, by
            the smallest M-norm correction of the linearized gaps (a frictionless
            LCP; 000 §2.5). Velocities are unchanged.
    """

    delta: float = eqx.field(static=True, default=1e-3)
    project: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        check_value("delta", self.delta, shape=(), nonnegative=True, finite=False)
        if not isinstance(self.project, bool):
            raise TypeError(f"project must be True or False, got {self.project!r}")

    @property
    def position_level(self):
        return False

    @property
    def projects(self):
        return self.project
