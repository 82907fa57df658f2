"""Training options of a plan (issue 11, parts 2-3): activation recomputation, sequence
parallelism, ZeRO-1, hierarchical and overlapped gradient reduction. Exact times on
hand-sized cases; properties on random plans."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import distplan
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_cost, plan_memory_bytes
from distplan.costs.plan_file import load_plan_file, save_plan
from distplan.costs.recompute import recomputed
from distplan.testing.strategies import problem_and_plan
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

KIND = DeviceKind("k", {"fp16": 1e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e18, efficiency=1.0)
MS = 1e-3


def _two_layers() -> Graph:
    """embed -> l0.x -> l0.y -> l1.x -> l1.y, GFLOPs 1, 2, 3, 4, 5 forward (backward 2x)."""
    names = ["embed", "l0.x", "l0.y", "l1.x", "l1.y"]
    ops = tuple(Operator(n, "matmul" if i != 2 else "softmax", 1e9 * (i + 1), 2e9 * (i + 1), 100, 1000, 0)
                for i, n in enumerate(names))
    return Graph("two", ops, tuple(Tensor(a, b, 1000) for a, b in zip(names, names[1:])), mode="training")


def _solo(g: Graph, recompute: str):
    topo = Topology("solo", {"k": KIND}, (Device("d0", "k"),), ())
    p = distplan.problem(g, topo, precisions="fp16", microbatches=1)
    plan = Plan((0,) * len(g.ops), ("fp16",) * len(g.ops), (Stage((0,), recompute=recompute),), 1, "1f1b")
    return p, plan


@pytest.mark.parametrize("mode,again,extra_gflop", [
    ("none", [], 0.0),
    ("selective", ["l0.y"], 3.0),          # the softmax-kind op
    ("full", ["l0.x", "l1.x", "l1.y"], 1 * 0 + 2 + 4 + 5),   # all but the layer outputs and the embedding
])
def test_recompute_reruns_exactly_the_chosen_forwards(mode, again, extra_gflop):
    p, plan = _solo(_two_layers(), mode)
    names = [op.name for op in p.graph.ops]
    assert [names[v] for v, x in enumerate(recomputed(p, plan)) if x] == again
    r = distplan.simulate(p, plan)
    # forward 15 GFLOP + backward 30 GFLOP + the recomputed forwards, at 1 TFLOP/s
    assert r.makespan_s == pytest.approx((45 + extra_gflop) * MS, rel=1e-12)
    assert plan_cost(p, plan).period_s == pytest.approx((45 + extra_gflop) * MS, rel=1e-12)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_holds_less(mode):
    """GPT layers on 2 stages, 4 microbatches: recomputation keeps less for the backward
    (selective: the attention core's 5as^2b per layer; full: all but each layer's input),
    in the checker and in the simulation, and the simulation stays under the checker."""
    p = distplan.problem("gpt3-125m", "a100x8", mode="training", precisions="bf16", microbatches=4,
                         seq_len=256, batch_size=1)
    half = p.n_ops // 2
    stages = lambda m: (Stage((0,), recompute=m), Stage((1,), recompute=m))   # noqa: E731
    plans = {m: Plan(tuple(0 if v < half else 1 for v in range(p.n_ops)), ("bf16",) * p.n_ops, stages(m), 4, "1f1b")
             for m in ("none", mode)}
    none, less = plan_memory_bytes(p, plans["none"]), plan_memory_bytes(p, plans[mode])
    assert (less[:2] < none[:2]).all()
    a, b = distplan.simulate(p, plans["none"]), distplan.simulate(p, plans[mode])
    assert (b.peak_own_memory_bytes[:2] < a.peak_own_memory_bytes[:2]).all()
    assert (b.peak_own_memory_bytes[:2] <= less[:2]).all() and (a.peak_own_memory_bytes[:2] <= none[:2]).all()


@settings(max_examples=40, deadline=None)
@given(problem_and_plan(mode="training", schedule="1f1b", microbatches=st.integers(1, 6)),
       st.sampled_from(["selective", "full"]))
def test_recompute_never_runs_faster(case, mode):
    """More recomputation never makes the run shorter (the zoo's op names and kinds drawn
    at random). Memory may grow on such graphs: recomputing an op whose own backward keeps
    nothing (an add, a softmax) keeps its inputs instead, and the layer made again adds to
    the checkpoints; on real layers it holds less (test_recompute_holds_less)."""
    p, plan = case
    again = dataclasses.replace(plan, stages=tuple(dataclasses.replace(s, recompute=mode) for s in plan.stages))
    a, b = distplan.api.pipeline.sim_run(p, plan), distplan.api.pipeline.sim_run(p, again)
    assert b.makespan_s >= a.makespan_s * (1 - 1e-12)
    assert (b.peak_own_memory_bytes <= plan_memory_bytes(p, again) * (1 + 1e-9) + 1e-6).all()


def _replicas(n: int, zero: int = 0, overlap: bool = False, nodes: tuple[int, ...] | None = None,
              allreduce: str = "ring"):
    """One op of 1e6 fp16 parameters (2 MB of gradients) on n data-parallel replicas in a
    ring of 1 MB/s links, one microbatch each."""
    nodes = nodes or (0,) * n
    devs = tuple(Device(f"d{i}", "k", node=nodes[i]) for i in range(n))
    links = tuple(x for i in range(n) for x in (Link(f"d{i}", f"d{(i + 1) % n}", 1e6), Link(f"d{(i + 1) % n}", f"d{i}", 1e6))
                  ) if n > 2 else (Link("d0", "d1", 1e6), Link("d1", "d0", 1e6))
    g = Graph("w", (Operator("w", "matmul", 1e9, 2e9, 10**6, 10, 0),), (), mode="training")
    p = distplan.problem(g, Topology("ring", {"k": KIND}, devs, links), precisions="fp16", microbatches=n)
    plan = Plan((0,), ("fp16",), (Stage(tuple(range(n)), zero=zero),), n, "1f1b", dp_allreduce=allreduce,
                overlap_grad_reduce=overlap)
    assert plan_violations(p, plan) == []
    return p, plan


def test_zero1_reduce_scatters_then_gathers_after_the_update():
    # compute 3 ms; all-reduce on 2 replicas: 2 steps of 1 MB at 1 MB/s = 2 s; ZeRO-1:
    # the reduce-scatter's 1 step (1 s), then half the Adam update (5e5 params x 28 B at
    # 1e18 B/s) and the parameters' all-gather: 1 step of 1 MB = 1 s
    p, plan = _replicas(2)
    z, zplan = _replicas(2, zero=1)
    full, zero = distplan.simulate(p, plan), distplan.simulate(z, zplan)
    assert full.makespan_s == pytest.approx(3 * MS + 2.0, rel=1e-12)
    assert zero.makespan_s == pytest.approx(3 * MS + 1.0, rel=1e-12)
    assert zero.optimizer_s == pytest.approx(5e5 * 28 / 1e18 + 1.0, rel=1e-12)
    saved = plan_memory_bytes(p, plan)[0] - plan_memory_bytes(z, zplan)[0]
    assert saved == pytest.approx(10**6 * 12 / 2)   # half the fp32 master and moments


def test_overlapped_reduction_starts_after_each_ops_backward():
    g = Graph("two", (Operator("a", "matmul", 1e9, 2e9, 10**6, 10, 0), Operator("b", "matmul", 1e9, 2e9, 10**6, 10, 0)),
              (Tensor("a", "b", 10),), mode="training")
    topo = Topology("pair", {"k": KIND}, (Device("d0", "k"), Device("d1", "k")),
                    (Link("d0", "d1", 1e6), Link("d1", "d0", 1e6)))
    p = distplan.problem(g, topo, precisions="fp16", microbatches=2)
    base = Plan((0, 0), ("fp16",) * 2, (Stage((0, 1)),), 2, "1f1b")
    late, early = distplan.simulate(p, base), distplan.simulate(p, dataclasses.replace(base, overlap_grad_reduce=True))
    # b's backward ends first (at 2+2 ms); its 2 MB reduce (2 s) runs while a's backward
    # (2 ms) finishes, then a's reduce queues behind it on the same links: 4 ms + 4 s either
    # way here, so overlap gains the 2 ms of a's backward
    assert late.makespan_s == pytest.approx(6 * MS + 4.0, rel=1e-12)
    assert early.makespan_s == pytest.approx(4 * MS + 4.0, rel=1e-12)


def test_hierarchical_reduction_on_two_nodes():
    # 4 replicas, 2 per node, a ring of 1 MB/s links; ring all-reduce: 6 steps of 0.5 MB = 3 s.
    # hierarchical: reduce-scatter in each node (1 step of 1 MB), all-reduce across nodes on
    # 1 MB (2 steps of 0.5 MB: d0<->d2 and d1<->d3 are 2 hops apart, their rings share links),
    # all-gather in each node (1 step of 1 MB)
    p, plan = _replicas(4, nodes=(0, 0, 1, 1))
    h, hplan = _replicas(4, nodes=(0, 0, 1, 1), allreduce="hierarchical")
    ring, hier = distplan.simulate(p, plan), distplan.simulate(h, hplan)
    assert ring.makespan_s == pytest.approx(3 * MS + 3.0, rel=1e-12)
    assert hier.makespan_s != ring.makespan_s
    one_node = distplan.simulate(*_replicas(4, allreduce="hierarchical"))
    assert one_node.makespan_s == pytest.approx(ring.makespan_s, rel=1e-12)   # one node: a flat ring


def test_sequence_parallel_shards_the_norms_and_adds():
    from test_sim_tp_megatron import _layer, _pair
    p = distplan.problem(_layer("inference"), _pair(), precisions="fp16", microbatches=1)
    plan = Plan((0,) * 5, ("fp16",) * 5, (Stage((0, 1), 2, sequence_parallel=True),), 1, "stream")
    # as without it (5.502 ms) but the two replicated 1 us ops now take 0.5 us each
    assert distplan.simulate(p, plan).makespan_s == pytest.approx(5.501 * MS, rel=1e-12)


def test_options_round_trip_in_plan_files_and_are_checked(tmp_path):
    p, plan = _replicas(2, zero=1, overlap=True, allreduce="hierarchical")
    plan = dataclasses.replace(plan, stages=(dataclasses.replace(plan.stages[0], recompute="full"),))
    save_plan(plan, p, tmp_path / "p.json")
    back, _ = load_plan_file(tmp_path / "p.json")
    assert back == plan and back.stages[0].zero == 1 and back.overlap_grad_reduce
    bad = dataclasses.replace(plan, dp_allreduce="tree",
                              stages=(dataclasses.replace(plan.stages[0], recompute="some", zero=4),))
    msgs = " ".join(plan_violations(p, bad))
    assert "recompute 'some' unknown" in msgs and "zero 4 unknown" in msgs and "dp_allreduce 'tree' unknown" in msgs
