"""The one plan-space interface (issue 23): every space (the pipeline MILP, the cluster
and fleet spaces, the baselines) is a ``PlanSpace`` whose ``search(problem, options,
clock)`` returns one ``SearchResult``: a ``Status``, the plans best first, the best
plan's objective, a bound and what kind of bound it is (``BoundKind``), what the clock
cut short, and a ``SolverReport`` only where a MILP solver ran. Clock:
``distplan.core.clock.Clock``; gap: ``distplan.core.gap.gap``.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from distplan.core.clock import Clock
from distplan.core.gap import gap
from distplan.core.plan import Plan


class BoundKind(enum.StrEnum):
    """What ``SearchResult.bound`` is: a bound the solver proved (PROVEN), a bound over the
    declared space under the analytic model (ANALYTIC), an ideal no plan of any space can
    beat (IDEAL), or no bound (NONE: ``bound`` is -inf)."""

    PROVEN = "proven"
    ANALYTIC = "analytic"
    IDEAL = "ideal"
    NONE = "none"


class Status(enum.StrEnum):
    """How a search ended; a StrEnum, so ``status == "optimal"`` and f-strings read as before.
    OPTIMAL: the gap target is proven; SEARCHED: every point visited or pruned, the gap
    left open; TIME_LIMIT / INTERRUPTED: the clock or Ctrl-C cut the search (the best so
    far kept); INFEASIBLE ... ITERATION_LIMIT: HiGHS's own; NOT_FOUND: a baseline found no
    feasible plan."""

    OPTIMAL = "optimal"
    SEARCHED = "searched"
    TIME_LIMIT = "time_limit"
    INTERRUPTED = "interrupted"
    INFEASIBLE = "infeasible"
    UNBOUNDED = "unbounded"
    SOLUTION_LIMIT = "solution_limit"
    ITERATION_LIMIT = "iteration_limit"
    NOT_FOUND = "not_found"
    OTHER = "other"   # a HiGHS status not named above: SolverReport.status has its text

    @classmethod
    def of(cls, text: str) -> Status:
        """The member whose value is ``text``; OTHER for a text no member has."""
        try:
            return cls(text)
        except ValueError:
            return cls.OTHER


@dataclass(frozen=True)
class SolverReport:
    """What a MILP solver did (None on a SearchResult no MILP made): the winning model's
    binaries and constraints, seconds building models and in the whole solve, the
    winning layout (path family name, its lane 0, its lanes), with user constraints
    HiGHS's own objective and bound for it, and the status as HiGHS's text."""

    binaries: int
    constraints: int
    build_s: float
    solve_s: float
    path_name: str
    path: tuple[int, ...] = ()
    lanes: tuple[tuple[int, ...], ...] = ()
    hook_objective_s: float | None = None
    hook_bound_s: float | None = None
    status: str = ""   # HiGHS's own status text (Status.OTHER says only that it is none of the above)


@dataclass(frozen=True)
class SearchResult:
    """One search's outcome in any space. ``objective``: the best plan's objective in the
    space's model (seconds: a period, latency or iteration; inf without a plan);
    ``bound``: a lower bound on it of kind ``bound_kind``; ``analytic``: plans are scored
    by the analytic iteration (cluster, fleet), not the pipeline MILP's model (the API
    then neither runs the ideal simulation nor ranks by throughput). ``problem``: the
    problem the plans are for when the space changed it (microbatch size), else None;
    ``replicas``: the best plan's data-parallel degree; ``explored``: the space's
    bookkeeping rows; ``details``: figures only one space has (a baseline's counts)."""

    space: str
    status: Status
    plans: tuple[Plan, ...]
    objective: float
    bound: float
    bound_kind: BoundKind
    analytic: bool = False
    cut_short: tuple[str, ...] = ()
    solver: SolverReport | None = None
    seconds: float = 0.0
    problem: Any = None
    replicas: int = 1
    explored: tuple[dict, ...] = ()
    log: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def gap(self) -> float:
        """The relative gap between the objective and the bound (``core.gap.gap``; inf without a bound)."""
        return gap(self.objective, self.bound) if self.bound_kind != BoundKind.NONE else math.inf

    @property
    def best(self) -> Plan | None:
        return self.plans[0] if self.plans else None


@runtime_checkable
class PlanSpace(Protocol):
    """A plan space: ``name`` ("pipeline", "cluster", "fleet", or a baseline's method) and
    ``search``, which plans ``problem`` under ``options`` within ``clock`` (its limit and
    Ctrl-C: a stop requested once a plan exists keeps the best so far, status
    INTERRUPTED)."""

    name: str

    def search(self, problem: Any, options: Any, clock: Clock) -> SearchResult: ...
