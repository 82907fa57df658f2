"""``solve``: coarsen (large graphs) -> MILP -> expand -> check -> simulate -> rank.

The one pipeline the CLI, ``--compare``, the studies and notebooks share.

``SolveOptions.time_limit_s`` is the budget of the whole pipeline: the MILP gets what
is left after coarsening, less a margin for simulating the plans
(``ranking_margin_s``); plans are then simulated one by one, each only when its
forecast fits the time left (``_rank``): when none fits, none is simulated and the plans
come back with their model figures, and the report says what was not done
(``SolveReport.cut_short``).
Ctrl-C once a plan exists (distplan.core.interrupt) ends the solve with the best plan
so far, which is simulated alone and reported as "interrupted".
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from distplan.api.report import RankedPlan, SolveReport
from distplan.core.clock import Clock
from distplan.core.deadline import current_deadline, deadline_at
from distplan.core.errors import DistplanError, InternalError, TimeUp
from distplan.core.interrupt import Stop, stop_on_interrupt
from distplan.core.plan import Plan
from distplan.core.validate import check_bool, check_float, check_instance
from distplan.costs.check import InfeasiblePlan, check_plan
from distplan.costs.evaluate import plan_cost, plan_sensitivity
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.model import SolveOptions, SolveResult
from distplan.model import solve as milp_solve
from distplan.core.space import PlanSpace
from distplan.model.spaces import SPACES, resolve_space
from distplan.model.phase_fast import first_plan_s, max_ops_for
from distplan.sim import SimOptions, SimResult
from distplan.sim import simulate as sim_run
from distplan.sim.execute import stop_at
from distplan.sim.forecast import expected_sim_s as forecast_sim_s

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


#: a first plan forecast to end this much past the limit is still searched for
FIRST_PLAN_SLACK_S = 2.0


def check_first_plan_fits(problem: Problem, clock: Clock) -> None:
    """A graph whose first plan alone (``model.phase_fast.first_plan_s``: cubic in the ops
    of an inference stream) cannot be found in the time left on ``clock`` is refused up
    front, with its size, the forecast and the limit, instead of running past the limit."""
    need, left = first_plan_s(problem), clock.deadline - time.perf_counter()
    run = current_deadline()   # the command line's limit, counted from the process's start
    limit_s = run.limit_s if run is not None else clock.limit_s
    if need > max(left, 0.0) + FIRST_PLAN_SLACK_S:   # a plan late by a second beats none
        raise DistplanError(
            f"{problem.graph.name!r} has {problem.n_ops:,} ops: the search for a first plan takes about "
            f"{need:.0f} s on them (it grows with the cube of the op count), more than the {max(left, 0.0):.1f} s "
            f"left of the time limit of {limit_s:g} s; coarsen it to at most {max_ops_for(left):,} ops "
            "(--coarsen N, coarsen_ops=N; the default coarsens graphs above "
            f"{AUTO_COARSEN_ABOVE_OPS} ops to {AUTO_COARSEN_TARGET_OPS}) or raise the time limit")


#: how to get each object the API's calls take, for the error when given something else
PROBLEM_HINT = "build one with distplan.problem(workload, topology, ...)"
PLAN_HINT = ("take one from a report (report.best.plan) or read a plan file with "
             "distplan.load_plan(path, problem)")


def check_problem_plan(problem: object, plan: object | None = None) -> None:
    """``problem`` is a Problem and ``plan`` (when given) a Plan, or a DistplanError
    naming the argument and how to get one (a file name is not a problem)."""
    check_instance("problem", problem, Problem, PROBLEM_HINT)
    if plan is not None:
        check_instance("plan", plan, Plan, PLAN_HINT)


def check(problem: Problem, plan: Plan) -> None:
    """Raise ``InfeasiblePlan`` (a DistplanError) naming every broken constraint."""
    check_problem_plan(problem)
    check_instance("plan", plan, Plan, PLAN_HINT)   # a plan is needed: None is not one
    check_plan(problem, plan)


def simulate(problem: Problem, plan: Plan, options: SimOptions | None = None) -> SimResult:
    """Check ``plan``, then replay it in the event simulator (realistic by default)."""
    check_problem_plan(problem)
    check_instance("plan", plan, Plan, PLAN_HINT)   # a plan is needed: None is not one
    if options is not None:
        check_instance("options", options, SimOptions, "use distplan.SimOptions(...)")
    check_plan(problem, plan)
    return sim_run(problem, plan, options or SimOptions())


#: simulation seconds per op and microbatch (measured: 1-2e-5 on one 2020s core), for
#: the share of the time limit kept for simulating and ranking the plans
SIM_S_PER_OP_MICROBATCH = 2.5e-5
#: at most this share of the time limit is kept for simulating and ranking
RANKING_SHARE_MAX = 0.2
#: the MILP always gets at least this many seconds
MIN_SOLVE_S = 0.05


def ranking_margin_s(problem: Problem, options: SolveOptions) -> float:
    """Seconds of the time limit kept for checking, simulating (realistic and ideal) and
    ranking the top_k plans after the solve: an estimate from the graph's size, at most
    ``RANKING_SHARE_MAX`` of the limit, plus what expanding, checking and writing the best
    plan take on a large graph (``FINE_PLAN_S_PER_OP``)."""
    passes = 2 if problem.training else 1
    patterns = max(1, problem.microbatches, problem.topology.n_devices)   # a plan of one lane per device builds one per lane
    est = options.top_k * 2 * passes * SIM_S_PER_OP_MICROBATCH * problem.n_ops * patterns
    return min(RANKING_SHARE_MAX * options.time_limit_s, est) + FINE_PLAN_S_PER_OP * problem.n_ops


#: seconds per op of the graph to expand the best coarse plan, cost it, check it and write
#: it (a 100,000-op chain on this project's 2-core machine: about 4 + 3 + 3 s), kept for
#: after the solve beside the simulations' margin
FINE_PLAN_S_PER_OP = 1e-4


def _milp_options(options: SolveOptions, clock: Clock, margin_s: float) -> SolveOptions:
    """``options`` with the time left on ``clock``, less ``margin_s``, as the MILP's limit."""
    left = clock.deadline - time.perf_counter() - margin_s
    return dataclasses.replace(options, time_limit_s=max(left, MIN_SOLVE_S))


def _milp_plans(problem: Problem, options: SolveOptions, clock: Clock,
                ) -> tuple[SolveResult, list[Plan], int | None]:
    """Solve, on a coarsened graph when it is large; plans come back on ``problem``'s ops.
    The MILP gets the time left on ``clock`` less the ranking margin."""
    margin = ranking_margin_s(problem, options)
    space = resolve_space(problem, options)
    # the analytic spaces (cluster, fleet) split whole layers and read the ops' tensor-parallel roles: never coarsened
    target = None if space.analytic else coarsen_target(problem, options.coarsen_ops)
    if target is None:
        if not space.analytic:   # the MILP's first plan (model.phase_fast)
            check_first_plan_fits(problem, clock)
        solved = milp_solve(problem, _milp_options(options, clock, margin) if math.isfinite(clock.limit_s) else options)
        return solved, list(solved.plans), None
    from distplan.workloads.coarsen import coarsen, expand_plan

    with deadline_at(clock.t0, clock.limit_s):   # no plan yet: past it, an error
        c = coarsen(problem.graph, target_ops=target)
        coarse = effective_coarse_memory(build_problem(c.coarse, problem.topology, ProblemOptions(
            precisions=problem.precisions, microbatches=problem.microbatches, schedule=problem.schedule,
            low_bit_ops=problem.low_bit_ops, comm=problem.comm)), problem, c)
        coarse = effective_coarse_times(coarse, problem, c)
    check_first_plan_fits(coarse, clock)
    if options.progress:
        options.progress(f"coarsened {problem.n_ops} ops to {coarse.n_ops} for the solve; plans are expanded back "
                         "and simulated on the original graph (the proven gap holds for the coarse problem)")
    solved = milp_solve(coarse, _milp_options(options, clock, margin) if math.isfinite(clock.limit_s) else options)
    plans = []
    for p in solved.plans:
        if plans and time.perf_counter() > clock.deadline:   # each expansion costs the fine graph: the best ones stand
            solved = dataclasses.replace(solved, cut_short=[*solved.cut_short, (
                f"expanding the coarse plans: {len(solved.plans) - len(plans)} of {len(solved.plans)} not expanded "
                "to the fine graph (time limit)")])
            break
        fine = expand_plan(c, p)   # a coarse op's int8 holds only for its matrix products:
        fine = dataclasses.replace(fine, op_precision=problem.effective_precisions(fine.op_precision))
        plans.append(fine.with_predicted(coarse_milp_period_s=p.predicted.get("milp_period_s"),
                                          milp_period_s=plan_cost(problem, fine).period_s))
    return solved, plans, coarse.n_ops


def effective_coarse_memory(coarse: Problem, fine: Problem, c) -> Problem:
    """``coarse`` with each coarse op's bytes at precision q scaled to what its members
    hold at the precisions they will run (``Problem.fallback_q``: int8 on a group's matrix
    products, fp16 on its norms and adds), so a coarse plan that fits expands to a fine
    plan that fits. Unchanged when every member may use every precision."""
    if fine.op_allowed.all():
        return coarse
    Q = len(fine.precisions)
    fb = np.array([[fine.fallback_q(v, q) for q in range(Q)] for v in range(fine.n_ops)])
    arrays = {}
    for name in ("static_bytes", "act_bytes", "send_bytes", "tied_bytes"):
        fa, ca = getattr(fine, name), np.array(getattr(coarse, name), dtype=float)
        for k in range(coarse.n_ops):
            m = list(c.members(k))
            for q in range(Q):
                want, plain = fa[m, fb[m, q]].sum(), fa[m, q].sum()
                if plain > 0 and want != plain:
                    ca[k, q] *= want / plain
        ca.setflags(write=False)
        arrays[name] = ca
    return dataclasses.replace(coarse, **arrays)


def effective_coarse_times(coarse: Problem, fine: Problem, c) -> Problem:
    """With measured times on the fine graph (``Graph.measured``): each coarse op's
    forward and backward seconds are the sums of its members' at the precisions they
    will run (``Problem.fallback_q``), so the coarse problem reads the measurements the
    coarsening dropped. Unchanged (the coarse roofline) without measurements."""
    if not fine.graph.measured:
        return coarse
    Q, C = len(fine.precisions), len(fine.kind_names)
    arrays = {}
    for name in ("fwd_time_s", "bwd_time_s"):
        fa, ca = getattr(fine, name), np.array(getattr(coarse, name), dtype=float)
        for k in range(coarse.n_ops):
            m = list(c.members(k))
            for q in range(Q):
                for kc in range(C):
                    fb = [fine.fallback_q(v, q, kc) for v in m]
                    ca[k, q, kc] = (math.inf if not coarse.supported[q, kc] or any(p is None for p in fb)
                                    else math.fsum(fa[v, p, kc] for v, p in zip(m, fb)))
        ca.setflags(write=False)
        arrays[name] = ca
    return dataclasses.replace(coarse, **arrays)


def simulated_overflow(problem: Problem, sim: SimResult) -> str | None:
    """The first device whose *simulated* peak (in-flight buffers included) exceeds its
    memory, as a message; None when every device fits."""
    for d, (peak, cap) in enumerate(zip(sim.peak_memory_bytes, problem.device_mem_bytes)):
        if peak > cap * (1 + 1e-9):
            name = problem.topology.devices[d].name
            return (f"device {name} peaks at {peak / 2**20:.2f} MiB in the realistic simulation "
                    f"(buffers in flight included), over its {cap / 2**20:.2f} MiB")
    return None


def budget_excess(problem: Problem, plan: Plan, budget: float | None) -> str | None:
    """A message when ``plan``'s sensitivity on ``problem`` (the graph the user gave)
    exceeds ``budget``; None when it holds or there is no budget."""
    if budget is None:
        return None
    s = plan_sensitivity(problem, plan)
    if s > budget * (1 + 1e-9) + 1e-12:
        return f"sensitivity {s:.6g} exceeds the budget {budget:.6g} on the original graph"
    return None


def expected_sim_s(problem: Problem, plan: Plan, trace: bool = False, analytic: bool = False) -> float:
    """A rough forecast of the seconds ``_simulate_one`` takes (``sim.forecast``): the
    realistic run (with ``trace`` identical copies are not merged) and, for a plan of
    the pipeline MILP (not ``analytic``), the ideal run, which never merges copies."""
    real = forecast_sim_s(problem, plan, trace=trace)
    return real if analytic else real + forecast_sim_s(problem, plan, trace=True)


#: a plan is simulated when its forecast fits the time left less this share of the time
#: limit (forecasts are rough, within 0.5-2.2x; the limit is not) ...
SIMULATION_MARGIN_SHARE = 0.03
#: ... except that the first plan always may when its forecast is this short
RANKING_GRACE_MIN_S = 0.05


def simulation_margin_s(time_limit_s: float) -> float:
    """How much of the time left a simulation's forecast must leave unused."""
    return SIMULATION_MARGIN_SHARE * time_limit_s if math.isfinite(time_limit_s) else 0.0


def rank_plans(problem: Problem, plans: list[Plan], trace: bool = False, sensitivity_budget: float | None = None,
               *, deadline: float = math.inf, stop: Stop | None = None, space: PlanSpace | None = None,
               ) -> tuple[tuple[RankedPlan, ...], tuple[tuple[Plan, str], ...]]:
    """Check and simulate every plan (realistic and ideal); keep those that fit memory
    in the realistic simulation and meet the sensitivity budget, best simulated
    throughput first (plans of an analytic space, ``space.analytic``: realistic run only,
    shortest simulated iteration first). ``space``: the plan space the plans come from
    (default: the one ``distplan.solve`` picks for ``problem`` with default options).
    Returns (ranked, dropped with the reason). Past ``deadline``
    (perf_counter seconds) or once ``stop`` is requested (Ctrl-C), the plans not
    simulated yet are left out; a plan whose forecast does not fit the time left is not
    simulated, and when none fits the plans come back unsimulated (``_rank``).

    A plan the planner returns that the independent checker rejects is an InternalError:
    the MILP and the checker disagree, which is a bug, never the user's input."""
    check_problem_plan(problem)
    if not isinstance(plans, (list, tuple)) or not all(isinstance(x, Plan) for x in plans):
        raise DistplanError(f"plans must be a list of Plans (a SolveResult's plans), got "
                            f"{type(plans).__name__}"[:200])
    check_bool("trace", trace)
    check_float("sensitivity_budget", sensitivity_budget, 0.0, optional=True, none_means="no budget")
    if space is None:
        try:
            space = resolve_space(problem, SolveOptions())
        except DistplanError:
            space = SPACES["pipeline"]
    ranked, dropped, _, _ = _rank(problem, list(plans), trace, sensitivity_budget, Clock.until(deadline, stop),
                                  analytic=space.analytic)
    return ranked, dropped


def _rank(problem: Problem, plans: list[Plan], trace: bool, sensitivity_budget: float | None, clock: Clock,
          margin_s: float = 0.0, analytic: bool = False,
          ) -> tuple[tuple[RankedPlan, ...], tuple[tuple[Plan, str], ...], int, str | None]:
    """rank_plans, how many plans the deadline or Ctrl-C left unsimulated, and why none
    was simulated (None when one was). A plan is simulated only when its forecast
    (``expected_sim_s``) fits the time left less ``margin_s`` (the first one also when
    its forecast is under ``RANKING_GRACE_MIN_S``), best plan first; when none fits, every plan comes back checked but unsimulated (``RankedPlan.sim``
    None), in the solver's order, with its model figures: a plan whose replicas do not
    merge, at scale, can take minutes to simulate."""
    deadline, stop = clock.deadline, clock.stop
    rows, dropped, waiting = [], [], []
    cost: dict[int, float] = {}
    interrupted_at = None   # the plan whose simulation a signal stopped
    timed_out = None        # the plan whose simulation the deadline stopped
    for plan in plans:
        left = deadline - time.perf_counter()
        if rows and (left <= 0 or stop.requested):
            break
        if id(plan) not in cost:   # no forecast without a deadline
            cost[id(plan)] = expected_sim_s(problem, plan, trace, analytic) if math.isfinite(left) else 0.0
        fits = cost[id(plan)] <= left - margin_s or (not rows and cost[id(plan)] <= RANKING_GRACE_MIN_S)
        if not fits:
            waiting.append(plan)   # would outlast the time limit
            continue
        try:   # a signal, or the clock passing the deadline, drops this simulation, never the plans
            with stop.raising(), stop_at(deadline):
                row = _simulate_one(problem, plan, trace, sensitivity_budget, analytic)
        except KeyboardInterrupt:
            if not stop.requested:
                raise
            interrupted_at = plan
            break
        except TimeUp:   # slower than its forecast (a loaded machine): the time limit holds
            timed_out = plan
            break
        if isinstance(row, str):
            dropped.append((plan, row))
        else:
            rows.append(row)
    why = None
    if not rows and (interrupted_at is not None or timed_out is not None):   # the first simulation was stopped
        why = (f"simulation interrupted ({stop.name}) before a plan was simulated" if interrupted_at is not None
               else f"simulation stopped at the time limit (forecast {cost[id(timed_out)]:.1f} s; it ran slower, "
                    "on a loaded machine)")   # the model's figures, for every plan not dropped
        waiting = [p for p in plans if not any(p is d for d, _ in dropped)]
        cost = {id(p): 0.0 for p in waiting}
    if not rows and waiting:   # none fits: the model's figures, said as such
        left = deadline - time.perf_counter()
        quickest = min(cost[id(p)] for p in waiting)
        why = why or (f"simulation skipped: forecast {quickest:.1f} s > {max(left - margin_s, 0.0):.1f} s usable "
               f"({max(left, 0.0):.1f} s left less a {margin_s:.1f} s margin)")
        checked = 0
        for plan in waiting:
            if rows and deadline - time.perf_counter() <= 0:   # past the limit: the best so far stands
                break   # (checking a 100,000-op plan takes seconds; the rest are counted as not ranked)
            checked += 1
            _check(problem, plan)
            over = budget_excess(problem, plan, sensitivity_budget)
            if over is not None:
                dropped.append((plan, over))
            else:
                rows.append((plan, None, None))
        return _ranked(rows, sort=False, analytic=analytic), tuple(dropped), len(waiting) - checked, why
    return _ranked(rows, sort=True, analytic=analytic), tuple(dropped), len(plans) - len(rows) - len(dropped), why


def _check(problem: Problem, plan: Plan) -> None:
    try:   # every space: the cluster space searches under the checker's memory too (costs.memory)
        check_plan(problem, plan)
    except InfeasiblePlan as e:
        raise InternalError(f"the planner returned a plan the checker rejects: {e}") from e


def _simulate_one(problem: Problem, plan: Plan, trace: bool, sensitivity_budget: float | None,
                  analytic: bool = False) -> tuple[Plan, SimResult, SimResult | None] | str:
    """(plan, realistic run, ideal run or None) or why the plan is dropped."""
    _check(problem, plan)
    why = budget_excess(problem, plan, sensitivity_budget)
    if why is not None:
        return why
    real = sim_run(problem, plan, SimOptions(trace=trace))
    why = simulated_overflow(problem, real)
    if why is not None:
        return why
    # the ideal mode is the pipeline MILP's model; an analytic space's model is the analytic
    # iteration, and its ideal run would not merge identical replicas (a full 1,000-GPU run)
    ideal = None if analytic else sim_run(problem, plan, SimOptions(ideal=True))
    return plan, real, ideal


def _ranked(rows: list, sort: bool, analytic: bool = False) -> tuple[RankedPlan, ...]:
    """RankedPlans of (plan, realistic, ideal) rows, sorted by the simulation (``sort``;
    unsimulated rows keep their order): an analytic space's by iteration (a training
    step, or one request), the pipeline MILP's by throughput."""
    if sort and rows and analytic:
        rows.sort(key=lambda r: (r[1].iteration_s, -r[1].throughput_per_s))
    elif sort:
        rows.sort(key=lambda r: (-r[1].throughput_per_s, r[1].makespan_s))
    return tuple(RankedPlan(i + 1, p if real is None else p.with_predicted(sim_period_s=real.period_s,
                                                                         throughput_per_s=real.throughput_per_s),
                            float(p.predicted.get("milp_period_s", float("nan"))),
                            ideal.period_s if ideal is not None else float("nan"), real)
                 for i, (p, real, ideal) in enumerate(rows))


def simulated_iteration_s(problem: Problem, plan: Plan, deadline_s: float) -> float | None:
    """The simulated iteration of a training ``plan`` (``SolveOptions.fallback_timer``):
    None where its forecast (``sim.forecast``) does not fit before ``deadline_s`` (a
    perf_counter instant) or the run reaches it."""
    if time.perf_counter() + forecast_sim_s(problem, plan) > deadline_s:
        return None
    try:
        with stop_at(deadline_s):
            return sim_run(problem, plan).iteration_s
    except TimeUp:
        return None


def solve(problem: Problem, options: SolveOptions | None = None, *, trace: bool = False) -> SolveReport:
    """Plan ``problem``: the MILP's top-K plans, each checked and simulated, ranked by
    simulated throughput, with the solver's status, proven bound and gap. A plan whose
    realistic simulation overflows a device's memory, or (after coarsening) breaks the
    sensitivity budget on the original graph, is dropped and the report says why.

    ``options.time_limit_s`` bounds the whole call (module docstring); what the clock or
    a Ctrl-C cut short is listed in ``SolveReport.cut_short``.

    ``trace=True`` keeps each simulation's events (for ``SolveReport.write_trace`` and
    the report plots). Raises DistplanError when no plan exists."""
    check_problem_plan(problem)
    if options is not None:
        check_instance("options", options, SolveOptions, "use distplan.SolveOptions(...)")
    check_bool("trace", trace)
    options = options or SolveOptions()
    if options.fallback_timer is None:   # the plans the analytic iteration refuses: simulated
        options = dataclasses.replace(options, fallback_timer=simulated_iteration_s)
    t0 = time.perf_counter()
    with stop_on_interrupt() as stop:
        clock = Clock(options.time_limit_s, t0, stop)
        solved, plans, coarse_ops = _milp_plans(problem, options, clock)
        if solved.problem is not None:   # the cluster space chose another microbatch size
            problem = solved.problem
        if not plans:
            raise DistplanError(f"the solver returned no plan (status {solved.status})")
        stop.arm()   # plans exist: a signal from now on keeps them (simulated or not)
        ranked, dropped, unranked, unsimulated = _rank(problem, plans, trace, options.sensitivity_budget, clock,
                                                       simulation_margin_s(options.time_limit_s),
                                                       analytic=solved.analytic)
    if not ranked:
        raise DistplanError(f"none of the {len(plans)} plans the solver found is usable: {dropped[0][1]}"
                            + (f" (and {len(dropped) - 1} more)" if len(dropped) > 1 else "")
                            + "; give the devices more memory, or fewer microbatches in flight")
    cut = list(solved.cut_short)
    if unranked:
        cut.append(f"ranking: {unranked} of {len(plans)} plans not simulated "
                   f"({'interrupted' if stop.requested else 'time limit'})")
    if unsimulated is not None:
        many = len(ranked) > 1
        cut.append(f"ranking: {unsimulated}; the {len(ranked)} plan{'s' if many else ''} above "
                   f"carr{'y' if many else 'ies'} the model's figures only "
                   f"({'interrupted' if stop.requested else 'time limit'})")
    return SolveReport(problem=problem, solver=solved, plans=ranked, coarse_ops=coarse_ops,
                       options=dataclasses.replace(options, progress=None), dropped=dropped,
                       cut_short=tuple(cut), interrupted=stop.requested,
                       interrupted_by=stop.name if stop.requested else "")
