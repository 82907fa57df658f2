"""Exposed communication (ProblemOptions.comm "exposed", costs.exposed): hand-worked loads,
and the planner's optimum against an enumeration written from the rules of issue 24:
each (source op, later receiving stage) pair is one direct transfer of the source's sent
bytes on the topology's route, whose time (bytes / bandwidth + latency per link, the way
back too in training) adds to the sender's and the receiver's device load."""
from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model import SolveOptions, solve
from distplan.model.downsets import enumerate_downsets, relaxation_bound
from distplan.testing.strategies import problems
from distplan.topologies.builders import duplex, fully_connected
from distplan.topologies.paths import lane_layouts
from distplan.topologies.topology import Device, DeviceKind, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

KIND = DeviceKind("acc", {"fp16": 1e12}, 1e12, 1e12, 1.0)


def exposed(problem):
    """The same problem under comm "exposed"."""
    return build_problem(problem.graph, problem.topology, dataclasses.replace(problem.options, comm="exposed"))


def three_ops(mode: str = "inference") -> Graph:
    """a -> b, a -> c, b -> c; a 1 ms, b 2 ms, c 3 ms; a sends 1,000 elements, b 500."""
    ops = (Operator("a", "matmul", 1.0, 1.0, out_elems=1000, fwd_s=1e-3, bwd_s=1e-3),
           Operator("b", "matmul", 1.0, 1.0, out_elems=500, fwd_s=2e-3, bwd_s=2e-3),
           Operator("c", "matmul", 1.0, 1.0, out_elems=10, fwd_s=3e-3, bwd_s=3e-3))
    return Graph("three", ops, (Tensor("a", "b", 1000), Tensor("a", "c", 1000), Tensor("b", "c", 500)), mode=mode)


def test_hand_worked_loads():
    """Stages a | b | c on three fully connected devices (1 MB/s, 0.1 ms a link): a sends
    2,000 bytes to stage 1 and, directly, to stage 2 (2.1 ms each); b 1,000 bytes (1.1 ms)."""
    topo = fully_connected("fc3", 3, KIND, 1e6, 1e-4)
    plan = Plan((0, 1, 2), ("fp16",) * 3, (Stage((0,)), Stage((1,)), Stage((2,))), 1, "stream")
    over = build_problem(three_ops(), topo, ProblemOptions(precisions=("fp16",), microbatches=1))
    c = plan_cost(over, plan)
    assert c.device_load_s.tolist() == pytest.approx([1e-3, 2e-3, 3e-3])
    assert c.period_s == pytest.approx(4e-3)   # the relay: 4,000 bytes on link 0 -> 1
    e = plan_cost(exposed(over), plan)
    assert e.device_load_s.tolist() == pytest.approx([5.2e-3, 5.2e-3, 6.2e-3])
    assert e.period_s == pytest.approx(6.2e-3)
    assert e.link_load_s.max() == pytest.approx(2e-3)   # a -> stage 1 or stage 2, each on its own link


def test_two_readers_on_one_stage_share_a_transfer():
    topo = fully_connected("fc2", 2, KIND, 1e6, 0.0)
    plan = Plan((0, 1, 1), ("fp16",) * 3, (Stage((0,)), Stage((1,))), 1, "stream")
    pb = build_problem(three_ops(), topo, ProblemOptions(precisions=("fp16",), microbatches=1, comm="exposed"))
    assert plan_cost(pb, plan).device_load_s.tolist() == pytest.approx([1e-3 + 2e-3, 5e-3 + 2e-3])


def test_training_pays_the_gradient_back():
    topo = fully_connected("fc2", 2, KIND, 1e6, 1e-4)
    plan = Plan((0, 1, 1), ("fp16",) * 3, (Stage((0,)), Stage((1,))), 1, "1f1b")
    pb = build_problem(three_ops("training"), topo, ProblemOptions(precisions=("fp16",), microbatches=1,
                                                                   comm="exposed"))
    assert plan_cost(pb, plan).device_load_s.tolist() == pytest.approx([2e-3 + 4.2e-3, 10e-3 + 4.2e-3])


def test_comm_is_checked_and_kept():
    pb = build_problem(three_ops(), fully_connected("fc2", 2, KIND, 1e6, 0.0),
                       ProblemOptions(precisions=("fp16",), comm="exposed"))
    assert pb.options.comm == "exposed" and pb.exposed
    with pytest.raises(DistplanError, match="comm must be one of"):
        build_problem(three_ops(), pb.topology, ProblemOptions(precisions=("fp16",), comm="hidden"))


# --- the oracle -------------------------------------------------------------------------
def oracle_period_s(problem, lanes, stage, qs) -> float:
    """The period of a plan from the rules (module docstring), not from costs.evaluate:
    stage k on lane i's k-th device, microbatch m in lane m % r, so every device and link
    carries 1/r of its lane's per-microbatch loads."""
    topo, g = problem.topology, problem.graph
    r = len(lanes)
    dev = [0.0] * problem.n_devices
    link = [0.0] * len(topo.links)
    out: dict[int, list[float]] = {}
    for t in g.tensors:
        out.setdefault(g.index(t.src), []).append(t.elems)
    pairs = {(g.index(t.src), stage[g.index(t.dst)]) for t in g.tensors
             if t.elems > 0 and stage[g.index(t.dst)] > stage[g.index(t.src)]}
    for path in lanes:
        for v, k in enumerate(stage):
            dev[path[k]] += problem.op_time_s(v, qs[v], problem.device_kind[path[k]]) / r
        for e, (u, v) in enumerate(problem.edges.tolist()):   # casts on the consumer
            d = path[stage[v]]
            dev[d] += problem.cast_time_s(e, qs[u], qs[v], problem.device_kind[d]) / r
        for u, k in pairs:
            a, b = path[stage[u]], path[k]
            op = g.ops[u]
            elems = op.send_elems if op.send_elems is not None else min(op.out_elems, math.fsum(out[u]))
            nbytes = elems * problem.bytes_per_elem[qs[u]]
            routes = [topo.route(a, b)] + ([topo.route(b, a)] if problem.training else [])
            t = 0.0
            for route in routes:
                for l in route:
                    t += nbytes / topo.links[l].bw_bytes_per_s + topo.links[l].latency_s
                    link[l] += nbytes / topo.links[l].bw_bytes_per_s / r
            dev[a] += t / r
            dev[b] += t / r
    return max(dev + link)


def oracle_optima_s(problem, replicas: int | None = 1) -> dict[tuple, float]:
    """Per layout (lanes of every replication factor: the divisors of the device count
    for a stream unless ``replicas`` fixes it), the least oracle period over every
    monotone stage map and every precision each op may use on every device of its stage;
    plans the checker refuses do not count."""
    V, Q = problem.n_ops, len(problem.precisions)
    preds = problem.graph.preds()
    D = problem.n_devices
    rs = [replicas] if replicas else [r for r in range(1, D + 1) if D % r == 0 and problem.schedule == "stream"] or [1]
    out = {}
    for r in rs:
        for _, lanes in lane_layouts(problem.topology, r):
            K = len(lanes[0])
            best = math.inf
            for stage in itertools.product(range(K), repeat=V):
                if any(stage[u] > stage[v] for v in range(V) for u in preds[v]):
                    continue
                choices = [[q for q in range(Q) if problem.op_allowed[v, q] and all(
                    problem.supported[q, problem.device_kind[lane[stage[v]]]] for lane in lanes)] for v in range(V)]
                for qs in itertools.product(*choices):
                    S = max(stage) + 1
                    plan = Plan(stage, tuple(problem.precisions[q] for q in qs),
                                tuple(Stage(tuple(lane[k] for lane in lanes)) for k in range(S)),
                                problem.microbatches, problem.schedule)
                    if plan_violations(problem, plan):
                        continue
                    best = min(best, oracle_period_s(problem, lanes, stage, qs))
            out[lanes] = best
    return out


def check_against_oracle(problem, replicas: int | None = 1) -> None:
    per_layout = oracle_optima_s(problem, replicas)
    want = min(per_layout.values())
    r = solve(problem, SolveOptions(replicas=replicas, rel_gap=1e-7, time_limit_s=60, top_k=1))
    if not math.isfinite(want):
        assert not r.plans
        return
    got = plan_cost(problem, r.plans[0]).period_s
    assert r.objective_s == pytest.approx(got, rel=1e-6)
    assert got == pytest.approx(want, rel=1e-6)
    assert r.bound_s <= want * (1 + 1e-6)
    mat = enumerate_downsets(problem)
    for lanes, best in per_layout.items():   # the downset relaxation (one lane) bounds each path's optimum
        if len(lanes) == 1:
            assert relaxation_bound(problem, lanes[0], mat) <= best * (1 + 1e-6)


def test_optimum_equals_oracle_hand_instance():
    """Three fully connected devices, and a chain of three where a tensor skipping a
    stage takes two links (no relay: only its end devices are charged)."""
    opts = ProblemOptions(precisions=("fp16",), microbatches=4, comm="exposed")
    check_against_oracle(build_problem(three_ops(), fully_connected("fc3", 3, KIND, 1e6, 1e-4), opts))
    chain = Topology("chain3", {"acc": KIND}, tuple(Device(f"d{i}", "acc") for i in range(3)),
                     tuple(duplex("d0", "d1", 1e6, 1e-4) + duplex("d1", "d2", 2e6, 1e-4)))
    pb = build_problem(three_ops(), chain, opts)
    check_against_oracle(pb)
    plan = Plan((0, 1, 2), ("fp16",) * 3, (Stage((0,)), Stage((1,)), Stage((2,))), 1, "stream")
    # a -> stage 2 over both links: 2 ms + 1 ms + 0.2 ms on d0 and d2, nothing on d1
    assert plan_cost(pb, plan).device_load_s.tolist() == pytest.approx([1e-3 + 2.1e-3 + 3.2e-3,
                                                                        2e-3 + 2.1e-3 + 0.6e-3,
                                                                        3e-3 + 3.2e-3 + 0.6e-3])


SMALL = dict(max_ops=4, max_devices=3, microbatches=st.integers(1, 8))


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(problems(mode=st.sampled_from(["inference", "training"]), **SMALL))
def test_optimum_equals_oracle(pb):
    check_against_oracle(exposed(pb))


@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(problems(mode="inference", max_ops=3, max_devices=4, microbatches=st.integers(1, 8)))
def test_optimum_equals_oracle_with_lanes(pb):
    """Inference streams: every replication factor (lanes), as the planner explores them."""
    check_against_oracle(exposed(pb), replicas=None)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems(mode="inference", max_ops=4, max_devices=4, microbatches=st.integers(1, 8)))
def test_optimum_equals_oracle_with_lanes_many(pb):
    check_against_oracle(exposed(pb), replicas=None)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(problems(mode=st.sampled_from(["inference", "training"]), max_ops=5, max_devices=3,
                microbatches=st.integers(1, 8)))
def test_optimum_equals_oracle_many(pb):
    check_against_oracle(exposed(pb))


def test_checker_refuses_what_exposed_does_not_model():
    topo = fully_connected("fc2", 2, KIND, 1e6, 0.0)
    plan = Plan((0, 0, 0), ("fp16",) * 3, (Stage((0, 1), tensor_parallel=2),), 1, "stream")
    over = build_problem(three_ops(), topo, ProblemOptions(precisions=("fp16",), microbatches=1))
    assert not plan_violations(over, plan)
    assert any("tensor_parallel 2 is not modelled with exposed" in x for x in plan_violations(exposed(over), plan))


def test_describe_says_exposed():
    from distplan.api.describe import describe
    pb = build_problem(three_ops(), fully_connected("fc2", 2, KIND, 1e6, 0.0),
                       ProblemOptions(precisions=("fp16",), comm="exposed"))
    assert "exposed communication" in describe(pb)
    assert "exposed" not in describe(build_problem(pb.graph, pb.topology, ProblemOptions(precisions=("fp16",))))


def test_plan_file_keeps_comm(tmp_path):
    from distplan.costs.plan_file import load_plan_file, save_plan
    pb = build_problem(three_ops(), fully_connected("fc3", 3, KIND, 1e6, 1e-4),
                       ProblemOptions(precisions=("fp16",), microbatches=1, comm="exposed"))
    plan = Plan((0, 1, 2), ("fp16",) * 3, (Stage((0,)), Stage((1,)), Stage((2,))), 1, "stream")
    save_plan(plan, pb, tmp_path / "p.json")
    back, pb2 = load_plan_file(tmp_path / "p.json")
    assert pb2.comm == "exposed"
    assert plan_cost(pb2, back).period_s == pytest.approx(6.2e-3)
