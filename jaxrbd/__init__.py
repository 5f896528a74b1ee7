"""jaxrbd: a differentiable rigid-body simulator in JAX for contact, Coulomb friction and impact.

The pipeline, one module (or subpackage) per stage, data flowing one way:

    model (System, State) / bodies (SceneBuilder) -> geometry (shapes, collision)
    -> Contacts (one record per step) -> cones -> complementarity -> stepping -> sysid, batch
"""

_SERIAL_LAPACK_FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler=false"


def _configure_cpu():
    """Two CPU settings that small dense solves need, applied before JAX starts its CPU backend.

    1. XLA's concurrency-optimized scheduler off. jaxlib 0.10.2 on CPU: a vmapped
       batch of dense solves (B >= 512) can deadlock when two thunks run batched
       LAPACK kernels at once, each waiting in `ParallelBatchMap` for tasks of the
       same 2-thread pool (seen in gdb). The flag is read when the backend starts,
       so it is set here unless XLA_FLAGS already names it; a backend started
       before `import jaxrbd` keeps its scheduler, and a warning says so.
    2. One OpenBLAS thread (scipy's OpenBLAS, which jaxlib's LAPACK kernels call),
       unless OPENBLAS_NUM_THREADS says otherwise. The step's matrices are 10-100
       rows, too small to split, and OpenBLAS's idle threads spin: on a 2-core host
       with one other busy process the four-ball rollout ran at 63 steps/s with two
       threads and 4,149 with one.
    """
    import os
    import warnings

    import jax._src.xla_bridge as xla_bridge

    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_enable_concurrency_optimized_scheduler" not in flags:
        if xla_bridge.backends_are_initialized():
            warnings.warn(
                "jaxrbd: JAX's backend started before `import jaxrbd`; batched dense solves may deadlock on jaxlib "
                f"0.10.2 CPU. Set XLA_FLAGS={_SERIAL_LAPACK_FLAG} before the first JAX computation.",
                stacklevel=3,
            )
        else:
            os.environ["XLA_FLAGS"] = f"{flags} {_SERIAL_LAPACK_FLAG}".strip()
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        import scipy.linalg.cython_lapack  # noqa: F401  (loads the OpenBLAS that jaxlib calls)
        import threadpoolctl

        threadpoolctl.threadpool_limits(1, user_api="blas")


_configure_cpu()


def _configure_compilation_cache():
    """The persistent compilation cache on: a program that took over a second to compile is kept on disk.

    A fit or a sweep compiles for 20-100 s; with the cache, the next process that
    builds the same program (the same scene, shapes and options) loads it instead.
    The directory is JAXRBD_CACHE_DIR (default ~/.cache/jaxrbd/xla), bounded to
    2 GiB (least recently used first out). A cache directory the user already
    gave JAX (JAX_COMPILATION_CACHE_DIR or `jax.config`) is kept as it is.
    JAXRBD_CACHE=0 leaves the cache off; `jax.config.update("jax_enable_compilation_cache", False)`
    turns it off after import.
    """
    import os

    import jax

    if os.environ.get("JAXRBD_CACHE", "1").strip().lower() in ("0", "false", "off", "no"):
        return
    if jax.config.jax_compilation_cache_dir:
        return
    path = os.environ.get("JAXRBD_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jaxrbd", "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_compilation_cache_max_size", 2 * 1024**3)
    _date_unbounded_entries(path)


def _date_unbounded_entries(path):
    """Give every entry of the cache directory the access-time file that a bounded cache keeps beside it.

    JAX's size-bounded cache reads `KEY-atime` for every `KEY-cache` when it
    evicts; an entry written without a bound (an earlier jaxrbd, or JAX with
    this directory and no size limit) has none, and then every write fails with
    a warning. Such entries are dated now, once, when the cache is opened.
    """
    import os
    import time

    try:
        names = set(os.listdir(path))
    except OSError:  # not created yet, or not readable: JAX reports what it cannot do itself
        return
    stamp = time.time_ns().to_bytes(8, "little")
    for name in names:
        if name.endswith("-cache") and name[: -len("-cache")] + "-atime" not in names:
            try:
                with open(os.path.join(path, name[: -len("-cache")] + "-atime"), "wb") as f:
                    f.write(stamp)
            except OSError:
                return


_configure_compilation_cache()

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
from ._contacts import Contacts as Contacts
from ._problems import LCP as LCP
from ._problems import NCP as NCP
from ._problems import FrictionLCP as FrictionLCP
from ._problems import friction_lcp as friction_lcp
from ._problems import natural_residual as natural_residual
from ._random import random_friction_lcp as random_friction_lcp
from .batch import sweep as sweep
from .bodies import SceneBuilder as SceneBuilder
from .complementarity import LCPSolution as LCPSolution
from .complementarity import Lemke as Lemke
from .complementarity import SemismoothNewton as SemismoothNewton
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
from .stepping import StepStats as StepStats
from .stepping import StepStatus as StepStatus
from .stepping import StewartTrinkle as StewartTrinkle
from .stepping import Trajectory as Trajectory
from .stepping import choose_solver as choose_solver
from .stepping import simulate as simulate

__version__ = "0.1.0"
