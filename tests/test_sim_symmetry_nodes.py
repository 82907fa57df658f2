"""Symmetry reduction by groups of replicas (``sim.symmetry``): where a node holds several
data-parallel replicas, shifting replicas by one maps NVLink routes onto InfiniBand ones,
but shifting them by one node's worth is a symmetry; those replicas are simulated and
the other nodes repeat them. The reduced run must give exactly the full run's figures,
links shared inside a node (one uplink per node) and between copies included."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.configs import megatron_plan
from distplan.api.problem import problem as make_problem
from distplan.sim import SimOptions, simulate
from distplan.sim.forecast import expected_sim_s, reduction_hops
from distplan.sim.program import build_program
from distplan.sim.symmetry import find_symmetry
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster, switched_cluster

from test_sim_symmetry import WORKLOAD, assert_same_run

_PROBLEMS: dict = {}


def _topology(name: str):
    """Presets by name, and hand-built clusters: ``uplink<n>x<g>``, n nodes of g A100 whose
    node switch has ONE link to the fabric (every transfer leaving a node shares it);
    ``rail<n>x<g>``, n nodes of g A100 with a network port per GPU; ``skewed4x4``, an
    uplink cluster whose node 0 has a faster uplink (nodes are not alike)."""
    if name.startswith("uplink"):
        n, g = map(int, name[6:].split("x"))
        return switched_cluster(name, n, g, K.A100, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                                2 * K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    if name.startswith("rail"):
        n, g = map(int, name[4:].split("x"))
        return rail_cluster(name, n, g, K.A100, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                            K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    if name == "skewed4x4":
        t = _topology("uplink4x4")
        links = tuple(dataclasses.replace(l, bw_bytes_per_s=l.bw_bytes_per_s * 2)
                      if {l.src, l.dst} == {"n0.nvswitch", "ib"} else l for l in t.links)
        return dataclasses.replace(t, name=name, links=links)
    return name


def _problem(topology: str, M: int, seq: int = 64):
    key = (topology, M, seq)
    if key not in _PROBLEMS:
        _PROBLEMS[key] = make_problem(WORKLOAD, _topology(topology), batch_size=1, seq_len=seq, mode="training",
                                      precisions=("bf16",), microbatches=M)
    return _PROBLEMS[key]


def _both(problem, plan, link_model="fifo"):
    full = simulate(problem, plan, SimOptions(link_model=link_model, symmetry=False))
    red = simulate(problem, plan, SimOptions(link_model=link_model))
    return full, red


def _per_node(topology: str) -> int:
    t = _topology(topology)
    return 8 if isinstance(t, str) else sum(1 for d in t.devices if d.node == 0)


_TOPOLOGIES = {"a100x16": 16, "a100x32": 32, "h100x32": 32, "uplink4x4": 16, "uplink3x4": 12, "rail4x4": 16,
               "skewed4x4": 16}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dp=st.sampled_from([2, 3, 4, 6, 8, 16]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]),
       per_replica=st.integers(1, 3), topology=st.sampled_from(sorted(_TOPOLOGIES)),
       link_model=st.sampled_from(["fifo", "fair", "free"]), recompute=st.sampled_from(["none", "full"]),
       zero=st.sampled_from([0, 1]), overlap=st.booleans(), hier=st.booleans(), sp=st.booleans())
def test_reduced_run_equals_full_run_with_several_replicas_per_node(dp, tp, pp, per_replica, topology, link_model,
                                                                    recompute, zero, overlap, hier, sp):
    if dp * tp * pp > _TOPOLOGIES[topology]:
        return
    p = _problem(topology, dp * per_replica)
    plan = megatron_plan(p, dp, tp, pp, "bf16", None, recompute, sp and tp > 1, zero,
                         "hierarchical" if hier else "ring", overlap)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    g = _per_node(topology)
    whole = dp * tp % g == 0 or g % (dp * tp) == 0
    if topology == "h100x32" and whole and dp * tp > 1:   # rail-optimised fat tree: cross-rail hops go up
        # the spine; groups may be larger, and a flat ring over whole nodes at tp 1 (dp 16:
        # n0.g7 -> n1.g0 and n1.g7 -> n0.g0 share leaf7 -> spine -> leaf0) merges none
        assert sym is None or sym.group * sym.factor == dp * tp
        assert sym is not None or (tp == 1 and not hier and dp * tp > g)
    elif topology in ("a100x16", "a100x32", "rail4x4") and whole:
        # a port per GPU, stages of whole nodes or inside one: every copy merges, in groups
        # of a node's g / tp replicas where a stage spans nodes (a shift by one replica
        # maps NVLink hops onto InfiniBand ones there), else replica by replica
        group = g // tp if dp * tp > g else 1
        assert sym is not None and (sym.group, sym.factor) == (group, dp * tp // group)
    if topology == "skewed4x4" and dp * tp > 4:
        assert sym is None or sym.replicas == 1   # every shift moves a replica off node 0
    full, red = _both(p, plan, link_model)
    assert_same_run(red, full)
    if sym is not None:   # the forecast counts the reduction's hops the reduced program builds
        prog = build_program(p, plan, sym=sym)
        assert reduction_hops(p, plan, sym) == sum(1 for s in prog.x_server if s >= prog.D)


@pytest.mark.parametrize("dp,tp,hier", [(4, 4, False), (4, 4, True), (8, 2, False), (8, 2, True), (16, 1, True)])
def test_one_node_of_replicas_is_simulated(dp, tp, hier):
    """dp x tp on a100x32 with 8 / tp replicas per node and 2 stages: the copy is one node's
    replicas (group 8 / tp), and the reduced plan runs exactly those devices."""
    p = _problem("a100x32", 2 * dp)
    plan = megatron_plan(p, dp, tp, 2, "bf16", None, "none", False, 0, "hierarchical" if hier else "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    g = 8 // tp
    assert sym is not None and (sym.replicas, sym.group, sym.ranks) == (dp // g, g, tp)
    assert sym.reduced.microbatches == 2 * g
    for k, stage in enumerate(sym.reduced.stages):
        assert stage.devices == plan.stages[k].devices[:8] and {p.topology.devices[d].node for d in stage.devices} \
            == {p.topology.devices[plan.stages[k].devices[0]].node}
    full, red = _both(p, plan, "fair")
    assert_same_run(red, full)


def test_shared_node_uplink_within_and_between_copies():
    """Nodes of 4 GPUs with one uplink each, dp 4 x tp 2 x pp 2: a node's two replicas
    send their pipeline tensors and the ring's hop to the next node over the same uplink
    (shared inside the copy), and the downlink into node 1 carries copy 0's ring hop and
    copy 1's pipeline gradients (shared between copies). Ranks do not merge: both ranks'
    tensors leave on the one uplink, a rank shift fixes it. Still exact."""
    p = _problem("uplink4x4", 8)
    for allreduce in ("ring", "hierarchical"):
        plan = megatron_plan(p, 4, 2, 2, "bf16", None, "none", False, 0, allreduce, True)
        sym = find_symmetry(p, plan, ideal=False, trace=False)
        assert sym is not None and (sym.replicas, sym.group, sym.ranks) == (2, 2, 1)
        for link_model in ("fifo", "fair"):
            full, red = _both(p, plan, link_model)
            assert_same_run(red, full)


def test_unlike_nodes_keep_their_replicas():
    """Node 0's uplink is faster than the others': no shift of replicas across nodes is
    a symmetry, the replicas stay (ranks may still merge), and the run is exact."""
    p = _problem("skewed4x4", 8)
    plan = megatron_plan(p, 4, 2, 2, "bf16", None, "none", False, 0, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is None or sym.replicas == 1
    full, red = _both(p, plan)
    assert_same_run(red, full)


def test_interleaved_node_groups_merge_no_replicas_hierarchically():
    """Replicas placed node 0, node 1, node 0, node 1: the hierarchical reduction's node
    groups are {0, 2} and {1, 3}, not blocks of consecutive replicas, so no replica shift
    is taken (ranks still merge); the flat ring (every hop across nodes) merges all."""
    p = _problem("a100x16", 8)
    base = megatron_plan(p, 4, 2, 1, "bf16", None, "none", False, 0, "ring", False)
    devices = (0, 1, 8, 9, 2, 3, 10, 11)
    for allreduce, want in (("hierarchical", (1, 4, 2)), ("ring", (4, 1, 2))):
        plan = dataclasses.replace(base, stages=(dataclasses.replace(base.stages[0], devices=devices),),
                                   dp_allreduce=allreduce)
        sym = find_symmetry(p, plan, ideal=False, trace=False)
        assert sym is not None and (sym.replicas, sym.group, sym.ranks) == want
        full, red = _both(p, plan)
        assert_same_run(red, full)


def test_copy_microbatch_maps_round_robin_onto_the_copy():
    """Microbatch m of r = 6 replicas in copies of 2 runs as the copy's (m mod 2) + (m // 6) x 2."""
    p = _problem("uplink3x4", 12)
    plan = megatron_plan(p, 6, 2, 1, "bf16", None, "none", False, 0, "ring", False)
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and (sym.replicas, sym.group) == (3, 2)
    assert sym.copy_microbatch(12).tolist() == [0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]
    full, red = _both(p, plan)
    assert_same_run(red, full)


def test_gpt3_175b_two_replicas_per_node_merge_and_forecast_small():
    """The plans --time-limit 30 finds for gpt3-175b on a100x1024 (dp 32 x tp 4 x pp 8,
    dp 64 x tp 4 x pp 4: two replicas per node) merge by nodes: 2 replicas and 1 rank
    simulated of 128 / 256, and the ranking's forecast drops from ~37 s to a few."""
    p = make_problem("gpt3-175b", "a100x1024", batch_size=1, mode="training", precisions=("bf16",),
                     microbatches=1536)
    for dp, pp in ((32, 8), (64, 4)):
        for allreduce, overlap in (("ring", False), ("ring", True), ("hierarchical", False)):
            plan = megatron_plan(p, dp, 4, pp, "bf16", None, "selective", True, 1, allreduce, overlap)
            sym = find_symmetry(p, plan, ideal=False, trace=False)
            assert sym is not None and (sym.replicas, sym.group, sym.ranks) == (dp // 2, 2, 4)
            assert expected_sim_s(p, plan) < 10.0

