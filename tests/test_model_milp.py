"""The MILP against brute force on tiny instances, and its linearisation identity.

Oracle: enumerate every stage assignment (respecting tensor direction) and every
precision assignment of the ops along the same device path, score each feasible plan
(sim.check) with costs.evaluate, and compare the minimum with the MILP optimum.
"""
from __future__ import annotations

import dataclasses
import itertools
import math

import pyomo.environ as pyo
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_cost, plan_latency_s, plan_sensitivity
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.errors import DistplanError
from distplan.model import SolveOptions, solve
from distplan.model.build import ModelSpec, build_model
from distplan.model.extract import assign_plan, make_plan
from distplan.model.heuristic import heuristic_plan
from distplan.topologies.paths import device_paths
from distplan.costs.check import check_plan, plan_violations
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

KINDS = {
    "fast": DeviceKind("fast", {"fp16": 2e12, "int8": 4e12}, 4e6, 1e11, 0.8, 1e-6),
    "slow": DeviceKind("slow", {"fp16": 1e12}, 2e6, 5e10, 0.7, 2e-6),
}


@st.composite
def instances(draw, max_ops: int = 7, max_devices: int = 3, mode: str | None = None,
              max_out: int = 2 * 10**5, max_edge: int = 10**6):
    n = draw(st.integers(1, max_ops))
    ops = tuple(Operator(f"v{i}", draw(st.sampled_from(["matmul", "softmax", "add", "layernorm"])),
                         draw(st.floats(1e6, 1e10)), draw(st.floats(1e6, 2e10)),
                         draw(st.integers(0, 4 * 10**5)), draw(st.integers(0, max_out)),
                         draw(st.floats(0, 1e6)))
                for i in range(n))
    if n >= 2 and draw(st.booleans()):   # a tied weight: the last op reads one an earlier op owns
        owner = draw(st.integers(0, n - 2))
        ops = ops[:-1] + (dataclasses.replace(ops[-1], tied_to=f"v{owner}",
                                              tied_elems=draw(st.integers(0, 10**6))),)
    tensors = []
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=2)):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, max_edge))))
    mode = mode or draw(st.sampled_from(["inference", "inference", "training"]))
    g = Graph("rand", ops, tuple(tensors), mode=mode)
    D = draw(st.integers(1, max_devices))
    kinds = [draw(st.sampled_from(["fast", "fast", "slow"])) for _ in range(D)]
    devs = tuple(Device(f"d{i}", kinds[i]) for i in range(D))
    links = []
    for a in range(D - 1):
        bw, lat = draw(st.floats(1e8, 1e11)), draw(st.sampled_from([0.0, 1e-6]))
        links += [Link(f"d{a}", f"d{a + 1}", bw, lat), Link(f"d{a + 1}", f"d{a}", bw, lat)]
    topo = Topology("line", {k: KINDS[k] for k in set(kinds)}, devs, tuple(links))
    precs = draw(st.sampled_from([("fp16",), ("fp16", "int8")]))
    sched = None if mode == "inference" else draw(st.sampled_from(["1f1b", "gpipe"]))
    mb = draw(st.integers(1, 4))
    return build_problem(g, topo, ProblemOptions(precisions=precs, microbatches=mb, schedule=sched))


def all_plans(problem, path):
    V, K, Q = problem.n_ops, len(path), len(problem.precisions)
    edges = [(int(u), int(v)) for u, v in problem.edges]
    for stage in itertools.product(range(K), repeat=V):
        if any(stage[u] > stage[v] for u, v in edges):
            continue
        for prec in itertools.product(range(Q), repeat=V):
            plan = make_plan(problem, path, stage, prec)
            if not plan_violations(problem, plan):
                yield plan


def brute_force(problem, path, objective="throughput", budget=None, weight=0.0):
    best = math.inf
    for plan in all_plans(problem, path):
        s = plan_sensitivity(problem, plan)
        if budget is not None and s > budget + 1e-9:
            continue
        main = plan_cost(problem, plan).period_s if objective == "throughput" else plan_latency_s(problem, plan)
        best = min(best, main + weight * s)
    return best


def has_plan(problem, path) -> bool:
    """Some plan along ``path`` passes costs.check (stops at the first)."""
    return next(all_plans(problem, path), None) is not None


def first_path(problem):
    return device_paths(problem.topology)[0]


def small(problem) -> bool:
    n = problem.n_devices ** problem.n_ops * len(problem.precisions) ** problem.n_ops
    if n > 300_000:
        event("skipped: too large for brute force")
    return n <= 300_000


SLOW_OK = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.filter_too_much])


def _check_optimum(problem, objective="throughput", budget=None, weight=0.0):
    name, path = first_path(problem)
    want = brute_force(problem, path, objective, budget, weight)
    opts = SolveOptions(objective=objective, sensitivity_budget=budget, sensitivity_weight=weight,
                        top_k=1, rel_gap=0.0, time_limit_s=30, path=name)
    event(f"ops={problem.n_ops} devices={problem.n_devices} precs={len(problem.precisions)} "
          f"{'infeasible' if math.isinf(want) else 'feasible'}")
    if math.isinf(want):
        with pytest.raises(DistplanError):
            solve(problem, opts)
        return
    r = solve(problem, opts)   # brute force found a plan: an error here fails the test
    assert r.status == "optimal"
    assert r.objective_s == pytest.approx(want, rel=1e-6, abs=1e-15)
    plan = r.plans[0]
    check_plan(problem, plan)
    assert plan.predicted["solver_objective"] == pytest.approx(want, rel=1e-6, abs=1e-12)


@SLOW_OK
@given(instances(mode="inference", max_out=1_500_000, max_edge=4 * 10**5).filter(small))
def test_stream_memory_optimum_equals_brute_force(problem):
    """Large outputs, smaller tensors between ops (fused ops send part of what they
    write): which outputs a stage holds twice decides feasibility."""
    _check_optimum(problem)


@SLOW_OK
@given(instances())
def test_throughput_optimum_equals_brute_force(problem):
    assume(small(problem))
    _check_optimum(problem)


@SLOW_OK
@given(instances(max_ops=5))
def test_latency_optimum_equals_brute_force(problem):
    assume(small(problem))
    _check_optimum(problem, objective="latency")


@SLOW_OK
@given(instances(max_ops=5), st.floats(0.0, 1.0), st.floats(0.0, 1e-4))
def test_sensitivity_budget_and_weight_equal_brute_force(problem, frac, weight):
    assume(small(problem))
    top = sum(problem.sensitivity[v].max() for v in range(problem.n_ops))
    _check_optimum(problem, budget=frac * top, weight=weight)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(instances(), instances(mode="inference", max_out=1_500_000, max_edge=4 * 10**5)), st.data())
def test_objective_is_exactly_plan_cost_at_every_integral_point(problem, data):
    """assign_plan writes a plan onto the model: T equals plan_cost's period, latency equals
    plan_latency_s, and every constraint holds iff the plan is feasible (a plan over memory
    breaks a memory row: sent copies and tied weights are counted exactly)."""
    _, path = first_path(problem)
    V, K, Q = problem.n_ops, len(path), len(problem.precisions)
    stage = sorted(data.draw(st.lists(st.integers(0, K - 1), min_size=V, max_size=V)))
    prec = data.draw(st.lists(st.integers(0, Q - 1), min_size=V, max_size=V))
    plan = make_plan(problem, path, stage, prec)
    bad = plan_violations(problem, plan)
    over_memory = bool(bad) and all("MiB but holds" in b for b in bad)
    assume(not bad or over_memory)   # other violations break rows the identity does not cover
    event("over memory" if over_memory else "feasible")
    for objective in ("throughput", "latency"):
        m = build_model(problem, ModelSpec(path=path, objective=objective))
        assign_plan(m, problem, plan)
        if over_memory:
            pass   # an op alone over memory has no cell (model.build.allowed_cells): loads differ
        elif objective == "throughput":
            assert pyo.value(m.T) / m.tscale == pytest.approx(plan_cost(problem, plan).period_s, rel=1e-9, abs=1e-18)
        else:
            assert pyo.value(m.latency) / m.tscale == pytest.approx(plan_latency_s(problem, plan), rel=1e-9, abs=1e-18)
        broken = []
        for c in m.component_data_objects(pyo.Constraint, active=True):
            body = pyo.value(c.body)
            tol = 1e-7 * max(1.0, abs(body))
            if (c.lower is not None and body < pyo.value(c.lower) - tol) or \
                    (c.upper is not None and body > pyo.value(c.upper) + tol):
                broken.append(c.name)
        if over_memory:   # a memory row, or the missing cell's assignment row; the period cuts
            # (period_min/period_avg) bound feasible plans only, so an infeasible one may break them too
            assert broken and all(n.startswith(("mem_cap", "stage_assign", "prec_assign", "period_"))
                                  for n in broken), broken
            assert any(n.startswith(("mem_cap", "stage_assign", "prec_assign")) for n in broken), broken
        else:
            assert not broken, broken


@settings(max_examples=30, deadline=None)
@given(instances())
def test_heuristic_plans_are_feasible(problem):
    _, path = first_path(problem)
    h = heuristic_plan(problem, path)
    if h is not None:
        check_plan(problem, h[0])
