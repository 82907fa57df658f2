"""The simulator under exposed communication (costs.exposed): a transfer is a send task
on the sender's device and a receive task on the receiver's, each as long as the
transfer, with its link hops between; in ideal mode the steady-state period equals
plan_cost's (hypothesis), and a transfer skipping a stage never touches its device."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.core.plan import Plan, Stage
from distplan.costs.evaluate import plan_cost
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.sim import SimOptions, simulate
from distplan.testing.strategies import problem_and_plan
from distplan.topologies.builders import duplex
from distplan.topologies.topology import Device, DeviceKind, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def exposed(pb):
    return build_problem(pb.graph, pb.topology, dataclasses.replace(pb.options, comm="exposed"))


@FAST
@given(problem_and_plan(mode=st.sampled_from(["inference", "training"]), microbatches=st.integers(1, 48),
                        replicas=True))
def test_ideal_period_equals_plan_cost(x):
    pb, plan = x
    pb = exposed(pb)
    if plan.schedule == "gpipe":
        plan = dataclasses.replace(plan, schedule="1f1b")
    r = simulate(pb, plan, SimOptions(ideal=True))
    assert r.steady
    assert r.period_s == pytest.approx(plan_cost(pb, plan).period_s, rel=1e-9)


def test_skipped_stage_is_not_busy_and_transfers_are_deduplicated():
    """a -> b, a -> c, b -> c on a chain d0 - d1 - d2, stages a | b | c: d1 serves b and
    two transfers (a in, b out), d0 sends a twice (to stage 1, and to stage 2 over both links)."""
    kind = DeviceKind("acc", {"fp16": 1e12}, 1e12, 1e12, 1.0)
    ops = (Operator("a", "matmul", 1.0, 1.0, out_elems=1000, fwd_s=1e-3),
           Operator("b", "matmul", 1.0, 1.0, out_elems=500, fwd_s=2e-3),
           Operator("c", "matmul", 1.0, 1.0, out_elems=10, fwd_s=3e-3))
    g = Graph("three", ops, (Tensor("a", "b", 1000), Tensor("a", "c", 1000), Tensor("b", "c", 500)))
    topo = Topology("chain3", {"acc": kind}, tuple(Device(f"d{i}", "acc") for i in range(3)),
                    tuple(duplex("d0", "d1", 1e6, 1e-4) + duplex("d1", "d2", 2e6, 1e-4)))
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16",), microbatches=8, comm="exposed"))
    plan = Plan((0, 1, 2), ("fp16",) * 3, (Stage((0,)), Stage((1,)), Stage((2,))), 8, "stream")
    r = simulate(pb, plan, SimOptions(ideal=True))
    want = [1e-3 + 2.1e-3 + 3.2e-3, 2e-3 + 2.1e-3 + 0.6e-3, 3e-3 + 3.2e-3 + 0.6e-3]
    assert (r.device_busy_s / 8).tolist() == pytest.approx(want)
    assert r.period_s == pytest.approx(max(want))


@FAST
@given(problem_and_plan(mode=st.sampled_from(["inference", "training"]), microbatches=st.integers(1, 24),
                        replicas=True), st.sampled_from(["fifo", "fair", "free"]))
def test_realistic_runs_finish_no_faster_than_the_busiest_device(x, lm):
    pb, plan = x
    pb = exposed(pb)
    if plan.schedule == "gpipe":
        plan = dataclasses.replace(plan, schedule="1f1b")
    r = simulate(pb, plan, SimOptions(link_model=lm))
    assert r.period_s >= max(plan_cost(pb, plan).device_load_s) * (1 - 1e-9)


def test_a_tensor_without_bytes_is_no_transfer():
    """a -> c carries no bytes (a dependency only), a -> b 1000 elements, stages a | b c:
    plan_cost charges the one sending edge; the simulator made a send and a receive task
    for the empty tensor too (each a link latency: hypothesis found the ideal period 1.79
    us above plan_cost's), and now only makes the reader wait for its producer."""
    kind = DeviceKind("acc", {"fp16": 1e12}, 1e12, 1e12, 1.0)
    ops = (Operator("a", "matmul", 1.0, 1.0, out_elems=1000, fwd_s=1e-3),
           Operator("b", "matmul", 1.0, 1.0, out_elems=10, fwd_s=2e-3),
           Operator("c", "matmul", 1.0, 1.0, out_elems=10, fwd_s=3e-3))
    g = Graph("empty", ops, (Tensor("a", "c", 0), Tensor("c", "b", 10)))
    topo = Topology("two", {"acc": kind}, (Device("d0", "acc"), Device("d1", "acc")),
                    tuple(duplex("d0", "d1", 1e6, 1e-4)))
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16",), microbatches=4, comm="exposed"))
    plan = Plan((0, 1, 1), ("fp16",) * 3, (Stage((0,)), Stage((1,))), 4, "stream")
    r = simulate(pb, plan, SimOptions(ideal=True))
    assert r.period_s == pytest.approx(plan_cost(pb, plan).period_s, rel=1e-12) == pytest.approx(5e-3)
