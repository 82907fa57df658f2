"""solve.py --compare: the table and the JSON document on a tiny instance, and the
MILP optimum never beaten by SA or random search (same cost model, tiny instances)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distplan.baselines import analytic_throughput, run_baseline
from conftest import chain_graph, line_topology
from distplan.costs import ProblemOptions, build_problem
from distplan.costs.evaluate import plan_cost
from distplan.api.compare import compare_methods, format_comparison, outside_milp_space, plan_shape
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from solve import main as solve_main
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import save_graph


@pytest.fixture
def chain_file(tmp_path):
    p = tmp_path / "chain6.json"
    save_graph(chain_graph(6), p)
    return str(p)


def test_compare_table(chain_file, capsys):
    rc = solve_main(["--workload", chain_file, "--topology", "mcm1x3", "--compare", "random,sa,dp,grid",
                     "--budget", "0.5", "--top-k", "2", "--quiet"])
    out = capsys.readouterr()
    assert rc == 0 and out.err == ""
    lines = out.out.splitlines()
    assert lines[1].split()[:5] == ["method", "samples/s", "vs", "MILP", "wall"]
    assert [l.split()[0] for l in lines[2:8]] == ["milp", "random", "sa", "dp", "grid", "ceiling"]
    assert lines[2].split()[2] == "1.000"
    assert lines[-1].startswith("MILP / best of random,sa: ")


def test_compare_json_and_progress(chain_file, capsys):
    rc = solve_main(["--workload", chain_file, "--topology", "mcm1x3", "--compare", "dp", "--budget", "0.5",
                     "--json"])
    out = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out.out)
    assert [m["method"] for m in doc["methods"]] == ["milp", "dp"]
    milp, dp = doc["methods"]
    assert milp["ratio_to_milp"] == 1.0 and milp["status"] == "optimal"
    assert doc["ceiling_throughput_per_s"] == pytest.approx(1 / doc["milp_bound_s"], rel=1e-12)
    assert dp["ratio_to_milp"] == pytest.approx(dp["throughput_per_s"] / milp["throughput_per_s"])
    assert dp["plan"]["format"] == "distplan-plan" and doc["milp_over_best_search"] is None
    assert "compare: dp" in out.err  # progress on stderr


def test_compare_budget_defaults_to_time_limit_and_errors(chain_file, capsys):
    assert solve_main(["--workload", chain_file, "--topology", "mcm1x2", "--compare", "dp",
                       "--time-limit", "0.5", "--quiet"]) == 0
    assert " 0.5 s per method" in capsys.readouterr().out
    assert solve_main(["--workload", chain_file, "--topology", "mcm1x2", "--compare", "nope", "--quiet"]) == 2
    assert "unknown baseline" in capsys.readouterr().err
    assert solve_main(["--workload", chain_file, "--topology", "mcm1x2", "--compare", "dp", "--budget", "0",
                       "--quiet"]) == 2


def test_plan_shape_and_space():
    one = Plan((0, 1), ("fp16", "fp16"), (Stage((0,)), Stage((1,))), 4, "stream")
    rep = Plan((0, 0), ("fp16", "fp16"), (Stage((0, 1, 2, 3), 2),), 4, "stream")
    lanes = Plan((0, 1), ("fp16", "fp16"), (Stage((0, 2)), Stage((1, 3))), 4, "stream")
    uneven = Plan((0, 1), ("fp16", "fp16"), (Stage((0, 2)), Stage((1,))), 4, "stream")
    assert plan_shape(one) == "2 stages" and not outside_milp_space(one)
    assert plan_shape(rep) == "1 stages x2 replicas tp2" and outside_milp_space(rep)
    assert not outside_milp_space(lanes) and outside_milp_space(uneven)


def test_comparison_ratios_on_hand_instance():
    p = build_problem(chain_graph(4), line_topology(2))
    c = compare_methods(p, ["dp"], 5.0)
    assert c.milp.status == "optimal"
    # two lanes of one device, each running the whole chain at int8: (1+2+3+4) GFLOP / 2 TFLOP/s / 2
    assert c.milp.throughput_per_s == pytest.approx(1 / 2.5e-3, rel=1e-9)
    # the DP partitioner does not replicate: its best is o0-o2 | o3 at int8, a 3 ms period
    assert c.ratio(c.rows[1]) == pytest.approx(2.5e-3 / 3e-3, rel=1e-9)
    assert "ceiling" in format_comparison(c)


@st.composite
def tiny_instances(draw):
    """<= 6 ops (a random DAG over a chain), <= 3 chips in a line; parameters large enough
    that memory sometimes binds (1 MB per chip)."""
    n = draw(st.integers(2, 6))
    ops = tuple(Operator(f"v{i}", "matmul", draw(st.floats(1e8, 5e9)), 0, draw(st.integers(0, 400_000)),
                         draw(st.integers(1, 100_000)), draw(st.floats(0, 1e8))) for i in range(n))
    pairs = {(i, i + 1) for i in range(n - 1)} | draw(st.sets(
        st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]), max_size=3))
    tensors = tuple(Tensor(f"v{a}", f"v{b}", draw(st.integers(1, 10**6))) for a, b in sorted(pairs))
    topo = line_topology(draw(st.integers(2, 3)), bw=draw(st.floats(1e7, 1e10)))
    return Graph("tiny", ops, tensors), topo


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=tiny_instances(), seed=st.integers(0, 5))
def test_sa_and_random_never_beat_the_milp_optimum(inst, seed):
    """Tiny instances, generous budgets, the MILP's own cost model as the scorer: a baseline
    period below the proven optimum would be a bug in one of them."""
    from distplan.model import SolveOptions, solve
    from distplan.testing.brute_force import brute_force_optimum

    g, topo = inst
    p = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=4))  # chips run both
    options = SolveOptions(rel_gap=0.0, time_limit_s=30, top_k=1)
    if brute_force_optimum(p).plan is None:  # memory binds everywhere: the planner must say so
        with pytest.raises(DistplanError, match="memory|fit"):
            solve(p, options)
        return
    solved = solve(p, options)
    assume(solved.status == "optimal")  # a tiny instance, 30 s: a time-out only on an overloaded machine
    for name in ("random", "sa"):
        r = run_baseline(name, p, 5.0, seed=seed, scorer=analytic_throughput, max_candidates=200)
        if r.plan is None:
            continue
        assert plan_cost(p, r.plan).period_s >= solved.objective_s * (1 - 1e-7), name


def test_compare_takes_a_percentage_budget(chain_file, capsys):
    """--sensitivity-budget 10% is parsed once and reaches the MILP and the baselines as a number."""
    assert solve_main(["--workload", chain_file, "--topology", "mcm1x2", "--compare", "dp", "--budget", "2",
                       "--sensitivity-budget", "10%", "--quiet"]) == 0
    assert "ceiling" in capsys.readouterr().out
