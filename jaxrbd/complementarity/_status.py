"""Solver status: an enumeration of codes with the message each one stands for."""

from .._status import StatusCode


class Status(StatusCode):
    """The status of a complementarity solve (`Solution.status`, an int array under `jit`).

    Compare codes with the members (`sol.status == Status.SUCCESS`); `Status.message(code)`
    says what a code means.
    """

    SUCCESS = 0, "converged: the natural residual is at or below the tolerance"
    MAX_STEPS = 1, "ran out of iterations (or Lemke pivots) with the residual above the tolerance"
    RAY = 2, "Lemke ended on a secondary ray: no solution was found"
    NONFINITE = 3, "NaN or inf in the data or the iterates"
