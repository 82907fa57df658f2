"""Megatron-style tensor parallelism in the simulator (issue 11, part 1): an op's
``tp_role`` decides its collectives. Exact times worked out by hand on two devices."""
from __future__ import annotations

import pytest

import distplan
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import graph_from_dict, graph_to_dict
from distplan.workloads.zoo import get_workload

# 1 TFLOP/s fp16 at full efficiency, no launch cost, memory traffic free: time = flops / 1e12
KIND = DeviceKind("k", {"fp16": 1e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e18, efficiency=1.0)
MS = 1e-3


def _pair(bw: float = 1e6) -> Topology:
    return Topology("pair", {"k": KIND}, (Device("d0", "k"), Device("d1", "k")),
                    (Link("d0", "d1", bw), Link("d1", "d0", bw)))


def _layer(mode: str) -> Graph:
    """inp (replicated) -> col (column) -> act (sharded) -> row (row) -> add (replicated),
    1,000-element tensors (2,000 bytes at fp16)."""
    ops = (Operator("inp", "add", 1e6, 1e6, 0, 1000, 0, tp_role="replicated"),
           Operator("col", "matmul", 4e9, 8e9, 10, 1000, 0, tp_role="column"),
           Operator("act", "activation", 1e9, 2e9, 0, 1000, 0, tp_role="sharded"),
           Operator("row", "matmul", 2e9, 4e9, 10, 1000, 0, tp_role="row"),
           Operator("add", "add", 1e6, 1e6, 0, 1000, 0, tp_role="replicated"))
    names = [o.name for o in ops]
    return Graph("layer", ops, tuple(Tensor(a, b, 1000) for a, b in zip(names, names[1:])), mode=mode)


def _run(mode: str, schedule: str):
    p = distplan.problem(_layer(mode), _pair(), precisions="fp16", microbatches=1, schedule=schedule)
    return distplan.simulate(p, Plan((0,) * 5, ("fp16",) * 5, (Stage((0, 1), 2),), 1, schedule))


def test_forward_all_reduces_only_after_the_row_parallel_op():
    # replicated ops run whole on each rank (1 us each); col, act, row divide by 2:
    # 2 + 0.5 + 1 ms; one ring all-reduce of row's 2,000 bytes on 2 devices: 2 steps of
    # 1,000 bytes at 1 MB/s = 2 ms. (The generic rule would also all-reduce col's output.)
    r = _run("inference", "stream")
    assert r.makespan_s == pytest.approx(0.001 * MS + 3.5 * MS + 2 * MS + 0.001 * MS, rel=1e-12)


def test_backward_all_reduces_the_column_parallel_input_gradient():
    # forward as above (5.502 ms); backward: add 1 us, row 2 ms, act 1 ms, col 4 ms, then
    # col's input gradient (2,000 bytes) all-reduced: 2 ms, inp 1 us. Row's backward needs
    # no collective (its input gradient stays sharded).
    r = _run("training", "gpipe")
    assert r.makespan_s == pytest.approx(5.502 * MS + 9.002 * MS, rel=1e-12)


def test_more_bandwidth_is_never_slower():
    slow = distplan.simulate(*_plan_on(_pair(1e6)))
    fast = distplan.simulate(*_plan_on(_pair(1e9)))
    assert fast.makespan_s < slow.makespan_s


def _plan_on(topo):
    p = distplan.problem(_layer("inference"), topo, precisions="fp16", microbatches=4)
    return p, Plan((0,) * 5, ("fp16",) * 5, (Stage((0, 1), 2),), 4, "stream")


def test_zoo_transformers_carry_megatron_roles():
    g = get_workload("gpt2", seq_len=128)
    role = {op.name.rsplit(".", 1)[-1]: op.tp_role for op in g.ops}
    assert role == {"embed": "vocab_embedding", "norm1": "replicated", "qkv": "column", "attn_score": "sharded",
                    "softmax": "sharded", "attn_context": "sharded", "proj": "row", "add1": "replicated",
                    "norm2": "replicated", "ffn1": "column", "act": "sharded", "ffn2": "row",
                    "add2": "replicated", "final_norm": "replicated", "head": "vocab_head"}
    assert get_workload("bert-base").ops[-1].tp_role == "replicated"   # the pooler


def test_roles_round_trip_and_unknown_roles_are_refused():
    g = _layer("inference")
    assert graph_from_dict(graph_to_dict(g)) == g
    d = graph_to_dict(g)
    d["ops"][0]["tp_role"] = "diagonal"
    with pytest.raises(DistplanError, match="tp_role 'diagonal' unknown"):
        graph_from_dict(d)


def test_llama_7b_tp8_is_its_hand_count():
    """llama-7b, one sample of 2,048 tokens, fp16, tp 8 on dgx-h100: every op's time
    divided by 8 (replicated norms and adds whole) plus 65 ring all-reduces (2 per layer
    and the embedding) of 2,048 x 4,096 fp16 = 16.78 MB: 14 steps of 2.1 MB, each across
    the NVSwitch's 2 hops store-and-forward at 450 GB/s + 0.5 us per hop."""
    p = distplan.problem("llama-7b", "dgx-h100", precisions="fp16", microbatches=1)
    launch = float(p.cast_fixed_s[0])
    comp = sum(float(p.fwd_time_s[v, 0, 0]) if op.tp_role == "replicated"
               else (float(p.fwd_time_s[v, 0, 0]) - launch) / 8 + launch for v, op in enumerate(p.graph.ops))
    n_ar = sum(op.tp_role in ("row", "vocab_embedding") for op in p.graph.ops)
    ring = 14 * 2 * (2048 * 4096 * 2 / 8 / 450e9 + 0.5e-6)
    r = distplan.simulate(p, Plan((0,) * p.n_ops, ("fp16",) * p.n_ops, (Stage(tuple(range(8)), 8),), 1, "stream"))
    assert n_ar == 65
    assert r.makespan_s == pytest.approx(comp + n_ar * ring, rel=1e-9)
    one = distplan.simulate(p, Plan((0,) * p.n_ops, ("fp16",) * p.n_ops, (Stage((0,)),), 1, "stream"))
    assert one.makespan_s / r.makespan_s > 2.5   # 54.8 ms -> 19.4 ms (it was no faster before)


def _dp_pp(workload: str, topo: str, dp: int, pp: int, M: int):
    p = distplan.problem(workload, topo, precisions="fp16", microbatches=M, mode="training", schedule="1f1b")
    V = p.n_ops
    plan = Plan(tuple(v * pp // V for v in range(V)), ("fp16",) * V,
                tuple(Stage(tuple(range(k * dp, (k + 1) * dp))) for k in range(pp)), M, "1f1b")
    return (distplan.simulate(p, plan).throughput_per_s,
            distplan.simulate(p, plan, distplan.SimOptions(ideal=True)).throughput_per_s)


@pytest.mark.parametrize("case", [("bert-large", "dgx-a100", 4, 2, 16), ("gpt3-1.3b", "a100x16", 4, 4, 16)])
def test_data_x_pipeline_1f1b_keeps_its_window_per_replica(case):
    """The 1F1B window counts each replica's own microbatches: a data x pipeline hybrid
    is not starved (it ran at 1/2 and 1/3.5 of its ideal rate: 940 vs 1,881 and 39 vs
    136 samples/s)."""
    real, ideal = _dp_pp(*case)
    assert real == pytest.approx(ideal, rel=0.01)


def test_iteration_adds_the_optimizer_step_to_the_run():
    """One op, one device, one microbatch of training: the run is forward + backward;
    the step adds one Adam update of 1e6 fp16 parameters: (24 + 2 x 2) bytes each at
    1e18 B/s, no launch cost."""
    g = Graph("one", (Operator("w", "matmul", 1e9, 2e9, 10**6, 10, 0),), (), mode="training")
    topo = Topology("solo", {"k": KIND}, (Device("d0", "k"),), ())
    p = distplan.problem(g, topo, precisions="fp16", microbatches=1)
    r = distplan.simulate(p, Plan((0,), ("fp16",), (Stage((0,)),), 1, "1f1b"))
    assert r.makespan_s == pytest.approx(3 * MS, rel=1e-12)
    assert r.optimizer_s == pytest.approx(10**6 * 28 / 1e18, rel=1e-12)
    assert r.iteration_s == pytest.approx(r.makespan_s + r.optimizer_s, rel=1e-15)
    assert r.step_throughput_per_s == pytest.approx(1 / r.iteration_s, rel=1e-12)


def test_a_pipeline_step_is_slower_than_its_steady_rate():
    p = distplan.problem("gpt2", "dgx-a100", precisions="fp16", microbatches=16, mode="training", seq_len=256)
    V = p.n_ops
    plan = Plan(tuple(v * 4 // V for v in range(V)), ("fp16",) * V, tuple(Stage((2 * k, 2 * k + 1)) for k in range(4)),
                16, "1f1b")
    r = distplan.simulate(p, plan)
    assert r.optimizer_s > 0 and r.step_throughput_per_s < r.throughput_per_s
    # fill and drain: at least (K - 1) microbatch slots of 16 are not in steady state
    assert r.iteration_s >= r.period_s * 16 * (1 + 3 / 16) * 0.99
