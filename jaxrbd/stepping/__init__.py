"""Time stepping: schemes, impact laws, the step solvers and the rollout.

- `_schemes`: `StewartTrinkle`, `AnitescuPotra` (the `Scheme` family);
- `_impacts`: `NewtonRestitution`, `PoissonRestitution` (the `ImpactLaw` family);
- `_rows`: the step problem assembled from the contact record;
- `_options`: `StepOptions`, the options of a step resolved once;
- `_solver`: the `StepSolver` interface; `_dense`: `DenseStep`; `_sweeps`: `ContactSweeps`;
- `_status`: `StepStatus`, why a step is bad, found from traced values;
- `_rollout`: `choose_solver` (the one rule) and `simulate`.
"""

from ._dense import DenseStep as DenseStep
from ._dense import step_problem_at as step_problem_at
from ._impacts import Impact as Impact
from ._impacts import ImpactLaw as ImpactLaw
from ._impacts import Newton as Newton
from ._impacts import NewtonRestitution as NewtonRestitution
from ._impacts import Poisson as Poisson
from ._impacts import PoissonRestitution as PoissonRestitution
from ._impacts import resolve_impact as resolve_impact
from ._options import StepOptions as StepOptions
from ._rollout import choose_solver as choose_solver
from ._rollout import simulate as simulate
from ._rows import default_cone as default_cone
from ._schemes import AnitescuPotra as AnitescuPotra
from ._schemes import Scheme as Scheme
from ._schemes import StewartTrinkle as StewartTrinkle
from ._solver import StepSolver as StepSolver
from ._status import StepStatus as StepStatus
from ._sweeps import AUTO_SIZE as AUTO_SIZE
from ._sweeps import AUTO_SIZE_COUPLED as AUTO_SIZE_COUPLED
from ._sweeps import ContactSweeps as ContactSweeps
from ._types import ContactImpulses as ContactImpulses
from ._types import StepStats as StepStats
from ._types import Trajectory as Trajectory
