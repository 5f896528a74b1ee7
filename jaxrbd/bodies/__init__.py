"""Rigid bodies: the scene builder (`_builder`) and the body model (`_model`): bodies and shapes compiled to a `System`.

A scene is a set of moving bodies, each carrying primitive shapes
(`jaxrbd.geometry`), and static geometry. `SceneBuilder` declares it and `build()`
compiles it to the same `System` the steppers run (000 §2.4 and §5):

- spatial scenes (dim=3): per moving body q holds its centre of mass (3) then its
  unit quaternion wxyz (4); v holds its linear velocity (3) then its angular
  velocity (3), both in the world frame. dq/dt = G(q) v with G = diag(I, E(quat)),
  M = diag(m I, R I_body R^T), and the gyroscopic force -w x (R I_body R^T) w;
- planar scenes (dim=2): bodies move in the x-y plane with q = (x, y, theta) and
  v = (vx, vy, omega); contacts have one tangent direction.

Every physical quantity (masses, inertias, shape sizes and offsets, gravity,
applied forces, mu, restitution) is an array leaf of `system.params` or
`system.mu`, so a scene can be differentiated and vmapped; the layout (which body
carries which shape, which pairs can touch) is static.
"""

from .._contacts import Contacts as Contacts
from ._builder import GRAVITY as GRAVITY
from ._builder import SceneBuilder as SceneBuilder
from ._model import BodyModel as BodyModel
from ._model import BodyParams as BodyParams
from ._model import JointParams as JointParams
from ._model import MotorParams as MotorParams
from ._tree import ActuatorParams as ActuatorParams
from ._tree import Tree as Tree
from ._tree import TreeParams as TreeParams
