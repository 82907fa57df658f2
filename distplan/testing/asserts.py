"""Assertion helpers for tests of planners, compilers and schedulers built on distplan.

Each raises ``AssertionError`` with a message that names what is wrong, by how much,
and what to suspect; each returns the figure it checked, so a test can go on with it.

    assert_feasible(problem, plan)                          # independent checker
    assert_simulated_matches_model(problem, plan, rel=1e-9) # ideal simulation == cost model
    assert_not_better_than_optimum(problem, plan, inst)     # no plan beats a proven optimum

A precondition the helper cannot check (a tensor-parallel plan, a GPipe plan for the
simulation identity) raises ``ValueError`` instead: it is a misuse, not a failed check.
"""
from __future__ import annotations

import math

from distplan.core.plan import Plan
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import Problem
from distplan.sim import SimOptions, simulate
from distplan.testing.corpus import CorpusInstance

__all__ = ["assert_feasible", "assert_simulated_matches_model", "assert_not_better_than_optimum"]

_MAX_LINES = 8


def _where(problem: Problem) -> str:
    return f"graph {problem.graph.name!r} ({problem.n_ops} ops) on topology {problem.topology.name!r}"


def _analytic_only(plan: Plan, what: str) -> None:
    tp = sorted({s.tensor_parallel for s in plan.stages if s.tensor_parallel != 1})
    if tp:
        raise ValueError(f"{what} needs tensor_parallel = 1 on every stage (the cost model "
                         f"costs.evaluate.plan_cost does not cover tensor parallelism); this plan has "
                         f"tensor_parallel {tp}: check it with distplan.sim.simulate instead")


def assert_feasible(problem: Problem, plan: Plan) -> None:
    """Fail unless ``distplan.costs.check.plan_violations`` (code independent of the
    planner) finds the plan feasible; the message lists every violation."""
    bad = plan_violations(problem, plan)
    if bad:
        shown = "\n  - ".join(bad[:_MAX_LINES])
        more = f"\n  (+{len(bad) - _MAX_LINES} more)" if len(bad) > _MAX_LINES else ""
        raise AssertionError(f"plan is infeasible for {_where(problem)}: {len(bad)} violation(s)\n  - "
                             f"{shown}{more}")


def assert_simulated_matches_model(problem: Problem, plan: Plan, rel: float = 1e-9) -> float:
    """Fail unless the ideal-mode simulation reaches a steady state whose period equals
    ``plan_cost(problem, plan).period_s`` within ``rel`` (relative). Returns that period.

    The identity is distplan's own contract (``distplan.sim`` docs): it holds for
    tensor_parallel = 1 under the 'stream', '1f1b' and 'explicit' schedules. GPipe
    flushes every step and has no steady state: replay such a plan with
    ``dataclasses.replace(plan, schedule='1f1b')``.
    """
    _analytic_only(plan, "assert_simulated_matches_model")
    if plan.schedule == "gpipe":
        raise ValueError("a 'gpipe' plan has no steady state (its period is makespan / microbatches), so the "
                         "identity does not apply; check dataclasses.replace(plan, schedule='1f1b') instead")
    model_s = plan_cost(problem, plan).period_s
    r = simulate(problem, plan, SimOptions(ideal=True))
    if not r.steady:
        raise AssertionError(f"ideal simulation of the plan on {_where(problem)} found no steady state "
                             f"(period estimate {r.period_s:.9g} s, cost model {model_s:.9g} s); the simulator "
                             "should settle in ideal mode: suspect distplan.sim")
    diff = abs(r.period_s - model_s) / max(abs(model_s), abs(r.period_s), 1e-300)
    if diff > rel:
        raise AssertionError(
            f"ideal simulated period {r.period_s:.12g} s != cost-model period {model_s:.12g} s on "
            f"{_where(problem)} (relative difference {diff:.3g} > {rel:g}); the MILP optimises the cost "
            "model, so one of distplan.sim and distplan.costs.evaluate is wrong for this plan")
    return model_s


def assert_not_better_than_optimum(problem: Problem, plan: Plan, optimum: float | CorpusInstance,
                                   rel: float = 1e-9) -> float:
    """Fail if the plan's cost-model period is below a proven optimum (or lower bound) by
    more than ``rel`` (relative). ``optimum``: seconds, or a :class:`CorpusInstance`
    (its proven bound is used; it equals the optimum up to the proof's gap). Returns the
    plan's period.

    A plan cannot beat a proven optimum: either the plan is infeasible (the message then
    lists why) or the optimum, the proof behind it or the cost model is wrong.
    """
    _analytic_only(plan, "assert_not_better_than_optimum")
    if isinstance(optimum, CorpusInstance):
        bound_s, what = optimum.bound_s, (f"corpus instance {optimum.name!r} (optimum {optimum.optimum_s:.12g} s, "
                                          f"bound {optimum.bound_s:.12g} s, proof: {optimum.proof})")
    else:
        bound_s, what = float(optimum), f"the proven optimum {float(optimum):.12g} s"
    if math.isnan(bound_s):
        raise ValueError("the optimum is NaN")
    period_s = plan_cost(problem, plan).period_s
    if period_s >= bound_s * (1 - rel):
        return period_s
    short = (bound_s - period_s) / bound_s if bound_s > 0 else math.inf
    bad = plan_violations(problem, plan)
    if bad:
        why = "; ".join(bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        raise AssertionError(f"plan period {period_s:.12g} s beats {what} by {short:.3%} on {_where(problem)}, "
                             f"but the plan is infeasible: {why}")
    raise AssertionError(f"a FEASIBLE plan with period {period_s:.12g} s beats {what} by {short:.3%} on "
                         f"{_where(problem)}: the optimum or its proof (corpus, planner) or the cost model is "
                         "wrong; report it with this plan")
