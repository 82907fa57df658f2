"""distplan.testing.strategies: feasible plans are feasible (on generous and on mixed
hardware), the identity holds on them, and the brute-force space is the planner's."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost
from distplan.testing.asserts import assert_feasible, assert_simulated_matches_model
from distplan.testing.brute_force import brute_force_optimum, count_candidates, layouts, plans
from distplan.testing.corpus import load_corpus
from distplan.testing.strategies import KIND_A, feasible_plans, problem_and_feasible_plan, problems
from distplan.topologies.topology import DeviceKind
from distplan.workloads.io import graph_from_dict, graph_to_dict

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FP16_ONLY = DeviceKind("half", {"fp16": 5e11}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=5e10)


@FAST
@given(problem_and_feasible_plan(mode=st.sampled_from(["inference", "training"]), replicas=True))
def test_feasible_plans_pass_the_checker(pair):
    problem, plan = pair
    assert plan_violations(problem, plan) == []
    assert plan.microbatches == problem.microbatches and plan.schedule == problem.schedule


@FAST
@given(problems(kinds={"ka": KIND_A, "half": FP16_ONLY}, max_devices=3).flatmap(
    lambda pb: st.tuples(st.just(pb), feasible_plans(pb, replicas=True))))
def test_feasible_plans_respect_what_each_device_runs(pair):
    problem, plan = pair
    assert_feasible(problem, plan)
    for v, k in enumerate(plan.op_stage):
        for d in plan.stages[k].devices:
            assert problem.topology.kind_of(d).supports(plan.op_precision[v])


@FAST
@given(problem_and_feasible_plan(mode=st.sampled_from(["inference", "training"]), schedule=None,
                                 microbatches=st.integers(1, 24), replicas=True))
def test_ideal_simulation_matches_the_model_on_feasible_plans(pair):
    problem, plan = pair
    if plan.schedule == "gpipe":   # no steady state: the identity is stated for 1F1B
        plan = plan.__class__(plan.op_stage, plan.op_precision, plan.stages, plan.microbatches, "1f1b")
    assert_simulated_matches_model(problem, plan)


@FAST
@given(problem_and_feasible_plan(max_ops=3, max_devices=3, max_stages=1, microbatches=4))
def test_a_one_stage_plan_is_never_below_the_brute_force_optimum(pair):
    """A one-stage plan on the first device of a layout lies in the planner's space, so it
    cannot beat the space's optimum; the optimum's plan is feasible."""
    problem, plan = pair
    best = brute_force_optimum(problem)
    assert best.plan is not None and plan_violations(problem, best.plan) == []
    firsts = {lanes[0][0] for _, lanes in layouts(problem)}
    if plan.stages[0].devices[0] in firsts:
        assert best.period_s <= plan_cost(problem, plan).period_s


def test_space_of_a_two_op_chain_on_two_devices_by_hand():
    """r = 1: stages (0,0), (0,1), (1,1); r = 2: both ops on the two-lane stage; x 2^2
    precisions = 16 candidates."""
    inst = load_corpus(["tiny-02-pair-line2"])[0]
    pb = inst.problem()
    assert [name for name, _ in layouts(pb)] == ["natural", "natural/2x1"]
    assert count_candidates(pb) == 16
    stagings = sorted({(p.op_stage, tuple(s.devices for s in p.stages)) for p in plans(pb)})
    assert stagings == [((0, 0), ((0,),)), ((0, 0), ((0, 1),)), ((0, 1), ((0,), (1,))), ((1, 1), ((0,), (1,)))]
    assert brute_force_optimum(pb).period_s == inst.optimum_s


def test_small_tiny_instances_are_reproved_by_brute_force_in_the_fast_suite():
    for inst in load_corpus():
        if inst.proof == "brute-force" and count_candidates(inst.problem()) <= 300:
            r = brute_force_optimum(inst.problem())
            assert r.period_s == inst.optimum_s, inst.name


@settings(max_examples=20, deadline=None)
@given(problems(max_ops=5))
def test_problem_graphs_round_trip_through_the_graph_format(problem):
    assert graph_from_dict(graph_to_dict(problem.graph)) == problem.graph
