"""model.solve: for each replication factor r (inference streams: every divisor of the
device count; otherwise r = 1) pick a lane layout (model.paths.lane_layouts) by a fast
heuristic and a proven period bound on the single-lane surrogate (model.lanes), solve the
MILP of the promising r's with HiGHS (warm-started), then collect the K best distinct
plans of the winner with no-good cuts. The reported bound is the least over the r's
explored of each r's proven bound."""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyomo.environ as pyo

from distplan.costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from distplan.costs.memory import activation_factors
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError, InternalError
from distplan.core.plan import Plan, Stage
from distplan.model.budget import budget_plans_and_bound
from distplan.model.build import ModelSpec, build_model
from distplan.model.downsets import enumerate_downsets, fixed_precision_plan, relaxation_bound
from distplan.model.extract import assign_plan, make_plan, plan_from_values, projection
from distplan.model.heuristic import heuristic_plan, neighbours, precision_candidates, score
from distplan.model.highs import HighsRun
from distplan.model.options import SolveOptions, SolveResult
from distplan.model.lanes import lane_problem, lift_plan
from distplan.topologies.paths import divisors, lane_layouts
from distplan.costs.check import plan_violations

MIB = 2.0**20
BUDGET_PHASE_SHARE = 0.5   # of the time limit, for the budget-aware bounds and incumbents


def check_inputs(problem: Problem, options: SolveOptions) -> None:
    """Raise DistplanError for inputs no plan can satisfy, naming the op or constraint."""
    g, topo = problem.graph, problem.topology
    kinds = problem.device_kind
    D = problem.n_devices
    # fewest copies of an output any stage holds (1F1B's last stage holds one microbatch;
    # a stream holds an output once when its consumers share its stage)
    n1 = 1.0 if problem.schedule == "1f1b" else float(activation_factors(problem.schedule, 0, 1,
                                                                          problem.microbatches)[0])
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
                f"{problem.act_bytes[v, problem.q_index(p)] / MIB:.2f} MiB x {n1:g} in-flight {'copy' if n1 == 1 else 'copies'}) "
                f"but the largest device holds {cap / MIB:.2f} MiB (short by {(need - cap) / MIB:.2f} MiB); "
                "use a lower precision, a smaller batch or sequence, fewer in-flight microbatches, "
                "or devices with more memory")
    _check_tied(problem, n1)
    if options.sensitivity_budget is not None:
        # per op: the least sensitivity among precisions some device runs and has room for
        lo_terms, forced = [], []
        for v, op in enumerate(g.ops):
            fits = [q for q in range(len(problem.precisions))
                    if any(problem.supported[q, kinds[d]] and problem.static_bytes[v, q] + n1 * problem.act_bytes[v, q]
                           <= problem.device_mem_bytes[d] for d in range(D))]
            best_q = min(fits, key=lambda q: problem.sensitivity[v, q])
            lo_terms.append(problem.sensitivity[v, best_q])
            if problem.sensitivity[v, best_q] > 0:
                forced.append(f"{op.name} ({problem.precisions[best_q]})")
        lo = math.fsum(lo_terms)
        if options.sensitivity_budget < lo - 1e-12:
            why = (f"; ops that fit only at a lower precision: {', '.join(forced[:4])}"
                   + (f" and {len(forced) - 4} more" if len(forced) > 4 else "")) if forced else ""
            raise DistplanError(
                f"sensitivity budget {options.sensitivity_budget:.6g} is below the minimum any plan achieves "
                f"({lo:.6g}: every op at the highest precision that some device runs and holds{why}); "
                f"short by {lo - options.sensitivity_budget:.6g}: raise the budget to at least {lo:.6g}")
    K = options.n_stages or D
    if K > D:
        raise DistplanError(f"n_stages {K} exceeds the {D} devices of topology {topo.name!r}; use at most {D}")


def _check_tied(problem: Problem, n1: float) -> None:
    """An op reading tied weights needs them on its device: beside their owner (both ops'
    bytes) or as its own copy. Raise when neither fits the largest device."""
    cap = float(problem.device_mem_bytes.max())
    need = problem.static_bytes + n1 * problem.act_bytes   # (V, Q), each op alone
    for v, o in enumerate(problem.tied_owner):
        if o < 0:
            continue
        apart = float((need[v] + problem.tied_bytes[v]).min())
        together = float(need[v].min() + need[o].min())
        if min(apart, together) > cap:
            g = problem.graph
            raise DistplanError(
                f"op {g.ops[v].name!r} reads the weights of {g.ops[o].name!r} (tied): beside it the two need "
                f"{together / MIB:.2f} MiB, apart it needs its own copy, {apart / MIB:.2f} MiB, but the largest "
                f"device holds {cap / MIB:.2f} MiB (short by {(min(apart, together) - cap) / MIB:.2f} MiB); "
                "use a smaller batch or sequence, or devices with more memory")


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _annotate(problem: Problem, plan: Plan, options: SolveOptions, solver_obj: float | None) -> Plan:
    pred = {"milp_period_s": plan_cost(problem, plan).period_s,
            "milp_latency_s": plan_latency_s(problem, plan),
            "sensitivity": plan_sensitivity(problem, plan),
            "milp_objective": score(problem, plan, options.objective, options.sensitivity_weight)}
    if solver_obj is not None and math.isfinite(solver_obj):
        pred["solver_objective"] = solver_obj
    return plan.with_predicted(**pred)


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


def replica_counts(problem: Problem, options: SolveOptions) -> list[int]:
    """Replication factors to explore: every divisor of the device count for an inference
    stream under the throughput objective, else 1 (``options.replicas`` forces one)."""
    D = problem.n_devices
    free = problem.schedule == "stream" and options.objective == "throughput"
    if options.replicas is not None:
        r = options.replicas
        if D % r:
            raise DistplanError(f"replicas {r} does not divide the {D} devices of topology "
                                f"{problem.topology.name!r}; use one of {', '.join(map(str, divisors(D)))}")
        if r > 1 and not free:
            raise DistplanError("replicated lanes are modelled for inference streams under the throughput "
                                "objective only; use replicas 1 (training: the gradient all-reduce is not modelled)")
        return [r]
    return divisors(D) if free else [1]


@dataclass
class _Candidate:
    """One (replication factor, lane layout) after the fast phase."""

    r: int
    name: str
    lanes: tuple[tuple[int, ...], ...]
    heur: tuple[Plan, float] | None    # best plan known (exact score)
    lb: float                          # proven period bound on this layout (surrogate)
    extra: list = field(default_factory=list)   # other heuristic plans (lifted)

    @property
    def score(self) -> float:
        return self.heur[1] if self.heur is not None else math.inf


def _fast_phase(problem: Problem, options: SolveOptions, r: int, name: str, lanes, K: int, mat) -> _Candidate:
    """Heuristic plans and the proven bound of one layout, via the single-lane surrogate."""
    budget, weight, obj = options.sensitivity_budget, options.sensitivity_weight, options.objective
    sp = lane_problem(problem, r)
    lanes = tuple(tuple(lane[:K]) for lane in lanes)
    p = lanes[0]
    singles = []
    h = heuristic_plan(sp, p, obj, budget, weight)
    if h is not None:
        singles.append(h[0])
    if mat is not None and obj == "throughput":
        d = _downset_plans(sp, p, mat, budget, weight)
        if d is not None:
            singles.append(d[0])
    lb = relaxation_bound(sp, p, mat) if mat is not None and obj == "throughput" else 0.0
    c = _Candidate(r, name, lanes, None, lb)
    _add_plans(problem, options, c, singles)
    return c


def _add_plans(problem: Problem, options: SolveOptions, c: _Candidate, singles: list[Plan]) -> None:
    """Lift single-lane surrogate plans onto c's lanes, score them exactly, keep the best."""
    for x in singles:
        plan = lift_plan(x, c.lanes) if c.r > 1 else x
        if c.r > 1 and plan_violations(problem, plan):
            continue
        c.extra.append(plan)
        c.heur = _better(problem, options, c.heur,
                         (plan, score(problem, plan, options.objective, options.sensitivity_weight)))


def _budget_phase(problem: Problem, options: SolveOptions, c: _Candidate, mat, deadline: float,
                  incumbent_s: float) -> None:
    """Budget-aware chain DP (model.budget) on c's surrogate: a proven period bound and
    budget-feasible incumbents, within ``deadline`` (perf_counter seconds). Without a
    plan of its own the search is capped at the best objective found elsewhere
    (``incumbent_s``): proving nothing fits below it is all that matters then."""
    if options.sensitivity_budget is None or mat is None or options.objective != "throughput" \
            or not math.isfinite(c.lb):
        return
    sp = lane_problem(problem, c.r)
    hi = min((plan_cost(sp, dataclasses.replace(x, stages=tuple(Stage((lane_dev,)) for lane_dev in
                                                                 c.lanes[0][:x.n_stages]))).period_s
              for x in c.extra), default=None)
    if hi is None and math.isfinite(incumbent_s):
        hi = incumbent_s
    bps, lb_b = budget_plans_and_bound(sp, c.lanes[0], mat, options.sensitivity_budget, c.lb, hi,
                                       deadline=deadline)
    c.lb = max(c.lb, lb_b)
    _add_plans(problem, options, c, bps[:3])


def surrogate_key(problem: Problem, r: int, lanes) -> tuple:
    """What the single-lane surrogate of a layout depends on (model.lanes): r and lane 0's
    device kinds, memories, and per boundary the route's links' bandwidths, plus how
    often lane 0's boundaries reuse a link. Layouts with equal keys get equal surrogate
    heuristics and bounds, so only the first is evaluated."""
    topo, p = problem.topology, lanes[0]
    routes = [topo.route(a, b) for a, b in zip(p, p[1:])]
    if problem.training:
        routes = [list(x) + list(topo.route(b, a)) for x, (a, b) in zip(routes, zip(p, p[1:]))]
    used = [l for x in routes for l in x]
    return (r, tuple(int(problem.device_kind[d]) for d in p), tuple(float(problem.device_mem_bytes[d]) for d in p),
            tuple(tuple(sorted(float(problem.link_bw_bytes_per_s[l]) for l in x)) for x in routes),
            len(used) - len(set(used)))


def _solve_layout(problem: Problem, options: SolveOptions, c: _Candidate, time_s: float, say) -> dict:
    """Build and solve the MILP of one layout: {'m','run','status','bound','best','obj','r','build_s'}."""
    budget, weight = options.sensitivity_budget, options.sensitivity_weight
    tb = time.perf_counter()
    spec = ModelSpec(path=c.lanes[0], objective=options.objective, sensitivity_budget=budget,
                     sensitivity_weight=weight, lanes=c.lanes if c.r > 1 else None)
    m = build_model(problem, spec)
    m.nogood = pyo.ConstraintList()
    lb = c.lb
    if lb > 0 and options.objective == "throughput":
        # valid cut: the downset-DP relaxation bounds every plan's period
        m.period_relax = pyo.Constraint(expr=m.T >= m.tscale * lb * (1 - 1e-9))
    run = HighsRun(m, threads=options.threads, seed=options.seed, verbose=options.verbose,
                   progress=options.progress)
    build_s = time.perf_counter() - tb
    say(f"model {c.name} (r={c.r}): {run.n_binaries} binaries, {run.n_constraints} constraints, "
        f"built in {build_s:.1f}s")
    run.h.setOptionValue("mip_improving_solution_save", True)
    heur = c.heur
    if heur is not None:
        assign_plan(m, problem, heur[0])
        run.set_start()
    hs = heur[1] if heur is not None else math.inf
    if options.objective == "throughput" and 0 < hs < math.inf and (hs - lb) / hs <= options.rel_gap:
        # the warm start is already within the gap of a proven bound: nothing for HiGHS to do
        r = {"status": "optimal", "objective": hs, "bound": lb, "seconds": 0.0, "values": None}
        say(f"warm start {_fmt(hs)} is within {options.rel_gap:.1%} of the proven bound {_fmt(lb)}; HiGHS skipped")
    else:
        r = run.run(time_s, options.rel_gap)
    status, bound = r["status"], r["bound"]
    if options.objective == "throughput" and (not math.isfinite(bound) or bound < lb):
        bound = lb   # T >= lb is a valid cut, and the objective is >= T
    best = None
    if r["values"] is not None:
        best = plan_from_values(m, problem, run.value_fn(r["values"]))
    if heur is not None and (best is None or score(problem, heur[0], options.objective, weight)
                             < score(problem, best, options.objective, weight) - 1e-15):
        best = heur[0]
    obj = score(problem, best, options.objective, weight) if best is not None else math.inf
    if status == "optimal" and bound > obj:
        bound = obj
    if status == "infeasible" and best is None:
        bound = math.inf
    say(f"r={c.r} {c.name}: objective {_fmt(obj)} bound {_fmt(bound)} status {status} ({r['seconds']:.1f}s)")
    return {"m": m, "run": run, "status": status, "bound": bound, "best": best, "obj": obj,
            "solver_obj": r["objective"], "build_s": build_s, "cand": c}


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
    D = problem.n_devices
    budget, weight = options.sensitivity_budget, options.sensitivity_weight
    rs = replica_counts(problem, options)
    layouts = [(r, n, lanes) for r in rs for n, lanes in lane_layouts(problem.topology, r)]
    if options.path is not None:
        layouts = [x for x in layouts if x[1] == options.path]
        if not layouts:
            names = ", ".join(n for r in rs for n, _ in lane_layouts(problem.topology, r))
            raise DistplanError(f"path family {options.path!r} not available here; use one of {names}")
        rs = sorted({x[0] for x in layouts})
    mat = enumerate_downsets(problem)

    # fast phase: heuristics and proven bounds per layout, best layout per r
    per_r: dict[int, _Candidate] = {}
    extra_plans: list[Plan] = []
    keys: dict[tuple, str] = {}
    for r, name, lanes in layouts:
        K = min(options.n_stages or D // r, D // r)
        key = surrogate_key(problem, r, tuple(tuple(lane[:K]) for lane in lanes))
        if key in keys:
            continue   # same surrogate as an evaluated layout: same heuristics and bound
        keys[key] = name
        c = _fast_phase(problem, options, r, name, lanes, K, mat)
        say(f"path {name} (r={r}, {K} stages): heuristic objective {_fmt(c.score)}, relaxation bound {_fmt(c.lb)}")
        old = per_r.get(r)
        if old is None or (c.score, -c.lb) < (old.score, -old.lb):
            per_r[r] = c
    # budget phase: most promising r first, within half of the time limit; an r it does
    # not reach keeps its (weaker, valid) relaxation bound
    budget_deadline = t0 + BUDGET_PHASE_SHARE * options.time_limit_s
    for c in sorted(per_r.values(), key=lambda c: (c.score, -c.lb, c.r)):
        if options.sensitivity_budget is None:
            break
        if time.perf_counter() > budget_deadline:
            say(f"r={c.r} {c.name}: no time left for the budget bound; keeping the relaxation bound {_fmt(c.lb)}")
            continue
        _budget_phase(problem, options, c, mat, budget_deadline,
                      min((x.score for x in per_r.values()), default=math.inf))
        say(f"r={c.r} {c.name} under the budget: objective {_fmt(c.score)}, bound {_fmt(c.lb)}")
    extra_plans = [p for c in per_r.values() for p in c.extra]
    order = sorted(per_r.values(), key=lambda c: (c.score, -c.lb, c.r))
    if all(math.isinf(c.lb) for c in order):
        raise DistplanError(f"no plan fits the devices' memory on path {order[0].name} even with every op at its "
                            "smallest precision; allow lower precisions, fewer in-flight microbatches or more devices")
    order = [c for c in order if not math.isinf(c.lb)]

    # MILP phase: solve the promising r's, best heuristic first; skip an r whose proven
    # bound is within the gap of the best plan found
    share = 1.0 if options.top_k == 1 else 0.8
    solves: dict[int, dict] = {}
    bounds: dict[int, tuple[float, str]] = {}   # r -> (proven bound, status)
    best_obj = min(c.score for c in order)

    def settled(c: _Candidate) -> bool:   # c's proven bound is within the gap of the best plan
        return math.isfinite(best_obj) and best_obj > 0 and (best_obj - c.lb) / best_obj <= options.rel_gap
    others = [c for c in order[1:] if not settled(c)]
    for i, c in enumerate(order):
        if i > 0 and settled(c):
            bounds[c.r] = (c.lb, "optimal")
            say(f"r={c.r}: its bound {_fmt(c.lb)} cannot beat the best {_fmt(best_obj)} by more than "
                f"{options.rel_gap:.1%}; not solved")
            continue
        if i > 0 and left() * share < 1.0:
            bounds[c.r] = (c.lb, "time_limit")
            say(f"r={c.r}: no time left to solve; its proven bound {_fmt(c.lb)} stands")
            continue
        n_left = len(order) - i
        t_i = left() * share / n_left if i > 0 else left() * share * (0.6 if others else 1.0)
        res = _solve_layout(problem, options, c, max(t_i, 0.1), say)
        solves[c.r] = res
        bounds[c.r] = (res["bound"], res["status"])
        best_obj = min(best_obj, res["obj"])
    for c in per_r.values():
        bounds.setdefault(c.r, (c.lb, "infeasible" if math.isinf(c.lb) else "optimal"))
    if not solves or all(s["best"] is None for s in solves.values()):
        first = solves.get(order[0].r) if solves else None
        status = first["status"] if first else "time_limit"
        if status == "infeasible":
            c = order[0]
            cap = sum(problem.device_mem_bytes[d] for d in c.lanes[0])
            need = math.fsum(problem.static_bytes[v].min() for v in range(problem.n_ops))
            raise DistplanError(
                f"no plan satisfies the constraints on path {c.name}: memory (parameters need at least "
                f"{need / MIB:.2f} MiB against {cap / MIB:.2f} MiB on {len(c.lanes[0])} devices)"
                + (f" and the sensitivity budget {budget:.6g}" if budget is not None else "")
                + "; allow lower precisions, more stages or a larger budget")
        raise DistplanError(f"no plan found within the time limit of {options.time_limit_s:g} s "
                            f"(HiGHS status {status}); raise the time limit")
    win = min((s for s in solves.values() if s["best"] is not None), key=lambda s: (s["obj"], s["cand"].r))
    m, run, c = win["m"], win["run"], win["cand"]
    best, path, lanes = win["best"], c.lanes[0], c.lanes
    if plan_violations(problem, best):  # never trust a solver alone
        raise InternalError("the MILP returned an infeasible plan: " + "; ".join(plan_violations(problem, best)))
    bound = min(b for b, _ in bounds.values())
    stats = [s for b, s in bounds.values() if math.isfinite(b)]
    status = next((s for s in stats if s != "optimal"), "optimal")
    plans = [_annotate(problem, best, options, win["solver_obj"])]
    obj = plans[0].predicted["milp_objective"]
    if bound > obj:
        bound = obj
    say(f"best: r={c.r} {c.name}, objective {_fmt(obj)}, bound over r in {sorted(bounds)} {_fmt(bound)}, "
        f"status {status}")

    seen = {projection(best)}
    saved = []
    try:
        saved = [np.array(x.col_value) for x in run.h.getSavedMipSolutions()]
    except Exception:  # older highspy: no solution pool
        pass
    pool = [plan_from_values(m, problem, run.value_fn(x)) for x in saved] + \
        ([c.heur[0]] if c.heur else []) + extra_plans + [s["best"] for s in solves.values() if s["best"] is not None]
    if options.top_k > 1:
        pool += neighbours(problem, best, path, lanes)

    def ok(p: Plan) -> bool:
        return projection(p) not in seen and not plan_violations(problem, p) and (
            budget is None or plan_sensitivity(problem, p) <= budget * (1 + 1e-12))

    def mine(p: Plan) -> bool:   # a plan of the winner's model (no-good cuts apply to it)
        return p.stages[0].devices == tuple(lane[0] for lane in lanes)

    whole_bound = bound if math.isfinite(bound) else 0.0   # bounds every plan, hence the k-th best
    while len(plans) < options.top_k:
        pool = sorted({projection(p): p for p in pool if ok(p)}.values(),
                      key=lambda p: score(problem, p, options.objective, weight))
        if pool:
            p0 = pool[0]
            cs = score(problem, p0, options.objective, weight)
            if cs > 0 and (cs - whole_bound) / cs <= options.rel_gap:
                # within the gap of a bound valid for every plan: no re-solve needed
                seen.add(projection(p0))
                plans.append(_annotate(problem, p0, options, None))
                pool = pool[1:] + (neighbours(problem, p0, path, lanes) if mine(p0) else [])
                say(f"plan {len(plans)}: objective {_fmt(cs)} (within {options.rel_gap:.1%} of the bound)")
                continue
        if left() <= 0.05:
            break
        cut = [p for p in plans if mine(p)]
        n_cut = len(m.nogood)
        for p in cut[n_cut:]:
            con = _nogood(m, problem, p)
            if con is None:
                break
            run.add_constraint(con)
        if len(m.nogood) < len(cut):
            break
        starts = [p for p in pool if mine(p)]
        if starts:
            assign_plan(m, problem, starts[0])
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
        pool += neighbours(problem, p, path, lanes)
        say(f"plan {len(plans)}: objective {_fmt(plans[-1].predicted['milp_objective'])} ({rr['status']})")
    if len(plans) < options.top_k:   # fill from the other layouts' plans
        rest = sorted({projection(p): p for p in pool if ok(p)}.values(),
                      key=lambda p: score(problem, p, options.objective, weight))
        plans += [_annotate(problem, p, options, None) for p in rest[:options.top_k - len(plans)]]
    plans.sort(key=lambda p: p.predicted["milp_objective"])
    obj = plans[0].predicted["milp_objective"]
    gap = max(0.0, (obj - bound) / obj) if obj > 0 and math.isfinite(bound) else (0.0 if obj == bound else math.inf)
    explored = [{"replicas": r, "layout": per_r[r].name, "heuristic_s": per_r[r].score, "bound_s": bounds[r][0],
                 "status": bounds[r][1], "solved": r in solves,
                 "objective_s": solves[r]["obj"] if r in solves else per_r[r].score} for r in sorted(per_r)]
    return SolveResult(status=status, objective_s=obj, bound_s=bound, gap=gap,
                       seconds=time.perf_counter() - t0, build_seconds=sum(s["build_s"] for s in solves.values()),
                       n_binaries=run.n_binaries, n_constraints=run.n_constraints, plans=plans, path_name=c.name,
                       path=path, log=log, replicas=c.r, lanes=lanes, explored=explored)
