"""``solve``: coarsen (large graphs) -> MILP -> expand -> check -> simulate -> rank.

The one pipeline the CLI, ``--compare``, the studies and notebooks share.
"""
from __future__ import annotations

import dataclasses

from distplan.api.report import RankedPlan, SolveReport
from distplan.core.errors import DistplanError, InternalError
from distplan.core.plan import Plan
from distplan.costs.check import InfeasiblePlan, check_plan
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.model import SolveOptions, SolveResult
from distplan.model import solve as milp_solve
from distplan.sim import SimOptions, SimResult
from distplan.sim import simulate as sim_run

#: Graphs larger than this are coarsened before the solve unless options say otherwise.
AUTO_COARSEN_ABOVE_OPS = 300
AUTO_COARSEN_TARGET_OPS = 150


def coarsen_target(problem: Problem, requested: int | None) -> int | None:
    """Target op count for the solve (None: solve the graph as it is)."""
    n = problem.n_ops
    if requested is None:
        return AUTO_COARSEN_TARGET_OPS if n > AUTO_COARSEN_ABOVE_OPS else None
    if requested < 0:
        raise DistplanError(f"coarsen must be >= 0 (0 disables), got {requested}")
    return requested if 0 < requested < n else None


def check(problem: Problem, plan: Plan) -> None:
    """Raise ``InfeasiblePlan`` (a DistplanError) naming every broken constraint."""
    check_plan(problem, plan)


def simulate(problem: Problem, plan: Plan, options: SimOptions | None = None) -> SimResult:
    """Check ``plan``, then replay it in the event simulator (realistic by default)."""
    check_plan(problem, plan)
    return sim_run(problem, plan, options or SimOptions())


def _milp_plans(problem: Problem, options: SolveOptions) -> tuple[SolveResult, list[Plan], int | None]:
    """Solve, on a coarsened graph when it is large; plans come back on ``problem``'s ops."""
    target = coarsen_target(problem, options.coarsen_ops)
    if target is None:
        solved = milp_solve(problem, options)
        return solved, list(solved.plans), None
    from distplan.workloads.coarsen import coarsen, expand_plan

    c = coarsen(problem.graph, target_ops=target)
    coarse = build_problem(c.coarse, problem.topology, ProblemOptions(
        precisions=problem.precisions, microbatches=problem.microbatches, schedule=problem.schedule))
    if options.progress:
        options.progress(f"coarsened {problem.n_ops} ops to {coarse.n_ops} for the solve; plans are expanded back "
                         "and simulated on the original graph (the proven gap holds for the coarse problem)")
    solved = milp_solve(coarse, options)
    plans = []
    for p in solved.plans:
        fine = expand_plan(c, p)
        plans.append(fine.with_predicted(coarse_milp_period_s=p.predicted.get("milp_period_s"),
                                          milp_period_s=plan_cost(problem, fine).period_s))
    return solved, plans, coarse.n_ops


def rank_plans(problem: Problem, plans: list[Plan], trace: bool = False) -> tuple[RankedPlan, ...]:
    """Check and simulate every plan (realistic and ideal), best simulated throughput first.

    A plan the planner returns that the independent checker rejects is an InternalError:
    the MILP and the checker disagree, which is a bug, never the user's input."""
    rows = []
    for plan in plans:
        try:
            check_plan(problem, plan)
        except InfeasiblePlan as e:
            raise InternalError(f"the planner returned a plan the checker rejects: {e}") from e
        real = sim_run(problem, plan, SimOptions(trace=trace))
        ideal = sim_run(problem, plan, SimOptions(ideal=True))
        rows.append((plan, real, ideal))
    rows.sort(key=lambda r: (-r[1].throughput_per_s, r[1].makespan_s))
    return tuple(RankedPlan(i + 1, p.with_predicted(sim_period_s=real.period_s, throughput_per_s=real.throughput_per_s),
                            float(p.predicted.get("milp_period_s", float("nan"))), ideal.period_s, real)
                 for i, (p, real, ideal) in enumerate(rows))


def solve(problem: Problem, options: SolveOptions | None = None, *, trace: bool = False) -> SolveReport:
    """Plan ``problem``: the MILP's top-K plans, each checked and simulated, ranked by
    simulated throughput, with the solver's status, proven bound and gap.

    ``trace=True`` keeps each simulation's events (for ``SolveReport.write_trace`` and
    the report plots). Raises DistplanError when no plan exists."""
    options = options or SolveOptions()
    solved, plans, coarse_ops = _milp_plans(problem, options)
    if not plans:
        raise DistplanError(f"the solver returned no plan (status {solved.status})")
    ranked = rank_plans(problem, plans, trace=trace)
    return SolveReport(problem=problem, solver=solved, plans=ranked, coarse_ops=coarse_ops,
                       options=dataclasses.replace(options, progress=None))
