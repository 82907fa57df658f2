"""Which SolveOptions a plan space reads (issue 26: one rule for options that do not
apply). An option set away from its default that the resolved space never reads was
silently ignored (``--virtual-stages`` on a training problem the auto space sends to the
pipeline MILP, ``--coarsen`` or ``--stages`` in the cluster space); ``model.solve`` and
the CLI both call :func:`check_options_apply`, which names the first such option and why
(the CLI prints the field as its flag: ``cli.main.FLAG_OF``)."""
from __future__ import annotations

import dataclasses

from distplan.core.errors import DistplanError
from distplan.costs.problem import Problem
from distplan.model.options import SolveOptions

_SEARCH = "the cluster space searches its own dp x tp x pp layouts"
_PRECISION = "the cluster space picks its precision recipe itself, not per op by sensitivity"
_MILP = "it adds rows to the pipeline space's MILP"
_LAYERS = "the cluster and fleet spaces split whole layers and are never coarsened"
_TRAINING = "only the training search of the cluster and fleet spaces reads it"
_TARGET = "only --objective sensitivity (the fleet space) reads it"
_CPEP = "only the cluster space's training search reads it (model.cluster_ranks)"
#: the cluster space's cp / ep degrees, read by no other space
_RANKS = {"context_parallel": _CPEP, "expert_parallel": _CPEP, "ep_dispatcher": _CPEP}

#: space -> option -> why that space does not read it
NOT_READ: dict[str, dict[str, str]] = {
    "pipeline": {"microbatch_sizes": _TRAINING, "virtual_stages": "only the cluster space's training search "
                 "reads it", "iteration_target": _TARGET, **_RANKS},
    "cluster": {"sensitivity_budget": _PRECISION, "sensitivity_weight": _PRECISION, "n_stages": _SEARCH,
                "path": _SEARCH, "replicas": _SEARCH, "extra_constraints": _MILP, "coarsen_ops": _LAYERS,
                "iteration_target": _TARGET},
    "stage": {"sensitivity_budget": _PRECISION, "sensitivity_weight": _PRECISION, "n_stages": _SEARCH,
              "path": _SEARCH, "replicas": _SEARCH, "extra_constraints": _MILP, "coarsen_ops": _LAYERS,
              "iteration_target": _TARGET, "virtual_stages": "the stage space plans 1F1B; interleaving is the "
              "cluster space's", **_RANKS},
    "fleet": {"sensitivity_weight": "the fleet space ranks by the iteration (or, with --objective sensitivity, "
              "by the summed sensitivity), never a weighted sum", "n_stages": "the fleet space searches its own "
              "stages", "path": "the fleet space searches its own stages", "replicas": "the fleet space searches "
              "its own replica groups", "extra_constraints": _MILP, "coarsen_ops": _LAYERS,
              "virtual_stages": "the fleet space runs 1F1B on each kind's stages", **_RANKS},
}
#: options the cluster space reads in training only
TRAINING_ONLY = {"microbatch_sizes": "the cluster space's inference search has one microbatch size",
                 "virtual_stages": "the interleaved schedule is for training",
                 "context_parallel": "context parallelism is searched for training",
                 "expert_parallel": "expert parallelism is searched for training",
                 "ep_dispatcher": "expert parallelism is searched for training"}

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SolveOptions)}


def _set(options: SolveOptions, name: str) -> bool:
    """Is ``name`` set away from its default? (``coarsen_ops=0``, never coarsen, agrees
    with every space.)"""
    value = getattr(options, name)
    if name == "coarsen_ops" and value == 0:
        return False
    return value != _DEFAULTS[name]


def unused_options(problem: Problem, options: SolveOptions, space: str) -> list[tuple[str, str]]:
    """(option, why) for each option set that ``space`` does not read, in field order."""
    skip = dict(NOT_READ.get(space, {}))
    if space == "cluster" and not problem.training:
        skip.update(TRAINING_ONLY)
    return [(name, skip[name]) for name in _DEFAULTS if name in skip and _set(options, name)]


def check_options_apply(problem: Problem, options: SolveOptions, space: str) -> None:
    """A DistplanError naming the first option ``space`` does not read (``SolveOptions.<field>
    does not apply ...``); nothing when every option set applies."""
    unused = unused_options(problem, options, space)
    if not unused:
        return
    name, why = unused[0]
    raise DistplanError(f"SolveOptions.{name} does not apply in the {space} plan space: {why}; leave it out"
                        + ("" if space == "pipeline" else " (or choose --space pipeline)"))


__all__ = ["check_options_apply", "unused_options", "NOT_READ"]
