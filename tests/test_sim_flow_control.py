"""Stream flow control (issue 12): a fast producer stage must not pile its tensors up on a
slower consumer stage. The realistic simulation sends microbatch m + 1's tensor to a
stage only once the stage has freed its copy of microbatch m (``sim.schedule.
stream_flow_control``), so the consumer holds the one microbatch of received bytes the
checker charges (``costs.memory.stream_activation_bytes``), and the period stays the
bottleneck's. Where the transfer cannot hide behind the stage's other ops, the stage
keeps two (double buffering) rather than slow down."""
from __future__ import annotations

import numpy as np
import pytest

from distplan.core.plan import Plan, Stage
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.sim import SimOptions, simulate
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

#: 1e12 FLOP/s, no memory traffic: an op of t x 1e12 FLOPs takes t s; fp16, 2 bytes an element
KIND = DeviceKind("fc", {"fp16": 1e12}, mem_capacity_bytes=1e6, mem_bw_bytes_per_s=1e15, efficiency=1.0)


def two_chips(bw: float) -> Topology:
    return Topology("two", {"fc": KIND}, (Device("d0", "fc"), Device("d1", "fc")),
                    (Link("d0", "d1", bw, 0.0), Link("d1", "d0", bw, 0.0)))


def problem_and_plan(times: list[float], outs: list[int], bw: float, M: int):
    """A chain, the first op on d0 and the rest on d1; op i takes times[i] s and writes
    outs[i] elements, all of which the next op reads."""
    ops = tuple(Operator(f"o{i}", "matmul", t * 1e12, 0.0, 0, o, 0.0) for i, (t, o) in enumerate(zip(times, outs)))
    ts = tuple(Tensor(f"o{i}", f"o{i + 1}", outs[i]) for i in range(len(ops) - 1))
    pb = build_problem(Graph("chain", ops, ts, mode="inference"), two_chips(bw),
                       ProblemOptions(precisions=("fp16",), microbatches=M, schedule="stream"))
    plan = Plan((0,) + (1,) * (len(ops) - 1), ("fp16",) * len(ops), (Stage((0,)), Stage((1,))), M, "stream")
    return pb, plan


def test_fast_producer_slow_consumer_holds_one_received_tensor():
    """o0 (0.1 s, 1,000 elements: 2,000 B) on d0 feeds o1 (0.5 s, 1,000 B out) -> o2
    (1.5 s, 20 B) on d1 over a 4,000 B/s link: 0.5 s a tensor, d1 busy 2 s a microbatch.

    Checker, d1: liveness peak at o2, its 20 B + o1's 1,000 B it reads = 1,020, plus one
    received tensor of 2,000 B: 3,020 B. d0: o0's 2,000 B and one older copy waiting to be
    sent: 4,000 B. Flow control: microbatch m + 1's tensor leaves d0 when o1(m) has ended
    and arrives 0.5 s later, while o2(m) runs (1.5 s): d1 then holds o1's and o2's
    outputs and the next tensor, 3,020 B, exactly the checker's figure; the period stays
    d1's 2 s. Without it (as the ideal mode, the MILP's model, still runs: queues
    unbounded) the link delivers a tensor every 0.5 s and d1 consumes one every 2 s: six
    received tensors wait at once over 8 microbatches, 13,020 B."""
    pb, plan = problem_and_plan([0.1, 0.5, 1.5], [1000, 500, 10], 4000.0, 8)
    checker = plan_memory_bytes(pb, plan)
    assert np.allclose(checker, [4000, 3020], rtol=1e-12)
    r = simulate(pb, plan, SimOptions())
    assert np.allclose(r.peak_memory_bytes, [4000, 3020], rtol=1e-12)
    assert np.all(r.peak_memory_bytes <= checker * (1 + 1e-12))
    assert r.period_s == pytest.approx(2.0, rel=1e-12)
    # o1(m) on [0.6 + 2m, 1.1 + 2m], o2(m) ends at 2.6 + 2m
    assert np.allclose(r.microbatch_done_s, 2.6 + 2.0 * np.arange(8), rtol=1e-12)
    ideal = simulate(pb, plan, SimOptions(ideal=True))
    assert ideal.period_s == pytest.approx(2.0, rel=1e-12)
    assert ideal.peak_memory_bytes[1] == pytest.approx(13020, rel=1e-12)


def test_consumer_op_alone_on_its_stage_double_buffers_instead_of_slowing_down():
    """o0 (0.1 s) feeds o1 (2 s), alone on d1, over a link of 0.5 s a tensor: one buffer
    would serialise the transfer and o1 (2.5 s a microbatch). The next tensor arrives
    while o1 runs: d1 holds two received tensors (4,000 B) and o1's 20 B, one tensor
    beyond the checker's 2,020 B, never more; the period is o1's 2 s."""
    pb, plan = problem_and_plan([0.1, 2.0], [1000, 10], 4000.0, 8)
    assert np.allclose(plan_memory_bytes(pb, plan), [4000, 2020], rtol=1e-12)
    r = simulate(pb, plan, SimOptions())
    assert np.allclose(r.peak_memory_bytes, [4000, 4020], rtol=1e-12)
    assert r.period_s == pytest.approx(2.0, rel=1e-12)


def test_a_tensor_relayed_over_stages_is_flow_controlled_hop_by_hop():
    """Issue 21: o0 (0.1 s) on d0 feeds o1 -> o2 -> o3 (1 s each) on d1..d3 and, past them,
    o4 (0.5 s) on d4, so o0's tensor is relayed by d1, d2, d3. A runtime bounds each
    stage's receive queue: d1 forwards microbatch m once d2 has room for it. One credit
    loop from o4 back to d0's link instead (the old rule: o0's tensor for m + 1 waited for
    o4(m)) ties d0's double buffer to the pipeline's whole depth: o0(m + 3) waited for
    o4(m), 3.6 s after o0(m) started, and the period was 1.233 s, not the bottleneck's 1 s
    (BERT's legacy ONNX export on mcm4x4 paid 22 % so, its attention mask relayed to the
    fourth stage). Hop by hop, each relay holds one copy, as the checker charges."""
    bw = 1e5
    topo = Topology("line", {"fc": KIND}, tuple(Device(f"d{i}", "fc") for i in range(5)),
                    tuple(x for i in range(4) for x in (Link(f"d{i}", f"d{i + 1}", bw, 0.0),
                                                        Link(f"d{i + 1}", f"d{i}", bw, 0.0))))
    times, outs = [0.1, 1.0, 1.0, 1.0, 0.5], [1000, 1000, 1000, 1000, 10]
    ops = tuple(Operator(f"o{i}", "matmul", t * 1e12, 0.0, 0, o, 0.0) for i, (t, o) in enumerate(zip(times, outs)))
    ts = tuple(Tensor(f"o{i}", f"o{i + 1}", outs[i]) for i in range(4)) + (Tensor("o0", "o4", 1000),)
    pb = build_problem(Graph("skip", ops, ts, mode="inference"), topo,
                       ProblemOptions(precisions=("fp16",), microbatches=16, schedule="stream"))
    plan = Plan((0, 1, 2, 3, 4), ("fp16",) * 5, tuple(Stage((i,)) for i in range(5)), 16, "stream")
    r = simulate(pb, plan, SimOptions())
    assert r.period_s == pytest.approx(1.0, rel=1e-12)
    assert simulate(pb, plan, SimOptions(ideal=True)).period_s == pytest.approx(1.0, rel=1e-12)
    checker = plan_memory_bytes(pb, plan)
    assert np.allclose(checker, [4000, 8000, 8000, 8000, 4020], rtol=1e-12)
    assert np.all(r.peak_memory_bytes <= checker * (1 + 1e-12))
