"""Random convex hulls dropped onto a box table, the floor and a static hull: how deep a mesh goes.

python benchmarks/mesh_drops.py [--draws 100] [--steps 150] [--dt 0.01]

Each draw is a random hull of 6-19 points (radius 0.03-0.2 m, stretched 0.4-1.6 along each axis), of mass
0.1-10 kg (log-uniform) and mu 0.1-1.5, in a random orientation with v in [-1, 1] m/s and w in [-5, 5] rad/s,
released 0.25-0.6 m above (its lowest vertex at least 2 cm above) a Box((0.3, 0.3, 0.15)) table, the floor
beside it, or a static hull of 48 points resting on the floor (a flattened ellipsoid 0.7 m wide and 0.24 m
high), in turn. Every scene holds all three, so plane-mesh, box-mesh and mesh-mesh contacts are all tried.
The draws run as one `vmap` (float64): their meshes are padded to common counts (`geometry.pad_meshes`) and
their systems stacked. Penetration is each hull vertex's depth below the floor or inside the table or the
static hull, over every step. It prints, per surface, the draws deeper than 1 and 2 mm and the deepest, and
whether every step converged.
"""

import argparse
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxrbd as rbd
from jaxrbd import _rotation as rot
from jaxrbd import geometry

TABLE = np.array([0.3, 0.3, 0.15])  # the table's half extents; it stands on the floor at the origin
ROCK_AT = np.array([-1.0, 0.0, 0.0])  # a static hull on the floor (a flattened ellipsoid of 48 points)
_rng = np.random.default_rng(2026)
_x = _rng.normal(size=(48, 3))
ROCK = _x / np.linalg.norm(_x, axis=1, keepdims=True) * (0.35, 0.35, 0.12)
ROCK = ROCK - (0.0, 0.0, ROCK[:, 2].min())  # resting on the floor
_rock = geometry.hull(ROCK)
SURFACES = ("table", "floor", "rock")
_ABOVE = {"table": (0.0, 0.0, 2 * TABLE[2]), "floor": (1.0, 0.0, 0.0), "rock": ROCK_AT + (0.0, 0.0, ROCK[:, 2].max())}


def draw(seed):
    """(scene, hull points, surface) of one draw."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rng.integers(6, 20), 3))
    points = x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.03, 0.2) * rng.uniform(0.4, 1.6, (1, 3))
    surface = SURFACES[seed % 3]
    builder = rbd.SceneBuilder(gravity=(0.0, 0.0, -9.81), mu=float(rng.uniform(0.1, 1.5)))
    builder.add_static("floor", rbd.Plane())
    builder.add_static("table", rbd.Box(tuple(TABLE), position=(0.0, 0.0, TABLE[2])))
    builder.add_static("rock", rbd.ConvexMesh(ROCK, position=tuple(ROCK_AT)))
    q = rng.normal(size=4)
    q = q / np.linalg.norm(q)
    position = np.asarray(_ABOVE[surface]) + rng.uniform((-0.1, -0.1, 0.25), (0.1, 0.1, 0.6))
    # A long hull's lowest vertex could start inside the surface: lift it to 2 cm above.
    below = -np.min((points @ np.asarray(rot.to_matrix(jnp.asarray(q))).T)[:, 2])
    position[2] = max(position[2], _ABOVE[surface][2] + below + 0.02)
    builder.add_body(
        "hull",
        rbd.ConvexMesh(points),
        mass=float(np.exp(rng.uniform(np.log(0.1), np.log(10.0)))),
        position=tuple(position),
        orientation=tuple(q),
        velocity=tuple(rng.uniform(-1.0, 1.0, 3)),
        angular_velocity=tuple(rng.uniform(-5.0, 5.0, 3)),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the draws' own warnings (none expected) would drown the table
        return builder.build(), points, surface


def stacked(scenes):
    """The scenes' systems and states stacked along a batch axis, their meshes padded to common counts."""
    systems = [scene.system for scene in scenes]
    shapes = [dict(system.params.shapes) for system in systems]
    for kind in shapes[0]:
        if "face_index" in shapes[0][kind]:  # every scene holds the same meshes (the rock, the hull): pad each
            count = np.shape(shapes[0][kind]["face_index"])[0]
            padded = [
                geometry.pad_meshes([{k: np.asarray(v)[i] for k, v in s[kind].items()} for s in shapes])
                for i in range(count)
            ]
            for j, s in enumerate(shapes):
                s[kind] = {k: jnp.stack([jnp.asarray(p[j][k]) for p in padded]) for k in padded[0][j]}
    systems = [eqx.tree_at(lambda s: s.params.shapes, system, s) for system, s in zip(systems, shapes)]
    stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)
    return stack(systems), stack([scene.state for scene in scenes])


def depths(q, points, surface):
    """(steps + 1,) the deepest vertex's penetration at each step (0 where none penetrates): below the floor,
    inside the table or inside the rock."""
    R = np.asarray(jax.vmap(rot.to_matrix)(jnp.asarray(q[:, 3:7])))
    V = q[:, None, :3] + np.einsum("tij,vj->tvi", R, points)
    inside = [-V[..., 2]]
    table = np.minimum.reduce([TABLE[0] - np.abs(V[..., 0]), TABLE[1] - np.abs(V[..., 1]), 2 * TABLE[2] - V[..., 2]])
    inside.append(np.minimum(table, V[..., 2]))
    inside.append(np.min(_rock["offsets"] - (V - ROCK_AT) @ _rock["normals"].T, axis=-1))
    return np.maximum(np.max(inside, axis=0).max(axis=1), 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--dt", type=float, default=0.01)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    start = time.perf_counter()
    draws = [draw(seed) for seed in range(args.draws)]
    system, state = stacked([d[0] for d in draws])
    built = time.perf_counter() - start

    def run(system, state):
        traj = rbd.simulate(system, state, dt=args.dt, steps=args.steps)
        return traj.q, traj.stats.converged, traj.stats.residual

    q, converged, residual = jax.block_until_ready(jax.jit(jax.vmap(run))(system, state))
    ran = time.perf_counter() - start - built
    deepest = np.array([depths(np.asarray(q[i]), d[1], d[2]).max() for i, d in enumerate(draws)])
    surface = np.array([d[2] for d in draws])
    print(f"{args.draws} draws, {args.steps} steps at h = {args.dt}: built in {built:.1f} s, ran in {ran:.1f} s")
    print(f"{'surface':<10}{'draws':>7}{'> 1 mm':>8}{'> 2 mm':>8}{'deepest mm':>12}{'draw':>6}")
    for name in SURFACES:
        mask = surface == name
        d = np.where(mask, deepest, -1.0)
        print(
            f"{name:<10}{int(mask.sum()):>7}{int((d > 1e-3).sum()):>8}{int((d > 2e-3).sum()):>8}"
            f"{1e3 * d.max():>12.2f}{int(d.argmax()):>6}"
        )
    print(
        f"steps converged: {int(np.asarray(converged).sum())} of {converged.size}; "
        f"largest residual {float(np.max(residual)):.1e}"
    )


if __name__ == "__main__":
    main()
