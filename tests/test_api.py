"""The Python API: problem -> solve -> SolveReport -> simulate / check / compare, on a
tiny chain whose optimum is worked out by hand."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import distplan
from conftest import chain_graph, line_topology
from distplan.core.plan import Plan, Stage
from distplan.costs.check import InfeasiblePlan


@pytest.fixture(scope="module")
def tiny():
    # 4 chained matmuls of 1..4 GFLOP on 2 chips of 2 TOPS int8 (memory time 1e-7 s per
    # op is under the roofline): a 2-stage pipeline is at best {o0,o1,o2} | {o3}: 3 ms;
    # two lanes of the whole chain run 10 GFLOP / 2e12 = 5 ms per microbatch each,
    # a period of 2.5 ms.
    return distplan.problem(chain_graph(4), line_topology(2, bw=1e12), precisions="fp16,int8", microbatches=4)


@pytest.fixture(scope="module")
def report(tiny):
    return distplan.solve(tiny, distplan.SolveOptions(time_limit_s=20, top_k=3))


def test_problem_from_names_and_objects(tiny):
    p = distplan.problem("mlp-xs", "mcm2x2")
    assert p.n_devices == 4 and p.graph.name.startswith("mlp")
    assert tiny.precisions == ("fp16", "int8") and tiny.microbatches == 4
    with pytest.raises(distplan.DistplanError, match="workload must be"):
        distplan.problem(42, "mcm2x2")
    with pytest.raises(distplan.DistplanError, match="not to a Graph"):
        distplan.problem(chain_graph(2), "mcm2x2", seq_len=64)


def test_solve_ranks_simulated_plans(report, tiny):
    assert isinstance(report, distplan.SolveReport)
    assert report.solver.status == "optimal"
    best = report.best
    assert best.rank == 1 and best.plan.op_stage == (0, 0, 0, 0) and best.plan.stages[0].replicas == 2
    assert best.plan.op_precision == ("int8",) * 4
    assert best.sim.period_s == pytest.approx(2.5e-3, rel=1e-12)
    assert report.solver.bound_s == pytest.approx(2.5e-3, rel=1e-9)
    thr = [r.sim.throughput_per_s for r in report.plans]
    assert thr == sorted(thr, reverse=True)
    assert best.plan.predicted["sim_period_s"] == best.sim.period_s


def test_report_table_and_json(report):
    table = report.table()
    assert "chain (inference) on line2" in table and "solver: optimal" in table
    doc = report.to_json()
    json.dumps(doc)  # serialisable as it is
    assert doc["solver"]["status"] == "optimal" and doc["plans"][0]["differs_from_winner"] == "winner"
    assert all(p["differs_from_winner"] not in ("", "same assignment") for p in doc["plans"][1:])


def test_plan_difference_names_what_changed(tiny):
    a = Plan((0, 0, 0, 1), ("int8",) * 4, (Stage((0,)), Stage((1,))), 4, "stream")
    b = Plan((0, 0, 1, 1), ("int8", "int8", "int8", "fp16"), (Stage((0,)), Stage((1,))), 4, "stream")
    assert distplan.api.plan_difference(tiny, a, b) == "1 op moved (o2 0->1); 1 op at another precision (o3 fp16)"
    assert distplan.api.plan_difference(tiny, a, a) == "winner"


def test_plans_are_frozen(report):
    plan = report.best.plan
    with pytest.raises(TypeError):
        plan.predicted["x"] = 1  # type: ignore[index]
    other = plan.with_predicted(x=1.0)
    assert other.predicted["x"] == 1.0 and "x" not in plan.predicted and other == plan


def test_simulate_and_check(tiny, report):
    res = distplan.simulate(tiny, report.best.plan, distplan.SimOptions(ideal=True))
    assert res.period_s == pytest.approx(report.best.milp_period_s, rel=1e-9)
    bad = Plan((1, 0, 0, 0), ("int8",) * 4, (Stage((0,)), Stage((1,))), 4, "stream")
    with pytest.raises(InfeasiblePlan, match="flows from stage 1 back to stage 0"):
        distplan.check(tiny, bad)
    with pytest.raises(InfeasiblePlan):
        distplan.simulate(tiny, bad)


def test_write_plan_round_trips(report, tiny, tmp_path):
    report.write_plan(tmp_path / "p.json")
    again, problem = distplan.load_plan(tmp_path / "p.json")
    assert again == report.best.plan
    assert problem.graph == tiny.graph and problem.topology == tiny.topology
    assert problem.precisions == tiny.precisions and problem.microbatches == tiny.microbatches


def test_compare_shares_the_pipeline(tiny):
    c = distplan.compare(tiny, ("dp",), budget_s=5)
    assert [r.method for r in c.rows] == ["milp", "dp"]
    assert c.milp.throughput_per_s >= c.rows[1].throughput_per_s * (1 - 1e-9)
    assert "ceiling" in c.table() and c.to_json()["methods"][0]["method"] == "milp"


def test_import_distplan_core_is_light():
    code = ("import sys, distplan, distplan.core; "
            "print(any(m.startswith(('pyomo', 'highspy', 'distplan.model')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def _overflowing():
    """a -> b -> c on three chips of 7 MB: the checker's bound is 6 MB on b's device (b's
    output, its older copy waiting to be sent, one received tensor of a). a and its link
    are fast, b (1 ms) is slow and b's 2 MB output takes 1.11 ms to c, the bottleneck.
    The stream's flow control keeps a's tensors from queueing at b (they did: 30 MB),
    but a's next tensor (0.2 ms) cannot arrive while b runs unless b's device keeps two
    of them (b alone would take 1.2 ms a microbatch): 2 x 2 MB received + b's output and
    its older copy waiting for the slow link, 8 MB in simulation."""
    from distplan.topologies.topology import Device, DeviceKind, Link, Topology
    from distplan.workloads.graph import Graph, Operator, Tensor
    E = 10**6
    k = DeviceKind("c", {"fp16": 1e12}, mem_capacity_bytes=7e6, mem_bw_bytes_per_s=1e12, efficiency=1.0)
    topo = Topology("t3", {"c": k}, tuple(Device(f"d{i}", "c") for i in range(3)),
                    (Link("d0", "d1", 1e10), Link("d1", "d0", 1e10), Link("d1", "d2", 1.8e9), Link("d2", "d1", 1.8e9)))
    g = Graph("g", (Operator("a", "matmul", 1e6, 0, 0, E, 0), Operator("b", "matmul", 1e9, 0, 0, E, 0),
                    Operator("c", "add", 1e6, 0, 0, 10, 0)), (Tensor("a", "b", E), Tensor("b", "c", E)))
    p = distplan.problem(g, topo, precisions="fp16", microbatches=16)
    return p, Plan((0, 1, 2), ("fp16",) * 3, (Stage((0,)), Stage((1,)), Stage((2,))), 16, "stream")


def test_a_plan_overflowing_in_simulation_is_not_ranked():
    p, plan = _overflowing()
    distplan.check(p, plan)  # the analytic bound fits ...
    ranked, dropped = distplan.api.rank_plans(p, [plan])
    assert ranked == () and len(dropped) == 1
    assert "device d1 peaks at 7.63 MiB in the realistic simulation" in dropped[0][1]


def test_replay_of_an_overflowing_plan_says_so(tmp_path):
    p, plan = _overflowing()
    distplan.save_plan(plan, p, tmp_path / "p.json")
    out = subprocess.run([sys.executable, "-m", "distplan.sim", str(tmp_path / "p.json")], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "period" in out.stdout
    assert out.stderr.startswith("error: the plan does not fit: device d1 peaks at 7.63 MiB")


def test_a_coarse_plan_is_rechecked_against_the_budget_on_the_fine_graph(tiny, report):
    plan = report.best.plan
    s = plan.predicted["sensitivity"]
    ranked, dropped = distplan.api.rank_plans(tiny, [plan], sensitivity_budget=s * 0.99)
    assert ranked == () and "exceeds the budget" in dropped[0][1]
    ranked, dropped = distplan.api.rank_plans(tiny, [plan], sensitivity_budget=s)
    assert len(ranked) == 1 and dropped == ()


def test_load_plan_takes_the_problem_as_the_readme_documents(tmp_path):
    # load_plan(path, problem) blamed the file ("malformed problem block (AttributeError ...)")
    p = distplan.problem("mlp-xs", "mcm2x2")
    f = tmp_path / "plan.json"
    distplan.solve(p, distplan.SolveOptions(time_limit_s=20, top_k=1)).write_plan(f)
    plan, back = distplan.load_plan(f, p)
    assert back is p and distplan.simulate(p, plan).throughput_per_s > 0
    with pytest.raises(distplan.DistplanError, match="another topology"):
        distplan.load_plan(f, distplan.problem("mlp-xs", "mcm4x4"))
