"""``solve.py --compare``: the MILP against baseline searches at equal wall-clock budget.

Every method gets the same budget; the MILP (``model.solve`` with ``time_limit_s`` =
budget) returns its top-K plans, which are checked and replayed in the realistic
simulator (``distplan.api.pipeline.solve``, coarsening large graphs as the CLI does); every baseline scores its candidates with that
same simulator and the same feasibility checker. The table shows, per method, the best
plan's simulated throughput, its ratio to the MILP plan, wall seconds and candidates
evaluated, and, as the ceiling, the throughput the MILP's proven bound allows
(``batch_size / bound_s``: no plan's period is shorter under the MILP's cost model, which
is the simulator's ideal mode).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distplan.costs.problem import Problem
from distplan.api.pipeline import check_problem_plan, solve
from distplan.core.errors import DistplanError
from distplan.core.validate import check_callable, check_float, check_instance, check_int
from distplan.api.report import _json_safe
from distplan.baselines import METHODS, parse_methods
from distplan.baselines.result import BaselineResult
from distplan.baselines.spaces import BaselineSpace
from distplan.core.clock import Clock
from distplan.core.interrupt import Stop, current_stop
from distplan.baselines.scoring import sim_rate
from distplan.core.plan import Plan, plan_to_dict
from distplan.model import SolveOptions
from distplan.model.options import check_seed

#: the searches the acceptance target is stated against (MCM partitioning paper)
SEARCH_BASELINES = ("random", "sa")


@dataclass(frozen=True)
class MethodRow:
    """One method's outcome. For the MILP ``status``/``objective_s``/``bound_s``/``gap``
    are the solver's; for a baseline ``status`` is 'found' or 'none', ``objective_s`` the
    simulated period of its plan and bound/gap are NaN. ``candidates``: plans simulated
    (MILP: its top-K), ``rejected``: candidates the feasibility gate turned away."""

    method: str
    throughput_per_s: float
    seconds: float
    candidates: int
    status: str
    objective_s: float = math.nan
    bound_s: float = math.nan
    gap: float = math.nan
    rejected: int = 0
    implausible: int = 0
    plan: Plan | None = None
    extra: dict = dataclasses.field(default_factory=dict)
    problem: Problem | None = None   # the plan's problem where not the compared one (a rank problem)


@dataclass(frozen=True)
class Comparison:
    problem: Problem
    budget_s: float
    rows: tuple[MethodRow, ...]  # the MILP first
    candidates: int | None = None  # the deterministic budget per baseline, if one was set

    @property
    def milp(self) -> MethodRow:
        return self.rows[0]

    @property
    def ceiling_per_s(self) -> float:
        """batch_size / proven bound (inf when the bound is 0 or unknown); for a bound on
        the training iteration (the cluster and fleet spaces): global batch / bound."""
        b = self.milp.bound_s
        samples = self.milp.extra.get("bound_samples", self.problem.graph.batch_size)
        return samples / b if b > 0 and math.isfinite(b) else math.inf

    def ratio(self, row: MethodRow) -> float:
        """row throughput / MILP throughput."""
        m = self.milp.throughput_per_s
        return row.throughput_per_s / m if m > 0 else math.nan

    def milp_over(self, methods: Sequence[str] = SEARCH_BASELINES) -> float:
        """MILP throughput / the best throughput among ``methods`` present (NaN if none)."""
        best = max((r.throughput_per_s for r in self.rows[1:] if r.method in methods), default=None)
        if best is None:
            return math.nan
        return self.milp.throughput_per_s / best if best > 0 else math.inf

    def table(self) -> str:
        """One row per method: simulated throughput, ratio to the MILP, seconds, candidates."""
        return format_comparison(self)

    def to_json(self) -> dict[str, Any]:
        return comparison_document(self)

    def __str__(self) -> str:
        return self.table()


def run_milp(problem: Problem, options: SolveOptions) -> MethodRow:
    """``distplan.solve`` (coarsen, MILP, check, simulate, rank); the row carries the best."""
    t0 = time.perf_counter()
    rep = solve(problem, options)
    solved, best = rep.solver, rep.best
    cp = int(best.plan.predicted.get("context_parallel", 1))   # a cp plan's problem is one context rank's
    rate = sim_rate(problem, best.sim) / cp if best.simulated else math.nan   # as the scorer; nan: not simulated
    return MethodRow("milp", float(rate), time.perf_counter() - t0, len(rep.plans),
                     solved.status if best.simulated else f"{solved.status}, not simulated",
                     float(solved.objective_s), float(solved.bound_s), float(solved.gap),
                     plan=best.plan,
                     extra={"solve_seconds": solved.seconds, "build_seconds": solved.build_seconds,
                            "binaries": solved.n_binaries, "constraints": solved.n_constraints,
                            "milp_period_s": best.milp_period_s,
                            "sim_period_s": best.sim.period_s if best.simulated else math.nan,
                            "coarse_ops": rep.coarse_ops,
                            # a bound on the iteration covers a step's samples, not one microbatch's
                            "bound_samples": (rep.problem.microbatches * rep.problem.graph.batch_size // cp
                                              if problem.training and solved.analytic
                                              else problem.graph.batch_size)},
                     problem=rep.problem if rep.problem is not problem else None)


def run_method(problem: Problem, method: str, budget_s: float, seed: int = 0,
               sensitivity_budget: float | None = None, scorer=None, candidates: int | None = None,
               solve_options: SolveOptions | None = None) -> MethodRow:
    """One baseline as a table row: its plan space (``baselines.spaces.BaselineSpace``)
    searched on a clock of ``budget_s``; ``solve_options``: the planner's, whose cluster
    space options (virtual stages, cp / ep degrees) the grid searches too. The row's
    ``problem`` is its plan's where that is a rank problem (the grid's cp / ep points)."""
    space = BaselineSpace(method, scorer=scorer, max_candidates=candidates)
    base = solve_options or SolveOptions()
    options = dataclasses.replace(base, seed=seed, sensitivity_budget=sensitivity_budget, progress=None)
    r = BaselineResult.of(space.search(problem, options, Clock(budget_s, stop=current_stop() or Stop())))
    found = r.plan is not None
    period = problem.graph.batch_size / r.throughput_per_s if found and r.throughput_per_s > 0 else math.nan
    return MethodRow(method, r.throughput_per_s, r.seconds, r.candidates, "found" if found else "none",
                     objective_s=period, rejected=r.rejected, implausible=r.implausible, plan=r.plan,
                     extra={"stopped_by": r.stopped_by, **({"space": r.space} if r.space else {})},
                     problem=r.problem)


def compare(problem: Problem, methods: Sequence[str] | str = ("random", "sa", "dp", "grid"), budget_s: float = 60.0,
            seed: int = 0, solve_options: SolveOptions | None = None, sensitivity_budget: float | None = None,
            progress: Callable[[str], None] | None = None, candidates: int | None = None) -> Comparison:
    """Run the MILP (time limit = ``budget_s``) and each baseline (budget ``budget_s``), one
    after the other so that none competes with another for the cores. ``candidates``:
    a deterministic budget, every baseline scores that many plans (``budget_s`` stays a
    safety cap); with the same ``seed`` every method then reproduces exactly."""
    check_problem_plan(problem)
    check_float("budget_s", budget_s, 0.0, above=True)
    seed = check_seed("seed", seed)
    check_int("candidates", candidates, optional=True)
    sensitivity_budget = check_float("sensitivity_budget", sensitivity_budget, 0.0, optional=True,
                                     none_means="no budget")
    check_callable("progress", progress, "a function of one line of text")
    if solve_options is not None:
        check_instance("solve_options", solve_options, SolveOptions, "use distplan.SolveOptions(...)")
        if sensitivity_budget is not None and sensitivity_budget != solve_options.sensitivity_budget:
            raise DistplanError(f"sensitivity_budget {sensitivity_budget:g} differs from solve_options."
                                f"sensitivity_budget {solve_options.sensitivity_budget}; give it in one place")
    if not (isinstance(methods, str) or (isinstance(methods, (list, tuple)) and methods
                                         and all(isinstance(m, str) for m in methods))):
        raise DistplanError(f"methods must be a name such as 'random,sa' or a list of names "
                            f"({', '.join(METHODS)}), got {methods!r} ({type(methods).__name__})"[:300])
    methods = parse_methods(methods if isinstance(methods, str) else ",".join(methods))
    opts = solve_options or SolveOptions(seed=seed, sensitivity_budget=sensitivity_budget)
    opts = dataclasses.replace(opts, time_limit_s=budget_s)
    say = progress or (lambda msg: None)
    say(f"compare: MILP with a {budget_s:g} s time limit ...")
    rows = [run_milp(problem, opts)]
    say(f"compare: milp {rows[0].throughput_per_s:.6g} samples/s ({rows[0].status}, {rows[0].seconds:.1f} s)")
    for m in methods:
        say(f"compare: {m} with a {budget_s:g} s budget ...")
        rows.append(run_method(problem, m, budget_s, seed, opts.sensitivity_budget, candidates=candidates,
                               solve_options=opts))
        r = rows[-1]
        say(f"compare: {m} {r.throughput_per_s:.6g} samples/s after {r.candidates} candidates ({r.seconds:.1f} s)"
            + (f"; searched {r.extra['space']}" if r.extra.get("space") else "")
            + (f"; best {plan_shape(r.plan)}" if r.plan is not None and r.extra.get("space") else ""))
    return Comparison(problem, budget_s, tuple(rows), candidates)


def plan_shape(plan: Plan | None) -> str:
    """'4 stages' / '4 stages x2 replicas tp2' (largest replica and tp degrees; cp, ep
    and vp where above 1: 'x4 replicas cp2' counts the context ranks among the replicas)."""
    if plan is None:
        return ""
    r = max(s.replicas for s in plan.stages)
    tp = max(s.tensor_parallel for s in plan.stages)
    cp = int(plan.predicted.get("context_parallel", 1))
    ep = max(s.expert_parallel for s in plan.stages)
    vp = plan.virtual_stages
    return (f"{len(plan.used_stages()) // vp} stages" + (f" x{r} replicas" if r > 1 else "") + (f" tp{tp}" if tp > 1 else "")
            + (f" cp{cp}" if cp > 1 else "") + (f" ep{ep}" if ep > 1 else "") + (f" vp{vp}" if vp > 1 else ""))


def outside_milp_space(plan: Plan | None) -> bool:
    """Plans the MILP cannot express: tensor-parallel stages, unequal replica counts, or
    replicas outside an inference stream (the MILP replicates whole pipelines into lanes,
    every stage r times, for streams only)."""
    if plan is None:
        return False
    reps = {s.replicas for s in plan.stages}
    return (any(s.tensor_parallel > 1 for s in plan.stages) or len(reps) > 1
            or (reps != {1} and plan.schedule != "stream"))


def _num(x: float, fmt: str = ".5g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def format_comparison(c: Comparison) -> str:
    p, g = c.problem, c.problem.graph
    lines = [f"{g.name} ({g.mode}) on {p.topology.name}: {len(g.ops)} ops, {p.n_devices} devices, "
             f"precisions {','.join(p.precisions)}; {c.budget_s:g} s per method, throughput simulated (realistic)",
             f"{'method':<8} {'samples/s':>11} {'vs MILP':>8} {'wall s':>7} {'candidates':>10}  note"]
    for r in c.rows:
        if r.method == "milp":
            note = f"{r.status}, gap {_num(100 * r.gap, '.2f')} %, top-{r.candidates} simulated; {plan_shape(r.plan)}"
        else:
            note = "no feasible plan found" if r.plan is None else f"{plan_shape(r.plan)}; {r.rejected} infeasible"
            if r.extra.get("stopped_by") == "interrupted":
                note += "; stopped by Ctrl-C"
            if r.extra.get("stopped_by") == "time" and c.candidates is not None:
                note += f"; cut by the {c.budget_s:g} s safety cap before {c.candidates} candidates: not reproducible"
            if r.implausible:
                note += f", {r.implausible} discarded (simulated throughput above the physical ceiling)"
        lines.append(f"{r.method:<8} {r.throughput_per_s:>11.5g} {_num(c.ratio(r), '.3f'):>8} {r.seconds:>7.1f} "
                     f"{r.candidates:>10}  {note}")
    ceil = c.ceiling_per_s
    lines.append(f"{'ceiling':<8} {_num(ceil):>11} {_num(ceil / c.milp.throughput_per_s if c.milp.throughput_per_s else math.nan, '.3f'):>8} "
                 f"{'':>7} {'':>10}  {'samples per step' if c.milp.extra.get('bound_samples', c.problem.graph.batch_size) != c.problem.graph.batch_size else 'batch'} / proven bound {_num(c.milp.bound_s, '.6g')} s (planner's cost model)")
    for r in c.rows[1:]:
        if r.throughput_per_s > ceil * (1 + 1e-6):
            why = ("its plan has tensor-parallel or unevenly replicated stages, outside the MILP's plan space"
                   if outside_milp_space(r.plan) else
                   "its plan has the MILP's shape (a pipeline, possibly replicated into lanes): either it uses a "
                   "device arrangement the MILP's path/lane families do not explore, or there is a bug in the "
                   "MILP, its bound or the simulator")
            lines.append(f"warning: {r.method} beats the MILP's proven ceiling by "
                         f"{r.throughput_per_s / ceil - 1:.1%}: {why}")
    present = [m for m in SEARCH_BASELINES if any(r.method == m for r in c.rows)]
    if present:
        lines.append(f"MILP / best of {','.join(present)}: {c.milp_over(present):.3f}x")
    return "\n".join(lines)


def comparison_document(c: Comparison) -> dict[str, Any]:
    p, g = c.problem, c.problem.graph
    rows = []
    for r in c.rows:
        rows.append({
            "method": r.method, "throughput_per_s": r.throughput_per_s, "ratio_to_milp": c.ratio(r),
            "seconds": r.seconds, "candidates": r.candidates, "rejected": r.rejected,
            "implausible": r.implausible, "status": r.status, "plan_shape": plan_shape(r.plan),
            "outside_milp_space": outside_milp_space(r.plan),
            "objective_s": r.objective_s, "bound_s": r.bound_s, "gap": r.gap, **r.extra,
            "plan": plan_to_dict(r.plan, r.problem or p) if r.plan is not None else None,
        })
    present = [m for m in SEARCH_BASELINES if any(r.method == m for r in c.rows)]
    return _json_safe({"workload": g.name, "mode": g.mode, "topology": p.topology.name,
            "precisions_allowed": list(p.precisions), "budget_s": c.budget_s,
            "ceiling_throughput_per_s": c.ceiling_per_s, "milp_bound_s": c.milp.bound_s,
            "milp_over_best_search": c.milp_over(present) if present else None,
            "methods": rows})


#: the name the studies and older callers use
compare_methods = compare
