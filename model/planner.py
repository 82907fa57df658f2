"""model.solve: plan a Problem in four phases, each a function returning a frozen dataclass.

1. fast (model.phase_fast): per replication factor r (inference streams: every divisor
   of the device count; otherwise r = 1) and lane layout (topologies.paths.lane_layouts),
   heuristic plans and a proven period bound on the single-lane surrogate (model.lanes);
2. budget (model.phase_budget, under a sensitivity budget): budget-aware bounds and
   plans (model.budget) within half of the time limit;
3. MILP (model.phase_milp): the promising layouts' MILPs, warm-started, solved by HiGHS;
   the others are pruned by their proven bounds;
4. top-K (model.phase_topk): the K best distinct plans of the winner, by no-good cuts.
The reported bound is the least over every layout explored of its proven bound, so it
holds over the whole plan space the planner declares (model.inputs.layouts_to_explore).

``time_limit_s`` bounds the whole solve: every phase looks at one clock (model.progress.
Clock) and, once it expires, keeps what it has with bounds that stay valid; what it left
undone is listed in SolveResult.cut_short and the status is then time_limit unless the
bound still proves the gap. Ctrl-C (distplan.core.interrupt.stop_on_interrupt, opened
here unless a caller already did) once a plan exists expires the clock the same way and
the status is "interrupted"; before that, or a second time, it raises KeyboardInterrupt.

User constraints (SolveOptions.extra_constraints, model.build.add_extra_constraints)
enter every MILP built. The heuristic, DP and budget phases ignore them: their bounds
stay valid lower bounds (the hook only restricts, so they bound a superset of the
constrained plans) but weaker, so with a user constraint the bound reported is in effect
the MILP's own; their plans are used only where they satisfy the MILP
(model.admission).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from distplan.core.gap import gap
from distplan.core.interrupt import stop_on_interrupt
from distplan.costs.problem import Problem
from distplan.model.admission import PlanGate
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
