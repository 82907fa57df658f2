"""Model vs simulator on a topology whose boxes share one inter-switch link (issue 23):
rings side by side on the link, pipeline lanes crossing it, and the link as the pace."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

import distplan
from distplan.costs import iteration as it
from distplan.costs.collectives import (gradient_reduction_parts, reduction_shares_links, ring_parts,
                                        rings_share_links, side_by_side_parts)
from distplan.costs.iteration import boundaries_contend, boundary_flows, estimate_iteration
from distplan.costs.megatron import megatron_plan
from distplan.costs.routes import link_loads_s
from distplan.sim import simulate

FILE = str(Path(__file__).resolve().parents[1] / "examples" / "topologies" / "a100-2x4-shared-link.yaml")
MID_BW, NV_BW = 1e9, 300e9           # the shared link, an A100's NVLink to its switch (bytes/s)
ROUTE_LAT = 0.5e-6 + 2.5e-6 + 0.5e-6   # g -> sw0 -> sw1 -> g


@functools.lru_cache(maxsize=1)
def _problem():
    return distplan.problem("gpt2", FILE, batch_size=1, mode="training", microbatches=8, seq_len=256)


@pytest.fixture(scope="module")
def pb():
    return _problem()


def test_two_rings_on_one_link_by_hand(pb):
    # two 2-member all-reduces (g0, g4) and (g1, g5) of 1e8 bytes each: 2 steps of 5e7 bytes
    # per hop, each hop g -> sw0 -> sw1 -> g; the shared link carries 2 rings x 2 steps x 5e7
    # = 2e8 bytes (0.2 s), and the last chunk still has its two NVLink hops and latencies
    nb = 1e8
    alone = 2 * (nb / 2 / MID_BW + 2 * nb / 2 / NV_BW + ROUTE_LAT)
    t1, b1 = side_by_side_parts(pb, [([0, 4], nb, 2)])
    assert t1 == pytest.approx(alone, rel=1e-12) and b1 == pytest.approx(nb / MID_BW, rel=1e-12)
    t2, b2 = side_by_side_parts(pb, [([0, 4], nb, 2), ([1, 5], nb, 2)])
    assert t2 == pytest.approx(2 * nb / MID_BW + 2 * nb / 2 / NV_BW + ROUTE_LAT, rel=1e-12)   # 0.2003368 s
    assert t2 == pytest.approx(0.20033683333, rel=1e-9) and b2 == pytest.approx(2 * nb / MID_BW, rel=1e-12)
    # inside one box nothing is shared: the slowest ring alone
    assert side_by_side_parts(pb, [([0, 1], nb, 2), ([2, 3], nb, 2)]) == side_by_side_parts(pb, [([0, 1], nb, 2)])


def test_rank_rings_share_the_link(pb):
    assert rings_share_links(pb.topology, [[0, 4], [1, 5]]) and not rings_share_links(pb.topology, [[0, 4]])
    ranks = [[0, 2, 4, 6], [1, 3, 5, 7]]   # dp 4 x tp 2: each rank's ring crosses the link both ways
    assert reduction_shares_links(pb.topology, ranks, False, 0)
    alone = gradient_reduction_parts(pb, ranks[0], 4e8, False, 0)[0]
    both = gradient_reduction_parts(pb, ranks[0], 4e8, False, 0, ranks)[0]
    assert both == pytest.approx(2 * alone, rel=0.01)   # the link's load doubles, and it paces both rings


def test_lanes_crossing_the_link_load_it_together(pb):
    plan = megatron_plan(pb, 4, 1, 2, "bf16")   # stage 0 on box 0, stage 1 on box 1, 4 lanes
    loads = link_loads_s(pb, boundary_flows(pb, plan))
    mid = [i for i, l in enumerate(pb.topology.links) if {l.src, l.dst} == {"sw0", "sw1"}]
    for l in mid:
        total, largest, n = loads[l]
        assert n == 4 and total == pytest.approx(4 * largest, rel=1e-12)
    est = estimate_iteration(pb, plan)
    assert boundaries_contend(pb, plan, est.stage_forward_s + est.stage_backward_s, est.boundary_s)
    inside = megatron_plan(pb, 2, 1, 2, "bf16")   # both stages in box 0: no link shared, closed form
    e2 = estimate_iteration(pb, inside)
    assert not boundaries_contend(pb, inside, e2.stage_forward_s + e2.stage_backward_s, e2.boundary_s)


@pytest.mark.parametrize("dp,tp,pp,allreduce,overlap", [
    (4, 1, 2, "ring", False), (2, 2, 2, "ring", True), (1, 1, 8, "ring", False), (8, 1, 1, "hierarchical", False),
    (4, 2, 1, "ring", True), (2, 4, 1, "ring", False)])
def test_model_within_5_percent_of_the_simulator(pb, dp, tp, pp, allreduce, overlap):
    plan = megatron_plan(pb, dp, tp, pp, "bf16", dp_allreduce=allreduce, overlap_grad_reduce=overlap)
    model, sim = estimate_iteration(pb, plan).iteration_s, simulate(pb, plan).iteration_s
    assert abs(model / sim - 1) <= 0.05, (model, sim)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.permutations(range(8)).map(lambda p: p[:4]), st.floats(1e5, 1e9), st.integers(1, 6)),
                min_size=1, max_size=4))
def test_side_by_side_rings_never_beat_one_alone(rings):
    pb = _problem()
    rings = [(list(d[:2 + i % 3]), nb, steps) for i, (d, nb, steps) in enumerate(rings)]
    alone = [ring_parts(pb, d, nb, s) for d, nb, s in rings]
    t, b = side_by_side_parts(pb, rings)
    assert t >= max(x for x, _ in alone) and b >= max(y for _, y in alone)
    if not rings_share_links(pb.topology, [d for d, _, _ in rings]):
        assert (t, b) == (max(x for x, _ in alone), max(y for _, y in alone))
    assert side_by_side_parts(pb, rings[:1]) == alone[0]


@pytest.mark.parametrize("dp,tp,pp", [(4, 1, 2), (2, 2, 2), (1, 1, 8), (2, 1, 4), (1, 4, 2)])
def test_hop_structure_is_the_flows_summed(pb, dp, tp, pp):
    # the fast path (one tensor-parallel degree) charges each link what boundary_flows puts on it
    plan = megatron_plan(pb, dp, tp, pp, "bf16")
    per_link, _ = it._hop_structure(pb, plan)
    loads = link_loads_s(pb, boundary_flows(pb, plan))
    got = per_link @ it._hop_bytes(pb, plan)
    assert sorted(got[got > 0]) == pytest.approx(sorted(x[0] for x in loads.values()), rel=1e-12)


def test_window_pace_by_hand():
    # 3 stages of 1 s, boundaries of 0.5 s each way: stage 1 keeps 2 in flight, its round
    # trip is 2 s of work + 2 x 0.5 s (1.5 s a microbatch); stage 0 keeps 3, its round
    # trip 3 s + 2 x (0.5 + 0.5) s: 5/3 s a microbatch, the pace
    assert it.window_pace_s(np.ones(3), np.array([0.5, 0.5]), 8) == pytest.approx(5 / 3)
    assert it.window_pace_s(np.ones(3), np.zeros(2), 8) == pytest.approx(1.0)
    # with 2 microbatches only the last stage (1 in flight) ever waits for its window
    assert it.window_pace_s(np.ones(3), np.array([0.5, 0.5]), 2) == pytest.approx(1.0)
    assert it.window_pace_s(np.ones(3), np.array([0.5, 0.5]), 1) == 0.0
