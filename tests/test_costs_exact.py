"""Cost models on hand-computed instances."""
from __future__ import annotations

import math

import pytest

from conftest import CHIP, chain_graph, line_topology
from distplan.costs import ProblemOptions, build_problem
from distplan.costs.collectives import (Transfers, all_gather_s, all_to_all_s, bottleneck_s_per_byte,
                                        boundary_links, gradient_reduction_parts, gradient_reduction_s,
                                        reduce_scatter_s, reduction_size, reduction_transfers, ring_allreduce_s,
                                        route_s, store_forward_coefficients)
from distplan.topologies.topology import Device, Link, Topology
from distplan.costs.compute import op_time_s, roofline_time_s
from distplan.costs.evaluate import plan_cost
from distplan.costs.memory import activation_factors, inflight_microbatches, send_elems, static_bytes
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import check_plan, plan_violations


def test_roofline_compute_and_memory_bound():
    assert roofline_time_s(2e12, 0, CHIP, "fp16") == pytest.approx(2.0, rel=1e-15)
    assert roofline_time_s(2e12, 0, CHIP, "int8") == pytest.approx(1.0, rel=1e-15)
    assert roofline_time_s(1.0, 1e11, CHIP, "fp16") == pytest.approx(1.0, rel=1e-15)
    assert op_time_s(0, 5e10, CHIP, "fp16") == pytest.approx(1.0, rel=1e-15)  # 1e11 bytes at 2 B
    assert math.isinf(roofline_time_s(1, 1, CHIP, "fp32"))


def test_transfer_ring_and_cast():
    t = line_topology(3, bw=1e9, latency_s=1e-6)
    # every op may compute at int8 (a cast is a kernel of its own, not fused into a product)
    p = build_problem(chain_graph(2), t, ProblemOptions(precisions=("fp16", "int8"), low_bit_ops="all"))
    # store and forward d0 -> d1 -> d2: per hop 1 us + 1e9 B at 1e9 B/s
    assert route_s(p, 0, 2, 1e9) == pytest.approx(2 * (1e-6 + 1.0), rel=1e-15)
    assert route_s(p, 1, 1, 1e9) == 0.0
    # ring over d0,d1: 2 steps of n_bytes/2; each step 1 hop
    assert ring_allreduce_s(p, [0, 1], 2e9) == pytest.approx(2 * (1e-6 + 1.0), rel=1e-15)
    # one node: the hierarchical reduction is the flat ring
    assert gradient_reduction_s(p, [0, 1], 2e9, hierarchical=True, zero=0) == ring_allreduce_s(p, [0, 1], 2e9)
    # reduce-scatter and all-gather: one step of 1e9 B each
    assert reduce_scatter_s(p, [0, 1], 2e9) == pytest.approx(1e-6 + 1.0, rel=1e-15)
    assert all_gather_s(p, [0, 1, 2], 3e9) == pytest.approx(2 * 2 * (1e-6 + 1.0), rel=1e-15)   # d2 -> d0: 2 hops
    # all-to-all over d0,d1,d2, 3e9 B each: round 1 (i -> i+1) and round 2 (i -> i+2) each
    # have a 2-hop route (d2 -> d0, d0 -> d2) of 1e9 B
    assert all_to_all_s(p, [0, 1, 2], 3e9) == pytest.approx(2 * 2 * (1e-6 + 1.0), rel=1e-15)
    # the cast of tensor o0 -> o1 (100 elements) fp16 -> int8: read 2 B + write 1 B each at
    # 1e11 B/s, plus the launch
    fp16, int8 = p.q_index("fp16"), p.q_index("int8")
    assert p.cast_time_s(0, fp16, int8, 0) == pytest.approx(100 * 3 / 1e11 + CHIP.launch_overhead_s, rel=1e-15)
    assert p.cast_time_s(0, fp16, fp16, 0) == 0.0


def test_boundary_links_add_the_gradients_way_back_in_training():
    t = line_topology(3, bw=1e9, latency_s=1e-6)
    inf = build_problem(chain_graph(2), t, ProblemOptions(precisions=("fp16",)))
    tr = build_problem(chain_graph(2, mode="training"), t, ProblemOptions(precisions=("fp16",)))
    assert boundary_links(inf, 0, 2) == list(t.route(0, 2))
    assert boundary_links(tr, 0, 2) == list(t.route(0, 2)) + list(t.route(2, 0))
    # the MILP's latency row: 4 hops' latency and 4 / 1e9 s per byte; the period's: 1 / 1e9
    assert store_forward_coefficients(tr, boundary_links(tr, 0, 2)) == pytest.approx((4e-6, 4e-9), rel=1e-15)
    assert bottleneck_s_per_byte(tr, boundary_links(tr, 0, 2)) == pytest.approx(1e-9, rel=1e-15)
    assert bottleneck_s_per_byte(tr, []) == 0.0


def _two_nodes(intra: float, inter: float, lat: float):
    """4 devices, 2 per node, every pair linked both ways: intra-node links at ``intra``
    B/s, the rest at ``inter``, all with latency ``lat``."""
    devs = tuple(Device(f"d{i}", "chip", node=i // 2) for i in range(4))
    links = tuple(Link(f"d{a}", f"d{b}", intra if a // 2 == b // 2 else inter, lat)
                  for a in range(4) for b in range(4) if a != b)
    return build_problem(chain_graph(1, mode="training"), Topology("two-nodes", {"chip": CHIP}, devs, links),
                         ProblemOptions(precisions=("fp16",)))


def test_hierarchical_reduction_by_hand():
    p = _two_nodes(intra=1e9, inter=1e8, lat=1e-6)
    nb = 4e8
    inside = nb / 2 / 1e9 + 1e-6      # reduce-scatter (and all-gather) in a node: 1 step of nb/2
    across = nb / 2 / 2 / 1e8 + 1e-6  # a ring of 2 nodes on a shard of nb/2: steps of nb/4
    assert gradient_reduction_s(p, [0, 1, 2, 3], nb, True, 0) == pytest.approx(2 * inside + 2 * across, rel=1e-14)
    assert gradient_reduction_s(p, [0, 1, 2, 3], nb, True, 1) == pytest.approx(inside + across, rel=1e-14)
    # flat: 6 steps of nb/4; the slow d1 -> d2 link carries a chunk every step (busy 6 x 1 s)
    # and the last one is delivered a latency later
    assert gradient_reduction_s(p, [0, 1, 2, 3], nb, False, 0) == pytest.approx(6 * nb / 4 / 1e8 + 1e-6, rel=1e-14)
    # transfers: 4 reduce-scatter + 2 rings x 2 steps x 2 senders + 4 all-gather
    assert reduction_size(p.topology, [0, 1, 2, 3], True, 0) == 16
    assert reduction_size(p.topology, [0, 1, 2, 3], True, 1) == 8
    # the same schedule transfer by transfer (no link shared): the closed form exactly
    for zero in (0, 1):
        tr = Transfers(p)
        reduction_transfers(tr, [0, 1, 2, 3], [0.0] * 4, nb, True, zero)
        assert len(tr.links) == reduction_size(p.topology, [0, 1, 2, 3], True, zero)
        assert max(tr.delivered_s()) == pytest.approx(gradient_reduction_parts(p, [0, 1, 2, 3], nb, True, zero)[0],
                                                      rel=1e-14)


def test_tied_weight_held_again_only_on_another_stage(line2):
    from distplan.workloads.graph import Graph, Operator, Tensor
    ops = (Operator("emb", "embedding", 1e6, param_elems=1000, out_elems=10),
           Operator("head", "head", 1e6, out_elems=50, tied_to="emb", tied_elems=1000))
    p = build_problem(Graph("t", ops, (Tensor("emb", "head", 10),)), line2, ProblemOptions(precisions=("fp16",)))
    apart = Plan((0, 1), ("fp16", "fp16"), (Stage((0,)), Stage((1,))), 4, "stream")
    together = Plan((0, 0), ("fp16", "fp16"), (Stage((0,)), Stage((1,))), 4, "stream")
    # device 0: table 2000 B + emb's output sent on (2 copies of 20 B); device 1: its own copy
    # of the table 2000 B + head's logits once (a sink) 100 B + the 20 B it receives
    assert list(plan_cost(p, apart).memory_bytes) == [2000 + 2 * 20, 2000 + 100 + 20]
    assert list(plan_cost(p, together).memory_bytes) == [2000 + 20 + 100, 0]


def test_memory_and_inflight():
    assert static_bytes(10, "fp16", training=False) == 20
    assert static_bytes(10, "fp16", training=True) == 10 * (4 + 12)
    assert inflight_microbatches("1f1b", 0, 4, 16) == 4
    assert inflight_microbatches("1f1b", 3, 4, 16) == 1
    assert inflight_microbatches("gpipe", 3, 4, 16) == 16
    assert inflight_microbatches("stream", 0, 4, 16) == 2
    assert activation_factors("stream", 0, 4, 16) == (1, 1)
    assert activation_factors("stream", 0, 4, 1) == (1, 0)
    assert activation_factors("1f1b", 1, 4, 16) == (3, 0)
    assert activation_factors("gpipe", 3, 4, 16) == (16, 0)
    assert send_elems(100, [100, 100]) == 100    # one output, read twice
    assert send_elems(500, [30, 20]) == 50       # a fused op: only what leaves it
    assert send_elems(100, []) == 0


def test_problem_numbers_and_sensitivity_zero_at_top(chain4, line2):
    p = build_problem(chain4, line2, ProblemOptions(precisions=("int8", "fp16")))
    assert p.precisions == ("fp16", "int8")  # highest fidelity first
    assert p.fwd_time_s[2, 0, 0] == pytest.approx(3e9 / 1e12)
    assert p.fwd_time_s[2, 1, 0] == pytest.approx(3e9 / 2e12)
    assert (p.sensitivity[:, 0] == 0).all() and (p.sensitivity[:, 1] > 0).all()
    # earlier ops feed more ops downstream: more sensitive
    assert list(p.sensitivity[:, 1]) == sorted(p.sensitivity[:, 1], reverse=True)
    assert p.period_lower_bound_s() == pytest.approx((1 + 2 + 3 + 4) * 1e9 / 2e12 / 2)


def test_plan_cost_two_stage_exact(chain4, line2):
    p = build_problem(chain4, line2, ProblemOptions(low_bit_ops="all"))   # an unfused cast, charged
    plan = Plan((0, 0, 1, 1), ("fp16", "fp16", "int8", "int8"), (Stage((0,)), Stage((1,))), 4, "stream")
    check_plan(p, plan)
    c = plan_cost(p, plan)
    cast = 100 * (2 + 1) / 1e11
    assert c.device_load_s[0] == pytest.approx(3e9 / 1e12, rel=1e-12)
    assert c.device_load_s[1] == pytest.approx(7e9 / 2e12 + cast, rel=1e-12)
    assert c.link_load_s.max() == pytest.approx(100 * 2 / 1e9, rel=1e-12)
    assert c.period_s == pytest.approx(7e9 / 2e12 + cast, rel=1e-12)
    # stream: op 0's output is read on its own stage (held once); op 1's goes to stage 1
    # (held for 2 in-flight microbatches)
    assert c.memory_bytes[0] == pytest.approx(2 * 1000 * 2 + 100 * 2 + 2 * 100 * 2)


def test_plan_cost_training_doubles_gradient_traffic():
    g = chain_graph(2, mode="training")
    p = build_problem(g, line_topology(2), ProblemOptions(precisions=("fp16",)))
    plan = Plan((0, 1), ("fp16", "fp16"), (Stage((0,)), Stage((1,))), 4, "1f1b")
    c = plan_cost(p, plan)
    assert c.link_load_s[0] == pytest.approx(200 / 1e9) and c.link_load_s[1] == pytest.approx(200 / 1e9)
    assert c.device_load_s[0] == pytest.approx(1e9 / 1e12 + 2e9 / 1e12)


def test_checker_names_shortfall_and_back_edges(chain4, line2):
    p = build_problem(chain4, line2)
    back = Plan((1, 0, 1, 1), ("fp16",) * 4, (Stage((0,)), Stage((1,))), 1, "stream")
    assert any("flows from stage 1 back to stage 0" in m for m in plan_violations(p, back))
    tiny = line_topology(2)
    big = chain_graph(4)
    import dataclasses
    ops = tuple(dataclasses.replace(o, param_elems=400_000) for o in big.ops)
    g2 = dataclasses.replace(big, ops=ops)
    p2 = build_problem(g2, tiny)
    plan = Plan((0, 0, 0, 1), ("fp16",) * 4, (Stage((0,)), Stage((1,))), 1, "stream")
    with pytest.raises(DistplanError, match=r"device d0: needs .* \(short by"):
        check_plan(p2, plan)


def test_bad_options():
    with pytest.raises(DistplanError, match="precision"):
        build_problem(chain_graph(), line_topology(), ProblemOptions(precisions=("fp64",)))
    with pytest.raises(DistplanError, match="supports any"):
        build_problem(chain_graph(), line_topology(), ProblemOptions(precisions=("fp32",)))
    with pytest.raises(DistplanError, match="training"):
        build_problem(chain_graph(), line_topology(), ProblemOptions(schedule="1f1b"))
