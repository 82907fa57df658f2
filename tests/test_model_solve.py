"""model.solve end to end: infeasible inputs, time limits, top-K, and the simulator's ideal
period reproducing the MILP objective."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings

from distplan.costs.evaluate import plan_cost, plan_sensitivity
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.errors import DistplanError
from distplan.model import SolveOptions, solve
from distplan.topologies.paths import device_paths
from distplan.costs.check import check_plan
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

from test_model_milp import has_plan, instances

CHIP = DeviceKind("chip", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e6,
                  mem_bw_bytes_per_s=1e11, efficiency=1.0, launch_overhead_s=1e-6)


def mesh_topology(rows: int, cols: int, chip: DeviceKind = CHIP) -> Topology:
    devs = tuple(Device(f"c{r}_{c}", chip.name, pos=(r, c)) for r in range(rows) for c in range(cols))
    links = []
    for r in range(rows):
        for c in range(cols):
            for r2, c2 in ((r, c + 1), (r + 1, c)):
                if r2 < rows and c2 < cols:
                    links += [Link(f"c{r}_{c}", f"c{r2}_{c2}", 1e9), Link(f"c{r2}_{c2}", f"c{r}_{c}", 1e9)]
    return Topology("mesh", {chip.name: chip}, devs, tuple(links), routing="xy")


def chain(n: int, params: int = 1000, flops=lambda i: 1e8 * (1 + i % 3)) -> Graph:
    ops = tuple(Operator(f"o{i}", "matmul", flops(i), 0.0, params, 1000, 1e4) for i in range(n))
    return Graph("chain", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 1000) for i in range(n - 1)))


def problem(n=12, rows=2, cols=2, **kw):
    return build_problem(chain(n, **kw), mesh_topology(rows, cols), ProblemOptions(precisions=("fp16", "int8")))


def test_op_too_big_for_any_device_names_op_and_shortfall():
    ops = (Operator("small", "matmul", 1e6, 0, 10, 10, 10), Operator("huge", "embedding", 1e6, 0, 3_000_000, 10, 10))
    g = Graph("g", ops, (Tensor("small", "huge", 10),))
    pb = build_problem(g, mesh_topology(1, 2), ProblemOptions(precisions=("fp16", "int8")))
    with pytest.raises(DistplanError, match=r"op 'huge'.*2\.86 MiB.*int8.*short by 1\.91 MiB"):
        solve(pb, SolveOptions(time_limit_s=5))


def test_sensitivity_budget_below_minimum_reports_minimum():
    int8_only = DeviceKind("i8", {"int8": 2e12}, 1e6, 1e11)
    pb = build_problem(chain(4), mesh_topology(1, 2, int8_only), ProblemOptions(precisions=("fp16", "int8")))
    lo = float(pb.sensitivity[:, 1].sum())
    assert lo > 0  # no device runs fp16, so every op carries int8's sensitivity
    with pytest.raises(DistplanError, match=r"sensitivity budget .* below the minimum .*" + f"{lo:.6g}"):
        solve(pb, SolveOptions(sensitivity_budget=lo / 2, time_limit_s=5))


def test_total_memory_shortfall_raises_not_empty_plan():
    # each op fits alone, but 4 ops of 0.6 MB params cannot share 2 devices of 1 MB
    pb = build_problem(chain(4, params=600_000), mesh_topology(1, 2), ProblemOptions(precisions=("int8",)))
    with pytest.raises(DistplanError, match="memory"):
        solve(pb, SolveOptions(time_limit_s=10))


def test_time_limit_returns_best_plan_status_and_gap():
    pb = problem(n=40, rows=2, cols=3, flops=lambda i: 1e8 * (1 + (i * 7) % 5))
    r = solve(pb, SolveOptions(time_limit_s=0.5, top_k=1, rel_gap=0.0))
    assert r.plans and r.status in ("optimal", "time_limit")
    check_plan(pb, r.plans[0])
    assert r.objective_s == pytest.approx(plan_cost(pb, r.plans[0]).period_s, rel=1e-9)
    assert r.bound_s <= r.objective_s * (1 + 1e-9)
    assert 0 <= r.gap <= 1


def test_top_k_distinct_sorted_and_feasible():
    pb = problem(n=10)
    r = solve(pb, SolveOptions(top_k=4, rel_gap=0.0, time_limit_s=30))
    assert len(r.plans) == 4
    keys = {(p.op_stage, p.op_precision) for p in r.plans}
    assert len(keys) == 4
    objs = [p.predicted["milp_objective"] for p in r.plans]
    assert objs == sorted(objs)
    for p in r.plans:
        check_plan(pb, p)
        assert p.predicted["milp_period_s"] == pytest.approx(plan_cost(pb, p).period_s, rel=1e-12)
    assert r.objective_s == objs[0]


def test_sensitivity_budget_respected():
    pb = problem(n=8)
    top = float(pb.sensitivity.max(axis=1).sum())
    r = solve(pb, SolveOptions(sensitivity_budget=top / 3, top_k=2, rel_gap=0.0, time_limit_s=30))
    for p in r.plans:
        assert plan_sensitivity(pb, p) <= top / 3 * (1 + 1e-9)


def test_paths_are_permutations_with_neighbouring_steps():
    topo = mesh_topology(3, 4)
    for name, p in device_paths(topo):
        assert sorted(p) == list(range(12)), name
        if name in ("row-snake", "col-snake", "spiral"):
            for a, b in zip(p, p[1:]):
                assert len(topo.route(a, b)) == 1, name


def test_progress_callback_and_result_fields():
    lines = []
    pb = problem(n=6)
    r = solve(pb, SolveOptions(progress=lines.append, top_k=1))
    assert lines and any("path" in s for s in lines)
    assert r.n_binaries > 0 and r.n_constraints > 0 and r.build_seconds >= 0 and r.path_name


sim = pytest.importorskip("distplan.sim.simulate")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(max_ops=6).filter(lambda pb: not pb.training))
def test_simulated_ideal_period_equals_milp_objective(pb):
    """With enough microbatches for a steady state (stream / 1F1B), the ideal simulator's
    period equals the MILP objective of every returned plan."""
    from distplan.sim.options import SimOptions
    pb = build_problem(pb.graph, pb.topology, ProblemOptions(
        precisions=pb.precisions, microbatches=24, schedule="1f1b" if pb.training else "stream"))
    name, path = device_paths(pb.topology)[0]
    opts = SolveOptions(top_k=2, rel_gap=0.0, time_limit_s=20, path=name)
    if not has_plan(pb, path):   # no plan fits along the path: the solve must say so
        event("no plan")
        with pytest.raises(DistplanError):
            solve(pb, opts)
        return
    r = solve(pb, opts)
    best = r.plans[0].predicted
    assert r.objective_s == pytest.approx(best["milp_period_s"], rel=1e-6)
    if "solver_objective" in best:  # absent when the warm start was certified and HiGHS skipped
        assert best["solver_objective"] == pytest.approx(best["milp_period_s"], rel=1e-6)
    for p in r.plans:
        s = sim.simulate(pb, p, SimOptions(ideal=True))
        assert s.steady
        assert s.period_s == pytest.approx(p.predicted["milp_period_s"], rel=1e-6)


def test_simulated_ideal_period_training_disconnected_ops():
    """Regression: the simulator once reported 3.85 ms for this 1F1B plan whose stage 1 has
    4.49 ms of work per microbatch (a periodic stretch measured before the run settled)."""
    from distplan.sim.options import SimOptions
    ops = (Operator("v0", "matmul", 1e6, 1e6), Operator("v1", "matmul", 1e6, 1e6),
           Operator("v2", "matmul", 1e6, 7185277958.0), Operator("v3", "matmul", 1e6, 6153628725.0))
    g = Graph("r", ops, (Tensor("v0", "v1", 0),), mode="training")
    kind = DeviceKind("fast", {"fp16": 2e12}, 4e6, 1e11, 0.8, 1e-6)
    devs = tuple(Device(f"d{i}", "fast") for i in range(3))
    links = (Link("d0", "d1", 1e8), Link("d1", "d0", 1e8), Link("d1", "d2", 1e8), Link("d2", "d1", 1e8))
    pb = build_problem(g, Topology("line", {"fast": kind}, devs, links),
                       ProblemOptions(precisions=("fp16",), microbatches=24, schedule="1f1b"))
    r = solve(pb, SolveOptions(top_k=2, rel_gap=0.0, path="natural"))
    for p in r.plans:
        assert sim.simulate(pb, p, SimOptions(ideal=True)).period_s == pytest.approx(
            p.predicted["milp_period_s"], rel=1e-6)
