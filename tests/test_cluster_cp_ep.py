"""Context and expert parallelism in the cluster space (model.cluster, model.cluster_ranks):
on tiny instances its optimum is the brute force's over the declared space with cp / ep
(distplan.testing.cluster_oracle.parallel_plans: the what-if's rank problems, every split),
its bound is below it, every point's bounds stay below the plans it covers, and a plan
found with cp / ep simulates as the analytic iteration times it."""
from __future__ import annotations

import dataclasses

import pytest

from distplan.api.problem import problem as make_problem
from distplan.costs.check import plan_violations
from distplan.costs.iteration import estimate_iteration
from distplan.core.errors import DistplanError
from distplan.model.cluster import ClusterPoint, RankSpaces, plan_cluster
from distplan.model.cluster_ranks import cp_degrees, ep_degrees, zoo_origin
from distplan.sim import simulate
from distplan.testing.cluster_oracle import parallel_plans
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster

MOE = "tiny-moe"    # 4 routed experts a layer (registered by the fixture below)
DENSE = "llama-256x2x4"


@pytest.fixture(autouse=True)
def tiny_moe(monkeypatch):
    """A Mixtral-style MoE whose experts hold most parameters (a 512-entry vocabulary)."""
    from distplan.workloads.zoo import catalog
    cfg = dataclasses.replace(catalog.mixtral(MOE, 256, 2, 4, 4, 2, 2048, "a tiny MoE", kv_heads=4), vocab=512)
    monkeypatch.setitem(catalog.NAMED, MOE, cfg)


def _topology(nodes: int, per_node: int, mem_bytes: float = K.A100.mem_capacity_bytes):
    kind = dataclasses.replace(K.A100, name="a100-small", mem_capacity_bytes=mem_bytes)
    return rail_cluster(f"tiny{nodes}x{per_node}", nodes, per_node, kind, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)


def _problem(workload: str, topo, M: int, seq: int):
    return make_problem(workload, topo, batch_size=1, seq_len=seq, mode="training", precisions=("bf16",),
                        microbatches=M, attention="flash", schedule="1f1b")


def _brute(workload, topo, M, seq, cps, eps):
    out = []
    for p, plan in parallel_plans(workload, topo, M, seq, "bf16", cps, eps):
        try:
            t = estimate_iteration(p, plan).iteration_s
        except DistplanError:   # an ep plan the analytic iteration refuses: outside what it times
            continue
        if not plan_violations(p, plan):
            out.append((t, p, plan))
    return sorted(out, key=lambda x: x[0])


@pytest.mark.parametrize("workload,nodes,per_node,mem,M,seq,cps,eps,chosen", [
    (MOE, 1, 4, 80e9, 4, 64, (1,), (1, 2, 4), (1, 4)),          # ep 4 x dp 4, ZeRO-3
    (DENSE, 1, 4, 3.2e8, 4, 4096, (1, 2, 4), (1,), (2, 1)),     # cp 2: 4,096 tokens fit 320 MB so
    (DENSE, 2, 2, 80e9, 2, 128, (1, 2, 4), (1,), (1, 1)),
    (MOE, 2, 2, 80e9, 4, 64, (1, 2), (1, 2), None),
])
def test_the_optimum_is_the_brute_force_over_cp_and_ep(workload, nodes, per_node, mem, M, seq, cps, eps, chosen):
    topo = _topology(nodes, per_node, mem)
    p = _problem(workload, topo, M, seq)
    brute = _brute(workload, topo, M, seq, cps, eps)
    r = plan_cluster(p, time_limit_s=600, top_k=1, microbatch_sizes=(), context_parallel=cps, expert_parallel=eps)
    assert r.plans[0].iteration_s == pytest.approx(brute[0][0], rel=1e-9)
    assert r.bound_s <= brute[0][0] * (1 + 1e-12)
    best = r.plans[0]
    assert best.point.cp in cps and best.point.ep in eps
    if chosen is not None:   # the brute force's best degrees
        b = brute[0][2].stages[0]
        assert (brute[0][1].microbatches // M, b.expert_parallel) == chosen
        assert (best.point.cp, best.point.ep) == chosen
    # the plan carries its groups and its problem, and is what the checker and the estimate see
    assert not plan_violations(best.problem, best.plan)
    assert best.plan.stages[0].expert_parallel == best.point.ep
    assert estimate_iteration(best.problem, best.plan).iteration_s == best.iteration_s


def test_the_search_chooses_ep_and_cp_where_they_are_the_only_way():
    """A tiny MoE at ep 4 only, a dense model at cp 2 only: the plans carry them."""
    topo = _topology(1, 4)
    r = plan_cluster(_problem(MOE, topo, 4, 64), time_limit_s=600, top_k=1, microbatch_sizes=(),
                     expert_parallel=(4,))
    assert {c.point.ep for c in r.plans} <= {1, 4}
    r = plan_cluster(_problem(DENSE, topo, 2, 128), time_limit_s=600, top_k=3, microbatch_sizes=(),
                     context_parallel=(2,))
    assert all(c.point.cp in (1, 2) for c in r.plans)


def test_every_points_bounds_are_below_the_plans_it_covers():
    """The bare (first) bound <= the point's timed bound <= every plan of the point, in
    the analytic iteration, or simulated where that refuses the plan (ZeRO-3 with expert
    groups across the nodes: ``costs.fsdp.rings_contend``), whose bound counts the
    experts' gathers on their groups' rings."""
    topo = _topology(2, 2)
    M, seq = 4, 64
    p = _problem(MOE, topo, M, seq)
    ranks = RankSpaces(p, "bf16", (1, 2), (1, 2))
    n = refused = 0
    for q, plan in parallel_plans(MOE, topo, M, seq, "bf16", (1, 2), (1, 2)):
        st = plan.stages[0]
        cp = q.microbatches // M
        ep = st.expert_parallel
        pt = ClusterPoint(st.replicas // cp, st.tensor_parallel, plan.n_stages, st.recompute, st.zero,
                          st.sequence_parallel, cp=cp, ep=ep)
        bare = ranks.space(ranks.bare(p, cp, ep), "", ep)
        timed = ranks.timed(bare, pt) if cp > 1 or ep > 1 else bare
        try:
            t = estimate_iteration(q, plan).iteration_s
        except DistplanError:
            t = simulate(q, plan).iteration_s
            refused += 1
        assert bare.point_lb_s(pt) <= timed.point_lb_s(pt) * (1 + 1e-12) <= t * (1 + 1e-9), pt.label()
        n += 1
    assert n > 50 and refused >= 4


@pytest.mark.parametrize("workload,seq,mem,cps,eps", [(MOE, 64, 80e9, (1,), (2, 4)),
                                                     (DENSE, 4096, 3.2e8, (2, 4), (1,))])
def test_plans_with_cp_and_ep_simulate_as_the_analytic_iteration_times_them(workload, seq, mem, cps, eps):
    """The plan and the problem it carries are the what-if's: simulated, the same step
    (one stage: to rounding)."""
    r = plan_cluster(_problem(workload, _topology(1, 4, mem), 4, seq), time_limit_s=600, top_k=4,
                     microbatch_sizes=(), context_parallel=cps, expert_parallel=eps)
    n = 0
    for c in r.plans:
        if c.point.cp > 1 or c.point.ep > 1:
            sim = simulate(c.problem, c.plan).iteration_s
            assert sim == pytest.approx(c.iteration_s, rel=1e-9 if c.point.pp == 1 else 2e-3), c.point.label()
            n += 1
    assert n >= 2


def test_degrees_follow_the_workload():
    topo = _topology(1, 4)
    dense, moe = _problem(DENSE, topo, 2, 128), _problem(MOE, topo, 2, 64)
    assert ep_degrees(dense, zoo_origin(dense.graph)) == (1,)
    assert ep_degrees(moe, zoo_origin(moe.graph)) == (1, 2, 4)
    assert cp_degrees(dense, zoo_origin(dense.graph)) == (1,)   # 128 tokens: short
    assert cp_degrees(dense, zoo_origin(dense.graph), (2, 3, 4)) == (1, 2, 4)   # 3 does not divide 128
    long = _problem(DENSE, topo, 2, 8192)
    assert cp_degrees(long, zoo_origin(long.graph)) == (1, 2, 4)   # 8 exceeds the 4 devices
    # degrees asked of a model that cannot take them: said, not dropped silently
    with pytest.raises(DistplanError, match="expert-parallel degrees 2 asked, but 'llama-256x2x4' has no routed"):
        ep_degrees(dense, zoo_origin(dense.graph), (2,))
    assert ep_degrees(dense, zoo_origin(dense.graph), (1,)) == (1,)
    with pytest.raises(DistplanError, match="not a zoo transformer"):
        cp_degrees(dense, None, (2, 4))


def test_a_tie_in_time_goes_to_the_plan_without_cp():
    """Llama 3 8B at 8,192 tokens on 8 H100s: cp 2 and cp 4 hide their K/V ring and time
    exactly as dp 8; the search keeps the plain data-parallel plan first (it was dp 2 x
    cp 4 by the points' order, and the documented dp 8 fell out of the top 1)."""
    p = make_problem("llama3-8b", "h100x8", batch_size=1, seq_len=8192, mode="training",
                     precisions=("bf16", "fp8"), microbatches=128, attention="flash")
    one = plan_cluster(p, time_limit_s=600, top_k=1, microbatch_sizes=(1, 2, 4, 8))
    assert one.plans[0].point.parallel_ranks == (1, 1)
    # three tie (selective recomputation is left out under FlashAttention: it remakes no op,
    # so its plans were three more copies of these)
    three = plan_cluster(p, time_limit_s=600, top_k=3, microbatch_sizes=(1, 2, 4, 8))
    times = [c.iteration_s for c in three.plans]
    assert times == [one.plans[0].iteration_s] * 3   # the tie itself
    assert [c.point.cp for c in three.plans] == [1, 2, 4]
    assert all(c.point.recompute == "none" for c in three.plans)


def test_a_cp_plans_report_and_replay_count_whole_sequences(tmp_path, capsys):
    """A plan with cp 8 is one context rank's problem (65,536 / 8 tokens, 16 x 8
    microbatches): the table's and the replay's samples/s are of whole sequences
    (global batch 16 / iteration), not of the rank's 8 x as many short ones."""
    from distplan.cli.main import main as solve_main
    from distplan.cli.replay import main as sim_main
    out = tmp_path / "plan.json"
    rc = solve_main(["--workload", "llama3-8b", "--topology", "h100x8", "--mode", "training", "--microbatches", "16",
                     "--batch-size", "1", "--seq-len", "65536", "--precisions", "bf16", "--attention", "flash",
                     "--top-k", "1", "--microbatch-sizes", "1", "--plan-out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "16 microbatches of 1 (global batch 16), 65,536 tokens a sequence, split over cp 8" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("1 "))
    model_s, sim_s, _, step, steady = row.split()[1:6]
    assert "cp 8" in row
    assert float(step) == pytest.approx(16 / float(sim_s), rel=1e-4)
    assert sim_main([str(out)]) == 0
    text = capsys.readouterr().out
    note = text.split("in whole sequences of 65,536 tokens: ")[1]
    whole_steady, whole_step = float(note.split()[0]), float(note.split(", ")[1].split()[0])
    assert whole_step == pytest.approx(float(step), rel=1e-4)
    assert whole_steady == pytest.approx(float(steady), rel=1e-4)


def test_the_untimed_bound_of_expert_reductions_is_below_their_timing():
    """Every plan of the tiny MoE on 2 x 2 GPUs whose experts reduce over their groups
    (ep 2 of 4 replicas, ZeRO 0-2, buckets overlapped or not): ``estimate_iteration``
    with ``above_s`` 0 raises ``Exceeds`` with a bound at most the iteration it times
    (the dense and the expert-data rings each alone, ``_expert_reduction_lb_s``), and
    with ``above_s`` past it times the plan as before."""
    from distplan.costs.iteration import Exceeds
    from distplan.costs.sharding import expert_reduces
    topo = _topology(2, 2)
    n = 0
    for q, plan in parallel_plans(MOE, topo, 4, 64, "bf16", (1,), (2,)):
        st = plan.stages[0]
        if not (expert_reduces(st) and st.zero < 3 and plan.n_stages == 1):
            continue
        t = estimate_iteration(q, plan).iteration_s
        with pytest.raises(Exceeds) as got:
            estimate_iteration(q, plan, above_s=0.0)
        assert 0 < got.value.bound_s <= t, (st.zero, plan.dp_allreduce, plan.overlap_grad_reduce)
        assert got.value.bound_s >= 0.5 * t
        assert estimate_iteration(q, plan, above_s=t * 1.5).iteration_s == t
        n += 1
    assert n >= 6


def test_the_deepep_dispatcher_times_ep_points_as_the_whatif_does():
    """--ep-dispatcher deepep: a point's timed problem carries the what-if's all-to-all
    of the same groups (ep 4 over 2 nodes of 2: the network phase of each rail pair
    carries a token once a node), below the alltoall dispatcher's; the search's plans
    simulate as it times them."""
    from distplan.api.configs import whatif
    from distplan.model.cluster_ranks import bare_problem, timed_problem
    topo = _topology(2, 2)
    p = _problem(MOE, topo, 4, 64)
    origin = zoo_origin(p.graph)
    bare = bare_problem(p, origin, 1, 4)
    kw = dict(dp=4, tp=1, pp=1, global_batch=4, seq_len=64, attention="flash", ep=4, breakdown=False,
              check_memory=False)
    for d in ("alltoall", "deepep"):
        mine = timed_problem(bare, origin, 4, 1, 1, False, 1, 4, d)
        theirs = whatif(MOE, topo, dispatcher=d, **kw).problem
        v = mine.graph.index("l0.ffn1")
        assert mine.fwd_time_s[v, 0, 0] == pytest.approx(float(theirs.fwd_time_s[theirs.graph.index("l0.ffn1"), 0, 0]),
                                                         rel=1e-12), d
    deep = timed_problem(bare, origin, 4, 1, 1, False, 1, 4, "deepep")
    flat = timed_problem(bare, origin, 4, 1, 1, False, 1, 4, "alltoall")
    v = deep.graph.index("l0.ffn1")
    assert deep.fwd_time_s[v, 0, 0] < flat.fwd_time_s[v, 0, 0]
    r = plan_cluster(p, time_limit_s=600, top_k=4, microbatch_sizes=(), context_parallel=(), expert_parallel=(2, 4),
                     ep_dispatcher="deepep")
    for c in r.plans:
        if c.point.ep > 1 and c.point.pp == 1:
            assert simulate(c.problem, c.plan).iteration_s == pytest.approx(c.iteration_s, rel=1e-9)


def test_the_ep_dispatcher_option_is_checked_and_read_by_the_cluster_space_only():
    from distplan.model.applies import check_options_apply
    from distplan.model.options import SolveOptions
    with pytest.raises(DistplanError, match="ep_dispatcher"):
        SolveOptions(ep_dispatcher="nccl")
    p = _problem(MOE, _topology(1, 4), 4, 64)
    check_options_apply(p, SolveOptions(ep_dispatcher="deepep"), "cluster")
    with pytest.raises(DistplanError, match="SolveOptions.ep_dispatcher does not apply in the pipeline"):
        check_options_apply(p, SolveOptions(ep_dispatcher="deepep"), "pipeline")
