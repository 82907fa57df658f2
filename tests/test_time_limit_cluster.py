"""The time limit in the cluster plan space and in the ranking (issue 13's contract:
"--time-limit bounds the whole run, every phase checks the clock, and the output says
what was cut short"). gpt3-175b on a100x1024 at --time-limit 30 took 38-63 s: one
cluster point's estimate (hierarchical, overlapped buckets timed transfer by transfer)
ran 7 s past the search's deadline, and the ranking simulated a plan forecast at 74 s.

Tiny instances, no wall-time targets (those are bench/'s): the clock is made to expire
by a slow fake estimate or a forecast patched high.
"""
from __future__ import annotations

import json
import time

import pytest

import distplan
import distplan.api.pipeline as pipeline
import distplan.model.cluster as cluster
from distplan.api.problem import problem as make_problem
from distplan.core.errors import TimeUp
from distplan.costs.iteration import estimate_iteration, estimate_transfers
from distplan.model import SolveOptions
from distplan.sim.forecast import reduction_hops
from distplan.sim.program import build_program
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster


def _cluster_problem(M: int = 4):
    """gpt3-256x2x4 on 2 nodes of 2 A100: dp 2 rings span nodes, so every option
    (flat / hierarchical, overlapped or not) is in the space."""
    topo = rail_cluster("tiny2x2", 2, 2, K.A100, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                        K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem("gpt3-256x2x4", topo, batch_size=1, seq_len=64, mode="training", precisions=("bf16",),
                        microbatches=M)


def test_estimate_stops_at_its_deadline():
    """The transfer-by-transfer timing of overlapped buckets looks at the clock."""
    p = _cluster_problem()
    space = cluster._Space(p, "bf16")
    pt = cluster.ClusterPoint(4, 1, 1, "none", 0, False)
    plan = cluster._plan(p, space, pt, [0] * len(space.units), "hierarchical", True)
    assert estimate_transfers(p, plan) > 0
    with pytest.raises(TimeUp):
        estimate_iteration(p, plan, deadline_s=time.perf_counter() - 1.0)
    assert estimate_iteration(p, plan, deadline_s=time.perf_counter() + 60).iteration_s == \
        estimate_iteration(p, plan).iteration_s


def test_search_skips_options_whose_forecast_does_not_fit(monkeypatch):
    """Forecasts above any time left: the overlapped options are not estimated, the
    result says so, and the bound still holds over them."""
    p = _cluster_problem()
    full = cluster.plan_cluster(p, top_k=3)
    assert any(c.plan.overlap_grad_reduce for c in full.plans)   # they matter here
    monkeypatch.setattr(cluster, "ESTIMATE_S_PER_TRANSFER", 1e6)
    r = cluster.plan_cluster(p, top_k=3, time_limit_s=60)
    assert r.plans and not any(c.plan.overlap_grad_reduce for c in r.plans)
    assert any("gradient-reduction option" in c and "not estimated (forecast up to" in c for c in r.cut_short), \
        r.cut_short
    assert r.bound_s <= full.plans[0].iteration_s * (1 + 1e-12)


def test_search_stops_mid_point_when_the_deadline_passes(monkeypatch):
    """An estimate that outlasts the deadline: the point's other options are skipped
    (not run past the deadline), the search stops, the first plan is kept, and the bound
    covers what was left."""
    p = _cluster_problem()
    full = cluster.plan_cluster(p, top_k=3)
    calls = []
    real = cluster.estimate_iteration

    def slow(problem, plan, deadline_s=float("inf"), **kw):
        calls.append(plan)
        time.sleep(0.4)
        return real(problem, plan, deadline_s, **kw)

    monkeypatch.setattr(cluster, "estimate_iteration", slow)
    r = cluster.plan_cluster(p, top_k=3, deadline=time.perf_counter() + 0.2)
    assert len(calls) == 1 and len(r.plans) == 1   # the cheapest option of the first point, nothing after
    assert any("not estimated" in c for c in r.cut_short), r.cut_short
    assert any("cluster points not visited" in c for c in r.cut_short), r.cut_short
    assert r.bound_s <= full.plans[0].iteration_s * (1 + 1e-12)
    assert r.bound_s <= r.plans[0].iteration_s


def _no_simulation(monkeypatch):
    """Every forecast far above the time left, and a simulator that must not run."""
    def never(*a, **kw):
        raise AssertionError("simulated a plan whose forecast did not fit")

    monkeypatch.setattr(pipeline, "expected_sim_s", lambda *a, **kw: 1e6)
    monkeypatch.setattr(pipeline, "sim_run", never)


def test_ranking_skips_simulation_when_no_forecast_fits(monkeypatch):
    _no_simulation(monkeypatch)
    rep = distplan.solve(distplan.api.problem("mlp-xs", "mcm2x2"), SolveOptions(time_limit_s=5, top_k=3))
    assert rep.plans and not any(r.simulated for r in rep.plans)
    assert any("simulation skipped: forecast 1000000.0 s >" in c for c in rep.cut_short), rep.cut_short
    table = rep.table()
    assert "not simulated" in table and "simulation skipped" in table
    doc = json.loads(json.dumps(rep.to_json()))
    row = doc["plans"][0]
    assert row["simulated"] is False and row["sim_period_s"] is None and row["throughput_per_s"] is None
    assert row["milp_period_s"] > 0 and row["plan"]
    assert any("simulation skipped" in c for c in doc["solver"]["cut_short"])


def test_cluster_ranking_reports_model_figures_when_unsimulated(monkeypatch, tmp_path):
    p = _cluster_problem()
    _no_simulation(monkeypatch)
    rep = distplan.solve(p, SolveOptions(time_limit_s=30, top_k=2))
    assert rep.solver.path_name == "megatron" and not rep.best.simulated
    table = rep.table()
    assert "ranked by the analytic iteration (not simulated)" in table
    assert "samples per step" in table and "simulation skipped" in table
    row = rep.to_json()["plans"][0]
    assert row["simulated"] is False and row["iteration_s"] is None and row["model_iteration_s"] > 0
    rep.write_plan(tmp_path / "plan.json")   # the plan itself is whole
    with pytest.raises(distplan.DistplanError, match="not simulated"):
        rep.write_trace(tmp_path / "trace.json")


def test_cli_prints_an_unsimulated_winner(monkeypatch, tmp_path, capsys):
    """--json and --trace with a winner the time limit left unsimulated: exit 0, the
    JSON says so, the trace is not written and stderr says why."""
    from distplan.cli.main import main

    _no_simulation(monkeypatch)
    rc = main(["--workload", "mlp-xs", "--topology", "mcm2x2", "--time-limit", "5", "--json", "--quiet",
               "--plan-out", str(tmp_path / "plan.json"), "--trace", str(tmp_path / "trace.json")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out)["plans"][0]["simulated"] is False
    assert (tmp_path / "plan.json").exists() and not (tmp_path / "trace.json").exists()
    assert "unsimulated" in out.err


@pytest.mark.parametrize("allreduce,overlap", [("ring", True), ("hierarchical", True), ("hierarchical", False)])
def test_forecast_counts_the_reduction_hops_the_simulator_builds(allreduce, overlap):
    """The ranking's forecast counts the gradient reduction's link hops: exactly the link
    nodes the simulator builds for it (every replica's: the program is built without the
    symmetry reduction; with it, tests/test_sim_symmetry_nodes.py)."""
    p = _cluster_problem()
    space = cluster._Space(p, "bf16")
    plan = cluster._plan(p, space, cluster.ClusterPoint(4, 1, 1, "none", 0, False), [0] * len(space.units),
                         allreduce, overlap)
    prog = build_program(p, plan)
    link_nodes = sum(1 for s in prog.x_server if s >= prog.D)
    assert reduction_hops(p, plan) == link_nodes > 0
