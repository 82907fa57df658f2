"""Offloading to host memory (``costs.offload``): bytes and seconds by hand on 2-8 devices,
the plan file round trip, the checker's refusals, the what-if CLI."""
from __future__ import annotations

import dataclasses

import pytest

import distplan
from distplan.core.plan import Plan, Stage, plan_from_dict, plan_to_dict
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_memory_bytes, static_memory_bytes
from distplan.costs.iteration import estimate_iteration, optimizer_step_per_device_s
from distplan.sim import simulate
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

#: 1 TFLOP/s, a host link of 1 MB/s each way, host Adam at 100 MB/s
HOSTED = DeviceKind("hosted", {"fp16": 1e12}, mem_capacity_bytes=1e9, mem_bw_bytes_per_s=1e11, efficiency=1.0,
                    host_link_bytes_per_s=1e6, host_mem_bw_bytes_per_s=1e8)
BARE = dataclasses.replace(HOSTED, name="bare", host_link_bytes_per_s=0.0, host_mem_bw_bytes_per_s=0.0)


def _line(n: int, kind: DeviceKind = HOSTED) -> Topology:
    devs = tuple(Device(f"d{i}", kind.name) for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", 1e9), Link(f"d{i + 1}", f"d{i}", 1e9)]
    return Topology(f"line{n}", {kind.name: kind}, devs, tuple(links))


def _chain(n: int, mode: str = "training") -> Graph:
    """l<i>.mm: 1 GFLOP forward, 2 backward, 1000 parameters, 100 output elements."""
    ops = tuple(Operator(f"l{i}.mm", "matmul", 1e9, 2e9, 1000, 100, 0) for i in range(n))
    return Graph("chain", ops, tuple(Tensor(f"l{i}.mm", f"l{i + 1}.mm", 100) for i in range(n - 1)), mode=mode)


def _pipeline(n_dev: int, ops_per_stage: int, offload=(), M: int = 4, kind: DeviceKind = HOSTED, mode="training"):
    g = _chain(n_dev * ops_per_stage, mode)
    p = distplan.problem(g, _line(n_dev, kind), precisions="fp16", microbatches=M)
    plan = Plan(tuple(v // ops_per_stage for v in range(len(g.ops))), ("fp16",) * len(g.ops),
                tuple(Stage((k,), offload=tuple(offload)) for k in range(n_dev)), M,
                "1f1b" if mode == "training" else "stream")
    return p, plan


@pytest.mark.parametrize("n_dev", [2, 4, 8])
def test_optimizer_offload_moves_12_bytes_a_parameter_and_steps_on_the_host(n_dev):
    p, plain = _pipeline(n_dev, 2)
    _, off = _pipeline(n_dev, 2, ("optimizer",))
    # two ops of 1000 fp16 parameters a device: weights 2 B + gradients 2 B + Adam 12 B
    assert static_memory_bytes(p, plain).tolist() == [2 * 1000 * 16.0] * n_dev
    assert static_memory_bytes(p, off).tolist() == [2 * 1000 * 4.0] * n_dev
    # gradients down 4000 B at 1 MB/s, Adam (2000 x 24 B + 2 x 4000 B) at 100 MB/s, parameters up
    host_s = 4e-3 + (2000 * 24 + 8000) / 1e8 + 4e-3
    assert optimizer_step_per_device_s(p, off) == pytest.approx([host_s] * n_dev, rel=1e-12)
    device_s = (2000 * 24 + 8000) / 1e11
    assert optimizer_step_per_device_s(p, plain) == pytest.approx([device_s] * n_dev, rel=1e-12)
    a, b = simulate(p, plain), simulate(p, off)
    assert b.iteration_s - a.iteration_s == pytest.approx(host_s - device_s, rel=1e-9)
    # the analytic iteration moves by the same seconds (its pipeline is the plain plan's)
    assert (estimate_iteration(p, off).iteration_s - estimate_iteration(p, plain).iteration_s
            == pytest.approx(host_s - device_s, rel=1e-9))
    # both memories drop by the 12 B a parameter (this chain's simulated peak sits 200-600 B
    # above the checker's bound with or without offload: the linear rule's, costs.evaluate)
    assert (plan_memory_bytes(p, plain) - plan_memory_bytes(p, off)).tolist() == pytest.approx([2000 * 12.0] * n_dev)
    assert (a.peak_memory_bytes - b.peak_memory_bytes).tolist() == pytest.approx([2000 * 12.0] * n_dev)


def test_the_plan_file_keeps_what_a_stage_offloads():
    p, plan = _pipeline(2, 1, ("optimizer", "activations", "optimizer"))
    assert plan.stages[0].offload == ("activations", "optimizer")
    d = plan_to_dict(plan, p)
    assert d["stages"][0]["offload"] == ["activations", "optimizer"]
    assert plan_from_dict(d, p) == plan
    _, bare = _pipeline(2, 1)
    assert "offload" not in plan_to_dict(bare, p)["stages"][0]   # older files mean the same


def test_the_checker_names_what_cannot_be_offloaded():
    p, plan = _pipeline(2, 1, ("weights",))
    assert any("offload 'weights' unknown" in x for x in plan_violations(p, plan))
    p, plan = _pipeline(2, 1, ("optimizer",), kind=BARE)
    assert any("has no host link" in x for x in plan_violations(p, plan))
    p, plan = _pipeline(2, 1, ("optimizer",), mode="inference")
    assert any("training only" in x for x in plan_violations(p, plan))
    p, plan = _pipeline(2, 1, ("activations",))
    assert not plan_violations(p, plan)
    gpipe = dataclasses.replace(plan, schedule="gpipe")
    assert any("modelled for the 1f1b schedule" in x for x in plan_violations(p, gpipe))
