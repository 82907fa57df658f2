"""The plan spaces of ``model.solve`` as ``core.space.PlanSpace`` objects, and
``resolve_space``, which picks one for a problem and its options (the rules:
``model.cluster_solve.space_name``). The baselines are plan spaces too (``baselines.spaces``)."""
from __future__ import annotations

from dataclasses import dataclass

from distplan.core.clock import Clock
from distplan.core.space import BoundKind, PlanSpace, SearchResult
from distplan.costs.problem import Problem
from distplan.model.cluster_solve import search_cluster, space_name
from distplan.model.fleet_solve import search_fleet
from distplan.model.options import SolveOptions
from distplan.model.pipeline_space import search_pipeline
from distplan.model.stage_space import search_stage


@dataclass(frozen=True)
class PipelineSpace:
    """The MILP's space: stages along device paths, per-op precision, replicated lanes;
    a proven bound and a solver report."""

    name: str = "pipeline"
    bound_kind: BoundKind = BoundKind.PROVEN
    analytic: bool = False   # its plans' model is the ideal simulation, ranked by throughput

    def search(self, problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
        return search_pipeline(problem, options, clock)


@dataclass(frozen=True)
class ClusterSpace:
    """Megatron-style dp x tp x pp plans (model.cluster); a bound under the analytic model."""

    name: str = "cluster"
    bound_kind: BoundKind = BoundKind.ANALYTIC
    analytic: bool = True

    def search(self, problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
        return search_cluster(problem, options, clock)


@dataclass(frozen=True)
class FleetSpace:
    """Mixed-fleet training plans (model.fleet); the bound is the fleet's ideal."""

    name: str = "fleet"
    bound_kind: BoundKind = BoundKind.IDEAL
    analytic: bool = True

    def search(self, problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
        return search_fleet(problem, options, clock)


@dataclass(frozen=True)
class StageSpace:
    """The cluster space plus heterogeneous stages from the stage MILP (model.stage_space)."""

    name: str = "stage"
    bound_kind: BoundKind = BoundKind.ANALYTIC
    analytic: bool = True

    def search(self, problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
        return search_stage(problem, options, clock)


SPACES: dict[str, PlanSpace] = {s.name: s for s in (PipelineSpace(), ClusterSpace(), FleetSpace(), StageSpace())}


def resolve_space(problem: Problem, options: SolveOptions) -> PlanSpace:
    """The space ``model.solve`` searches for ``problem`` under ``options``
    (``options.space``; "auto": ``model.cluster_solve.space_name``'s rules)."""
    return SPACES[space_name(problem, options)]
