"""Friction cones: each turns a step's contact rows into a complementarity problem.

- `PolyhedralCone(k | directions=, e_t, e_o, e_r)`: the LCP of 004 §3.2 (isotropic,
  anisotropic, with or without torsion); `PlanarCone()` for one tangent direction.
- `EllipticCone(e_t, e_o)`, `SoftFingerCone(e_t, e_o, e_r)`, `MixedCone(e_t, e_o, e_r)`:
  exact smooth cones as mixed NCPs (000 eq. (18)-(22), 002 eq. (1)-(2) and example (c)).
- `PerContactCone(cones, index)`: a different cone per contact, in one mixed NCP
  (`SceneBuilder.set_pair(a, b, friction=...)` makes one).

Every cone is a `Cone`: it has `dim` (1: t; 2: t, o; 3: t, o and the torsion r), `size(nc, ng)` (the
length of its unknown z) and `build(M, N, T, mu, b, bn=, active=, J=, bj=)`, which
returns a problem with `.problem` (the LCP or NCP to solve) and the maps from its
solution z to `normal`, `friction` (contact coordinates), `joint`, `impulse` and
`velocity`.
"""

from ._base import Cone as Cone
from ._composite import PerContactCone as PerContactCone
from ._polyhedral import PlanarCone as PlanarCone
from ._polyhedral import PolyhedralCone as PolyhedralCone
from ._polyhedral import check_positive_span as check_positive_span
from ._polyhedral import polygon_directions as polygon_directions
from ._polyhedral import soft_finger_directions as soft_finger_directions
from ._smooth import EllipticCone as EllipticCone
from ._smooth import MixedCone as MixedCone
from ._smooth import SoftFingerCone as SoftFingerCone
from ._smooth import project_ball as project_ball


def is_cone(x):
    """True for a friction cone object (an instance of `Cone`)."""
    return isinstance(x, Cone)
