"""Inference activation memory from liveness (issue 12): the planner charges an inference
stage the most bytes alive at once in its execution order, plus the older copies of what
it sends (costs.memory.stream_activation_bytes), not the sum of every output.

The checker's estimate (costs.evaluate.plan_memory_bytes), the MILP's rows
(model.build.add_live_peak) and the simulator (sim.memory) must agree: hand-worked
figures, exact; on random instances the MILP's least memory equals the checker's,
bounds the simulated own peak and never exceeds the old sum (both with the bytes a
stage receives, one microbatch of them, which the old rule left out).
"""
from __future__ import annotations

import math

import numpy as np
import pyomo.environ as pyo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.memory import contiguous_live_peak_bytes, last_reader, stream_copies, stream_live_peak_bytes
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.plan import Plan, Stage
from distplan.model.build import ModelSpec, build_model
from distplan.model.extract import assign_plan
from distplan.sim import SimOptions, simulate
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

#: 1e12 FLOP/s, no memory traffic: an op of t * 1e12 FLOPs takes t s; 100 kB of memory so
#: that the MILP's rows (in units of it) are far above the solver's tolerances
KIND = DeviceKind("live", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e5, mem_bw_bytes_per_s=1e15,
                  efficiency=1.0)


def line(n: int, bw: float = 1e9) -> Topology:
    devs = tuple(Device(f"d{i}", "live") for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", bw, 0.0), Link(f"d{i + 1}", f"d{i}", bw, 0.0)]
    return Topology(f"line{n}", {"live": KIND}, devs, tuple(links))


def five() -> Graph:
    """x0 (1,000 elements) -> x1 -> x2 -> x3 -> x4 (100 each) and x0 -> x2: x0's output is
    still wanted while x1 and x2 run. Every op takes 1 s; fp16, 2 bytes an element."""
    outs = [1000, 100, 100, 100, 100]
    ops = tuple(Operator(f"x{i}", "matmul", 1e12, 0.0, 0, o, 0.0) for i, o in enumerate(outs))
    ts = (Tensor("x0", "x1", 1000), Tensor("x0", "x2", 1000), Tensor("x1", "x2", 100), Tensor("x2", "x3", 100),
          Tensor("x3", "x4", 100))
    return Graph("five", ops, ts, mode="inference")


def milp_memory_bytes(pb, plan: Plan) -> list[float]:
    """The MILP's least memory (bytes) per stage with the plan's stages and precisions
    fixed: an LP over the memory auxiliaries (sent, sent_all, before, act_peak), read off
    the memory rows (static + act_peak + bytes crossing into the stage)."""
    K = plan.n_stages
    m = build_model(pb, ModelSpec(path=tuple(s.devices[0] for s in plan.stages)))
    assign_plan(m, pb, plan)
    for v in list(m.y.values()) + list(m.prec.values()):
        v.fix()
    for o in m.component_objects(pyo.Objective, active=True):
        o.deactivate()
    m.least = pyo.Objective(expr=sum(m.act_peak[k] for k in m.PEAK_STAGES))
    res = pyo.SolverFactory("appsi_highs").solve(m)
    assert str(res.solver.termination_condition) == "optimal", res
    return [pyo.value(m.mem_cap[k].body) * float(pb.device_mem_bytes[plan.stages[k].devices[0]])
            if k in m.mem_cap else 0.0 for k in range(K)]


# --- hand-worked ----------------------------------------------------------------------------
@pytest.mark.parametrize("M,stage,bw,expected,simulated", [
    # one stage: at x2, x2 (200 B) + x0 (2,000 B, read by x2) + x1 (200 B): 2,400 (the sum: 2,600)
    (1, (0, 0, 0, 0, 0), 1e9, [2400], [2400]),
    (4, (0, 0, 0, 0, 0), 1e9, [2400], [2400]),
    # x4 on a second stage, one microbatch: x3 stays alive to the end of stage 0: still
    # 2,400; stage 1 holds x4 (200 B) and the 200 B it receives from x3
    (1, (0, 0, 0, 0, 1), 1e9, [2400, 400], [2400, 200]),
    # two microbatches: x3 of the first may wait to be sent while the second runs: + 200
    (2, (0, 0, 0, 0, 1), 1e9, [2600, 400], [2400, 200]),
    # four, over a slow link: x3 of microbatches m-1 and m both wait while m+1 runs x2 (two
    # older copies of an op not yet run, the stream's two buffers): 2,400 + 2 x 200, reached
    (4, (0, 0, 0, 0, 1), 20.0, [2800, 400], [2800, 200]),
    (4, (0, 0, 0, 0, 1), 1e9, [2800, 400], [2400, 200]),
])
def test_hand_worked_peak(M, stage, bw, expected, simulated):
    """Checker and MILP (``expected``) and the simulator's own peak (``simulated``), exact;
    the received bytes are buffers in flight (``peak_memory_bytes``), within the bound."""
    K = max(stage) + 1
    pb = build_problem(five(), line(K, bw), ProblemOptions(precisions=("fp16",), microbatches=M, schedule="stream"))
    plan = Plan(stage, ("fp16",) * 5, tuple(Stage((d,)) for d in range(K)), M, "stream")
    assert np.allclose(plan_memory_bytes(pb, plan), expected, rtol=1e-12)
    assert np.allclose(milp_memory_bytes(pb, plan), expected, rtol=1e-7)
    r = simulate(pb, plan, SimOptions())
    assert np.allclose(r.peak_own_memory_bytes, simulated, rtol=1e-12)
    assert np.all(r.peak_memory_bytes <= np.array(expected) * (1 + 1e-12))


def test_live_peak_helpers_by_hand():
    edges = np.array([[0, 1], [0, 2], [1, 2], [2, 3], [3, 4]])
    act = np.array([2000.0, 200, 200, 200, 200])
    last = last_reader(5, edges)
    assert list(last) == [2, 2, 3, 4, -1]
    none = np.zeros(5, dtype=bool)
    assert stream_live_peak_bytes(range(5), act, act, last, none) == 2400
    assert stream_live_peak_bytes([3, 4], act, act, last, none) == 400
    leaves = np.array([False, False, False, True, False])
    assert stream_live_peak_bytes(range(4), act, act, last, leaves, microbatches=4) == 2800
    assert stream_copies(1) == (0, 0) and stream_copies(2) == (1, 0) and stream_copies(9) == (1, 1)
    peak = contiguous_live_peak_bytes(edges, act, act)
    assert peak[0, 5] == 2400 and peak[0, 2] == 2200 and peak[1, 3] == 400 and peak[3, 5] == 400
    assert peak[2, 2] == 0 and peak[4, 1] == 0


# --- random instances -----------------------------------------------------------------------
@st.composite
def instances(draw):
    """A random inference DAG (1-7 ops, out and tensor elements up to 2,000, zero-byte
    tensors included), a line of 1-3 devices, a monotone stage assignment with stage k on
    device k, 1-6 microbatches, each op at a precision it may run."""
    n = draw(st.integers(1, 7))
    ops = tuple(Operator(f"v{i}", draw(st.sampled_from(["matmul", "add", "softmax"])), draw(st.floats(1e6, 1e10)),
                         0.0, draw(st.integers(0, 2000)), draw(st.integers(1, 2000)), 0.0) for i in range(n))
    tensors = []
    for j in range(1, n):
        for i in sorted(draw(st.sets(st.integers(0, j - 1), max_size=3))):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, 2000))))
    g = Graph("g", ops, tuple(tensors), mode="inference")
    K = draw(st.integers(1, 3))
    M = draw(st.integers(1, 6))
    pb = build_problem(g, line(K, draw(st.sampled_from([1e3, 1e6, 1e9]))),
                       ProblemOptions(precisions=("fp16", "int8"), microbatches=M, schedule="stream"))
    preds = g.preds()
    stage: list[int] = []
    for v in range(n):
        stage.append(draw(st.integers(max((stage[u] for u in preds[v]), default=0), K - 1)))
    precs = []
    for v in range(n):
        ok = [q for q, p in enumerate(pb.precisions) if math.isfinite(pb.fwd_time_s[v, q, 0])]
        precs.append(pb.precisions[draw(st.sampled_from(ok))])
    return pb, Plan(tuple(stage), tuple(precs), tuple(Stage((k,)) for k in range(K)), M, "stream")


def old_sum_bytes(pb, plan: Plan) -> np.ndarray:
    """What the planner charged before: static + every output once + n1 x the sent bytes of
    the ops a later stage reads; plus, new, the bytes crossing into each stage."""
    n1, _ = stream_copies(plan.microbatches)
    mem = np.zeros(pb.n_devices)
    for v, k in enumerate(plan.op_stage):
        q = pb.q_index(plan.op_precision[v])
        leaves = any(plan.op_stage[w] > k for u, w in pb.edges if u == v)
        mem[plan.stages[k].devices[0]] += pb.static_bytes[v, q] + pb.act_bytes[v, q] + n1 * leaves * pb.send_bytes[v, q]
    for e, (u, w) in enumerate(pb.edges):
        for k in range(plan.op_stage[u] + 1, plan.op_stage[w] + 1):
            mem[plan.stages[k].devices[0]] += pb.edge_elems[e] * pb.bytes_per_elem[pb.q_index(plan.op_precision[u])]
    return mem


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.sampled_from(["fifo", "fair", "free"]), st.booleans())
def test_milp_memory_bounds_the_simulated_peak_and_never_exceeds_the_sum(x, link_model, ideal):
    pb, plan = x
    milp = np.array(milp_memory_bytes(pb, plan))
    checker = plan_memory_bytes(pb, plan)
    assert np.allclose(milp, checker, rtol=1e-6, atol=1e-3)
    sim = simulate(pb, plan, SimOptions(link_model=link_model, ideal=ideal)).peak_own_memory_bytes
    assert np.all(sim <= checker * (1 + 1e-9) + 1e-6), (sim, checker)
    assert np.all(checker <= old_sum_bytes(pb, plan) * (1 + 1e-12) + 1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(), st.data(), st.sampled_from(["fifo", "fair", "free"]), st.booleans())
def test_checker_bounds_the_simulated_peak_with_replicas_and_shared_devices(x, data, link_model, ideal):
    """Stages of 1-2 data-parallel replicas on any devices of a 4-device line, two stages
    possibly on one device (their bounds add up there)."""
    pb0, plan0 = x
    pb = build_problem(pb0.graph, line(4), ProblemOptions(precisions=("fp16", "int8"),
                                                          microbatches=plan0.microbatches, schedule="stream"))
    stages = tuple(Stage(tuple(data.draw(st.permutations(range(4)))[:data.draw(st.integers(1, 2))]))
                   for _ in plan0.stages)
    plan = Plan(plan0.op_stage, plan0.op_precision, stages, plan0.microbatches, "stream")
    sim = simulate(pb, plan, SimOptions(link_model=link_model, ideal=ideal)).peak_own_memory_bytes
    checker = plan_memory_bytes(pb, plan)
    assert np.all(sim <= checker * (1 + 1e-9) + 1e-6), (sim, checker)
