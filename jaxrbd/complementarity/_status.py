"""Solver status: an enumeration of codes with the message each one stands for."""

import enum


class Status(enum.IntEnum):
    """The status of a complementarity solve (`LCPSolution.status`, an int array under `jit`).

    Compare codes with the members (`sol.status == Status.SUCCESS`); `Status.message(code)`
    says what a code means.
    """

    SUCCESS = 0
    MAX_STEPS = 1
    RAY = 2
    NONFINITE = 3

    @classmethod
    def message(cls, code):
        """The sentence for a status code (an int or a scalar array)."""
        return _MESSAGES[cls(int(code))]


_MESSAGES = {
    Status.SUCCESS: "converged: the natural residual is at or below the tolerance",
    Status.MAX_STEPS: "ran out of iterations (or Lemke pivots) with the residual above the tolerance",
    Status.RAY: "Lemke ended on a secondary ray: no solution was found",
    Status.NONFINITE: "NaN or inf in the data or the iterates",
}
