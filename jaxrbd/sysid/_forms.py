"""The problem of a fit as an object: what `fit(problem, params)` minimizes."""

import equinox as eqx

from ._experiments import Experiments


class Loss(eqx.Module):
    """A scalar loss: fn(params) -> scalar, or fn(params, data) -> scalar when `data` is given.

    Attributes:
        fn: the loss; it usually simulates a scene built from the parameters and
            compares with observations (`trajectory_loss`).
        data: its data argument (a pytree of arrays), or None.
    """

    fn: object = eqx.field(static=True)
    data: object = None


class LeastSquares(eqx.Module):
    """A residual vector: fn(params) (or fn(params, data)) -> r, or (r, valid); the loss is its mean square over
    the valid entries, and the fit reports the Gauss-Newton uncertainty. A `MultipleShooting` is such an fn.

    Attributes:
        fn: the residual function.
        data: its data argument (a pytree of arrays), or None.
    """

    fn: object = eqx.field(static=True)
    data: object = None


class ManyExperiments(eqx.Module):
    """Many experiments sharing the physical parameters: predict(params, inputs_e) -> one experiment's (T, n)
    prediction, compared with `experiments.observed` (masked, weighted).

    Attributes:
        predict: the prediction of one experiment from its inputs.
        experiments: the `Experiments` (observations, inputs, mask, weights).
        per_experiment: names of nuisance parameters with a leading axis E (an
            initial velocity per throw): experiment e sees its own slice.
    """

    predict: object = eqx.field(static=True)
    experiments: Experiments
    per_experiment: tuple = eqx.field(static=True, default=())


PROBLEMS = (Loss, LeastSquares, ManyExperiments)


def keywords(problem):
    """The keyword form of `fit` that a problem object stands for."""
    if isinstance(problem, Loss):
        return {"loss": problem.fn, "data": problem.data}
    if isinstance(problem, LeastSquares):
        return {"residuals": problem.fn, "data": problem.data}
    return {
        "predict": problem.predict,
        "experiments": problem.experiments,
        "per_experiment": tuple(problem.per_experiment),
    }
