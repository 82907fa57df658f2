"""Coarsening: exact hand-worked cases and hypothesis properties over random DAGs (totals
conserved exactly, result acyclic, every coarse plan expands to a feasible fine plan)."""
from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.costs.evaluate import plan_cost, plan_memory_bytes
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import check_plan
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.coarsen import coarsen, expand_plan
from distplan.workloads.graph import Graph, Operator, Tensor

KINDS = ["matmul", "softmax", "layernorm", "add", "elementwise", "activation", "reshape", "embedding"]
BIG = DeviceKind("big", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e15,
                 mem_bw_bytes_per_s=1e11, efficiency=0.8, launch_overhead_s=1e-6)


def _line(n: int) -> Topology:
    devs = tuple(Device(f"d{i}", "big") for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", 1e9), Link(f"d{i + 1}", f"d{i}", 1e9)]
    return Topology(f"line{n}", {"big": BIG}, devs, tuple(links))


@st.composite
def dags(draw, max_ops: int = 30) -> Graph:
    """Random DAGs with integer-valued costs (as every importer and the zoo produce)."""
    n = draw(st.integers(1, max_ops))
    ints = st.integers(0, 10**9)
    ops = tuple(Operator(f"v{i}", draw(st.sampled_from(KINDS)), float(draw(ints)), float(draw(ints)),
                         draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)), float(draw(ints)))
                for i in range(n))
    if n >= 2 and draw(st.booleans()):   # one tied weight (an LM head reading the embedding)
        a, b = sorted(draw(st.sets(st.integers(0, n - 1), min_size=2, max_size=2)))
        ops = tuple(dataclasses.replace(op, tied_to=f"v{a}", tied_elems=draw(st.integers(0, 10**6)))
                    if i == b else op for i, op in enumerate(ops))
    tensors = []
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=3)):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, 10**6))))
    mode = draw(st.sampled_from(["inference", "training"]))
    if mode == "training" and not any(op.bwd_flops > 0 for op in ops):   # build_problem refuses a free backward
        ops = (dataclasses.replace(ops[0], bwd_flops=1.0),) + ops[1:]
    return Graph("rand", ops, tuple(tensors), mode=mode)


def _totals(g: Graph) -> tuple:
    return (g.fwd_flops, g.bwd_flops, g.param_elems, sum(op.out_elems for op in g.ops),
            math.fsum(op.touched_elems for op in g.ops))


def _op(name: str, kind: str, fwd: float, params: int = 0) -> Operator:
    return Operator(name, kind, fwd, 2 * fwd, params, 10, 30.0)


# --- hand-worked cases -------------------------------------------------------------------

def test_cheap_chain_fuses_into_producer():
    ops = (_op("mm1", "matmul", 100, 5), _op("bias", "add", 1, 1), _op("act", "activation", 8),
           _op("view", "reshape", 0), _op("mm2", "matmul", 100, 5))
    g = Graph("chain", ops, tuple(Tensor(a.name, b.name, 10) for a, b in zip(ops, ops[1:])))
    c = coarsen(g)
    assert [op.name for op in c.coarse.ops] == ["mm1", "mm2"]
    assert c.fine_to_coarse == (0, 0, 0, 0, 1)
    assert c.coarse.ops[0].fwd_flops == 109 and c.coarse.ops[0].param_elems == 6
    assert c.coarse.ops[0].out_elems == 40 and c.coarse.ops[0].touched_elems == 120
    assert c.coarse.tensors == (Tensor("mm1", "mm2", 10),)


def test_residual_add_fuses_into_its_larger_producer():
    # x -> a -> add, x -> add (residual); add's larger input comes from a
    ops = (_op("x", "matmul", 10), _op("a", "matmul", 10), _op("add", "add", 1))
    g = Graph("res", ops, (Tensor("x", "a", 5), Tensor("a", "add", 7), Tensor("x", "add", 5)))
    c = coarsen(g)
    assert c.fine_to_coarse == (0, 1, 1)
    assert c.coarse.tensors == (Tensor("x", "a", 10),)  # both tensors from x, summed


def test_no_contraction_that_would_close_a_cycle():
    # u -> w -> v and u -> v: contracting (u, v) first would make {u,v} -> w -> {u,v}
    ops = (_op("u", "matmul", 1), _op("w", "matmul", 1000), _op("v", "matmul", 1))
    g = Graph("tri", ops, (Tensor("u", "w", 1), Tensor("w", "v", 1), Tensor("u", "v", 100)))
    c = coarsen(g, target_ops=2)
    assert len(c.coarse.ops) == 2
    assert c.fine_to_coarse in ((0, 0, 1), (0, 1, 1))


def test_disconnected_parts_still_reach_the_target():
    ops = tuple(_op(f"o{i}", "matmul", 10 + i) for i in range(6))
    c = coarsen(Graph("bits", ops, ()), target_ops=2)
    assert len(c.coarse.ops) == 2 and c.coarse.fwd_flops == sum(10 + i for i in range(6))


def test_bad_target_and_bad_plan_size():
    g = Graph("one", (_op("a", "matmul", 1),), ())
    for bad in (0, -3, 1.5, True):
        with pytest.raises(DistplanError, match="target"):
            coarsen(g, bad)
    c = coarsen(g)
    plan = Plan((0, 0), ("fp16", "fp16"), (Stage((0,)),), 1, "stream")
    with pytest.raises(DistplanError, match="coarse graph"):
        expand_plan(c, plan)


def test_expand_explicit_order_runs_members_forward_then_reversed():
    ops = (_op("mm1", "matmul", 100), _op("act", "activation", 1), _op("mm2", "matmul", 100))
    g = Graph("c3", ops, (Tensor("mm1", "act", 1), Tensor("act", "mm2", 1)), mode="training")
    c = coarsen(g)
    assert c.fine_to_coarse == (0, 0, 1)
    order = {0: ((0, 0, "F"), (0, 1, "F"), (0, 1, "B"), (0, 0, "B"))}
    fine = expand_plan(c, Plan((0, 0), ("fp16", "int8"), (Stage((0,)),), 1, "explicit", order))
    assert fine.op_stage == (0, 0, 0) and fine.op_precision == ("fp16", "fp16", "int8")
    assert fine.device_order == {0: ((0, 0, "F"), (0, 1, "F"), (0, 2, "F"), (0, 2, "B"),
                                     (0, 1, "B"), (0, 0, "B"))}
    assert fine.predicted["coarse_ops"] == 2


# --- properties ------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(dags(), st.integers(1, 30), st.booleans())
def test_totals_conserved_and_acyclic(g, target, fuse):
    c = coarsen(g, target_ops=target, fuse_cheap=fuse)
    assert _totals(c.coarse) == _totals(g)
    assert len(c.coarse.ops) <= max(target, 1)
    assert len(c.fine_to_coarse) == len(g.ops)
    assert sorted({*c.fine_to_coarse}) == list(range(len(c.coarse.ops)))
    # acyclic: Graph() validated it; and every fine tensor goes forward in the coarse order
    cross = 0
    for u, v, e in g.edges():
        cu, cv = c.fine_to_coarse[u], c.fine_to_coarse[v]
        assert cu <= cv
        cross += e if cu != cv else 0
    assert sum(t.elems for t in c.coarse.tensors) == cross
    for ci, op in enumerate(c.coarse.ops):  # the coarse op is named after one of its members
        assert op.name in {g.ops[v].name for v in c.members(ci)}


@settings(max_examples=60, deadline=None)
@given(dags(max_ops=20))
def test_fusion_only_never_adds_operators(g):
    c = coarsen(g)
    assert _totals(c.coarse) == _totals(g)
    assert len(c.coarse.ops) <= len(g.ops)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(max_ops=20), st.integers(1, 8), st.integers(1, 3), st.data())
def test_any_coarse_plan_expands_to_a_feasible_fine_plan(g, target, n_stages, data):
    c = coarsen(g, target_ops=target)
    cg = c.coarse
    # a random monotone stage assignment: at least the stage of every producer
    stage = []
    preds = cg.preds()
    for v in range(len(cg.ops)):
        lo = max((stage[u] for u in preds[v]), default=0)
        stage.append(data.draw(st.integers(lo, n_stages - 1)))
    prec = tuple(data.draw(st.sampled_from(["fp16", "int8"])) for _ in cg.ops)
    topo = _line(n_stages)
    sched = "1f1b" if g.mode == "training" else "stream"
    plan = Plan(tuple(stage), prec, tuple(Stage((k,)) for k in range(n_stages)), 4, sched)
    # the coarsening property, for any precisions: int8 may go on any op here
    opts = ProblemOptions(precisions=("fp16", "int8"), microbatches=4, low_bit_ops="all")
    pc, pf = build_problem(cg, topo, opts), build_problem(g, topo, opts)
    check_plan(pc, plan)
    fine = expand_plan(c, plan)
    check_plan(pf, fine)
    mf, mc = plan_memory_bytes(pf, fine), plan_memory_bytes(pc, plan)
    if sched == "stream":   # a coarse op may send a tensor twice over; never less than its members
        assert np.all(mf <= mc * (1 + 1e-12))
    else:
        # the pipeline space's linear charge (what its MILP, DP and heuristic bound on the coarse
        # problem) is additive, so equal on both; the checker takes the smaller of it and the
        # saved-input model, so the fine plan never needs more than the coarse planners allowed
        from distplan.costs.evaluate import static_memory_bytes, training_activation_bytes
        lin_c = static_memory_bytes(pc, plan) + training_activation_bytes(pc, plan, linear=True)
        lin_f = static_memory_bytes(pf, fine) + training_activation_bytes(pf, fine, linear=True)
        np.testing.assert_allclose(lin_f, lin_c, rtol=1e-12)
        assert np.all(mf <= lin_c * (1 + 1e-12))
    assert plan_cost(pf, fine).period_s >= plan_cost(pc, plan).period_s * (1 - 1e-12)
