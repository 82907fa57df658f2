"""The baselines as plan spaces (``core.space.PlanSpace``): ``BaselineSpace(method).search(
problem, options, clock)`` runs one baseline within the clock (Ctrl-C keeps its best
plan) and returns a ``SearchResult`` with no bound and no solver report."""
from __future__ import annotations

import math
from dataclasses import dataclass

from distplan.baselines import METHODS, parse_methods
from distplan.baselines.grid import GridOptions
from distplan.baselines.scoring import Scorer
from distplan.core.clock import Clock
from distplan.core.space import BoundKind, SearchResult
from distplan.costs.problem import Problem


@dataclass(frozen=True)
class BaselineSpace:
    """Baseline ``name`` (a key of ``baselines.METHODS``); ``options`` is read for its
    seed and sensitivity budget, and by the grid for the cluster space's options it
    searches too (``virtual_stages``, ``context_parallel``, ``expert_parallel``:
    ``baselines.grid.GridOptions``); ``scorer`` and ``max_candidates`` as ``run_baseline``."""

    name: str
    scorer: Scorer | None = None
    max_candidates: int | None = None
    bound_kind: BoundKind = BoundKind.NONE
    analytic: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", parse_methods(self.name)[0])

    def search(self, problem: Problem, options, clock: Clock) -> SearchResult:
        budget = clock.limit_s if math.isfinite(clock.limit_s) else options.time_limit_s   # the clock's deadline binds
        kw = {"options": GridOptions.of(options)} if self.name == "grid" else {}
        r = METHODS[self.name](problem, budget, options.seed, scorer=self.scorer,
                               sensitivity_budget=options.sensitivity_budget,
                               max_candidates=self.max_candidates, clock=clock, **kw)
        return r.search
