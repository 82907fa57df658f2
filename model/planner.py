"""model.solve: pick a device path, warm-start from the DP heuristic, solve the MILP with
HiGHS, then collect the K best distinct plans with no-good cuts."""
from __future__ import annotations

import math
import time

import numpy as np
import pyomo.environ as pyo

from costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from costs.memory import inflight_microbatches
from costs.problem import Problem
from distplan.errors import DistplanError
from distplan.plan import Plan
from model.budget import budget_plans_and_bound
from model.build import ModelSpec, build_model
from model.downsets import enumerate_downsets, fixed_precision_plan, relaxation_bound
from model.extract import make_plan
from model.extract import assign_plan, plan_from_values, projection
from model.heuristic import heuristic_plan, neighbours, precision_candidates, score
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
    # fewest microbatches any stage holds at once (1F1B's last stage holds one)
    n1 = 1.0 if problem.schedule == "1f1b" else float(inflight_microbatches(problem.schedule, 0, 1,
                                                                             problem.microbatches))
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
                f"(parameters {problem.static_bytes[v, problem.q_index(p)] / MIB:.2f} MiB + output "
                f"{problem.act_bytes[v, problem.q_index(p)] / MIB:.2f} MiB x {n1:g} in-flight microbatches) "
                f"but the largest device holds {cap / MIB:.2f} MiB (short by {(need - cap) / MIB:.2f} MiB); "
                "use a lower precision, a smaller batch or sequence, fewer in-flight microbatches, "
                "or devices with more memory")
    if options.sensitivity_budget is not None:
        usable = [q for q in range(len(problem.precisions))
                  if any(problem.supported[q, problem.device_kind[d]] for d in range(problem.n_devices))]
        lo = math.fsum(min(problem.sensitivity[v, q] for q in usable) for v in range(problem.n_ops))
        if options.sensitivity_budget < lo - 1e-12:
            raise DistplanError(
                f"sensitivity budget {options.sensitivity_budget:.6g} is below the minimum any plan achieves "
                f"({lo:.6g}, every op at the highest precision some device runs); raise the budget to at least {lo:.6g}")
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
    if not terms:
        return None   # no binaries: the plan is the only one
    return m.nogood.add(sum(terms) >= 1)


def _better(problem, options, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a if a[1] <= b[1] else b


def _downset_plans(problem, path, mat, budget, weight):
    """Exact best stage assignment for each candidate precision vector (downset DP)."""
    best = None
    for prec in precision_candidates(problem, path, budget):
        if budget is not None and math.fsum(problem.sensitivity[v, q] for v, q in enumerate(prec)) > budget:
            continue
        stage = fixed_precision_plan(problem, path, mat, prec)
        if stage is None:
            continue
        plan = make_plan(problem, path, stage, prec)
        if plan_violations(problem, plan):
            continue
        best = _better(problem, None, best, (plan, score(problem, plan, "throughput", weight)))
    return best


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
    mat = enumerate_downsets(problem)
    cands = []
    for name, p in paths:
        p = tuple(p[:K])
        h = heuristic_plan(problem, p, options.objective, budget, weight)
        if mat is not None and options.objective == "throughput":
            h = _better(problem, options, h, _downset_plans(problem, p, mat, budget, weight))
        lb = relaxation_bound(problem, p, mat) if mat is not None and options.objective == "throughput" else 0.0
        if budget is not None and mat is not None and options.objective == "throughput" and math.isfinite(lb):
            # budget-aware chain DP (model.budget): a proven period bound and incumbents
            hi = plan_cost(problem, h[0]).period_s if h is not None else None
            bps, lb_b = budget_plans_and_bound(problem, p, mat, budget, lb, hi)
            lb = max(lb, lb_b)
            for bp in bps[:3]:
                h = _better(problem, options, h, (bp, score(problem, bp, "throughput", weight)))
        s = h[1] if h else math.inf
        say(f"path {name}: heuristic objective {_fmt(s)}, relaxation bound {_fmt(lb)}")
        cands.append((s, -lb, len(cands), name, p, h, lb))
    cands.sort(key=lambda c: c[:3])
    _, _, _, path_name, path, heur, lb = cands[0]
    if math.isinf(lb):
        raise DistplanError(f"no plan fits the devices' memory on path {path_name} even with every op at its "
                            "smallest precision; allow lower precisions, fewer in-flight microbatches or more devices")
    say(f"solving on path {path_name} ({K} stages)")

    tb = time.perf_counter()
    spec = ModelSpec(path=path, objective=options.objective, sensitivity_budget=budget, sensitivity_weight=weight)
    m = build_model(problem, spec)
    m.nogood = pyo.ConstraintList()
    if lb > 0 and options.objective == "throughput":
        # valid cut: the downset-DP relaxation bounds every plan's period
        m.period_relax = pyo.Constraint(expr=m.T >= m.tscale * lb * (1 - 1e-9))
    run = HighsRun(m, threads=options.threads, seed=options.seed, verbose=options.verbose,
                   progress=options.progress)
    build_s = time.perf_counter() - tb
    say(f"model: {run.n_binaries} binaries, {run.n_constraints} constraints, built in {build_s:.1f}s")
    run.h.setOptionValue("mip_improving_solution_save", True)
    if heur is not None:
        assign_plan(m, problem, heur[0])
        run.set_start()

    share = 1.0 if options.top_k == 1 else 0.8
    hs = heur[1] if heur is not None else math.inf
    if options.objective == "throughput" and 0 < hs < math.inf and (hs - lb) / hs <= options.rel_gap:
        # the warm start is already within the gap of a proven bound: nothing for HiGHS to do
        r = {"status": "optimal", "objective": hs, "bound": lb, "seconds": 0.0, "values": None}
        say(f"warm start {_fmt(hs)} is within {options.rel_gap:.1%} of the proven bound {_fmt(lb)}; HiGHS skipped")
    else:
        r = run.run(left() * share, options.rel_gap)
    status, bound = r["status"], r["bound"]
    if options.objective == "throughput" and (not math.isfinite(bound) or bound < lb):
        bound = lb   # T >= lb is a valid cut, and the objective is >= T
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
    pool = [plan_from_values(m, problem, run.value_fn(x)) for x in saved] + ([heur[0]] if heur else [])
    if options.top_k > 1:
        pool += neighbours(problem, best, path)

    def ok(p: Plan) -> bool:
        return projection(p) not in seen and not plan_violations(problem, p) and (
            budget is None or plan_sensitivity(problem, p) <= budget * (1 + 1e-12))
    whole_bound = bound if math.isfinite(bound) else 0.0   # bounds every plan, hence the k-th best
    while len(plans) < options.top_k:
        pool = sorted({projection(p): p for p in pool if ok(p)}.values(),
                      key=lambda p: score(problem, p, options.objective, weight))
        if pool:
            c = pool[0]
            cs = score(problem, c, options.objective, weight)
            if cs > 0 and (cs - whole_bound) / cs <= options.rel_gap:
                # within the gap of a bound valid for every plan: no re-solve needed
                seen.add(projection(c))
                plans.append(_annotate(problem, c, options, None))
                pool = pool[1:] + neighbours(problem, c, path)
                say(f"plan {len(plans)}: objective {_fmt(cs)} (within {options.rel_gap:.1%} of the bound)")
                continue
        if left() <= 0.05:
            break
        n_cut = len(m.nogood)
        for p in plans[n_cut:]:
            con = _nogood(m, problem, p)
            if con is None:
                break
            run.add_constraint(con)
        if len(m.nogood) < len(plans):
            break
        if pool:
            assign_plan(m, problem, pool[0])
            run.set_start()
        k_left = options.top_k - len(plans)
        rr = run.run(left() / k_left, options.rel_gap)
        if rr["values"] is None:
            if rr["status"] == "infeasible":
                say(f"no further distinct plan exists after {len(plans)}")
            break
        p = plan_from_values(m, problem, run.value_fn(rr["values"]))
        if not ok(p):
            break
        seen.add(projection(p))
        plans.append(_annotate(problem, p, options, rr["objective"]))
        pool += neighbours(problem, p, path)
        say(f"plan {len(plans)}: objective {_fmt(plans[-1].predicted['milp_objective'])} ({rr['status']})")
    plans.sort(key=lambda p: p.predicted["milp_objective"])
    obj = plans[0].predicted["milp_objective"]
    gap = max(0.0, (obj - bound) / obj) if obj > 0 and math.isfinite(bound) else (0.0 if obj == bound else math.inf)
    return SolveResult(status=status, objective_s=obj, bound_s=bound, gap=gap,
                       seconds=time.perf_counter() - t0, build_seconds=build_s, n_binaries=run.n_binaries,
                       n_constraints=run.n_constraints, plans=plans, path_name=path_name, path=path, log=log)
