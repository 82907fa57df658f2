"""model.budget: the budget-aware period bound never exceeds the brute-force optimum under
the budget; its plans are feasible and within the budget; budget_from_fraction."""
from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_cost, plan_sensitivity
from distplan.core.errors import DistplanError
from distplan.model.budget import budget_from_fraction, budget_plans_and_bound
from distplan.model.knapsack import front_choice
from distplan.model.downsets import enumerate_downsets, relaxation_bound
from distplan.costs.check import check_plan

from test_model_milp import all_plans, first_path, instances, small


def _optimum(problem, path, budget):
    best = math.inf
    for plan in all_plans(problem, path):
        if plan_sensitivity(problem, plan) <= budget + 1e-9:
            best = min(best, plan_cost(problem, plan).period_s)
    return best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(instances(max_ops=6), st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5, 1.0]))
def test_budget_bound_never_exceeds_brute_force_optimum(problem, frac):
    assume(small(problem))
    _, path = first_path(problem)
    mat = enumerate_downsets(problem)
    budget = budget_from_fraction(problem, frac)
    opt = _optimum(problem, path, budget)
    lb0 = relaxation_bound(problem, path, mat)
    if math.isinf(lb0):   # the relaxation proves that no plan fits the path
        event("infeasible")
        assert math.isinf(opt)
        return
    assume(math.isfinite(opt))   # the bound is measured against a plan within the budget
    plans, bound = budget_plans_and_bound(problem, path, mat, budget, lb0, opt)
    event(f"bound {'tight' if bound >= opt * (1 - 1e-3) else 'loose'}; plans {'found' if plans else 'none'}")
    assert lb0 <= bound <= opt * (1 + 1e-9)
    for p in plans:
        check_plan(problem, p)
        assert plan_sensitivity(problem, p) <= budget * (1 + 1e-9) + 1e-12
        assert plan_cost(problem, p).period_s >= bound * (1 - 1e-9)
    # past its deadline it returns what it had proven: the bound it was given, no plans
    assert budget_plans_and_bound(problem, path, mat, budget, lb0, opt, deadline=0.0) == ([], lb0)
    # capped at a period below the optimum (another layout's incumbent), it proves that cap
    _, capped = budget_plans_and_bound(problem, path, mat, budget, lb0, max(lb0, 0.9 * opt))
    assert lb0 <= capped <= opt * (1 + 1e-9)
    # with no known plan the upward search still returns a valid bound
    plans2, bound2 = budget_plans_and_bound(problem, path, mat, budget, lb0, None)
    assert bound2 <= opt * (1 + 1e-9)
    for p in plans2:
        check_plan(problem, p)
        assert plan_sensitivity(problem, p) <= budget * (1 + 1e-9) + 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-6, 1.0), st.floats(0.0, 10.0)), min_size=1, max_size=7),
       st.floats(0.0, 3.0))
def test_front_choice_is_the_exact_knapsack(items, need):
    opts = {v: [(dt, ds, 1)] for v, (dt, ds) in enumerate(items)}
    best = math.inf
    for pick in itertools.product((0, 1), repeat=len(items)):
        if sum(p * dt for p, (dt, _) in zip(pick, items)) >= need:
            best = min(best, sum(p * ds for p, (_, ds) in zip(pick, items)))
    ch = front_choice(opts, need)
    if math.isinf(best):
        assert ch is None
    else:
        assert ch is not None
        assert sum(items[v][0] for v in ch) >= need * (1 - 1e-9)
        assert sum(items[v][1] for v in ch) == pytest.approx(best, abs=1e-9)


def test_budget_from_fraction_is_share_of_all_lowest_precision_sensitivity(request):
    from test_model_solve import problem as chain_problem
    pb = chain_problem(6)
    s_max = float(pb.sensitivity.max(axis=1).sum())
    assert s_max > 0
    assert budget_from_fraction(pb, 0.1) == pytest.approx(0.1 * s_max, rel=1e-12)
    assert budget_from_fraction(pb, 0) == 0.0
    with pytest.raises(DistplanError, match="fraction"):
        budget_from_fraction(pb, -0.1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(-1, 3), st.floats(-1, 3), st.floats(0, 2)), min_size=0, max_size=2),
                min_size=1, max_size=6), st.floats(0, 6), st.floats(0, 6))
@example([[(2.0, 0.0, 0.0)], [(-1.0, 1.0, 0.0)]], 3.0147733601949836e-288, 1.0)   # a need lost to rounding
@example([[(0.0, -1.0, 0.0)]], 0.0, 4.026027980360169e-132)          # ... and a tiny need not met
def test_joint_choice_matches_brute_force(opts, nt, nm):
    import itertools
    from distplan.model.knapsack import joint_choice
    by_op = {v: [(dt, dm, ds, 1) for dt, dm, ds in o] for v, o in enumerate(opts)}
    best = math.inf
    for pick in itertools.product(*[range(-1, len(o)) for o in opts]):
        ch = [(v, k) for v, k in enumerate(pick) if k >= 0]
        t = sum(by_op[v][k][0] for v, k in ch)
        m = sum(by_op[v][k][1] for v, k in ch)
        if t >= nt * (1 - 1e-12) and m >= nm * (1 - 1e-12):
            best = min(best, sum(by_op[v][k][2] for v, k in ch))
    r = joint_choice(by_op, nt, nm, max_states=10**6)
    assert r is not None
    assert r[0] == pytest.approx(best, abs=1e-9) if math.isfinite(best) else r[0] == math.inf


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.tuples(st.floats(0.0, 5.0), st.floats(0.01, 2.0)), min_size=1, max_size=3),
                min_size=1, max_size=5), st.floats(0.0, 4.0))
def test_lp_over_hull_steps_bounds_the_exact_knapsack(points, need):
    """model.knapsack, pure: the LP relaxation over each op's convex-hull steps never
    exceeds the exact least added sensitivity (front_choice) that saves ``need`` s."""
    import numpy as np
    from distplan.model.knapsack import hull_steps, lp_min_sensitivity
    pts = [sorted((s, t, q) for q, (s, t) in enumerate(op)) for op in points]
    steps = hull_steps(pts)
    opts = {}
    for v, op in enumerate(pts):
        s0, t0, _ = op[0]
        assert steps.base_sens[v] == s0 and steps.base_time[v] == t0
        opts[v] = [(t0 - t, s - s0, q) for s, t, q in op[1:] if t < t0]
    ch = front_choice(opts, need)
    lp = lp_min_sensitivity(steps, np.ones(len(steps.op), dtype=bool), need)
    if ch is None:   # even every op at its fastest saves too little: so do all hull steps
        assert lp == math.inf
    else:
        assert lp <= sum(opts[v][k][1] for v, k in ch.items()) + 1e-9
