"""System identification: fit physical parameters to observed trajectories by gradient descent (optax).

The package, one concern per module: `_bounds` (parameter maps), `_losses`
(`trajectory_loss`), `_experiments` (`Experiments`, `MultipleShooting`),
`_forms` (the problem objects `Loss`, `LeastSquares`, `ManyExperiments`),
`_problem` (the compiled residual Jacobian), `_uncertainty` (`uncertainty`),
`_fit` (`fit`, `LevenbergMarquardt`, `FitResult`), `_violation` (the
complementarity-violation loss).

    def loss(p):
        scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=1.0)
        traj = rbd.simulate(*scene, dt=0.01, steps=100)
        return rbd.sysid.trajectory_loss(traj.q[:, :2], q_obs)

    result = rbd.sysid.fit(loss, {"mu": 0.5}, bounds={"mu": rbd.sysid.Positive()})
    result.params["mu"], result.loss_history, result.grad_norms

Residuals, many experiments, uncertainty. Give the residual vector instead of
a scalar loss and `fit` also returns the Gauss-Newton uncertainty at the
optimum; give a batch of experiments and it shares the physical parameters
across them (the prediction is mapped over the experiments, one after another):

    def predict(p, inputs):                       # one experiment: (T, n)
        scene = rbd.scenes.block_on_incline(angle=0.0, mu=p["mu"], speed=inputs["speed"], dim=2)
        return rbd.simulate(*scene, dt=0.01, steps=60).q[:, :1]

    experiments = rbd.sysid.Experiments(x_obs, {"speed": speeds}, mask=None)   # x_obs: (E, T, n)
    result = rbd.sysid.fit(params={"mu": 0.5}, predict=predict, experiments=experiments,
                           bounds={"mu": rbd.sysid.Positive()}, optimizer=rbd.sysid.LevenbergMarquardt(),
                           noise=1e-3)
    result.params["mu"], result.interval["mu"], result.std["mu"], result.best_step
    result.uncertainty.singular_values, result.uncertainty.rms, result.uncertainty.identified

- `fit` returns the best iterate it evaluated (`best_step`, `loss`), not the last.
- `per_experiment=("v0",)` fits nuisance parameters with a leading axis E (an
  initial velocity per throw) beside the shared ones.
- `residuals=fn` (fn(params, data) -> r) is the same without the experiment
  structure; `loss=fn` with `data=` a scalar loss (no uncertainty).
- `residuals=MultipleShooting(run, L)` fits a long or chaotic trajectory in
  segments of L steps, each from its own fitted start state, tied by defects.
- `uncertainty(...)` computes sigma^2 (J^T J)^-1 with sigma^2 = RSS / (m - p),
  J the residual Jacobian in the natural parameters, Student t intervals with
  m - p degrees of freedom, and names in a warning every parameter the data do
  not constrain, with the range the data allow (a block that sticks: mu >= about
  tan(angle)).
- `LevenbergMarquardt()` suits residual fits: a few Gauss-Newton steps, and it
  reuses the compiled Jacobian of the uncertainty (one compilation per fit).
- No recompilation: the data are an argument of the compiled step, cached on
  (function, bounds, optimizer). Define the function once (not a new lambda per
  data set) and pass the data through `data=` / `experiments=`; a fit on new data
  of the same shapes then compiles nothing.

Each parameter is optimized in an unconstrained coordinate u: `Positive()` maps
u to exp(u) (masses, mu, e_r: log space), `Interval(lo, hi)` to lo + (hi - lo)
sigmoid(u) (restitution: `Interval(0, 1)`), `Free()` is the identity.

Identifiability and `grad_smoothing`. Contact makes some exact gradients zero:
a block that sticks for the whole observation does not move whatever mu is, so
the exact d(loss)/d(mu) is 0 and mu cannot be identified from such data (any mu
above the sticking threshold fits). Where the data cross a switch (the block
stops, a contact closes) the exact gradient also jumps. `simulate(...,
grad_smoothing=eps)` differentiates each step through the smoothed
Fischer-Burmeister residual instead, which blends the two sides of a switch over
a width eps in the impulses; it does not change the forward simulation, only
the gradient. Use it (eps ~ 1e-6-1e-4 of the impulses) when a fit stalls on a
plateau; it cannot create information that the data do not hold.
"""

from ._bounds import Free as Free
from ._bounds import Interval as Interval
from ._bounds import Positive as Positive
from ._experiments import Experiments as Experiments
from ._experiments import MultipleShooting as MultipleShooting
from ._fit import FitResult as FitResult
from ._fit import LevenbergMarquardt as LevenbergMarquardt
from ._fit import fit as fit
from ._forms import LeastSquares as LeastSquares
from ._forms import Loss as Loss
from ._forms import ManyExperiments as ManyExperiments
from ._losses import trajectory_loss as trajectory_loss
from ._named import ModelParameters as ModelParameters
from ._uncertainty import Uncertainty as Uncertainty
from ._uncertainty import uncertainty as uncertainty
from ._violation import velocities_from_positions as velocities_from_positions
from ._violation import violation_loss as violation_loss
from ._violation import violation_residuals as violation_residuals
