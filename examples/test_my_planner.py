"""Checking your own planner against distplan's corpus of proven optima.

Run from the repository root:  python -m pytest examples/test_my_planner.py

"My planner" here is deliberately naive: it splits the operators, in topological order,
evenly over the devices of one device path at the lowest precision each device allows,
and says whether its plan fits (by the usual memory estimate). The tests hold it to
three promises: a plan it says fits is feasible (checked independently); no such plan is
faster than the instance's proven optimum, and its cost-model period is what the
simulator measures; a plan it says does not fit is rejected by the checker too. A
planner that cheated would fail here (docs/guides/testing.md).
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from distplan.core.plan import Plan, Stage
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.problem import Problem
from distplan.testing.asserts import (assert_feasible, assert_not_better_than_optimum,
                                      assert_simulated_matches_model)
from distplan.testing.brute_force import brute_force_optimum
from distplan.testing.corpus import load_corpus
from distplan.testing.strategies import problems
from distplan.topologies.paths import device_paths


# --- the planner under test ------------------------------------------------------------
def naive_plan(problem: Problem) -> tuple[Plan, bool]:
    """Even split over the first device path, lowest allowed precision; (plan, fits)."""
    path = device_paths(problem.topology)[0][1]
    V, K = problem.n_ops, len(path)
    op_stage = tuple(v * K // V for v in range(V))          # topological order -> stages

    def lowest(v: int, device: int) -> str:                  # precisions: highest first
        kind = problem.topology.kind_of(device)               # op_allowed: int8 on matrix products only
        runs = [p for q, p in enumerate(problem.precisions) if kind.supports(p)]
        return ([p for p in runs if problem.op_allowed[v, problem.q_index(p)]] or runs)[-1]

    plan = Plan(op_stage=op_stage, op_precision=tuple(lowest(v, path[k]) for v, k in enumerate(op_stage)),
                stages=tuple(Stage((path[k],)) for k in range(max(op_stage) + 1)),
                microbatches=problem.microbatches, schedule=problem.schedule)
    fits = bool((plan_memory_bytes(problem, plan) <= problem.device_mem_bytes).all())
    return plan, fits


# --- the tests -------------------------------------------------------------------------
CORPUS = load_corpus()


@pytest.mark.parametrize("inst", CORPUS, ids=[i.name for i in CORPUS])
def test_naive_planner_against_the_corpus(inst):
    problem = inst.problem()
    plan, fits = naive_plan(problem)
    if fits:
        assert_feasible(problem, plan)
        period_s = assert_not_better_than_optimum(problem, plan, inst)
        assert assert_simulated_matches_model(problem, plan) == period_s
    else:   # the planner admits its plan overflows memory: the checker must agree
        with pytest.raises(AssertionError, match="MiB but holds"):
            assert_feasible(problem, plan)


def test_the_corpus_catches_a_plan_that_overflows_memory():
    """On this instance the even split overflows a device, and it would beat the proven
    optimum if memory did not count: the helper says the plan is infeasible."""
    (inst,) = load_corpus(["tiny-08-chain6-line4-tight"])
    plan, fits = naive_plan(inst.problem())
    assert not fits
    with pytest.raises(AssertionError, match="beats corpus instance .* but the plan is infeasible"):
        assert_not_better_than_optimum(inst.problem(), plan, inst)


@settings(max_examples=25, deadline=None)
@given(problems(max_ops=4, max_devices=3))
def test_naive_plans_on_random_problems(problem):
    """On random small problems (generous memory) the naive plan fits, is feasible, and is
    never better than the exhaustive optimum of the planner's space."""
    plan, fits = naive_plan(problem)
    assert fits
    assert_feasible(problem, plan)
    assert_not_better_than_optimum(problem, plan, brute_force_optimum(problem).period_s)
