"""The main job: solve the MILP, replay every plan in the simulator, rank by simulated
throughput, report, and write the winner (plan, trace, plots)."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from costs.problem import Problem
from distplan.errors import DistplanError
from distplan.plan import Plan, plan_to_dict, save_plan


@dataclass(frozen=True)
class RankedPlan:
    rank: int
    plan: Plan
    milp_period_s: float
    ideal_period_s: float
    sim: Any  # sim.SimResult under realistic settings


def rank_plans(problem: Problem, plans: list[Plan], trace: bool = False) -> list[RankedPlan]:
    """Check and simulate every plan (realistic and ideal), best simulated throughput first."""
    from sim import SimOptions, simulate
    from sim.check import check_plan

    rows = []
    for plan in plans:
        check_plan(problem, plan)
        real = simulate(problem, plan, SimOptions(trace=trace))
        ideal = simulate(problem, plan, SimOptions(ideal=True))
        rows.append((plan, real, ideal))
    rows.sort(key=lambda r: (-r[1].throughput_per_s, r[1].makespan_s))
    return [RankedPlan(i + 1, p, float(p.predicted.get("milp_period_s", float("nan"))), ideal.period_s, real)
            for i, (p, real, ideal) in enumerate(rows)]


def lanes(plan: Plan) -> int:
    """Replicas of the pipeline (1: a single pipeline)."""
    return max(s.replicas for s in plan.stages)


def precision_mix(plan: Plan) -> str:
    counts: dict[str, int] = {}
    for p in plan.op_precision:
        counts[p] = counts.get(p, 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def result_document(problem: Problem, solved: Any, ranked: list[RankedPlan]) -> dict[str, Any]:
    """The ``--json`` document."""
    g = problem.graph
    return {
        "workload": g.name, "mode": g.mode, "topology": problem.topology.name,
        "precisions_allowed": list(problem.precisions), "microbatches": problem.microbatches,
        "solver": {"status": solved.status, "objective_s": solved.objective_s, "bound_s": solved.bound_s,
                   "gap": solved.gap, "seconds": solved.seconds, "build_seconds": solved.build_seconds,
                   "binaries": solved.n_binaries, "constraints": solved.n_constraints},
        "plans": [{
            "rank": r.rank, "milp_period_s": r.milp_period_s, "sim_period_s": r.sim.period_s,
            "sim_ideal_period_s": r.ideal_period_s, "throughput_per_s": r.sim.throughput_per_s,
            "makespan_s": r.sim.makespan_s, "stages": len(r.plan.used_stages()), "lanes": lanes(r.plan),
            "sensitivity": r.plan.predicted.get("sensitivity"),
            "precisions": {op.name: r.plan.op_precision[v] for v, op in enumerate(g.ops)},
            "peak_memory_bytes": float(max(r.sim.peak_memory_bytes)),
            "plan": plan_to_dict(r.plan, problem),
        } for r in ranked],
    }


def format_table(problem: Problem, solved: Any, ranked: list[RankedPlan]) -> str:
    g = problem.graph
    head = (f"{g.name} ({g.mode}) on {problem.topology.name}: {len(g.ops)} ops, "
            f"{problem.topology.n_devices} devices, precisions {','.join(problem.precisions)}")
    cols = f"{'rank':>4} {'MILP period':>12} {'sim period':>12} {'ideal sim':>12} {'samples/s':>11} " \
           f"{'stages':>6} {'lanes':>5} {'peak MiB':>9}  precision mix"
    lines = [head, cols]
    for r in ranked:
        lines.append(f"{r.rank:>4} {r.milp_period_s:>12.5g} {r.sim.period_s:>12.5g} {r.ideal_period_s:>12.5g} "
                     f"{r.sim.throughput_per_s:>11.5g} {len(r.plan.used_stages()):>6} {lanes(r.plan):>5} "
                     f"{max(r.sim.peak_memory_bytes) / 2**20:>9.1f}  {precision_mix(r.plan)}")
    gap = "n/a" if solved.gap is None else f"{100 * solved.gap:.2f} %"
    lines.append(f"solver: {solved.status}, objective {solved.objective_s:.6g} s, proven bound "
                 f"{solved.bound_s:.6g} s, gap {gap}, {solved.seconds:.1f} s solve + {solved.build_seconds:.1f} s build, "
                 f"{solved.n_binaries} binaries, {solved.n_constraints} constraints")
    if solved.status != "optimal":
        lines.append(f"note: the solver stopped at '{solved.status}' before proving its gap target; "
                     "the plans above are the best found, with the gap shown")
    return "\n".join(lines)


def parse_budget(text: str | None, problem: Problem) -> float | None:
    """'--sensitivity-budget' as an absolute value ('120') or as a share of the
    all-lowest-precision sensitivity ('10%')."""
    if text is None:
        return None
    t = str(text).strip()
    try:
        if t.endswith("%"):
            frac = float(t[:-1]) / 100.0
            if not 0 <= frac:
                raise ValueError
            return frac * float(problem.sensitivity.max(axis=1).sum())
        value = float(t)
    except ValueError:
        raise DistplanError(f"--sensitivity-budget must be a number or a percentage like 10%, got {text!r}") from None
    if value < 0:
        raise DistplanError(f"--sensitivity-budget must be >= 0, got {text!r}")
    return value


def solve_options(args: argparse.Namespace, problem: Problem):
    from model import SolveOptions

    def progress(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    kw: dict[str, Any] = dict(
        objective=args.objective, sensitivity_budget=parse_budget(args.sensitivity_budget, problem),
        sensitivity_weight=args.sensitivity_weight, top_k=args.top_k, time_limit_s=args.time_limit,
        rel_gap=args.gap, seed=args.seed, n_stages=args.stages,
        progress=None if args.quiet or args.json else progress,
    )
    if args.threads is not None:
        kw["threads"] = args.threads
    return SolveOptions(**kw)


#: Graphs larger than this are coarsened before the solve unless --coarsen says otherwise.
AUTO_COARSEN_ABOVE_OPS = 300
AUTO_COARSEN_TARGET_OPS = 150


def coarsen_target(problem: Problem, requested: int | None) -> int | None:
    """Target op count for the solve (None: solve the graph as it is)."""
    n = problem.n_ops
    if requested is None:
        return AUTO_COARSEN_TARGET_OPS if n > AUTO_COARSEN_ABOVE_OPS else None
    if requested < 0:
        raise DistplanError(f"--coarsen must be >= 0 (0 disables), got {requested}")
    return requested if 0 < requested < n else None


def solve_maybe_coarse(problem: Problem, args: argparse.Namespace):
    """Solve ``problem``, on a coarsened graph when it is large; plans come back on the
    original operators. Returns (SolveResult, plans on ``problem``, coarse op count or None)."""
    from costs.evaluate import plan_cost
    from costs.problem import ProblemOptions, build_problem
    from model import solve

    target = coarsen_target(problem, getattr(args, "coarsen", None))
    if target is None:
        solved = solve(problem, solve_options(args, problem))
        return solved, list(solved.plans), None
    from workloads.coarsen import coarsen, expand_plan

    c = coarsen(problem.graph, target_ops=target)
    coarse = build_problem(c.coarse, problem.topology, ProblemOptions(
        precisions=problem.precisions, microbatches=problem.microbatches, schedule=problem.schedule))
    if not args.quiet and not args.json:
        print(f"coarsened {problem.n_ops} ops to {coarse.n_ops} for the solve; plans are expanded back and "
              "simulated on the original graph (the proven gap holds for the coarse problem)",
              file=sys.stderr, flush=True)
    solved = solve(coarse, solve_options(args, coarse))
    plans = []
    for p in solved.plans:
        fine = expand_plan(c, p)
        fine.predicted.update(coarse_milp_period_s=p.predicted.get("milp_period_s"),
                              milp_period_s=plan_cost(problem, fine).period_s)
        plans.append(fine)
    return solved, plans, coarse.n_ops


def run_main(problem: Problem, args: argparse.Namespace) -> int:
    """Solve, rank, print, write; returns the process exit code."""
    if args.top_k < 1:
        raise DistplanError("--top-k must be >= 1")
    if args.compare:
        from distplan.compare import run_compare

        return run_compare(problem, args)
    solved, plans, coarse_ops = solve_maybe_coarse(problem, args)
    if not plans:
        raise DistplanError(f"the solver returned no plan (status {solved.status})")
    ranked = rank_plans(problem, plans, trace=bool(args.trace or args.report))
    best = ranked[0]
    if args.plan_out:
        best_plan = best.plan
        best_plan.predicted.update(sim_period_s=best.sim.period_s, throughput_per_s=best.sim.throughput_per_s)
        save_plan(best_plan, problem, args.plan_out)
    if args.trace:
        from sim.trace import write_chrome_trace

        write_chrome_trace(best.sim, problem, args.trace)
    if args.report:
        from distplan.plots import write_report

        write_report(problem, best, args.report)
    if args.json:
        doc = result_document(problem, solved, ranked)
        doc["solver"]["coarse_ops"] = coarse_ops
        print(json.dumps(doc, indent=1, default=float))
    else:
        print(format_table(problem, solved, ranked))
        if coarse_ops is not None:
            print(f"note: solved on a {coarse_ops}-op coarsening of the {problem.n_ops}-op graph; the bound and gap "
                  "above are for the coarse problem, periods are for the expanded plans on the original graph")
        outs = [p for p in (args.plan_out, args.trace, args.report) if p]
        if outs:
            print("wrote " + ", ".join(outs))
    return 0
