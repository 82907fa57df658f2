"""Simulator: hand-computed cases, exact to 1e-12 relative.

Times are set through FLOPs on a device kind with peak 1e12 FLOP/s, efficiency 1 and no
memory traffic or launch overhead, so an op of ``t * 1e12`` FLOPs takes exactly t s; a
tensor of ``n`` fp16 elements on a 1e9 B/s link takes 2n / 1e9 s.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from distplan.costs.collectives import gradient_reduction_s, ring_allreduce_s
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.plan import Plan, Stage
from distplan.sim import SimOptions, simulate
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

EXACT = DeviceKind("exact", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e15, mem_bw_bytes_per_s=1e12,
                   efficiency=1.0)
BW = 1e9


def close(a: float, b: float, rel: float = 1e-12) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def topo_line(n: int, latency_s: float = 0.0, bw: float = BW) -> Topology:
    devs = tuple(Device(f"d{i}", "exact") for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", bw, latency_s), Link(f"d{i + 1}", f"d{i}", bw, latency_s)]
    return Topology(f"line{n}", {"exact": EXACT}, devs, tuple(links))


def topo_ring(n: int, latency_s: float = 0.0) -> Topology:
    devs = tuple(Device(f"d{i}", "exact") for i in range(n))
    links = []
    for i in range(n):
        j = (i + 1) % n
        links += [Link(f"d{i}", f"d{j}", BW, latency_s), Link(f"d{j}", f"d{i}", BW, latency_s)]
    return Topology(f"ring{n}", {"exact": EXACT}, devs, tuple(links))


def chain(fwd: list[float], bwd: list[float] | None = None, elems: list[int] | None = None,
          mode: str = "inference", params: int = 0, out_elems: int = 1, kind: str = "add") -> Graph:
    bwd = bwd or [0.0] * len(fwd)
    elems = elems if elems is not None else [0] * (len(fwd) - 1)
    ops = tuple(Operator(f"o{i}", kind, f * 1e12, b * 1e12, params, out_elems, 0.0)
                for i, (f, b) in enumerate(zip(fwd, bwd)))
    ts = tuple(Tensor(f"o{i}", f"o{i + 1}", elems[i]) for i in range(len(fwd) - 1))
    return Graph("chain", ops, ts, mode=mode)


def pipeline_plan(n_ops: int, M: int, schedule: str, devices: list[int] | None = None) -> Plan:
    devices = devices if devices is not None else list(range(n_ops))
    return Plan(tuple(range(n_ops)), ("fp16",) * n_ops, tuple(Stage((d,)) for d in devices), M, schedule)


def run(g: Graph, topo: Topology, plan: Plan, low_bit_ops: str = "all", **opts):
    """Simulate ``plan``; "all": every cast is a kernel of its own (the hand counts below)."""
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=plan.microbatches,
                                               schedule=plan.schedule if plan.schedule != "explicit" else None,
                                               low_bit_ops=low_bit_ops))
    return simulate(pb, plan, SimOptions(**opts)), pb


def test_two_stage_pipeline_with_transfer_and_latency():
    # stage 0: 1 s, stage 1: 2 s, tensor 0.5 s on the link + 0.25 s latency, 4 microbatches
    g = chain([1.0, 2.0], elems=[250_000_000])
    r, _ = run(g, topo_line(2, latency_s=0.25), pipeline_plan(2, 4, "stream"))
    assert np.allclose(r.microbatch_done_s, [3.75, 5.75, 7.75, 9.75], rtol=1e-12, atol=0)
    assert close(r.makespan_s, 9.75)
    assert close(r.period_s, 2.0)  # 4 microbatches: too few to call it steady
    assert close(r.throughput_per_s, 0.5)
    assert r.n_tasks == 8
    assert close(r.link_bytes[0], 4 * 500_000_000) and r.link_bytes[1] == 0
    assert close(r.link_busy_s[0], 2.0)
    assert np.allclose(r.device_busy_s, [4.0, 8.0], rtol=1e-12)


def test_four_stage_pipeline_given_times():
    # tandem line, all microbatches ready at 0: makespan = sum(t) + (M - 1) max(t)
    times = [1.0, 3.0, 2.0, 1.0]
    M = 5
    r, _ = run(chain(times), topo_line(4), pipeline_plan(4, M, "stream"))
    assert close(r.makespan_s, sum(times) + (M - 1) * max(times))
    done = sum(times) + np.arange(M) * 3.0
    assert np.allclose(r.microbatch_done_s, done, rtol=1e-12, atol=0)


@pytest.mark.parametrize("S", [1, 2, 4])
@pytest.mark.parametrize("M", [1, 3, 8])
def test_stream_uniform_closed_form(S, M):
    t = 1.5
    r, _ = run(chain([t] * S), topo_line(S), pipeline_plan(S, M, "stream"))
    assert close(r.makespan_s, (M + S - 1) * t)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("S", [1, 2, 4])
@pytest.mark.parametrize("M", [1, 2, 3, 8])
def test_training_uniform_closed_form(schedule, S, M):
    # fwd = bwd = t: makespan 2 (M + S - 1) t; fwd f, bwd b: (M + S - 1)(f + b)
    t = 1.0
    g = chain([t] * S, [t] * S, mode="training")
    r, _ = run(g, topo_line(S), pipeline_plan(S, M, schedule))
    assert close(r.makespan_s, 2 * (M + S - 1) * t)
    g = chain([1.0] * S, [2.0] * S, mode="training")
    r, _ = run(g, topo_line(S), pipeline_plan(S, M, schedule))
    assert close(r.makespan_s, (M + S - 1) * 3.0)
    assert r.n_tasks == 2 * S * M


def test_1f1b_steady_period_and_memory_window():
    S, M = 4, 16
    # a softmax keeps its output for the backward (an add would keep nothing)
    g = chain([1.0] * S, [2.0] * S, mode="training", out_elems=1000, kind="softmax")
    r, pb = run(g, topo_line(S), pipeline_plan(S, M, "1f1b"))
    assert close(r.period_s, 3.0) and r.steady
    # stage k holds at most S - k activations of 2000 bytes (fp16)
    assert np.allclose(r.peak_own_memory_bytes, [2000.0 * (S - k) for k in range(S)])
    r, _ = run(g, topo_line(S), pipeline_plan(S, M, "gpipe"))
    assert np.allclose(r.peak_own_memory_bytes, 2000.0 * M)
    assert close(r.period_s, r.makespan_s / M)


def _two_tensor_problem(latency_s: float = 0.0):
    # stage 0 on d0: A1 (1 s) then A2 (1 s); stage 1 on d1: B (1 s) needs both.
    # A1 -> B: 1e9 elems = 2 s on the link; A2 -> B: 2.5e8 elems = 0.5 s.
    ops = (Operator("A1", "add", 1e12), Operator("A2", "add", 1e12), Operator("B", "add", 1e12))
    ts = (Tensor("A1", "B", 1_000_000_000), Tensor("A2", "B", 250_000_000))
    g = Graph("two", ops, ts)
    plan = Plan((0, 0, 1), ("fp16",) * 3, (Stage((0,)), Stage((1,))), 1, "stream")
    return g, topo_line(2, latency_s), plan


@pytest.mark.parametrize("model,start_b", [("fifo", 3.5), ("fair", 3.5), ("free", 3.0)])
def test_two_transfers_contend_on_one_link(model, start_b):
    g, topo, plan = _two_tensor_problem()
    r, _ = run(g, topo, plan, link_model=model, trace=True)
    assert close(r.makespan_s, start_b + 1.0)
    spans = {e[3].split()[1]: e for e in r.events if e[4] == "transfer"}
    link = [e for e in r.events if e[0] == 2]  # server 2 = link d0->d1
    assert len(link) == 2
    if model == "fifo":
        assert sorted((e[1], e[1] + e[2]) for e in link) == [(1.0, 3.0), (3.0, 3.5)]
        assert close(r.link_busy_s[0], 2.5)
    if model == "free":
        assert sorted((e[1], e[1] + e[2]) for e in link) == [(1.0, 3.0), (2.0, 2.5)]
    assert spans


def test_latency_is_pipelined_per_hop():
    g, topo, plan = _two_tensor_problem(latency_s=0.25)
    r, _ = run(g, topo, plan)
    # A1 serialised [1, 3] arrives 3.25; A2 serialised [3, 3.5] arrives 3.75; B [3.75, 4.75]
    assert close(r.makespan_s, 4.75)


def test_store_and_forward_over_relay_stage():
    # o0 on d0 (stage 0) -> o1 on d2 (stage 2); stage 1 (d1) only relays: two hops
    g = chain([1.0, 1.0], elems=[500_000_000])  # 1 s per link
    plan = Plan((0, 2), ("fp16", "fp16"), (Stage((0,)), Stage((1,)), Stage((2,))), 1, "stream")
    r, _ = run(g, topo_line(3, latency_s=0.1), plan)
    assert close(r.makespan_s, 1.0 + (1.0 + 0.1) * 2 + 1.0)
    assert close(r.link_bytes[0], 1e9) and close(r.link_bytes[2], 1e9)


def test_cast_on_consumer_device():
    # o0 fp16 -> o1 int8: cast of 1e9 elems at (2 + 1) B / 1e12 B/s = 3e-3 s on d1
    g = chain([1.0, 1.0], elems=[1_000_000_000])
    topo = topo_line(2, bw=1e12)
    plan = Plan((0, 1), ("fp16", "int8"), (Stage((0,)), Stage((1,))), 1, "stream")
    r, pb = run(g, topo, plan)
    # o1 at int8 runs at 2e12 FLOP/s: 0.5 s
    assert close(r.makespan_s, 1.0 + 2e9 / 1e12 + 3e-3 + 0.5)
    assert close(r.device_busy_s[1], 3e-3 + 0.5)
    # the int8-engine policy fuses a cast into the matrix product it feeds: no cast task
    mm = Graph(g.name, tuple(dataclasses.replace(op, kind="matmul") for op in g.ops), g.tensors)
    r, pb = run(mm, topo, plan, low_bit_ops="matmul")
    assert close(r.makespan_s, 1.0 + 2e9 / 1e12 + 0.5)
    assert close(r.device_busy_s[1], 0.5)


def test_ring_allreduce_after_backward():
    # one op, 3 data-parallel replicas, one microbatch each: F [0,1], B [1,2], then a ring
    # all-reduce of 3e8 fp16 params: 4 steps of 2e8 B (0.2 s) + 0.05 s latency each
    P = 300_000_000
    g = chain([1.0], [1.0], mode="training", params=P)
    topo = topo_ring(3, latency_s=0.05)
    plan = Plan((0,), ("fp16",), (Stage((0, 1, 2)),), 3, "1f1b")
    r, pb = run(g, topo, plan)
    ring = 4 * (2 * P / 3 / BW + 0.05)
    assert close(ring, 1.0)
    assert close(ring_allreduce_s(pb, [0, 1, 2], 2 * P), ring)
    assert close(gradient_reduction_s(pb, [0, 1, 2], 2 * P, hierarchical=False, zero=0), ring)
    assert close(r.makespan_s, 2.0 + ring)
    assert np.allclose(r.link_bytes[[0, 2, 4]], 4 * 2e8 / 1)  # d0->d1, d1->d2, d2->d0 each carry 4 chunks


def test_tensor_parallel_allreduce_of_matmul_output():
    # one matmul of 2 s on 2 devices (1 s each), output 1e8 fp16 elems = 2e8 B:
    # ring all-reduce of 2 steps x 1e8 B (0.1 s each)
    g = Graph("tp", (Operator("mm", "matmul", 2e12, 0.0, 0, 100_000_000, 0.0),), ())
    plan = Plan((0,), ("fp16",), (Stage((0, 1), tensor_parallel=2),), 1, "stream")
    r, _ = run(g, topo_line(2), plan)
    assert close(r.makespan_s, 1.0 + 2 * 0.1)
    assert np.allclose(r.device_busy_s, [1.0, 1.0])


def test_data_parallel_replicas_alternate_microbatches():
    # stage 0: one device, 1 s; stage 1: two replicas of 2 s each -> period 1 s
    g = chain([1.0, 2.0])
    plan = Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((1, 2))), 8, "stream")
    r, _ = run(g, topo_line(3), plan)
    assert close(r.period_s, 1.0)
    assert np.allclose(r.device_busy_s, [8.0, 8.0, 8.0])


def test_explicit_order_replays_and_deadlock_is_reported():
    g = chain([1.0, 2.0])
    order = {0: ((0, 0, "F"), (1, 0, "F")), 1: ((1, 1, "F"), (0, 1, "F"))}
    plan = Plan((0, 1), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 2, "explicit", device_order=order)
    r, _ = run(g, topo_line(2), plan)
    # d1 runs microbatch 1 first: [2, 4], then microbatch 0: [4, 6]
    assert close(r.makespan_s, 6.0)
    assert np.allclose(r.microbatch_done_s, [6.0, 4.0])
    from distplan.core.errors import DistplanError
    bad = {0: ((0, 0, "F"), (1, 0, "F")), 1: ((1, 1, "F"), (0, 1, "F"))}
    bad_plan = Plan((0, 0), ("fp16",) * 2, (Stage((0,)), Stage((1,))), 2, "explicit",
                    device_order={0: ((0, 1, "F"), (0, 0, "F"), (1, 0, "F"), (1, 1, "F"))})
    with pytest.raises(DistplanError, match="deadlock"):
        run(g, topo_line(2), bad_plan)
    assert bad


def test_ideal_mode_drops_latency_and_matches_analytic_period():
    from distplan.costs.evaluate import plan_cost
    g = chain([1.0, 2.0, 1.0], elems=[400_000_000, 1_500_000_000])  # 0.8 s and 3 s on links
    plan = pipeline_plan(3, 64, "stream")
    r, pb = run(g, topo_line(3, latency_s=1.0), plan, ideal=True)
    assert close(r.period_s, 3.0) and close(plan_cost(pb, plan).period_s, 3.0)
    real, _ = run(g, topo_line(3, latency_s=1.0), plan)
    assert real.makespan_s > r.makespan_s


def test_memory_counts_static_and_stream_double_buffer():
    # o0 on d0 sends 1000 elems to o1 on d1 over a slow link (2 s each) while o0 takes 1 s:
    # double buffering keeps d0's own outputs at 2 x 2000 B, plus 1000 params x 2 B static;
    # d1's output (a sink) lives only while o1 runs
    g = chain([1.0, 1.0], elems=[1_000_000_000], params=1000, out_elems=1000)
    r, pb = run(g, topo_line(2), pipeline_plan(2, 6, "stream"))
    from distplan.costs.evaluate import plan_memory_bytes
    bound = plan_memory_bytes(pb, pipeline_plan(2, 6, "stream"))
    assert np.allclose(r.peak_own_memory_bytes, [2000 + 4000, 2000 + 2000])
    assert np.all(r.peak_own_memory_bytes <= bound)
    # the link is the bottleneck: 2 s per microbatch
    assert close(r.period_s, 2.0)
    assert math.isfinite(r.peak_memory_bytes.sum())


def test_fair_sharing_spans_in_trace():
    g, topo, plan = _two_tensor_problem()
    r, _ = run(g, topo, plan, link_model="fair", trace=True)
    link = sorted((e[1], e[1] + e[2]) for e in r.events if e[0] == 2)
    # A1 alone on [1, 2] then shared with A2 from 2: A2 done at 3.0, A1 at 3.5
    assert np.allclose(link, [(1.0, 3.5), (2.0, 3.0)], rtol=1e-12)
    assert close(r.link_busy_s[0], 2.5)


def test_device_with_two_slots_runs_two_tasks_at_once():
    kind = DeviceKind("dual", {"fp16": 1e12}, mem_capacity_bytes=1e15, mem_bw_bytes_per_s=1e12, efficiency=1.0,
                      concurrency=2)
    topo = Topology("one", {"dual": kind}, (Device("d0", "dual"),), ())
    ops = (Operator("a", "add", 1e12), Operator("b", "add", 2e12), Operator("c", "add", 1e12))
    g = Graph("par", ops, (Tensor("a", "c", 0),))
    plan = Plan((0, 0, 0), ("fp16",) * 3, (Stage((0,)),), 1, "stream")
    r, _ = run(g, topo, plan)
    # a [0, 1] and b [0, 2] side by side; c after a on the free slot: [1, 2]
    assert close(r.makespan_s, 2.0)
    assert close(r.device_busy_s[0], 4.0)


def test_standard_1f1b_window_bounds_the_period_with_communication():
    # 2 stages, f = b = 1 s, 0.5 s on the link each way. Standard 1F1B lets stage 0 hold
    # 2 microbatches, and microbatch m + 2's forward waits for m's backward, which needs a
    # round trip F0 + c + F1 + B1 + c + B0 = 5 s: period 5 / 2 = 2.5 s, above the busiest
    # server's 2 s (plan_cost). Ideal mode deepens the window and reaches 2 s.
    from distplan.costs.evaluate import plan_cost
    g = chain([1.0, 1.0], [1.0, 1.0], elems=[250_000_000], mode="training", kind="softmax")
    plan = pipeline_plan(2, 64, "1f1b")
    r, pb = run(g, topo_line(2), plan)
    assert close(r.period_s, 2.5) and r.steady
    assert close(plan_cost(pb, plan).period_s, 2.0)
    ideal, _ = run(g, topo_line(2), plan, ideal=True)
    assert close(ideal.period_s, 2.0)
    assert ideal.peak_own_memory_bytes[0] > r.peak_own_memory_bytes[0]
