"""Contact geometry: shapes, the collision table of closed-form pairs, the driver and the broad phase.

- `_shapes`: `Plane`, `Sphere`, `Capsule`, `Box`, `ConvexMesh` (array leaves, a pose on their body);
- `_pairs`: the closed-form pairs registered in `COLLIDERS` with their capacity,
  keyed by the pair of kinds in the order plane < sphere < capsule < box < mesh; each
  returns a fixed number of candidate contacts with the gap f (>= 0 when
  separated), the unit normal n from the first shape to the second and the
  contact point x (the midpoint of the two witness points). Gaps are exact signed
  distances of the convex primitives (box-plane: the signed distances of the
  lowest corners), so the rows built from n and x are grad f exactly;
- `_boxes`: box-box (separating axes, the clipped face manifold, 8 contacts; 2
  in planar scenes), capsule-box (4) and capsule-capsule (2); the
  least gap of a pair is its exact signed distance, each contact's gap the exact
  distance of its point to the reference face;
- `_convex`: `ConvexMesh` pairs (plane, sphere, capsule, box, mesh): the hull on
  the host, separating axes over face normals and edge pairs, the clipped face
  manifold (4 contacts; capsule 2, sphere 1), exact distances when separated;
- `_driver`: `collide`, every shape pair of a scene at once (`Collision`);
- `_broadphase`: `BroadPhase`, the nearest pairs in fixed slots.
"""

from ._boxes import box_box as box_box
from ._boxes import capsule_box as capsule_box
from ._broadphase import BroadPhase as BroadPhase
from ._broadphase import bounding_gaps as bounding_gaps
from ._broadphase import select as select
from ._convex import box_mesh as box_mesh
from ._convex import capsule_mesh as capsule_mesh
from ._convex import hull as hull
from ._convex import mesh_mesh as mesh_mesh
from ._convex import pad_meshes as pad_meshes
from ._convex import plane_mesh as plane_mesh
from ._convex import sphere_mesh as sphere_mesh
from ._driver import Collision as Collision
from ._driver import PairGroup as PairGroup
from ._driver import collide as collide
from ._driver import take as take
from ._pairs import COLLIDERS as COLLIDERS
from ._pairs import capsule_capsule as capsule_capsule
from ._pairs import collider as collider
from ._pairs import contact_frame as contact_frame
from ._pairs import planar_tangent as planar_tangent
from ._pairs import plane_box as plane_box
from ._pairs import plane_capsule as plane_capsule
from ._pairs import plane_sphere as plane_sphere
from ._pairs import safe_norm as safe_norm
from ._pairs import sphere_box as sphere_box
from ._pairs import sphere_capsule as sphere_capsule
from ._pairs import sphere_sphere as sphere_sphere
from ._pairs import world_pose as world_pose
from ._shapes import KINDS as KINDS
from ._shapes import Box as Box
from ._shapes import Capsule as Capsule
from ._shapes import ConvexMesh as ConvexMesh
from ._shapes import Plane as Plane
from ._shapes import Shape as Shape
from ._shapes import Sphere as Sphere
