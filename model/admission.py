"""Admitting plans found outside the MILP when the user added constraints.

The heuristic, downset-DP and budget-chain plans (model.heuristic, model.downsets,
model.budget) and the top-K phase's local moves (model.heuristic.neighbours) never see
the user's ``SolveOptions.extra_constraints`` (model.build.add_extra_constraints). With
a hook set, such a plan serves as an incumbent, a warm start or a returned plan only if
it satisfies the MILP of its layout: written onto a model of that layout
(model.extract.assign_plan), with the period ``T`` raised as far as the hook's rows ask
(a user's model may charge more than distplan's), every constraint and bound the hook
added holds, to ``rel_tol``. distplan's own families need no check: they hold for every plan that
costs.check.plan_violations accepts (tests/test_model_milp.py), and every outside plan
has passed it. A hook that declares variables of its own makes outside plans
uncheckable (their values are unknown): then none is admitted and only the MILP's own
solutions remain. Without a hook every plan is admitted and no model is built.
"""
from __future__ import annotations

import math

import pyomo.environ as pyo

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.build import ModelSpec, build_model
from distplan.model.extract import assign_plan, projection
from distplan.model.options import SolveOptions

Lanes = tuple[tuple[int, ...], ...]


def layout_spec(options: SolveOptions, lanes: Lanes, period_lb_s: float = 0.0) -> ModelSpec:
    """The ModelSpec of a layout (lane 0 is the path; one lane: no ``lanes``)."""
    return ModelSpec(path=tuple(lanes[0]), objective=options.objective,
                     sensitivity_budget=options.sensitivity_budget, sensitivity_weight=options.sensitivity_weight,
                     lanes=tuple(lanes) if len(lanes) > 1 else None, period_lb_s=period_lb_s,
                     extra_constraints=options.extra_constraints)


def _within(x: float | None, lo: float | None, hi: float | None, rel_tol: float) -> bool:
    if x is None or not math.isfinite(x):
        return False
    if lo is not None and x < lo - rel_tol * max(1.0, abs(lo)):
        return False
    return hi is None or x <= hi + rel_tol * max(1.0, abs(hi))


def satisfies_user_constraints(m, problem: Problem, plan: Plan, rel_tol: float = 1e-6) -> bool | None:
    """Whether ``plan`` (stage positions on ``m.path``) meets every constraint and bound
    the user's hook added to ``m`` (module docstring); None when that cannot be told (the
    hook declared variables of its own). Overwrites m's variable values."""
    if not (m.user_rows or m.user_bounds or m.user_vars):
        return True
    if m.user_vars:
        return None
    if plan.op_stage and max(plan.op_stage) >= m.K:
        return False
    assign_plan(m, problem, plan)
    _lift_period(m, rel_tol)
    for v, lo, hi in m.user_bounds:
        if not _within(v.value, lo, hi, rel_tol):
            return False
    for c in m.user_rows:
        if not _within(pyo.value(c.body, exception=False), c.lb, c.ub, rel_tol):
            return False
    return True


def _lift_period(m, rel_tol: float) -> None:
    """Raise the period variable ``m.T`` (which the plan's own cost set) to the least value
    the user's rows allow: a user's model may charge a plan more than distplan's (rows
    T >= its own loads), and the plan then meets it at that period. Rows are linear, so
    each one's coefficient on T is read off two evaluations."""
    t0 = float(m.T.value)
    need = t0
    for c in m.user_rows:
        base = pyo.value(c.body, exception=False)
        m.T.set_value(t0 + 1.0)
        slope = pyo.value(c.body, exception=False) - base if base is not None else 0.0
        m.T.set_value(t0)
        if base is None or abs(slope) < 1e-12:
            continue
        for bound, sign in ((c.lb, 1.0), (c.ub, -1.0)):
            if bound is None:
                continue
            short = sign * (bound - base)   # how far the row is from holding
            if short > rel_tol * max(1.0, abs(bound)) and sign * slope > 0:
                need = max(need, t0 + short / (sign * slope))
    m.T.set_value(need)


class PlanGate:
    """Admits plans from outside the MILP (module docstring): every plan without a user
    hook; with one, the plans that satisfy a model of their layout, built once per layout
    and kept (as are the verdicts)."""

    def __init__(self, problem: Problem, options: SolveOptions):
        self.problem, self.options = problem, options
        self.active = options.extra_constraints is not None
        self._models: dict[Lanes, object] = {}
        self._verdicts: dict[tuple, bool | None] = {}

    def verdict(self, lanes: Lanes, plan: Plan) -> bool | None:
        """satisfies_user_constraints of ``plan`` on the layout ``lanes`` (True without a hook)."""
        if not self.active:
            return True
        lanes = tuple(tuple(lane) for lane in lanes)
        key = (lanes, projection(plan))
        if key not in self._verdicts:
            if lanes not in self._models:
                self._models[lanes] = build_model(self.problem, layout_spec(self.options, lanes))
            self._verdicts[key] = satisfies_user_constraints(self._models[lanes], self.problem, plan)
        return self._verdicts[key]

    def admits(self, lanes: Lanes, plan: Plan) -> bool:
        """Whether ``plan``, found outside the MILP on the layout ``lanes``, may be used."""
        return self.verdict(lanes, plan) is True

    def contradicts(self, lanes: Lanes, plan: Plan) -> bool:
        """Whether ``plan`` surely breaks the user's constraints (a check on the MILP's own
        solutions: HiGHS enforced them, up to its tolerances)."""
        return self.verdict(lanes, plan) is False
