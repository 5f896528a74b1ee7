"""The family of step solvers: one interface, one rule that picks one."""

import abc

import equinox as eqx


class StepSolver(eqx.Module):
    """A way to solve a time step: the dense Newton step (`DenseStep`) or `ContactSweeps`.

    Every step solver reads the same contact record (`System.contacts`) and the same
    dynamics (`jaxrbd.dynamics`); they differ only in how the step's complementarity
    problem is assembled and solved.
    """

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """A short label, as the benchmark prints it."""

    @abc.abstractmethod
    def supports(self, system, options):
        """None when this solver can run the step with these `StepOptions`, else a string saying why not."""

    @abc.abstractmethod
    def init(self, system, state, cone):
        """The warm start z0 of the first step."""

    @abc.abstractmethod
    def step(self, system, state, z, options):
        """One step with these `StepOptions`: (next state, z for the next warm start, `ContactImpulses`,
        `StepStats`)."""
