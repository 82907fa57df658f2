"""model.solve: plan a Problem in four phases, each a function returning a frozen dataclass.

1. fast (model.phase_fast): heuristic plans and a proven period bound per replication
   factor and lane layout; 2. budget (model.phase_budget, under a sensitivity budget):
   budget-aware bounds and plans; 3. MILP (model.phase_milp): the promising layouts'
   MILPs, warm-started, solved by HiGHS, the others pruned by their bounds; 4. top-K
   (model.phase_topk): the K best distinct plans of the winner, by no-good cuts.

Guarantees: the reported bound is the least proven bound over every layout explored, so
it holds over the whole declared plan space. ``time_limit_s`` bounds the whole solve on
one clock; once it (or a Ctrl-C after a first plan) expires, each phase keeps what it has
with valid bounds and lists what it skipped in ``SolveResult.cut_short``. User
constraints enter every MILP; the other phases' plans are used only where they satisfy
it (model.admission). Phases, clock and user constraints: docs/concepts/milp.md.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from distplan.core.gap import gap
from distplan.core.interrupt import stop_on_interrupt
from distplan.costs.problem import Problem
from distplan.model.admission import PlanGate
from distplan.model.applies import check_options_apply
from distplan.model.cluster_solve import resolve_space, solve_cluster
from distplan.model.fleet_solve import solve_fleet
from distplan.model.inputs import check_inputs
from distplan.model.options import SolveOptions, SolveResult
from distplan.model.phase_budget import BudgetPhase, budget_phase
from distplan.model.phase_fast import fast_phase
from distplan.model.phase_milp import MilpPhase, milp_phase
from distplan.model.phase_topk import topk_phase
from distplan.model.progress import Clock, Log


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


def solve(problem: Problem, options: SolveOptions | None = None) -> SolveResult:
    """Plan ``problem``: the best plans found within ``options.time_limit_s`` (end to end)."""
    options = options or SolveOptions()
    with stop_on_interrupt() as stop:
        clock, say = Clock(options.time_limit_s, stop=stop), Log(options.progress)
        space = resolve_space(problem, options)
        check_options_apply(problem, options, space)   # an option the space never reads: an error, not ignored
        if space == "cluster":
            return solve_cluster(problem, options, clock, say)
        if space == "fleet":
            return solve_fleet(problem, options, clock, say)
        check_inputs(problem, options)
        gate = PlanGate(problem, options)
        fast = fast_phase(problem, options, gate, clock, say)
        budget = budget_phase(problem, options, gate, fast, clock, say)
        milp = milp_phase(problem, options, gate, budget.candidates, clock, say)
        top = topk_phase(problem, options, gate, budget.candidates, milp, clock, say)
        status = "interrupted" if stop.requested else milp.status
    win = milp.winner
    obj, bound = top.plans[0].predicted["milp_objective"], milp.bound_s
    gap_ = gap(obj, bound)
    run = win.run
    return SolveResult(status=status, objective_s=obj, bound_s=bound, gap=gap_, seconds=clock.elapsed_s(),
                       build_seconds=sum(s.build_s for s in milp.solves),
                       n_binaries=run.n_binaries if run is not None else 0,
                       n_constraints=run.n_constraints if run is not None else 0, plans=list(top.plans),
                       path_name=win.candidate.name, path=win.candidate.lanes[0], log=say.lines,
                       replicas=win.candidate.r, lanes=win.candidate.lanes,
                       explored=[dataclasses.asdict(row) for row in explored_rows(budget, milp)],
                       cut_short=list(clock.cut_short), **_hook_figures(options, win))


def _hook_figures(options: SolveOptions, win) -> dict:
    """With user constraints, the MILP's own objective and bound of the winning layout
    (they may count what distplan's re-scoring leaves out); nothing otherwise."""
    if options.extra_constraints is None or not math.isfinite(win.solver_objective_s):
        return {}
    bound = win.solver_bound_s if math.isfinite(win.solver_bound_s) else None
    return {"hook_objective_s": float(win.solver_objective_s), "hook_bound_s": bound}
