"""User constraints (SolveOptions.extra_constraints, model.build.add_extra_constraints):
they change the plan, every returned plan satisfies them, the optimum equals brute force
over the constrained plans, hooks that relax are refused, and plans found outside the
MILP are admitted only when they satisfy it (model.admission)."""
from __future__ import annotations

import math

import pyomo.environ as pyo
import pytest
from hypothesis import HealthCheck, assume, event, given, settings

from distplan.costs.check import check_plan
from distplan.costs.evaluate import plan_cost
from distplan.core.errors import DistplanError
from distplan.model import SolveOptions, solve
from distplan.model.admission import satisfies_user_constraints
from distplan.model.build import ModelSpec, build_model, y_of
from distplan.model.extract import make_plan

from test_model_milp import all_plans, first_path, instances, small
from test_model_solve import problem as chain_problem


def cap_two_stages(m, problem, spec):
    """At most two stages: y[v,k] = 0 for k >= 2."""
    m.stage_cap = pyo.Constraint(m.OPS, [k for k in m.CUTS if k >= 2], rule=lambda m, v, k: m.y[v, k] == 0)


def ends_apart(m, problem, spec):
    """The last op runs on a later stage than op 0: stage(last) >= stage(0) + 1."""
    last = problem.n_ops - 1
    gap = sum(y_of(m, last, k) - y_of(m, 0, k) for k in range(1, m.K))
    if isinstance(gap, (int, float)):   # one stage (or one op): no variable, a constant verdict
        m.ends_apart = pyo.Constraint(rule=lambda m: pyo.Constraint.Skip if gap >= 1 else pyo.Constraint.Infeasible)
    else:
        m.ends_apart = pyo.Constraint(expr=gap >= 1)


def test_stage_cap_changes_the_plan_and_every_plan_satisfies_it():
    pb = chain_problem(n=10)
    free = solve(pb, SolveOptions(top_k=3, rel_gap=0.0, time_limit_s=30, replicas=1))
    assert max(free.plans[0].op_stage) >= 2
    specs = []

    def hook(m, problem, spec):
        specs.append(spec)
        cap_two_stages(m, problem, spec)
    res = solve(pb, SolveOptions(top_k=3, rel_gap=0.0, time_limit_s=30, replicas=1, extra_constraints=hook))
    assert specs and all(s.extra_constraints is hook for s in specs)   # called on every model built
    assert res.status == "optimal"
    assert res.objective_s > free.objective_s
    assert res.bound_s <= res.objective_s * (1 + 1e-9)
    assert len(res.plans) == 3
    for p in res.plans:
        assert max(p.op_stage) <= 1
        check_plan(pb, p)
    # the best of the plans on at most two stages along the same path (brute force)
    path = res.lanes[0]
    want = min(plan_cost(pb, p).period_s for p in all_plans(pb, path[:2]))
    assert res.objective_s == pytest.approx(want, rel=1e-9)


def test_stage_cap_over_every_replication_factor():
    pb = chain_problem(n=10)
    res = solve(pb, SolveOptions(top_k=4, rel_gap=0.0, time_limit_s=30, extra_constraints=cap_two_stages))
    assert {e["replicas"] for e in res.explored} == {1, 2, 4}
    for p in res.plans:
        assert max(p.op_stage) <= 1
        check_plan(pb, p)


def test_fixing_variables_is_a_constraint_too():
    pb = chain_problem(n=8)
    q8 = pb.q_index("int8")
    free = solve(pb, SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=30, replicas=1))
    assert "int8" in free.plans[0].op_precision

    def no_int8(m, problem, spec):
        for v in m.OPS:
            m.prec[v, q8].fix(0)
    res = solve(pb, SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=30, replicas=1, extra_constraints=no_int8))
    assert res.objective_s > free.objective_s
    for p in res.plans:
        assert set(p.op_precision) == {"fp16"}
        check_plan(pb, p)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(instances(max_ops=5))
def test_constrained_optimum_equals_brute_force(problem):
    assume(small(problem) and problem.n_ops >= 2 and problem.n_devices >= 2)
    name, path = first_path(problem)
    feasible = [p for p in all_plans(problem, path) if p.op_stage[-1] >= p.op_stage[0] + 1]
    opts = SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=30, path=name, extra_constraints=ends_apart)
    if not feasible:
        event("infeasible under the constraint")
        with pytest.raises(DistplanError):
            solve(problem, opts)
        return
    event("feasible")
    want = min(plan_cost(problem, p).period_s for p in feasible)
    res = solve(problem, opts)
    assert res.status == "optimal"
    assert res.objective_s == pytest.approx(want, rel=1e-6, abs=1e-15)
    assert res.bound_s <= want * (1 + 1e-9)
    for p in res.plans:
        assert p.op_stage[-1] >= p.op_stage[0] + 1
        check_plan(problem, p)


def test_a_constraint_no_plan_meets_is_an_error_naming_it():
    pb = chain_problem(n=4, rows=1, cols=1)   # one device, one stage: the ends cannot be apart
    with pytest.raises(DistplanError, match="extra_constraints"):
        solve(pb, SolveOptions(top_k=1, time_limit_s=10, extra_constraints=ends_apart))


@pytest.mark.parametrize("hook, what", [
    (lambda m, pb, spec: m.mem_cap.deactivate(), "removed or deactivated"),
    (lambda m, pb, spec: m.del_component(m.stage_order), "removed or deactivated"),
    (lambda m, pb, spec: m.obj.deactivate() or setattr(m, "obj2", pyo.Objective(expr=m.sensitivity)), "objective"),
    (lambda m, pb, spec: setattr(m.T, "domain", pyo.Reals), "relaxed variable T"),
    (lambda m, pb, spec: m.z.setub(2), "relaxed variable z"),
    (lambda m, pb, spec: setattr(m.y[0, 1], "domain", pyo.UnitInterval), "relaxed variable y"),
])
def test_hooks_that_relax_are_refused(hook, what):
    pb = chain_problem(n=4)
    with pytest.raises(DistplanError, match=f"extra_constraints .*{what}"):
        build_model(pb, ModelSpec(path=(0, 1, 2, 3), extra_constraints=hook))


def test_admission_checks_the_hooks_rows_bounds_and_variables():
    pb = chain_problem(n=4)
    path = (0, 1, 2, 3)
    two = make_plan(pb, path, [0, 0, 1, 1], [0] * 4)
    three = make_plan(pb, path, [0, 1, 2, 2], [0] * 4)
    m = build_model(pb, ModelSpec(path=path, extra_constraints=cap_two_stages))
    assert len(m.user_rows) == 4 * 2 and not m.user_bounds and not m.user_vars
    assert satisfies_user_constraints(m, pb, two) and not satisfies_user_constraints(m, pb, three)

    def fix_last(m, problem, spec):
        m.y[3, 2].fix(1)
    m = build_model(pb, ModelSpec(path=path, extra_constraints=fix_last))
    assert len(m.user_bounds) == 1 and not m.user_rows
    assert satisfies_user_constraints(m, pb, three) and not satisfies_user_constraints(m, pb, two)

    def own_variable(m, problem, spec):
        m.n_used = pyo.Var(bounds=(0, 4))
        m.n_used_def = pyo.Constraint(expr=m.n_used >= 1 + sum(m.y[3, k] for k in m.CUTS))
    m = build_model(pb, ModelSpec(path=path, extra_constraints=own_variable))
    assert len(m.user_vars) == 1
    assert satisfies_user_constraints(m, pb, two) is None   # its value is unknown: cannot tell
    m0 = build_model(pb, ModelSpec(path=path))
    assert (m0.user_rows, m0.user_bounds, m0.user_vars) == ((), (), ())
    assert satisfies_user_constraints(m0, pb, three)


def test_a_hook_with_its_own_variables_still_yields_plans_that_satisfy_it():
    pb = chain_problem(n=10)

    def few_stages(m, problem, spec):   # n_used >= stage(last) + 1, n_used <= 2
        last = problem.n_ops - 1
        m.n_used = pyo.Var(bounds=(0, 2))
        m.n_used_def = pyo.Constraint(expr=m.n_used >= 1 + sum(y_of(m, last, k) for k in range(1, m.K)))
    res = solve(pb, SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=30, replicas=1, extra_constraints=few_stages))
    assert res.plans
    for p in res.plans:
        assert max(p.op_stage) <= 1
        check_plan(pb, p)
    assert math.isfinite(res.bound_s) and res.bound_s <= res.objective_s * (1 + 1e-9)


def test_a_hook_that_raises_the_objective_is_reported_beside_the_rescored_plan():
    # a user's model that charges more than distplan's (here: every period at least twice
    # the free optimum, as exposed-communication rows would add load): HiGHS's own
    # objective and bound are that, distplan re-scores the plan without the row
    import distplan
    pb = chain_problem(n=6)
    free = solve(pb, SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=30, replicas=1))
    floor_s = 2 * free.objective_s

    def slow(m, problem, spec):
        m.user_floor = pyo.Constraint(expr=m.T >= m.tscale * floor_s)
    res = solve(pb, SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=30, replicas=1, extra_constraints=slow))
    assert res.hook_objective_s == pytest.approx(floor_s, rel=1e-6)
    assert res.hook_bound_s == pytest.approx(floor_s, rel=1e-6)
    assert res.objective_s < res.hook_objective_s   # distplan's own figure for the same plan
    assert free.hook_objective_s is None
    text = distplan.solve(pb, SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=30, replicas=1,
                                           extra_constraints=slow)).table()
    assert f"the MILP's own objective is {floor_s:.6g} s" in text
