"""The pipeline plan space's search (the MILP, model.planner's four phases) as a
``core.space.SearchResult``: the proven bound, and a solver report of the winning layout."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from distplan.core.clock import Clock
from distplan.core.space import BoundKind, SearchResult, SolverReport, Status
from distplan.costs.problem import Problem
from distplan.model.admission import PlanGate
from distplan.model.inputs import check_inputs
from distplan.model.options import SolveOptions
from distplan.model.phase_budget import BudgetPhase, budget_phase
from distplan.model.phase_fast import fast_phase
from distplan.model.phase_milp import MilpPhase, milp_phase
from distplan.model.phase_topk import topk_phase
from distplan.model.progress import Log


@dataclass(frozen=True)
class Explored:
    """One row of SolveResult.explored: a replication factor, its layout, the best plan
    found without the MILP, its proven bound and status, whether its MILP was solved, and
    its best objective."""

    replicas: int
    layout: str
    heuristic_s: float
    bound_s: float
    status: str
    solved: bool
    objective_s: float


def explored_rows(budget: BudgetPhase, milp: MilpPhase) -> list[Explored]:
    """One row per layout explored, in increasing r."""
    bounds = {(b.r, b.name): b for b in milp.bounds}
    rows = []
    for c in sorted(budget.candidates, key=lambda c: c.r):
        s = milp.solve_of(c.r, c.name)
        b = bounds[c.r, c.name]
        rows.append(Explored(c.r, c.name, c.score, b.bound_s, b.status, s is not None,
                             s.objective_s if s is not None else c.score))
    return rows


def search_pipeline(problem: Problem, options: SolveOptions, clock: Clock) -> SearchResult:
    """The four phases within ``clock``; a Ctrl-C once a plan exists keeps the best so far
    with its proven bound (status INTERRUPTED)."""
    say = Log(options.progress)
    check_inputs(problem, options)
    gate = PlanGate(problem, options)
    fast = fast_phase(problem, options, gate, clock, say)
    budget = budget_phase(problem, options, gate, fast, clock, say)
    milp = milp_phase(problem, options, gate, budget.candidates, clock, say)
    top = topk_phase(problem, options, gate, budget.candidates, milp, clock, say)
    text = "interrupted" if clock.stop.requested else milp.status
    win = milp.winner
    run = win.run
    solver = SolverReport(binaries=run.n_binaries if run is not None else 0,
                          constraints=run.n_constraints if run is not None else 0,
                          build_s=sum(s.build_s for s in milp.solves), solve_s=clock.elapsed_s(),
                          path_name=win.candidate.name, path=win.candidate.lanes[0], lanes=win.candidate.lanes,
                          status=text, **_hook_figures(options, win))
    return SearchResult("pipeline", Status.of(text), tuple(top.plans), top.plans[0].predicted["milp_objective"],
                        milp.bound_s, BoundKind.PROVEN, cut_short=tuple(clock.cut_short), solver=solver,
                        seconds=solver.solve_s, replicas=win.candidate.r,
                        explored=tuple(dataclasses.asdict(row) for row in explored_rows(budget, milp)),
                        log=tuple(say.lines))


def _hook_figures(options: SolveOptions, win) -> dict:
    """With user constraints, the MILP's own objective and bound of the winning layout
    (they may count what distplan's re-scoring leaves out); nothing otherwise."""
    if options.extra_constraints is None or not math.isfinite(win.solver_objective_s):
        return {}
    bound = win.solver_bound_s if math.isfinite(win.solver_bound_s) else None
    return {"hook_objective_s": float(win.solver_objective_s), "hook_bound_s": bound}
