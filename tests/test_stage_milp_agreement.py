"""The stage MILP's objective against the analytic iteration (``costs.iteration``) of
the same fixed multi-stage plan (flat ring, overlapped buckets): its exposed gradient
reduction streams the stage's buckets at the busiest link's rate
(``costs.reduction_bound.stream_rate``), a lower bound of the buckets timed transfer by
transfer, so on plans laid out as the MILP's representative layout (stage 0 at device 0,
the next stage's first device on the next node) the objective is at most the estimate.
Before, its slope was the closed-form ring's, which charges every ring step the whole
route: twice the link's on two-link hops (30 % above the estimate on gpt3-6.7b)."""
from __future__ import annotations

import pytest

from distplan.api.problem import problem as make_problem
from distplan.costs.collectives import gradient_reduction_parts
from distplan.costs.iteration import estimate_iteration
from distplan.costs.reduction_bound import stage_stream, stream_rate
from distplan.model.cluster import _Space
from distplan.model.stage_milp import model_objective_s
from distplan.model.stage_space import build_plan
from distplan.model.stage_terms import StageConfig, stage_terms
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster


def _problem(model: str, nodes: int, per_node: int, M: int, seq: int = 32):
    topo = rail_cluster(f"tiny{nodes}x{per_node}", nodes, per_node, K.A100, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem(model, topo, batch_size=1, seq_len=seq, mode="training", precisions=("bf16",),
                        microbatches=M)


def _both(p, cfgs: list[StageConfig], split: list[int]) -> tuple[float, float]:
    """(MILP objective, analytic iteration with overlapped buckets) of a plan whose stages
    share one config: the reduction the MILP streams for it (``stage_stream``: the flat
    ring, or the hierarchical reduction where that streams faster)."""
    space = _Space(p, "bf16")
    t = stage_terms(p, space, cfgs)
    c = cfgs[0]
    hier = c.dp > 1 and stage_stream(p, c.tp, c.dp, c.zero)[0]
    est = estimate_iteration(p, build_plan(p, space, split, cfgs, "hierarchical" if hier else "ring", True)).iteration_s
    return model_objective_s(t, len(cfgs), split, list(range(len(cfgs)))), est


def test_a_two_node_ring_streams_at_half_the_closed_form():
    """dp 2 across 2 nodes of 1 A100: each hop is two InfiniBand links (25 GB/s, 1 us).
    Closed form of 100 MB: 2 steps x (2 x 1 us + 2 x 50 MB / 25 GB/s) = 8.004 ms; each
    link carries 2 steps x 50 MB: 4e-11 s a byte, 1 us + 4.0 ms = 4.001 ms."""
    p = _problem("gpt3-256x2x4", 4, 1, 2)
    assert gradient_reduction_parts(p, [0, 1], 1e8, False, 0)[0] == pytest.approx(8.004e-3, rel=1e-12)
    lat, rate = stream_rate(p, [[0, 1]], False, 0)
    assert (lat, rate) == (pytest.approx(1e-6), pytest.approx(4e-11))
    assert stream_rate(p, [[0, 1]], False, 2)[1] == pytest.approx(2e-11)   # ZeRO-2: the reduce-scatter only
    assert stream_rate(p, [[0]], False, 0) == (0.0, 0.0)


def test_zero2_pair_of_stages_equals_the_estimate_worked_by_hand():
    """gpt3-256x2x4 on 4 x 1 A100, dp 2 ZeRO-2 | dp 2 ZeRO-2: the exposed reduction is the
    embedding's bucket (50,257 + 2,048 positions x 256 elements, 26,780,160 bytes),
    ready when stage 0's backward ends, reduce-scattered in one step of two IB links:
    2 x 1 us + 2 x 13,390,080 B / 25 GB/s = 1.0732064 ms, in the MILP and the estimate."""
    p = _problem("gpt3-256x2x4", 4, 1, 2)
    U = len(_Space(p, "bf16").units)
    cfgs = [StageConfig(1, 2, zero=2), StageConfig(1, 2, zero=2)]
    split = [0] * (U // 2) + [1] * (U - U // 2)
    space = _Space(p, "bf16")
    e = estimate_iteration(p, build_plan(p, space, split, cfgs, "ring", True))
    assert e.exposed_allreduce_s == pytest.approx(2e-6 + 2 * 13_390_080 / 25e9, rel=1e-12)
    milp, est = _both(p, cfgs, split)
    assert milp == pytest.approx(est, rel=1e-12)


@pytest.mark.parametrize("nodes,per_node,tp,dp,zero,low", [
    (4, 1, 1, 2, 0, 0.95), (4, 1, 1, 2, 2, 0.95),   # 0.962 / 0.964 (were 1.131 / 1.040)
    (2, 2, 1, 2, 0, 0.99), (2, 2, 1, 2, 2, 0.99),   # 0.998 / 1.000 (were 1.022 / 1.000)
    (4, 2, 2, 2, 0, 0.95), (4, 2, 2, 2, 2, 0.95),   # 0.971 / 0.972 (were 1.119 / 1.037)
    (4, 2, 1, 4, 0, 0.98), (4, 2, 1, 4, 2, 0.99),   # 0.985 / 1.000 hierarchical (flat, mixed NVLink / IB hops: 0.898 / 0.964)
    (8, 1, 1, 4, 0, 0.98), (8, 1, 1, 4, 2, 0.98),   # 0.988 / 0.989 (were 1.186 / 1.079)
])
def test_fixed_two_stage_plans_bound_the_estimate(nodes, per_node, tp, dp, zero, low):
    """gpt3-1024x4x16, 4 microbatches, the embedding alone on stage 0 and the 4 layers
    with the head on stage 1 (its 4 layers' buckets exposed), on 4-8 A100s: the MILP's
    objective is at most the estimate and close below it (``low``: measured, rounded
    down; mixed hops make the closed-form chain of the embedding's bucket a bound only)."""
    p = _problem("gpt3-1024x4x16", nodes, per_node, 4)
    U = len(_Space(p, "bf16").units)
    cfgs = [StageConfig(tp, dp, zero=zero), StageConfig(tp, dp, zero=zero)]
    milp, est = _both(p, cfgs, [0] + [1] * (U - 1))
    assert low * est <= milp <= est * (1 + 1e-12)


def test_gpt3_6_7b_two_stage_plan_agrees_with_the_estimate():
    """The issue's case: gpt3-6.7b on 128 A100s, 16 microbatches of 1, tp 8 x dp 8 (sp) on
    both stages, 14 | 18 layers. Pipeline, boundary and optimizer step agree; the exposed
    reduction was 0.1062 - 0.0225 s (closed form over B_0), 0.2266 s in all against the
    estimate's 0.1743 s; streamed at the link's rate it is 0.0306 s: 0.17347 s, 0.5 % below."""
    p = make_problem("gpt3-6.7b", "a100x128", batch_size=1, mode="training", microbatches=16)
    space = _Space(p, "bf16")
    U = len(space.units)
    assert U == 32
    cfg = StageConfig(8, 8, sequence_parallel=True)
    milp, est = _both(p, [cfg, cfg], [0] * 14 + [1] * 18)
    assert est == pytest.approx(0.174326, rel=1e-5)
    assert 0.99 * est <= milp <= est
