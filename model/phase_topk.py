"""Phase 4 of a solve: the K best distinct plans.

Distinct means a different symmetry-free projection (model.extract.projection). A pool
of known plans (HiGHS's saved solutions, every layout's heuristic and budget plans, the
solved layouts' bests, one-move neighbours of the winner) supplies the next plan
whenever its score is within the gap of the bound valid for every plan; otherwise the
winner's MILP is re-solved with no-good cuts (model.build.add_nogood_cut) on the plans
found so far, warm-started from the pool. Plans from other layouts fill what is left.
Every pool plan passes costs.check and the budget, and, unless it is a solution of the
winner's MILP (where HiGHS enforced them), model.admission's gate.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.admission import PlanGate
from distplan.model.build import add_nogood_cut
from distplan.model.extract import assign_plan, plan_from_values, projection
from distplan.model.heuristic import neighbours, score
from distplan.model.inputs import Lanes
from distplan.model.options import SolveOptions
from distplan.model.phase_fast import Candidate
from distplan.model.phase_milp import MilpPhase
from distplan.model.progress import Clock, Log, fmt


@dataclass(frozen=True)
class TopKPhase:
    """Up to top_k distinct plans, best first, each annotated (``annotate``)."""

    plans: tuple[Plan, ...]


def annotate(problem: Problem, plan: Plan, options: SolveOptions, solver_obj: float | None) -> Plan:
    """``plan`` with its predicted figures: milp_period_s, milp_latency_s, sensitivity,
    milp_objective (model.heuristic.score) and, from HiGHS, solver_objective."""
    pred = {"milp_period_s": plan_cost(problem, plan).period_s,
            "milp_latency_s": plan_latency_s(problem, plan),
            "sensitivity": plan_sensitivity(problem, plan),
            "milp_objective": score(problem, plan, options.objective, options.sensitivity_weight)}
    if solver_obj is not None and math.isfinite(solver_obj):
        pred["solver_objective"] = solver_obj
    return plan.with_predicted(**pred)


def _saved_solutions(run) -> list[np.ndarray]:
    try:
        return [np.array(x.col_value) for x in run.h.getSavedMipSolutions()]
    except Exception:  # older highspy: no solution pool
        return []


def topk_phase(problem: Problem, options: SolveOptions, gate: PlanGate, candidates: tuple[Candidate, ...],
               milp: MilpPhase, clock: Clock, say: Log) -> TopKPhase:
    """Phase 4 (module docstring)."""
    win = milp.winner
    m, run, c, best = win.model, win.run, win.candidate, win.best
    path, lanes = c.lanes[0], c.lanes
    budget, weight = options.sensitivity_budget, options.sensitivity_weight
    plans = [annotate(problem, best, options, win.solver_objective_s)]
    seen = {projection(best)}
    saved = [plan_from_values(m, problem, run.value_fn(x)) for x in _saved_solutions(run)]
    from_milp = {projection(p) for p in saved}   # HiGHS enforced the user's constraints on these
    pool = saved + ([c.best[0]] if c.best else []) + [p for x in candidates for p in x.plans] + \
        [s.best for s in milp.solves if s.best is not None]
    if options.top_k > 1:
        pool += neighbours(problem, best, path, lanes)

    def mine(p: Plan) -> bool:   # a plan of the winner's model (no-good cuts apply to it)
        return p.stages[0].devices == tuple(lane[0] for lane in lanes)

    def lanes_of(p: Plan) -> Lanes | None:
        if mine(p):
            return lanes
        return next((x.lanes for x in candidates if all(st.devices == tuple(lane[k] for lane in x.lanes)
                                                       for k, st in enumerate(p.stages))), None)

    def ok(p: Plan) -> bool:
        if projection(p) in seen or plan_violations(problem, p) or (
                budget is not None and plan_sensitivity(problem, p) > budget * (1 + 1e-12)):
            return False
        if not gate.active or (mine(p) and projection(p) in from_milp):
            return True
        where = lanes_of(p)
        return where is not None and gate.admits(where, p)

    def rank(p: Plan) -> float:
        return score(problem, p, options.objective, weight)

    whole_bound = milp.bound_s if math.isfinite(milp.bound_s) else 0.0   # bounds every plan, hence the k-th best
    while len(plans) < options.top_k:
        pool = sorted({projection(p): p for p in pool if ok(p)}.values(), key=rank)
        if pool:
            p0 = pool[0]
            cs = rank(p0)
            if cs > 0 and (cs - whole_bound) / cs <= options.rel_gap:
                # within the gap of a bound valid for every plan: no re-solve needed
                seen.add(projection(p0))
                plans.append(annotate(problem, p0, options, None))
                pool = pool[1:] + (neighbours(problem, p0, path, lanes) if mine(p0) else [])
                say(f"plan {len(plans)}: objective {fmt(cs)} (within {options.rel_gap:.1%} of the bound)")
                continue
        if clock.left_s() <= 0.05:
            break
        cut = [p for p in plans if mine(p)]
        for p in cut[len(m.nogood):]:
            con = add_nogood_cut(m, problem, p)
            if con is None:
                break
            run.add_constraint(con)
        if len(m.nogood) < len(cut):
            break
        starts = [p for p in pool if mine(p)]
        if starts:
            assign_plan(m, problem, starts[0])
            run.set_start()
        out = run.run(clock.left_s() / (options.top_k - len(plans)), options.rel_gap)
        if out.values is None:
            if out.status == "infeasible":
                say(f"no further distinct plan exists after {len(plans)}")
            break
        p = plan_from_values(m, problem, run.value_fn(out.values))
        from_milp.add(projection(p))
        if not ok(p):
            break
        seen.add(projection(p))
        plans.append(annotate(problem, p, options, out.objective_s))
        pool += neighbours(problem, p, path, lanes)
        say(f"plan {len(plans)}: objective {fmt(plans[-1].predicted['milp_objective'])} ({out.status})")
    if len(plans) < options.top_k:   # fill from the other layouts' plans
        rest = sorted({projection(p): p for p in pool if ok(p)}.values(), key=rank)
        plans += [annotate(problem, p, options, None) for p in rest[:options.top_k - len(plans)]]
    plans.sort(key=lambda p: p.predicted["milp_objective"])
    return TopKPhase(tuple(plans))
