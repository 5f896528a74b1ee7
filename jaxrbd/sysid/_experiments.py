"""Many experiments (`Experiments`) and multiple shooting (`MultipleShooting`): the problem forms with structure."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._validate import check_value
from ._losses import _residual_rows


class Experiments(eqx.Module):
    """A batch of E experiments of one system, observed with the same shapes.

    Attributes:
        observed: (E, T, n) the data; NaN entries are missing observations.
        inputs: a pytree whose leaves have the leading axis E: what differs
            between experiments and is known (initial states, time step, slope,
            ...); `predict(params, inputs_e)` receives one experiment's slice.
            None: nothing.
        mask: (E, T, n), (E, n) or (E,) 1 where observed, 0 where not (partial
            observations; an experiment whose mask is all 0 drops out of the fit
            without changing any shape, hence without recompiling). None: all 1.
        weights: (n,) weight per column (for example 1 / sigma_i^2). None: all 1.
    """

    observed: jax.Array
    inputs: object
    mask: jax.Array
    weights: jax.Array

    def __init__(self, observed, inputs=None, mask=None, weights=None):
        observed = jnp.asarray(observed, dtype=jnp.result_type(observed, float))
        if observed.ndim != 3:
            raise ValueError(f"observed must have shape (E, T, n), got {observed.shape}")
        E = observed.shape[0]
        for leaf in jax.tree_util.tree_leaves(inputs):
            if np.ndim(leaf) == 0 or np.shape(leaf)[0] != E:
                raise ValueError(f"every leaf of inputs needs the leading axis E = {E}, got shape {np.shape(leaf)}")
        if mask is None:
            mask = jnp.ones(observed.shape, observed.dtype)
        else:
            mask = jnp.asarray(mask, observed.dtype)
            if mask.ndim == 1:
                mask = mask[:, None, None]
            elif mask.ndim == 2:
                mask = mask[:, None, :]
            try:
                mask = jnp.broadcast_to(mask, observed.shape)
            except ValueError:
                raise ValueError(f"mask of shape {mask.shape} does not fit observed {observed.shape}") from None
        weights = (
            jnp.ones(observed.shape[-1:], observed.dtype) if weights is None else jnp.asarray(weights, observed.dtype)
        )
        if weights.shape != observed.shape[-1:]:
            raise ValueError(f"weights must have shape {observed.shape[-1:]}, got {weights.shape}")
        self.observed = observed
        self.inputs = inputs
        self.mask = mask
        self.weights = weights

    @property
    def count(self):
        """E, the number of experiments."""
        return self.observed.shape[0]


class MultipleShooting(eqx.Module):
    """Residuals of a long or chaotic trajectory cut into K segments, each simulated from its own start state.

    One rollout over a long horizon makes a rugged loss: a small change of a
    parameter moves a late bounce or a tumble by whole steps. Multiple shooting
    fits the start state of every segment (the nodes, nuisance parameters)
    beside the physical parameters, and ties the segments together by the
    defects: the state a segment ends in minus the next segment's start,
    weighted by `continuity` (a penalty, not a constraint; at an exact fit of
    noise-free data the defects are 0).

        def run(params, node):          # one segment from the node (z, vz)
            scene = ...                 # built from params and node
            traj = rbd.simulate(*scene, dt=dt, steps=L, impact=rbd.NewtonRestitution())
            return traj.q[:L, 2:3], jnp.stack([traj.q[L, 2], traj.v[L, 2]])

        shooting = rbd.sysid.MultipleShooting(run, L)
        nodes = shooting.nodes_from(states)    # (K, m): every L-th row of a first guess of the states
        result = rbd.sysid.fit(residuals=shooting, data=observed, params={"e": 0.5, "nodes": nodes},
                               optimizer=rbd.sysid.LevenbergMarquardt())
        shooting.defects(result.params)        # (K - 1, m)

    Attributes:
        run: run(params, node) -> (pred, end): the segment from the node state
            (an array of m numbers, in whatever coordinates the user chooses:
            only what the observations and the dynamics need), its (L, n)
            prediction of the observations at the segment's steps 0 .. L - 1,
            and its state after L steps in the node's coordinates. `params`
            holds every parameter but the nodes; `run` is `vmap`ped over the
            segments.
        segment_steps: L, the steps of one segment (>= 1).
        continuity: the weight of the defects (> 0): a defect d enters the
            residuals as continuity * d, beside the prediction errors.
        nodes: the name of the nodes' entry in the parameters, shape (K, m).

    The data are the observed trajectory, (K L, n), NaN where not observed.
    Pass the same object (or an equal one: same function, L, weight and name)
    to every fit: the compiled step is cached on it.
    """

    run: object = eqx.field(static=True)
    segment_steps: int = eqx.field(static=True)
    continuity: float = eqx.field(static=True, default=1.0)
    nodes: str = eqx.field(static=True, default="nodes")

    def __check_init__(self):
        if not callable(self.run):
            raise TypeError(f"MultipleShooting: run must be a function (params, node) -> (pred, end), got {self.run!r}")
        L = self.segment_steps
        if not isinstance(L, int) or isinstance(L, bool) or L < 1:
            raise ValueError(f"MultipleShooting: segment_steps must be an integer >= 1, got {L!r}")
        check_value("MultipleShooting: continuity", self.continuity, shape=(), positive=True)
        if not isinstance(self.nodes, str):
            raise TypeError(f"MultipleShooting: nodes must be the name of a parameter, got {self.nodes!r}")

    def _segments(self, params):
        """(pred (K, L, n), end (K, m), nodes (K, m)) for the parameters."""
        if self.nodes not in params:
            raise KeyError(
                f"MultipleShooting: the parameters have no entry {self.nodes!r} (the segments' start states)"
            )
        nodes = jnp.asarray(params[self.nodes])
        if nodes.ndim != 2:
            raise ValueError(f"MultipleShooting: params[{self.nodes!r}] must have shape (K, m), got {nodes.shape}")
        physical = {k: v for k, v in params.items() if k != self.nodes}
        pred, end = jax.vmap(lambda node: self.run(physical, node))(nodes)
        pred, end = jnp.asarray(pred), jnp.asarray(end)
        K, L = nodes.shape[0], self.segment_steps
        if pred.ndim != 3 or pred.shape[:2] != (K, L):
            raise ValueError(
                f"MultipleShooting: run must return a prediction of shape (L, n) = ({L}, n) per "
                f"segment, got {pred.shape[1:]}"
            )
        if end.shape != nodes.shape:
            raise ValueError(
                f"MultipleShooting: run must return the end state in the node's shape {nodes.shape[1:]}, "
                f"got {end.shape[1:]}"
            )
        return pred, end, nodes

    def __call__(self, params, observed):
        """(r, valid): the prediction errors of every segment, then the weighted defects."""
        pred, end, nodes = self._segments(params)
        K, L, n = pred.shape
        observed = jnp.asarray(observed, pred.dtype)
        if observed.shape != (K * L, n):
            raise ValueError(
                f"MultipleShooting: observed must have shape (K L, n) = ({K * L}, {n}) for K = {K} "
                f"segments of L = {L} steps, got {observed.shape}"
            )
        r_fit, valid = _residual_rows(pred.reshape(K * L, n), observed, 1.0, jnp.ones((n,), pred.dtype))
        gaps = self.continuity * (end[:-1] - nodes[1:]).reshape(-1)
        return jnp.concatenate([r_fit, gaps]), jnp.concatenate([valid, jnp.ones_like(gaps)])

    def defects(self, params):
        """(K - 1, m): where each segment ends minus where the next one starts (unweighted)."""
        _, end, nodes = self._segments(params)
        return end[:-1] - nodes[1:]

    def nodes_from(self, states):
        """(K, m): the start state of every segment, rows 0, L, 2 L, ... of `states` (T, m), a first guess of the
        states at every step (from the data: positions observed, velocities by differences)."""
        states = jnp.asarray(states)
        if states.ndim != 2 or states.shape[0] < self.segment_steps:
            raise ValueError(
                f"MultipleShooting.nodes_from: states must have shape (T, m) with T >= L = "
                f"{self.segment_steps}, got {states.shape}"
            )
        return states[:: self.segment_steps][: states.shape[0] // self.segment_steps]


def _split(params, per_experiment):
    return {k: v for k, v in params.items() if k not in per_experiment}, {k: params[k] for k in per_experiment}


def _experiment_functions(predict, per_experiment):
    """The residual function and its per-experiment Jacobian (jacrev per experiment) for `predict`."""

    def one(shared, own, inputs, observed, mask, weights):
        r, valid = _residual_rows(jnp.asarray(predict({**shared, **own}, inputs)), observed, mask, weights)
        return r, (r, valid)

    def each(fn, shared, own, exps):
        # One experiment after another (`lax.map`), not `vmap`ped: a `vmap` batches the simulator's dense solves,
        # and on jaxlib 0.10.2's CPU backend two batched LAPACK kernels at once can deadlock its thread pool (ten
        # throws of a cube hung every time; see `violation_residuals`).
        return jax.lax.map(lambda xs: fn(shared, *xs, exps.weights), (own, exps.inputs, exps.observed, exps.mask))

    def residuals(params, exps):
        shared, own = _split(params, per_experiment)
        _, (r, valid) = each(one, shared, own, exps)
        return r.reshape(-1), valid.reshape(-1)

    def jacobian(params, exps):
        shared, own = _split(params, per_experiment)
        (Js, Jo), (r, valid) = each(jax.jacrev(one, argnums=(0, 1), has_aux=True), shared, own, exps)
        return (Js, Jo), r, valid

    return residuals, jacobian
