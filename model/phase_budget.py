"""Phase 2 of a solve, under a sensitivity budget only: the budget-aware chain DP
(model.budget) on each kept layout's surrogate, most promising r first, tightens its
period bound and adds budget-feasible plans, until ``BUDGET_PHASE_SHARE`` of the time
limit has passed (or the clock expires: Ctrl-C). A layout it does not reach keeps its
(weaker, valid) relaxation bound, and the solve says so (SolveResult.cut_short).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem
from distplan.core.plan import Stage
from distplan.model.admission import PlanGate
from distplan.model.budget import budget_plans_and_bound
from distplan.model.lanes import lane_problem
from distplan.model.options import SolveOptions
from distplan.model.phase_fast import Candidate, FastPhase, with_plans
from distplan.model.progress import Clock, Log, fmt

BUDGET_PHASE_SHARE = 0.5   # of the time limit, for the budget-aware bounds and incumbents


@dataclass(frozen=True)
class BudgetPhase:
    """The fast phase's candidates (same order) with the bounds and plans the budget
    search added; ``reached``: the r's it ran on."""

    candidates: tuple[Candidate, ...]
    reached: tuple[int, ...] = ()


def budget_candidate(problem: Problem, options: SolveOptions, gate: PlanGate, c: Candidate,
                     mat: np.ndarray | None, deadline: float, incumbent_s: float,
                     stop: Callable[[], bool] = lambda: False) -> Candidate:
    """Budget-aware chain DP (model.budget) on c's surrogate: a proven period bound and
    budget-feasible plans, within ``deadline`` (perf_counter seconds). Without a plan of
    its own the search is capped at the best objective found elsewhere (``incumbent_s``):
    proving nothing fits below it is all that matters then."""
    if options.sensitivity_budget is None or mat is None or options.objective != "throughput" \
            or not math.isfinite(c.bound_s):
        return c
    sp = lane_problem(problem, c.r)
    hi = min((plan_cost(sp, dataclasses.replace(x, stages=tuple(Stage((d,)) for d in c.lanes[0][:x.n_stages])))
              .period_s for x in c.plans), default=None)
    if hi is None and math.isfinite(incumbent_s):
        hi = incumbent_s
    plans, lb = budget_plans_and_bound(sp, c.lanes[0], mat, options.sensitivity_budget, c.bound_s, hi,
                                       deadline=deadline, stop=stop)
    c = dataclasses.replace(c, bound_s=max(c.bound_s, lb))
    return with_plans(problem, options, c, plans[:3], gate.admits if gate.active else None)


def budget_phase(problem: Problem, options: SolveOptions, gate: PlanGate, fast: FastPhase,
                 clock: Clock, say: Log) -> BudgetPhase:
    """Phase 2 (module docstring); without a budget the fast phase's candidates as they are."""
    if options.sensitivity_budget is None:
        return BudgetPhase(fast.candidates)
    by_r = {(c.r, c.name): c for c in fast.candidates}
    deadline = clock.at(BUDGET_PHASE_SHARE)
    reached = []
    missed = []
    unevaluated = set(fast.unevaluated)
    for c in sorted(fast.candidates, key=lambda c: (c.score, -c.bound_s, c.r)):
        if (c.r, c.name) in unevaluated:
            continue   # no plan and only the floor bound: the fast phase ran out of time
        if time.perf_counter() > deadline or clock.expired():
            say(f"r={c.r} {c.name}: no time left for the budget bound; keeping the relaxation bound {fmt(c.bound_s)}")
            if math.isfinite(c.bound_s):
                missed.append(c.name)
            continue
        c = by_r[c.r, c.name] = budget_candidate(problem, options, gate, c, fast.downsets, deadline,
                                         min((x.score for x in by_r.values()), default=math.inf),
                                         stop=lambda: clock.stop.requested)
        if c.scored:
            clock.stop.arm()
        if c.r not in reached:
            reached.append(c.r)
        say(f"r={c.r} {c.name} under the budget: objective {fmt(c.score)}, bound {fmt(c.bound_s)}")
    if missed:   # past the phase's share of the limit, or the clock expired
        clock.cut(f"budget phase: {len(missed)} layouts kept their weaker relaxation bound "
                  f"({', '.join(missed[:3])}{', ...' if len(missed) > 3 else ''})", say)
    return BudgetPhase(tuple(by_r.values()), tuple(reached))
