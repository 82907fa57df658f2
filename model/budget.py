"""The period under a sensitivity budget: a proven lower bound and budget-feasible plans,
by bisection on the period T (this module drives it; model.savings, model.knapsack,
model.segments and model.chain_dp hold the pieces).

Per segment S (a stage on device kind c) the least sensitivity that makes its compute
fit T is a multiple-choice knapsack, ``minsens(S, T)``, read off the segment's exact
Pareto front of (saved seconds, added sensitivity), or its LP relaxation beyond
``max_front`` points. ``R(T)``, the least sum of ``minsens`` over chains of <= K downsets
that fit memory and link loads, is a relaxation and non-increasing in T, so
``R(T) > B`` proves period > T: ``budget_bound`` is the largest T proven infeasible, a
valid lower bound (seconds) on every budget-feasible plan's period on the path. The
chain attaining R at the smallest feasible T is a plan (``budget_plans_and_bound``),
re-partitioned exactly for its precisions and scored with costs.evaluate. The algebra:
docs/concepts/milp.md, "The bound under a sensitivity budget".
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost, plan_sensitivity
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.model.chain_dp import chain_dp, chain_plan
from distplan.model.downsets import fixed_precision_plan
from distplan.model.extract import make_plan
from distplan.model.segments import JointTimeout, SegmentTables, build_tables


def budget_from_fraction(problem: Problem, fraction: float) -> float:
    """Sensitivity budget = fraction x S_max, S_max = sum_v max_q s[v,q] (every op at its
    most sensitive, i.e. lowest, precision); 0.1 means "10 %"."""
    if not (isinstance(fraction, (int, float)) and math.isfinite(fraction) and fraction >= 0):
        raise DistplanError(f"sensitivity budget fraction must be a number >= 0 (0.1 = 10 %), got {fraction!r}")
    return float(fraction) * float(problem.sensitivity.max(axis=1).sum())


def _never() -> bool:
    return False


def _bisect(tb: SegmentTables, budget: float, lo: float, hi: float, rel_tol: float,
            side: str = "lb", joint: bool = False, keep: bool = False,
            deadline: float = math.inf, stop: Callable[[], bool] = _never) -> tuple[float, float]:
    """(largest T found with R(T) > budget, smallest T found with R(T) <= budget); past
    ``deadline`` (perf_counter seconds) or once ``stop()`` it stops with what it has
    proven. ``keep``: a JointTimeout carries the (lo, hi, side) proven so far."""
    slack = 1e-9 * max(1.0, abs(budget))
    while (hi - lo) > rel_tol * hi and time.perf_counter() < deadline and not stop():
        mid = 0.5 * (lo + hi)
        try:
            val = chain_dp(tb, mid, side, joint)[0]
        except JointTimeout:
            if keep:
                raise JointTimeout((lo, hi, side)) from None
            raise
        if val > budget + slack:
            lo = mid
        else:
            hi = mid
    return lo, hi


def _joint_bisect(tb: SegmentTables, budget: float, lo: float, hi: float, rel_tol: float,
                  time_s: float) -> tuple[float, float]:
    """(lo, hi) tightened by the joint knapsack (lb side, then ub side) within ``time_s``
    seconds; on time out whatever each side had proven stands (each bisection step is a
    proof on its own)."""
    tb.joint.reset(time.perf_counter() + time_s)
    try:
        lo = _bisect(tb, budget, lo, hi, rel_tol, "lb", joint=True, keep=True)[0]
        hi = _bisect(tb, budget, lo, hi, rel_tol, "ub", joint=True, keep=True)[1]
    except JointTimeout as e:
        if e.proven is not None:
            lo, hi = (e.proven[0], hi) if e.proven[2] == "lb" else (lo, e.proven[1])
    finally:
        tb.joint.reset(-math.inf)   # no joint work outside the allowance
    return lo, hi


def budget_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray, budget: float,
                 lo_s: float, hi_s: float, rel_tol: float = 1e-5, joint_time_s: float = 3.0) -> float:
    """Largest period T in [lo_s, hi_s] with R(T) > budget (module docstring): no plan on
    ``path`` within the budget has a period <= the returned value. ``lo_s`` must itself be
    a valid lower bound (e.g. model.downsets.relaxation_bound), ``hi_s`` >= some
    budget-feasible plan's period."""
    if not hi_s > lo_s:
        return lo_s
    tb = build_tables(problem, path, mat, hi_s)
    lo, hi = _bisect(tb, budget, lo_s, hi_s, rel_tol)
    return _joint_bisect(tb, budget, lo, hi_s, rel_tol, joint_time_s)[0]


def budget_plans_and_bound(problem: Problem, path: tuple[int, ...], mat: np.ndarray, budget: float,
                           lo_s: float, hi_s: float | None, rel_tol: float = 1e-5,
                           joint_time_s: float = 3.0, deadline: float = math.inf,
                           stop: Callable[[], bool] = _never) -> tuple[list[Plan], float]:
    """(plans, bound): ``budget_bound`` (``hi_s`` None: searched upwards from ``lo_s``; the
    bound is then only ``lo_s`` if no T up to 1.5^8 lo_s fits) and the chain plans at the
    smallest feasible T found and a few larger T, each also re-partitioned exactly for
    its precisions (model.downsets.fixed_precision_plan, casts included). Only plans
    within the budget that pass costs.check are returned, best period first. Past
    ``deadline`` (perf_counter seconds), or once ``stop()`` (Ctrl-C), it returns what it
    has: the bound proven so far (at least ``lo_s``) and the plans found so far."""
    slack = 1e-9 * max(1.0, abs(budget))
    if hi_s is None:   # no plan known: grow T until the chain DP fits the budget
        hi_s = lo_s
        for _ in range(8):
            if time.perf_counter() > deadline or stop():
                return [], lo_s
            hi_s *= 1.5
            tb = build_tables(problem, path, mat, hi_s)
            if chain_dp(tb, hi_s, "ub")[0] <= budget + slack:
                break
        else:   # no plan found: still prove what the bound side can (R_lb > budget up to T)
            if chain_dp(tb, hi_s, "lb")[0] > budget + slack:
                return [], hi_s
            return [], _bisect(tb, budget, lo_s, hi_s, rel_tol, deadline=deadline, stop=stop)[0]
    if not hi_s > lo_s or time.perf_counter() > deadline or stop():
        return [], lo_s
    tb = build_tables(problem, path, mat, hi_s)
    if chain_dp(tb, hi_s, "lb")[0] > budget + slack:   # nothing within the budget up to hi_s
        return [], hi_s
    lo, _ = _bisect(tb, budget, lo_s, hi_s, rel_tol, deadline=deadline, stop=stop)
    _, hi = _bisect(tb, budget, lo, hi_s, rel_tol, "ub", deadline=deadline, stop=stop)
    # tighten both sides with the joint time-and-memory knapsack between them
    joint_time_s = 0.0 if stop() else max(0.0, min(joint_time_s, deadline - time.perf_counter()))
    lo, hi = _joint_bisect(tb, budget, lo, hi, rel_tol, joint_time_s)
    tb.joint.reset(time.perf_counter() + joint_time_s)   # for the plans below
    out = {}
    for T in (hi, hi * 1.001, hi * 1.003, hi * 1.01):
        try:
            val, segs = chain_dp(tb, min(T, hi_s), "ub", joint=True)
        except JointTimeout:
            val, segs = chain_dp(tb, min(T, hi_s), "ub")
        if val > budget + slack:
            continue
        p = chain_plan(problem, path, tb, min(T, hi_s), segs)
        if p is None:
            continue
        prec = [problem.q_index(x) for x in p.op_precision]
        cands = [p]
        stage = fixed_precision_plan(problem, path, mat, prec)
        if stage is not None:
            cands.append(make_plan(problem, path, stage, prec))
        for c in cands:
            if plan_sensitivity(problem, c) <= budget + slack and not plan_violations(problem, c):
                out[(c.op_stage, c.op_precision)] = c
    return sorted(out.values(), key=lambda p: plan_cost(problem, p).period_s), lo
