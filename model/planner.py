"""model.solve: pick a device path, warm-start from the DP heuristic, solve the MILP with
HiGHS, then collect the K best distinct plans with no-good cuts."""
from __future__ import annotations

import math
import time

import numpy as np
import pyomo.environ as pyo

from costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from costs.problem import Problem
from distplan.errors import DistplanError
from distplan.plan import Plan
from model.build import ModelSpec, build_model
from model.extract import assign_plan, plan_from_values, projection
from model.heuristic import heuristic_plan, score
from model.highs import HighsRun
from model.options import SolveOptions, SolveResult
from model.paths import device_paths
from sim.check import plan_violations

MIB = 2.0**20


def check_inputs(problem: Problem, options: SolveOptions) -> None:
    """Raise DistplanError for inputs no plan can satisfy, naming the op or constraint."""
    g, topo = problem.graph, problem.topology
    kinds = problem.device_kind
    D = problem.n_devices
    n1 = 1.0
    for v, op in enumerate(g.ops):
        best = None
        for q, p in enumerate(problem.precisions):
            devs = [d for d in range(D) if problem.supported[q, kinds[d]]]
            if not devs:
                continue
            need = problem.static_bytes[v, q] + n1 * problem.act_bytes[v, q]
            cap = max(problem.device_mem_bytes[d] for d in devs)
            if best is None or need - cap < best[0] - best[1]:
                best = (need, cap, p)
            if need <= cap:
                best = None
                break
        if best is not None:
            need, cap, p = best
            raise DistplanError(
                f"op {op.name!r} does not fit on any device: it needs {need / MIB:.2f} MiB even at {p} "
                f"but the largest device holds {cap / MIB:.2f} MiB (short by {(need - cap) / MIB:.2f} MiB); "
                "use a lower precision, a smaller batch, or devices with more memory")
    if options.sensitivity_budget is not None:
        lo = math.fsum(min(problem.sensitivity[v, q] for q in range(len(problem.precisions))
                           if problem.supported[q].any()) for v in range(problem.n_ops))
        if options.sensitivity_budget < lo - 1e-12:
            raise DistplanError(
                f"sensitivity budget {options.sensitivity_budget:.6g} is below the minimum any plan achieves "
                f"({lo:.6g}, every op at its highest allowed precision); raise the budget to at least {lo:.6g}")
    K = options.n_stages or D
    if K > D:
        raise DistplanError(f"n_stages {K} exceeds the {D} devices of topology {topo.name!r}; use at most {D}")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _annotate(problem: Problem, plan: Plan, options: SolveOptions, solver_obj: float | None) -> Plan:
    pred = {"milp_period_s": plan_cost(problem, plan).period_s,
            "milp_latency_s": plan_latency_s(problem, plan),
            "sensitivity": plan_sensitivity(problem, plan),
            "milp_objective": score(problem, plan, options.objective, options.sensitivity_weight)}
    if solver_obj is not None and math.isfinite(solver_obj):
        pred["solver_objective"] = solver_obj
    plan.predicted.update(pred)
    return plan


def _nogood(m, problem: Problem, plan: Plan):
    """sum over the plan's 1-bits of (1 - x) + over its 0-bits of x >= 1, on (y, prec)."""
    terms = []
    for v in range(problem.n_ops):
        for k in m.CUTS:
            terms.append((1 - m.y[v, k]) if plan.op_stage[v] >= k else m.y[v, k])
        qv = problem.q_index(plan.op_precision[v])
        for q in m.PRECS:
            if len(problem.precisions) > 1:
                terms.append((1 - m.prec[v, q]) if q == qv else m.prec[v, q])
    return m.nogood.add(sum(terms) >= 1)


def solve(problem: Problem, options: SolveOptions | None = None) -> SolveResult:
    """Plan ``problem``: the best plans found within ``options.time_limit_s`` (end to end)."""
    options = options or SolveOptions()
    t0 = time.perf_counter()
    log: list[str] = []

    def say(msg: str) -> None:
        log.append(msg)
        if options.progress is not None:
            options.progress(msg)

    def left() -> float:
        return options.time_limit_s - (time.perf_counter() - t0)

    check_inputs(problem, options)
    K = options.n_stages or problem.n_devices
    paths = device_paths(problem.topology)
    if options.path is not None:
        paths = [(n, p) for n, p in paths if n == options.path]
        if not paths:
            names = ", ".join(n for n, _ in device_paths(problem.topology))
            raise DistplanError(f"path family {options.path!r} not available here; use one of {names}")
    budget, weight = options.sensitivity_budget, options.sensitivity_weight
    cands = []
    for name, p in paths:
        p = tuple(p[:K])
        h = heuristic_plan(problem, p, options.objective, budget, weight)
        s = h[1] if h else math.inf
        say(f"path {name}: heuristic objective {_fmt(s)}")
        cands.append((s, len(cands), name, p, h))
    cands.sort(key=lambda c: (c[0], c[1]))
    _, _, path_name, path, heur = cands[0]
    say(f"solving on path {path_name} ({K} stages)")

    tb = time.perf_counter()
    spec = ModelSpec(path=path, objective=options.objective, sensitivity_budget=budget, sensitivity_weight=weight)
    m = build_model(problem, spec)
    m.nogood = pyo.ConstraintList()
    run = HighsRun(m, threads=options.threads, seed=options.seed, verbose=options.verbose,
                   progress=options.progress)
    build_s = time.perf_counter() - tb
    say(f"model: {run.n_binaries} binaries, {run.n_constraints} constraints, built in {build_s:.1f}s")
    run.h.setOptionValue("mip_improving_solution_save", True)
    if heur is not None:
        assign_plan(m, problem, heur[0])
        run.set_start()

    share = 1.0 if options.top_k == 1 else 0.8
    r = run.run(left() * share, options.rel_gap)
    status, bound = r["status"], r["bound"]
    if r["values"] is not None:
        best = plan_from_values(m, problem, run.value_fn(r["values"]))
    elif heur is not None:
        best = heur[0]
    else:
        if status == "infeasible":
            cap = sum(problem.device_mem_bytes[d] for d in path)
            need = math.fsum(problem.static_bytes[v].min() for v in range(problem.n_ops))
            raise DistplanError(
                f"no plan satisfies the constraints on path {path_name}: memory (parameters need at least "
                f"{need / MIB:.2f} MiB against {cap / MIB:.2f} MiB on {K} devices)"
                + (f" and the sensitivity budget {budget:.6g}" if budget is not None else "")
                + "; allow lower precisions, more stages or a larger budget")
        raise DistplanError(f"no plan found within the time limit of {options.time_limit_s:g} s "
                            f"(HiGHS status {status}); raise the time limit")
    if heur is not None and score(problem, heur[0], options.objective, weight) < \
            score(problem, best, options.objective, weight) - 1e-15:
        best = heur[0]
    if plan_violations(problem, best):  # never trust a solver alone
        raise DistplanError("internal: the MILP returned an infeasible plan: " + "; ".join(plan_violations(problem, best)))
    plans = [_annotate(problem, best, options, r["objective"])]
    obj = plans[0].predicted["milp_objective"]
    if status == "optimal" and bound > obj:
        bound = obj
    say(f"best: objective {_fmt(obj)} bound {_fmt(bound)} status {status} ({r['seconds']:.1f}s)")

    seen = {projection(best)}
    saved = []
    try:
        saved = [np.array(s.col_value) for s in run.h.getSavedMipSolutions()]
    except Exception:  # older highspy: no solution pool
        pass
    spare = [plan_from_values(m, problem, run.value_fn(x)) for x in saved]
    while len(plans) < options.top_k and left() > 0.05:
        for p in plans[len(m.nogood):]:
            run.add_constraint(_nogood(m, problem, p))
        starts = [p for p in spare + ([heur[0]] if heur else []) if projection(p) not in seen
                  and not plan_violations(problem, p)]
        if starts:
            st = min(starts, key=lambda p: score(problem, p, options.objective, weight))
            assign_plan(m, problem, st)
            run.set_start()
        k_left = options.top_k - len(plans)
        rr = run.run(left() / k_left, options.rel_gap)
        if rr["values"] is None:
            if rr["status"] == "infeasible":
                say(f"no further distinct plan exists after {len(plans)}")
            break
        p = plan_from_values(m, problem, run.value_fn(rr["values"]))
        if projection(p) in seen or plan_violations(problem, p):
            break
        seen.add(projection(p))
        plans.append(_annotate(problem, p, options, rr["objective"]))
        say(f"plan {len(plans)}: objective {_fmt(plans[-1].predicted['milp_objective'])} ({rr['status']})")
    plans.sort(key=lambda p: p.predicted["milp_objective"])
    obj = plans[0].predicted["milp_objective"]
    gap = max(0.0, (obj - bound) / obj) if obj > 0 and math.isfinite(bound) else (0.0 if obj == bound else math.inf)
    return SolveResult(status=status, objective_s=obj, bound_s=bound, gap=gap,
                       seconds=time.perf_counter() - t0, build_seconds=build_s, n_binaries=run.n_binaries,
                       n_constraints=run.n_constraints, plans=plans, path_name=path_name, path=path, log=log)
