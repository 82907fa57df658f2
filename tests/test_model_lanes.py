"""Replicated pipelines (lanes): layouts, the MILP's exactness on replicated plans, brute
force over every replication factor and layout, the simulator's ideal period, and a
degenerate instance that once crashed the model build."""
from __future__ import annotations

import dataclasses

import itertools
import math

import pyomo.environ as pyo
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.errors import DistplanError
from distplan.model import SolveOptions, solve
from distplan.model.build import ModelSpec, build_model
from distplan.model.downsets import enumerate_downsets, relaxation_bound
from distplan.model.extract import assign_plan, make_plan
from distplan.model.lanes import lane_problem
from distplan.topologies.paths import divisors, lane_layouts
from distplan.costs.check import check_plan, plan_violations
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator

from test_model_milp import instances
from test_model_solve import chain, mesh_topology

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.filter_too_much])


def inference(max_ops: int = 5, max_devices: int = 4):
    return instances(max_ops=max_ops, max_devices=max_devices).filter(lambda pb: not pb.training)


def all_layouts(problem):
    return [(r, name, lanes) for r in divisors(problem.n_devices)
            for name, lanes in lane_layouts(problem.topology, r)]


def layout_plans(problem, lanes):
    """Every feasible plan on ``lanes`` (stage assignments respecting tensor direction x precisions)."""
    V, K, Q = problem.n_ops, len(lanes[0]), len(problem.precisions)
    edges = [(int(u), int(v)) for u, v in problem.edges]
    for stage in itertools.product(range(K), repeat=V):
        if any(stage[u] > stage[v] for u, v in edges):
            continue
        for prec in itertools.product(range(Q), repeat=V):
            plan = make_plan(problem, lanes[0], stage, prec, lanes=lanes)
            if not plan_violations(problem, plan):
                yield plan


def layout_optimum(problem, lanes) -> float:
    return min((plan_cost(problem, p).period_s for p in layout_plans(problem, lanes)), default=math.inf)


def small(problem, limit=20_000) -> bool:
    n = problem.n_devices ** problem.n_ops * len(problem.precisions) ** problem.n_ops
    if n > limit:
        event("skipped: too large for brute force")
    return n <= limit


# --------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("rows,cols", [(4, 4), (2, 4), (3, 2)])
def test_lane_layouts_partition_devices_and_snake_chunks_are_link_disjoint(rows, cols):
    topo = mesh_topology(rows, cols)
    D = rows * cols
    for r in divisors(D):
        layouts = lane_layouts(topo, r)
        assert layouts
        for name, lanes in layouts:
            assert len(lanes) == r and all(len(l) == D // r for l in lanes)
            assert sorted(d for l in lanes for d in l) == list(range(D)), name
        name, lanes = layouts[0]   # the best layout first: one link per boundary, no link shared
        used = [l for lane in lanes for a, b in zip(lane, lane[1:]) for l in topo.route(a, b)]
        assert len(used) == len(set(used)) == r * (D // r - 1), name
    rows4 = dict(lane_layouts(mesh_topology(4, 4), 4))["row-snake/4x4"]
    assert [sorted(l) for l in rows4] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_lane_layouts_r1_are_the_device_paths():
    from distplan.topologies.paths import device_paths
    topo = mesh_topology(2, 3)
    assert [(n, (p,)) for n, p in device_paths(topo)] == lane_layouts(topo, 1)


# --------------------------------------------------------------------------- exactness
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(inference(max_ops=7), st.data())
def test_objective_is_plan_cost_for_replicated_plans(problem, data):
    """A replicated plan written onto the lane model: T equals plan_cost's period (which
    averages over the replica cycle), and every constraint holds for a feasible plan."""
    r, name, lanes = data.draw(st.sampled_from(all_layouts(problem)))
    V, K, Q = problem.n_ops, len(lanes[0]), len(problem.precisions)
    stage = sorted(data.draw(st.lists(st.integers(0, K - 1), min_size=V, max_size=V)))
    prec = data.draw(st.lists(st.integers(0, Q - 1), min_size=V, max_size=V))
    plan = make_plan(problem, lanes[0], stage, prec, lanes=lanes)
    assume(not plan_violations(problem, plan))
    event(f"r={r}")
    m = build_model(problem, ModelSpec(path=lanes[0], lanes=lanes))
    assign_plan(m, problem, plan)
    assert pyo.value(m.T) / m.tscale == pytest.approx(plan_cost(problem, plan).period_s, rel=1e-9, abs=1e-18)
    for c in m.component_data_objects(pyo.Constraint, active=True):
        body = pyo.value(c.body)
        tol = 1e-7 * max(1.0, abs(body))
        assert c.lower is None or body >= pyo.value(c.lower) - tol, c.name
        assert c.upper is None or body <= pyo.value(c.upper) + tol, c.name
    # the surrogate's relaxation bound along lane 0 never exceeds the plan's period
    mat = enumerate_downsets(problem)
    assert relaxation_bound(lane_problem(problem, r), lanes[0], mat) <= \
        plan_cost(problem, plan).period_s * (1 + 1e-9)


@SETTINGS
@given(inference())
def test_each_layout_optimum_equals_brute_force(problem):
    assume(small(problem))
    for r, name, lanes in all_layouts(problem):
        want = layout_optimum(problem, lanes)
        opts = SolveOptions(top_k=1, rel_gap=0.0, time_limit_s=30, path=name)
        if math.isinf(want):
            with pytest.raises(DistplanError):
                solve(problem, opts)
            continue
        res = solve(problem, opts)
        assert res.status == "optimal" and res.replicas == r
        assert res.objective_s == pytest.approx(want, rel=1e-6, abs=1e-15), name
        assert res.bound_s <= res.objective_s * (1 + 1e-9)
        check_plan(problem, res.plans[0])
        assert res.plans[0].stages[0].replicas == r


@SETTINGS
@given(inference())
def test_default_solve_explores_every_replication_factor(problem):
    """The default solve's optimum is the best, over r, of the brute-force optimum of the
    layout it explored for r; no plan on any layout beats... its bound."""
    assume(small(problem))
    best = {name: layout_optimum(problem, lanes) for _, name, lanes in all_layouts(problem)}
    opts = SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=30)
    if all(math.isinf(v) for v in best.values()):   # no layout holds a plan: the solve must say so
        with pytest.raises(DistplanError):
            solve(problem, opts)
        return
    res = solve(problem, opts)
    assert {e["replicas"] for e in res.explored} == set(divisors(problem.n_devices))
    want = min(best[e["layout"]] for e in res.explored)
    event(f"winner r={res.replicas}")
    assert res.status == "optimal"
    assert res.objective_s == pytest.approx(want, rel=1e-6, abs=1e-15)
    assert res.bound_s <= want * (1 + 1e-9)
    assert res.bound_s == pytest.approx(res.objective_s, rel=1e-6, abs=1e-15)
    assert res.objective_s >= min(best.values()) * (1 - 1e-9)   # nothing beats the true optimum
    for p in res.plans:
        check_plan(problem, p)
        assert p.predicted["milp_period_s"] == pytest.approx(plan_cost(problem, p).period_s, rel=1e-12)


def test_replication_pays_on_a_compute_bound_mesh():
    """12 equal ops on a 2x2 mesh of roomy chips: 4 lanes of 1 stage beat 1 lane of 4 stages
    (no transfers at all); the bound is proven over r in {1, 2, 4}."""
    big = DeviceKind("chip", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e9,
                     mem_bw_bytes_per_s=1e11, efficiency=1.0, launch_overhead_s=1e-6)
    pb = build_problem(chain(12, flops=lambda i: 1e8), mesh_topology(2, 2, big),
                       ProblemOptions(precisions=("fp16",)))
    res = solve(pb, SolveOptions(top_k=3, rel_gap=0.0, time_limit_s=30))
    assert res.replicas == 4 and res.status == "optimal"
    t_op = pb.op_time_s(0, 0, 0)
    assert res.objective_s == pytest.approx(12 * t_op / 4, rel=1e-9)
    assert res.bound_s == pytest.approx(res.objective_s, rel=1e-9)
    assert sorted({e["replicas"] for e in res.explored}) == [1, 2, 4]   # every layout of each r
    for p in res.plans:
        check_plan(pb, p)


def test_replicas_option_and_latency_stay_single_lane():
    pb = build_problem(chain(6), mesh_topology(2, 2), ProblemOptions(precisions=("fp16",)))
    assert solve(pb, SolveOptions(replicas=2, top_k=1)).replicas == 2
    assert solve(pb, SolveOptions(objective="latency", top_k=1)).replicas == 1
    with pytest.raises(DistplanError, match="replicas 3 does not divide"):
        solve(pb, SolveOptions(replicas=3))
    with pytest.raises(DistplanError, match="throughput"):
        solve(pb, SolveOptions(replicas=2, objective="latency"))


# --------------------------------------------------------------------------- simulator
sim = pytest.importorskip("distplan.sim.simulate")


def _sim_matches(pb, replicas):
    from distplan.sim.options import SimOptions
    pb = build_problem(pb.graph, pb.topology, dataclasses.replace(pb.options, microbatches=24))
    assume(pb.n_devices % replicas == 0)
    opts = SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=20, replicas=replicas)
    if not any(next(layout_plans(pb, lanes), None) is not None for _, lanes in lane_layouts(pb.topology, replicas)):
        event("no plan")   # no layout of r lanes holds a plan: the solve must say so
        with pytest.raises(DistplanError):
            solve(pb, opts)
        return
    res = solve(pb, opts)
    for p in res.plans:
        assert p.stages[0].replicas == replicas
        s = sim.simulate(pb, p, SimOptions(ideal=True))
        assert s.period_s == pytest.approx(p.predicted["milp_period_s"], rel=1e-6)


def test_simulated_ideal_period_equals_milp_period_two_lanes_chain():
    from distplan.sim.options import SimOptions
    pb = build_problem(chain(10, flops=lambda i: 1e8 * (1 + (i * 7) % 5)), mesh_topology(2, 2),
                       ProblemOptions(precisions=("fp16", "int8"), microbatches=24))
    res = solve(pb, SolveOptions(top_k=3, rel_gap=0.0, time_limit_s=20, replicas=2))
    for p in res.plans:
        assert p.stages[0].replicas == 2
        assert sim.simulate(pb, p, SimOptions(ideal=True)).period_s == pytest.approx(
            p.predicted["milp_period_s"], rel=1e-6)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.filter_too_much])
@given(inference(max_ops=6).filter(lambda pb: pb.n_devices % 2 == 0))
def test_simulated_ideal_period_equals_milp_period_two_lanes(pb):
    _sim_matches(pb, 2)


def _independent_ops_on_one_replicated_stage(n_devices: int):
    k = DeviceKind("fast", {"fp16": 2e12}, 4e6, 1e11, 0.8, 1e-6)
    ops = (Operator("a", "matmul", 1e6, 0, 0, 0, 0.0), Operator("b", "matmul", 1e8, 0, 0, 0, 0.0))
    devs = tuple(Device(f"d{i}", "fast") for i in range(n_devices))
    links = tuple(Link(f"d{i}", f"d{i + 1}", 1e8) for i in range(n_devices - 1)) + \
        tuple(Link(f"d{i + 1}", f"d{i}", 1e8) for i in range(n_devices - 1))
    return build_problem(Graph("g", ops, ()), Topology("line", {"fast": k}, devs, links),
                         ProblemOptions(precisions=("fp16",), microbatches=24))


@pytest.mark.parametrize("n", [3, 4])
def test_simulated_ideal_period_equals_milp_period_three_or_more_lanes(n):
    """Regression: stream back-pressure once made microbatch m + 2 wait for microbatch m's
    buffer on another lane's device, chaining independent lanes."""
    from distplan.costs.evaluate import plan_cost as cost
    from distplan.core.plan import Plan, Stage
    from distplan.sim.options import SimOptions
    pb = _independent_ops_on_one_replicated_stage(n)
    p = Plan((0, 0), ("fp16", "fp16"), (Stage(tuple(range(n))),), 24, "stream")
    assert cost(pb, p).period_s == pytest.approx((pb.op_time_s(0, 0, 0) + pb.op_time_s(1, 0, 0)) / n, rel=1e-12)
    assert sim.simulate(pb, p, SimOptions(ideal=True)).period_s == pytest.approx(cost(pb, p).period_s, rel=1e-6)


# --------------------------------------------------------------------------- regressions
def test_degenerate_instance_with_constant_constraints_builds_and_solves():
    """One op of 0 params and 501 output elements; a device kind without fp16/int8 (so its
    stage has no allowed cell and its memory row has no variable); 1000 B per device.
    Pyomo once raised InvalidConstraintError ("mem_cap[0]" evaluated to True)."""
    a = DeviceKind("a", {"fp16": 1e12, "int8": 2e12}, 1000, 1e11, 1.0, 1e-6)
    b = DeviceKind("b", {"fp32": 1e12}, 1000, 1e11, 1.0, 1e-6)
    g = Graph("g", (Operator("v0", "matmul", 1e6, 0.0, 0, 501, 0.0),), ())
    for order in (("b", "a"), ("a", "b")):
        devs = (Device("d0", order[0]), Device("d1", order[1]))
        topo = Topology("t", {"a": a, "b": b}, devs, (Link("d0", "d1", 1e9), Link("d1", "d0", 1e9)))
        pb = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=1))
        m = build_model(pb, ModelSpec(path=(0, 1)))
        assert (0 if order[0] == "b" else 1) not in m.mem_cap   # no variable: skipped, not a crash
        res = solve(pb, SolveOptions(time_limit_s=10, top_k=2, rel_gap=0.0))
        assert res.status == "optimal"
        want = pb.op_time_s(0, pb.q_index("int8"), pb.kind_names.index("a"))
        assert res.objective_s == pytest.approx(want, rel=1e-9)
        for p in res.plans:
            check_plan(pb, p)
            assert p.op_precision == ("int8",)
