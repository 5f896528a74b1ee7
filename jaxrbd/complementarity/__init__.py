"""Complementarity solvers with implicit gradients."""

from ._implicit import Adjoint as Adjoint
from ._implicit import DenseAdjoint as DenseAdjoint
from ._implicit import implicit_solve as implicit_solve
from ._solve import LCPSolution as LCPSolution
from ._solve import Solution as Solution
from ._solve import solve as solve
from ._solve import solve_lcp as solve_lcp
from ._solve import solve_ncp as solve_ncp
from ._solvers import Lemke as Lemke
from ._solvers import SemismoothNewton as SemismoothNewton
from ._solvers import Solver as Solver
from ._solvers import within_tolerance as within_tolerance
from ._status import Status as Status
