"""jaxrbd: a differentiable rigid-body simulator in JAX for contact, Coulomb friction and impact.

The pipeline, one module (or subpackage) per stage, data flowing one way:

    model (System, State) / bodies (SceneBuilder) -> geometry (shapes, collision)
    -> Contacts (one record per step) -> cones -> complementarity -> stepping -> sysid, batch

`import jaxrbd` changes no process-wide setting; `jaxrbd.configure()` applies the
compilation cache and CPU settings that jaxrbd's programs want.
"""

from . import analysis as analysis
from . import bodies as bodies
from . import complementarity as complementarity
from . import cones as cones
from . import dynamics as dynamics
from . import foreign as foreign
from . import geometry as geometry
from . import mjcf as mjcf
from . import reference as reference
from . import scenes as scenes
from . import stepping as stepping
from . import sysid as sysid
from ._config import Configuration as Configuration
from ._config import configure as configure
from ._contacts import Contacts as Contacts
from ._problems import LCP as LCP
from ._problems import NCP as NCP
from ._problems import FrictionLCP as FrictionLCP
from ._problems import friction_lcp as friction_lcp
from ._problems import natural_residual as natural_residual
from ._random import random_friction_lcp as random_friction_lcp
from .batch import UnconvergedLanes as UnconvergedLanes
from .batch import sweep as sweep
from .batch import unconverged_lanes as unconverged_lanes
from .bodies import SceneBuilder as SceneBuilder
from .complementarity import LCPSolution as LCPSolution
from .complementarity import Lemke as Lemke
from .complementarity import SemismoothNewton as SemismoothNewton
from .complementarity import Solution as Solution
from .complementarity import Status as Status
from .complementarity import solve_lcp as solve_lcp
from .complementarity import solve_ncp as solve_ncp
from .cones import EllipticCone as EllipticCone
from .cones import MixedCone as MixedCone
from .cones import PlanarCone as PlanarCone
from .cones import PolyhedralCone as PolyhedralCone
from .cones import SoftFingerCone as SoftFingerCone
from .geometry import Box as Box
from .geometry import BroadPhase as BroadPhase
from .geometry import Capsule as Capsule
from .geometry import ConvexMesh as ConvexMesh
from .geometry import Plane as Plane
from .geometry import Sphere as Sphere
from .mjcf import MjcfScene as MjcfScene
from .mjcf import load_mjcf as load_mjcf
from .model import Scene as Scene
from .model import State as State
from .model import System as System
from .stepping import AnitescuPotra as AnitescuPotra
from .stepping import ContactImpulses as ContactImpulses
from .stepping import ContactSweeps as ContactSweeps
from .stepping import DenseStep as DenseStep
from .stepping import Newton as Newton
from .stepping import NewtonRestitution as NewtonRestitution
from .stepping import Poisson as Poisson
from .stepping import PoissonRestitution as PoissonRestitution
from .stepping import StepOptions as StepOptions
from .stepping import StepStats as StepStats
from .stepping import StepStatus as StepStatus
from .stepping import StewartTrinkle as StewartTrinkle
from .stepping import Trajectory as Trajectory
from .stepping import choose_solver as choose_solver
from .stepping import simulate as simulate

__version__ = "0.1.0"
