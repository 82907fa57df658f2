"""The cluster space's bounds (model.cluster): a point's first bound and a split's bound
stay below the analytic iteration of every plan they cover (the oracle's enumeration of
the declared space, distplan.testing.cluster_oracle), and the optimizer terms, ZeRO-1/2's
parameter all-gather included, are exact where one stage holds everything."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.api.problem import problem as make_problem
from distplan.costs.iteration import Exceeds, boundaries_contend, estimate_iteration
from distplan.costs.megatron import megatron_plan
from distplan.model import cluster
from distplan.model.cluster import ClusterPoint, _Space, _units
from distplan.testing.cluster_oracle import declared_plans
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster


def _topology(nodes: int, per_node: int):
    return rail_cluster(f"tiny{nodes}x{per_node}", nodes, per_node, K.A100, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)


def _problem(layers: int, nodes: int, per_node: int, M: int, seq: int = 32):
    return make_problem(f"gpt3-256x{layers}x4", _topology(nodes, per_node), batch_size=1, seq_len=seq,
                        mode="training", precisions=("bf16",), microbatches=M)


def point_of(plan) -> ClusterPoint:
    """The cluster point a Megatron plan of the declared space belongs to."""
    s = plan.stages[0]
    return ClusterPoint(s.replicas, s.tensor_parallel, plan.pipeline_ranks, s.recompute, s.zero,
                        s.sequence_parallel, vp=plan.virtual_stages)


def edges_of(problem, plan) -> tuple[int, ...]:
    """The unit boundaries of a 1F1B plan's split."""
    stage = [plan.op_stage[u[0]] for u in _units(problem)]
    return (0, *[i for i in range(1, len(stage)) if stage[i] != stage[i - 1]], len(stage))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(1, 4), nodes=st.sampled_from([1, 2]), per_node=st.sampled_from([2, 4]),
       M=st.sampled_from([2, 4, 8]), vps=st.sampled_from([(), (2,)]))
def test_point_and_split_bounds_are_below_every_plan_they_cover(layers, nodes, per_node, M, vps):
    """Every plan the estimate times in closed form (1F1B: fill + (m - 1) x the slowest
    stage + drain; interleaved: the joint run). A 1F1B plan whose boundary links pace the
    run (``boundaries_contend``) is replayed jointly instead, which the closed-form bound
    is not proven to cover (at d114d8b dp 1 x pp 3 of 4 layers, 2 microbatches, went
    there and came out at 0.956 ms against a bound of 1.012 ms; d352ff9 keeps it closed)."""
    p = _problem(layers, nodes, per_node, M)
    space = _Space(p, "bf16")
    n = 0
    for plan in declared_plans(p, "bf16", virtual_stages=vps):
        pt = point_of(plan)
        e = estimate_iteration(p, plan)
        t = e.iteration_s
        if plan.schedule == "1f1b" and plan.n_stages > 1 and \
                boundaries_contend(p, plan, e.stage_forward_s + e.stage_backward_s, e.boundary_s):
            continue
        assert space.point_lb_s(pt) <= t * (1 + 1e-12), (pt.label(), plan.dp_allreduce, plan.overlap_grad_reduce)
        if pt.vp == 1:
            assert space.split_lb_s(pt, edges_of(p, plan)) <= t * (1 + 1e-12), pt.label()
        n += 1
    assert n > 0


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_one_stage_optimizer_bound_is_the_estimates_optimizer_step(zero):
    """dp 4 over two nodes of two A100, one stage: the bound's update and all-gather (the
    slower ring hop, over InfiniBand, times a ring step) are the estimate's, to 1e-12."""
    p = _problem(2, 2, 2, 4)
    space = _Space(p, "bf16")
    pt = ClusterPoint(4, 1, 1, "none", zero, False)
    plan = next(x for x in declared_plans(p, "bf16") if point_of(x) == pt)
    want = estimate_iteration(p, plan).optimizer_s
    assert space.optimizer_lb_s(pt) == pytest.approx(want, rel=1e-11)
    assert space.split_optimizer_s(pt, edges_of(p, plan)) == pytest.approx(want, rel=1e-11)


@pytest.mark.parametrize("zero", [0, 1])
def test_split_optimizer_bound_is_the_slowest_stages_step(zero):
    """pp 2 x dp 2 on 2 x 2 A100, every split: the split's optimizer term is the
    estimate's optimizer step (the stage with more parameters; ZeRO-1 adds its gather)."""
    p = _problem(4, 2, 2, 4)
    space = _Space(p, "bf16")
    pt = ClusterPoint(2, 1, 2, "none", zero, False)
    plans = [x for x in declared_plans(p, "bf16") if point_of(x) == pt and x.dp_allreduce == "ring"
             and not x.overlap_grad_reduce]
    assert len(plans) == 3   # 4 layers in 2 stages
    for plan in plans:
        want = estimate_iteration(p, plan).optimizer_s
        assert space.split_optimizer_s(pt, edges_of(p, plan)) == pytest.approx(want, rel=1e-11)
        assert space.optimizer_lb_s(pt) <= want


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(1, 4), nodes=st.sampled_from([1, 2, 4]), per_node=st.sampled_from([2, 4]),
       M=st.sampled_from([4, 8]), seq=st.sampled_from([32, 256]))
def test_the_untimed_bound_of_overlapped_buckets_is_below_their_timing(layers, nodes, per_node, M, seq):
    """Every overlapped plan of the declared space: ``estimate_iteration`` with ``above_s``
    0 raises ``Exceeds`` with a bound at most the iteration it times without it, or,
    where the plan takes the joint run (no bound there), returns that iteration."""
    p = _problem(layers, nodes, per_node, M, seq)
    n = 0
    for plan in declared_plans(p, "bf16"):
        if not plan.overlap_grad_reduce:
            continue
        t = estimate_iteration(p, plan).iteration_s
        try:
            assert estimate_iteration(p, plan, above_s=0.0).iteration_s == t
        except Exceeds as got:
            assert 0 < got.bound_s <= t, (point_of(plan).label(), plan.dp_allreduce)
            n += 1
        assert estimate_iteration(p, plan, above_s=t * 1.5).iteration_s == t   # not reached: timed as before
    assert n > 0


def test_the_bound_of_a_contended_flat_ring_is_its_busiest_link():
    """gpt3-1024x8x16, dp 16 x tp 2 on a100x32, flat ring overlapped: the 16 replicas'
    ring crosses the rail switches' shared uplinks; the bound (the busiest link's load after
    the first bucket is ready) lies within 10 % of the timed iteration, which the cluster
    space then skips timing once it is past the K-th best."""
    p = make_problem("gpt3-1024x8x16", "a100x32", batch_size=1, seq_len=512, mode="training",
                     precisions=("bf16",), microbatches=16)
    plan = megatron_plan(p, 16, 2, 1, "bf16", dp_allreduce="ring", overlap_grad_reduce=True)
    t = estimate_iteration(p, plan).iteration_s
    with pytest.raises(Exceeds) as got:
        estimate_iteration(p, plan, above_s=0.0)
    assert 0.9 * t <= got.value.bound_s <= t


def test_dropping_untimed_options_leaves_the_best_plans_as_they_were(monkeypatch):
    """Two nodes of four A100: the search with options dropped by their bound and put off
    while fewer than K plans are known returns the same plans, in the same order with the
    same figures, as one that times every option in turn, and it did drop some."""
    p = _problem(4, 2, 4, 8, 256)
    dropped = []
    real = cluster.estimate_iteration

    def counting(*a, **kw):
        try:
            return real(*a, **kw)
        except Exceeds:
            dropped.append(1)
            raise

    put_off = []

    class Counted(cluster._Deferred):
        def __init__(self, *a):
            super().__init__(*a)
            put_off.append(self.point)

    monkeypatch.setattr(cluster, "estimate_iteration", counting)
    monkeypatch.setattr(cluster, "_Deferred", Counted)
    monkeypatch.setattr(cluster, "DEFER_S", 0.0)   # put off every option but the cheapest
    got = cluster.plan_cluster(p, top_k=5)
    assert dropped and put_off
    monkeypatch.setattr(cluster._Best, "entry_s", lambda *a: math.inf)
    monkeypatch.setattr(cluster, "DEFER_S", math.inf)
    want = cluster.plan_cluster(p, top_k=5)
    assert [(c.point, c.plan, c.iteration_s) for c in got.plans] == [(c.point, c.plan, c.iteration_s)
                                                                     for c in want.plans]
    assert got.bound_s == want.bound_s and got.solved == want.solved


@pytest.mark.parametrize("allreduce", ["ring", "hierarchical"])
def test_a_flat_ring_of_mixed_hops_is_timed_as_the_simulator_runs_it(allreduce):
    """dp 4 x tp 2 on 2 x 4 A100s without overlapped buckets: each rank's flat ring
    alternates NVLink and InfiniBand hops, where the closed form's chain and busiest-link
    terms are each only a lower bound (7.28 ms against 7.63 ms replayed, the iteration
    2.4 % fast); it is now replayed transfer by transfer, as the overlapped buckets are,
    and equals the simulator. The hierarchical reduction's rings are uniform: closed form."""
    from distplan.api.configs import whatif
    from distplan.costs.collectives import reduction_closed_form_exact
    w = whatif("gpt3-1024x4x16", _topology(2, 4), dp=4, tp=2, pp=1, global_batch=16, seq_len=512,
               dp_allreduce=allreduce, breakdown=False)
    st = w.plan.stages[0]
    ranks = [[st.devices[i * 2 + j] for i in range(4)] for j in range(2)]
    assert reduction_closed_form_exact(w.problem, ranks, allreduce == "hierarchical", 0) == (allreduce != "ring")
    e = estimate_iteration(w.problem, w.plan)
    assert e.iteration_s == pytest.approx(w.iteration_s, rel=1e-9)
    if allreduce == "ring":
        assert e.exposed_allreduce_s > e.allreduce_s[0] * 1.04   # the replay, past the closed form's 7.28 ms
