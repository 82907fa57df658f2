"""Phase 4 of a solve: the K best distinct plans.

Distinct means a different symmetry-free projection (model.extract.projection). A pool
of known plans supplies the next plan whenever its score is within the gap of the bound
valid for every plan; otherwise the winner's MILP is re-solved with no-good cuts
(model.build.add_nogood_cut), warm-started from the pool. Every plan passes costs.check,
the budget and, unless HiGHS enforced them, model.admission's gate. Pool plans are
scored once each, lazily, while the clock allows; once it expires the phase keeps what
it has and says how many of the K it returns (SolveResult.cut_short).

Details: docs/concepts/milp.md, "Phases 1 and 4 in detail".
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distplan.core.gap import within_gap
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


class _Pool:
    """Plans offered for the top-K: each distinct projection checked (``ok``) and scored
    (``rank``) at most once, in the order offered, while ``clock`` allows."""

    def __init__(self, ok: Callable[[Plan], bool], rank: Callable[[Plan], float], clock: Clock):
        self.ok, self.rank, self.clock = ok, rank, clock
        self.pending: deque[Plan] = deque()
        self.verdict: dict[tuple, float | None] = {}   # projection -> score (None: rejected)
        self.heap: list[tuple[float, int, tuple, Plan]] = []
        self._n = itertools.count()

    def add(self, plans: list[Plan]) -> None:
        self.pending.extend(plans)

    def add_scored(self, scored: list[tuple[Plan, float]]) -> None:
        """Plans already checked and scored (a candidate's: model.phase_fast.Candidate.scored)."""
        for p, s in scored:
            k = projection(p)
            if k not in self.verdict and math.isfinite(s):
                self.verdict[k] = s
                heapq.heappush(self.heap, (s, next(self._n), k, p))

    def drain(self) -> bool:
        """Score what is pending; False when the clock expired first."""
        while self.pending:
            if self.clock.expired():
                return False
            p = self.pending.popleft()
            k = projection(p)
            if k in self.verdict:
                continue
            s = self.rank(p) if self.ok(p) else None
            self.verdict[k] = s
            if s is not None:
                heapq.heappush(self.heap, (s, next(self._n), k, p))
        return True

    def best(self, seen: set) -> tuple[Plan, float] | None:
        """The best scored plan not in ``seen`` (left in the pool)."""
        while self.heap and self.heap[0][2] in seen:
            heapq.heappop(self.heap)
        return (self.heap[0][3], self.heap[0][0]) if self.heap else None

    def ranked(self, seen: set) -> list[Plan]:
        """Every scored plan not in ``seen``, best first."""
        return [x[3] for x in sorted(self.heap) if x[2] not in seen]


def topk_phase(problem: Problem, options: SolveOptions, gate: PlanGate, candidates: tuple[Candidate, ...],
               milp: MilpPhase, clock: Clock, say: Log) -> TopKPhase:
    """Phase 4 (module docstring)."""
    win = milp.winner
    m, run, c, best = win.model, win.run, win.candidate, win.best
    path, lanes = c.lanes[0], c.lanes
    budget, weight, K = options.sensitivity_budget, options.sensitivity_weight, options.top_k
    plans = [annotate(problem, best, options, win.solver_objective_s)]
    if K == 1:
        return TopKPhase(tuple(plans))
    seen = {projection(best)}
    solver = run is not None and not run.busy   # the winner's MILP can be re-solved
    saved = [plan_from_values(m, problem, run.value_fn(x)) for x in _saved_solutions(run)] if solver else []
    from_milp = {projection(p) for p in saved}   # HiGHS enforced the user's constraints on these

    def mine(p: Plan) -> bool:   # a plan of the winner's model (no-good cuts apply to it)
        return p.stages[0].devices == tuple(lane[0] for lane in lanes)

    def lanes_of(p: Plan) -> Lanes | None:
        if mine(p):
            return lanes
        return next((x.lanes for x in candidates if all(st.devices == tuple(lane[k] for lane in x.lanes)
                                                       for k, st in enumerate(p.stages))), None)

    def ok(p: Plan) -> bool:
        if plan_violations(problem, p) or (
                budget is not None and plan_sensitivity(problem, p) > budget * (1 + 1e-12)):
            return False
        if not gate.active or (mine(p) and projection(p) in from_milp):
            return True
        where = lanes_of(p)
        return where is not None and gate.admits(where, p)

    def rank(p: Plan) -> float:
        return score(problem, p, options.objective, weight)

    pool = _Pool(ok, rank, clock)
    pool.add_scored([x for cand in candidates for x in cand.scored])   # checked and scored already
    pool.add(saved + [s.best for s in milp.solves if s.best is not None])
    if not clock.expired():
        pool.add(neighbours(problem, best, path, lanes, checked=False, expired=clock.expired))
    whole_bound = milp.bound_s if math.isfinite(milp.bound_s) else 0.0   # bounds every plan, hence the k-th best
    timed_out = False
    while len(plans) < K:
        complete = pool.drain()
        if clock.expired():   # annotating a plan on a thousand lanes takes seconds
            timed_out = True
            break
        top = pool.best(seen)
        if top is not None:
            p0, cs = top
            if within_gap(cs, whole_bound, options.rel_gap):
                # within the gap of a bound valid for every plan: no re-solve needed
                seen.add(projection(p0))
                plans.append(annotate(problem, p0, options, None))
                if mine(p0):
                    pool.add(neighbours(problem, p0, path, lanes, checked=False, expired=clock.expired))
                say(f"plan {len(plans)}: objective {fmt(cs)} (within {options.rel_gap:.1%} of the bound)")
                continue
        if not complete or clock.left_s() <= 0.05:
            timed_out = True
            break
        if not solver:
            break
        cut = [p for p in plans if mine(p)]
        for p in cut[len(m.nogood):]:
            con = add_nogood_cut(m, problem, p)
            if con is None:
                break
            run.add_constraint(con)
        if len(m.nogood) < len(cut):
            break
        starts = [p for p in pool.ranked(seen) if mine(p)]
        if starts:
            assign_plan(m, problem, starts[0])
            run.set_start()
        out = run.run(clock.left_s() / (K - len(plans)), options.rel_gap)
        if run.busy:   # left running after a Ctrl-C
            solver = False
        if out.values is None:
            if out.status == "infeasible":
                say(f"no further distinct plan exists after {len(plans)}")
            else:
                timed_out = out.status in ("time_limit", "interrupted")
            break
        p = plan_from_values(m, problem, run.value_fn(out.values))
        from_milp.add(projection(p))
        if projection(p) in seen or not ok(p):
            break
        seen.add(projection(p))
        plans.append(annotate(problem, p, options, out.objective_s))
        pool.add(neighbours(problem, p, path, lanes, checked=False, expired=clock.expired))
        say(f"plan {len(plans)}: objective {fmt(plans[-1].predicted['milp_objective'])} ({out.status})")
    if len(plans) < K:   # fill from the other layouts' plans
        timed_out = not pool.drain() or timed_out
        for p in pool.ranked(seen)[:K - len(plans)]:
            if clock.expired():
                timed_out = True
                break
            plans.append(annotate(problem, p, options, None))
    if len(plans) < K and (timed_out or clock.expired()):
        clock.cut(f"top-K: {len(plans)} of {K} plans", say)
    plans.sort(key=lambda p: p.predicted["milp_objective"])
    return TopKPhase(tuple(plans))
