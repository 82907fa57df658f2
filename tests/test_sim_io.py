"""Simulator I/O: plan JSON round trip, the checker's messages, the trace file and the
``python -m distplan.sim`` replay command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import write_unreadable

from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.plan import Plan, Stage, plan_from_dict, plan_to_dict
from distplan.costs.plan_file import load_plan_file, save_plan
from distplan.sim import SimOptions, simulate
from distplan.costs.check import InfeasiblePlan, check_plan, plan_violations
from distplan.sim.trace import chrome_trace, write_chrome_trace
from test_sim_exact import chain, pipeline_plan, run, topo_line
from distplan.workloads.zoo import get_workload
from distplan.topologies.presets import get_topology

ROOT = Path(__file__).resolve().parents[1]


def test_plan_json_round_trip_replays_identically(tmp_path):
    g = chain([1.0, 2.0, 1.0], elems=[1000, 2000])
    topo = topo_line(3)
    plan = Plan((0, 1, 2), ("fp16", "int8", "fp16"), (Stage((0,)), Stage((1,)), Stage((2,))), 8, "stream",
                predicted={"milp_period_s": 2.0})
    r, pb = run(g, topo, plan)
    save_plan(plan, pb, tmp_path / "p.json")
    back = plan_from_dict(json.loads((tmp_path / "p.json").read_text()), pb)
    assert back == plan and back.predicted == plan.predicted
    r2 = simulate(pb, back)
    assert r2.makespan_s == r.makespan_s and np.array_equal(r2.microbatch_done_s, r.microbatch_done_s)


def test_explicit_order_round_trips():
    g = chain([1.0, 1.0])
    order = {0: ((0, 0, "F"), (1, 0, "F")), 1: ((0, 1, "F"), (1, 1, "F"))}
    plan = Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 2, "explicit", device_order=order)
    r, pb = run(g, topo_line(2), plan)
    back = plan_from_dict(json.loads(json.dumps(plan_to_dict(plan, pb))), pb)
    assert back.device_order == order
    assert simulate(pb, back).makespan_s == r.makespan_s == 3.0


def test_checker_names_device_and_memory_shortfall():
    g = chain([1.0, 1.0], params=10**6)  # 2 MB of fp16 params per op
    topo = topo_line(2)
    from distplan.topologies.topology import DeviceKind, Topology
    small = DeviceKind("exact", {"fp16": 1e12}, mem_capacity_bytes=3e6, mem_bw_bytes_per_s=1e12, efficiency=1.0)
    topo = Topology("tiny", {"exact": small}, topo.devices, topo.links)
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16",), microbatches=2))
    ok = Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 2, "stream")
    check_plan(pb, ok)
    bad = Plan((0, 0), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 2, "stream")
    with pytest.raises(InfeasiblePlan, match=r"device d0: needs 3\.81 MiB .*short by 0\.95 MiB"):
        check_plan(pb, bad)


def test_checker_names_ops_of_a_backward_tensor():
    g = chain([1.0, 1.0])
    _, pb = run(g, topo_line(2), pipeline_plan(2, 1, "stream"))
    bad = Plan((1, 0), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 1, "stream")
    (msg,) = plan_violations(pb, bad)
    assert "'o0'->'o1'" in msg and "stage 1 back to stage 0" in msg and "move" in msg


def test_trace_has_a_track_per_device_and_link(tmp_path):
    g = chain([1.0, 2.0], elems=[10**6])
    plan = pipeline_plan(2, 3, "stream")
    r, pb = run(g, topo_line(2), plan, trace=True)
    write_chrome_trace(r, pb, tmp_path / "t.json")
    doc = json.loads((tmp_path / "t.json").read_text())
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert len(names) == pb.n_devices + len(pb.topology.links)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == r.n_nodes == 6 + 3
    assert {e["cat"] for e in spans} == {"forward", "transfer"}
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(r.makespan_s * 1e6)
    with pytest.raises(Exception, match="trace=True"):
        chrome_trace(simulate(pb, plan), pb)


def _zoo_plan(tmp_path, stage_devices=(0, 1, 2, 3)) -> Path:
    g = get_workload("mlp-xs")
    topo = get_topology("dgx-a100")
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16",), microbatches=8))
    V = len(g.ops)
    K = len(stage_devices)
    plan = Plan(tuple(v * K // V for v in range(V)), ("fp16",) * V, tuple(Stage((d,)) for d in stage_devices),
                8, "stream")
    path = tmp_path / "plan.json"
    save_plan(plan, pb, path)
    return path


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "distplan.sim", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_cli_replays_a_plan_file_and_writes_a_trace(tmp_path):
    plan = _zoo_plan(tmp_path)
    out = _cli(plan, "--trace", tmp_path / "trace.json")
    assert out.returncode == 0, out.stderr
    assert "period" in out.stdout and "throughput" in out.stdout
    doc = json.loads((tmp_path / "trace.json").read_text())
    assert any(e["ph"] == "X" for e in doc["traceEvents"])
    out = _cli(plan, "--ideal", "--link-model", "free")
    assert out.returncode == 0, out.stderr


def test_cli_errors_are_one_line_with_status_2(tmp_path):
    out = _cli(tmp_path / "missing.json")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "not found" in out.stderr
    (tmp_path / "junk.json").write_text("{}")
    out = _cli(tmp_path / "junk.json")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    doc = json.loads(_zoo_plan(tmp_path).read_text())
    first = next(iter(doc["ops"]))
    doc["ops"][first]["stage"] = 3  # the first op after its consumers
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    out = _cli(tmp_path / "bad.json")
    assert out.returncode == 2 and "infeasible plan" in out.stderr and "Traceback" not in out.stderr


def test_simulate_rejects_malformed_plans_with_one_error():
    from distplan.core.errors import DistplanError
    g = chain([1.0, 1.0])
    _, pb = run(g, topo_line(2), pipeline_plan(2, 1, "stream"))
    with pytest.raises(DistplanError, match="stage 5 outside"):
        simulate(pb, Plan((0, 5), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 1, "stream"))
    with pytest.raises(DistplanError, match="device index 7"):
        simulate(pb, Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((7,))), 1, "stream"))
    with pytest.raises(DistplanError, match="not allowed"):
        simulate(pb, Plan((0, 1), ("fp16", "fp8"), (Stage((0,)), Stage((1,))), 1, "stream"))
    with pytest.raises(DistplanError, match="training graph"):
        simulate(pb, Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 1, "1f1b"))


def _custom_gpt2_plan(tmp_path) -> tuple[Path, float]:
    """A custom graph that calls itself 'gpt2' (10x the zoo's FLOPs on each op) with a
    plan file; returns the path and the throughput its own problem simulates at."""
    from distplan.workloads.graph import Graph, Operator, Tensor
    from distplan.workloads.io import save_graph
    zoo = get_workload("gpt2", seq_len=128)
    ops = tuple(Operator(op.name, op.kind, op.fwd_flops * 10, op.bwd_flops * 10, op.param_elems, op.out_elems,
                         op.touched_elems) for op in zoo.ops)
    g = Graph("gpt2", ops, zoo.tensors, mode="inference", batch_size=1, seq_len=128)
    save_graph(g, tmp_path / "gpt2.json")
    topo = get_topology("dgx-a100")
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16",), microbatches=4))
    V = len(g.ops)
    plan = Plan(tuple(v * 4 // V for v in range(V)), ("fp16",) * V, tuple(Stage((d,)) for d in range(4)), 4, "stream")
    save_plan(plan, pb, tmp_path / "plan.json")
    return tmp_path / "plan.json", simulate(pb, plan).throughput_per_s


def test_a_plan_file_replays_its_own_graph_not_a_namesake(tmp_path):
    path, own = _custom_gpt2_plan(tmp_path)
    plan, pb = load_plan_file(path)
    assert pb.graph.fwd_flops == pytest.approx(10 * get_workload("gpt2", seq_len=128).fwd_flops)
    out = _cli(path)
    assert out.returncode == 0, out.stderr
    assert f"throughput {own:.6g}" in out.stdout
    # naming the zoo's gpt2 explicitly is refused: it is another graph
    out = _cli(path, "--workload", "gpt2")
    assert out.returncode == 2 and "made for another graph" in out.stderr and "Traceback" not in out.stderr
    # the custom file itself is accepted
    out = _cli(path, "--workload", tmp_path / "gpt2.json")
    assert out.returncode == 0, out.stderr


def test_an_edited_embedded_graph_or_a_v1_file_is_refused(tmp_path):
    path, _ = _custom_gpt2_plan(tmp_path)
    doc = json.loads(path.read_text())
    doc["problem"]["graph"]["ops"][0]["fwd_flops"] = 1.0
    (tmp_path / "edited.json").write_text(json.dumps(doc))
    out = _cli(tmp_path / "edited.json")
    assert out.returncode == 2 and "does not match its recorded sha256" in out.stderr
    doc = json.loads(path.read_text())
    doc["version"] = 1
    for k in ("graph", "topology", "graph_sha256", "topology_sha256"):
        del doc["problem"][k]
    (tmp_path / "v1.json").write_text(json.dumps(doc))
    out = _cli(tmp_path / "v1.json")
    assert out.returncode == 2 and "version-1" in out.stderr and "--workload" in out.stderr
    out = _cli(tmp_path / "v1.json", "--workload", tmp_path / "gpt2.json", "--topology", "dgx-a100")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("content", ["dir", b"\xff\xfe\x00bad", '{"format": "distplan-plan", "version": 2}'])
def test_unreadable_plan_files_are_one_line(tmp_path, content):
    path = tmp_path / "p.json"
    write_unreadable(path, content)
    out = _cli(path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and out.stderr.startswith("error:")


@pytest.mark.parametrize("stage", [1.5, "1", True, None])
def test_a_stage_that_is_not_a_whole_number_is_named(tmp_path, stage):
    doc = json.loads(_zoo_plan(tmp_path).read_text())
    doc["ops"][next(iter(doc["ops"]))]["stage"] = stage
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    out = _cli(tmp_path / "bad.json")
    assert out.returncode == 2 and "must be a whole number" in out.stderr and "flows" not in out.stderr
