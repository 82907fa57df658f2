"""Exhaustive search over the planner's plan space: the oracle for tiny instances.

The space ``distplan.model.solve`` searches under its default options and the throughput
objective, restated from the documented rules (not the planner's code, so a planner bug
cannot hide in both): replication factors r, every divisor of the device count for an
inference stream ('stream' schedule), else 1; for each r every layout of
``topologies.paths.lane_layouts(topology, r)`` (r lanes of K = D / r devices, stage k on
(lane_0[k], ..., lane_{r-1}[k])); every stage assignment with stage(u) <= stage(v) on
every tensor (inner stages without operators stay as relays, trailing empty ones are
dropped) and every precision assignment among ``problem.precisions``. A plan counts when
``costs.check.plan_violations`` finds nothing; its score is
``costs.evaluate.plan_cost(problem, plan).period_s``::

    best = brute_force_optimum(problem)   # .period_s, .plan, .n_feasible
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem
from distplan.topologies.paths import divisors, lane_layouts

#: Refuse searches larger than this many (stage structure x precision) candidates.
DEFAULT_MAX_CANDIDATES = 2_000_000


@dataclass(frozen=True)
class BruteForceResult:
    """The least period over every feasible plan of the space (``inf`` and no plan when none
    is feasible); ``n_candidates`` plans were scored or rejected, ``n_feasible`` passed."""

    period_s: float
    plan: Plan | None
    n_candidates: int
    n_feasible: int
    n_layouts: int


def replication_factors(problem: Problem) -> list[int]:
    """r values of the space: divisors of the device count for a stream, else [1]."""
    return divisors(problem.n_devices) if problem.schedule == "stream" else [1]


def layouts(problem: Problem, names: Collection[str] | None = None) -> list[tuple[str, tuple[tuple[int, ...], ...]]]:
    """Every (name, lanes) layout of the space, over every replication factor (only those
    named in ``names`` when given)."""
    out = [x for r in replication_factors(problem) for x in lane_layouts(problem.topology, r)]
    return out if names is None else [x for x in out if x[0] in names]


def stage_assignments(problem: Problem, n_stages: int) -> Iterator[tuple[int, ...]]:
    """Every op -> stage map with 0 <= stage < n_stages that no tensor flows backwards in
    (ops are in topological order, so each op's floor is its inputs' largest stage)."""
    preds = problem.graph.preds()
    V = problem.n_ops
    stage = [0] * V

    def walk(v: int) -> Iterator[tuple[int, ...]]:
        if v == V:
            yield tuple(stage)
            return
        lo = max((stage[u] for u in preds[v]), default=0)
        for k in range(lo, n_stages):
            stage[v] = k
            yield from walk(v + 1)

    yield from walk(0)


def _stage_structures(problem: Problem, names: Collection[str] | None
                      ) -> Iterator[tuple[tuple[int, ...], tuple[Stage, ...]]]:
    """Distinct (op_stage, stages) pairs of the space (layouts that agree on the used
    stages give the same plan once)."""
    seen: set[tuple] = set()
    for _, lanes in layouts(problem, names):
        K = len(lanes[0])
        for op_stage in stage_assignments(problem, K):
            S = max(op_stage) + 1
            stages = tuple(Stage(tuple(lane[k] for lane in lanes)) for k in range(S))
            key = (op_stage, stages)
            if key not in seen:
                seen.add(key)
                yield op_stage, stages


def count_candidates(problem: Problem, names: Collection[str] | None = None) -> int:
    """Plans of the space before any check: stage structures x precisions^ops."""
    Q = len(problem.precisions)
    return sum(Q ** problem.n_ops for _ in _stage_structures(problem, names))


def plans(problem: Problem, names: Collection[str] | None = None) -> Iterator[Plan]:
    """Every plan of the space whose precisions run on their stage's devices (the others
    are infeasible by ``plan_violations``' own rule); memory is not yet checked."""
    topo = problem.topology
    for op_stage, stages in _stage_structures(problem, names):
        ok = [tuple(p for p in problem.precisions if all(topo.kind_of(d).supports(p) for d in s.devices))
              for s in stages]
        for precs in itertools.product(*(ok[k] for k in op_stage)):
            yield Plan(op_stage, tuple(precs), stages, problem.microbatches, problem.schedule)


def brute_force_optimum(problem: Problem, names: Collection[str] | None = None,
                        max_candidates: int = DEFAULT_MAX_CANDIDATES) -> BruteForceResult:
    """Score every feasible plan of the space (of the layouts in ``names`` when given);
    ties keep the first found, so the result is deterministic."""
    n = count_candidates(problem, names)
    if n > max_candidates:
        raise DistplanError(f"brute force over {n} candidate plans exceeds the limit of {max_candidates}; "
                            "use fewer ops, devices or precisions, or raise max_candidates")
    best, best_plan, feasible, scored = math.inf, None, 0, 0
    for plan in plans(problem, names):
        scored += 1
        if plan_violations(problem, plan):
            continue
        feasible += 1
        period = plan_cost(problem, plan).period_s
        if period < best:
            best, best_plan = period, plan
    return BruteForceResult(best, best_plan, n, feasible, len(layouts(problem, names)))
