"""The grid baseline searches what the cluster space searches besides dp x tp x pp
(baselines.grid.GridOptions, baselines.grid_ranks): context and expert parallelism on the
cluster space's rank problems, interleaved 1F1B, and the fp8 training recipe. Each such
point is scored by the one cost model: the grid's score of a cp / ep point equals the
simulated throughput of the cluster space's plan of the same point, an interleaved point
simulates as the what-if of the same configuration, and an fp8 point runs the recipe's
precisions."""
from __future__ import annotations

import dataclasses

import pytest

from distplan.api.compare import plan_shape
from distplan.api.configs import whatif
from distplan.api.problem import problem as make_problem
from distplan.baselines import grid
from distplan.baselines.scoring import simulated_throughput
from distplan.costs.megatron import fp8_training_precisions
from distplan.model.cluster import plan_cluster
from distplan.sim import simulate
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster

from test_cluster_cp_ep import MOE, tiny_moe  # noqa: F401  (the tiny MoE, registered for every test)

DENSE = "llama-256x2x4"


def _topology(per_node: int, kind=K.A100, mem_bytes: float | None = None):
    kind = dataclasses.replace(kind, name=f"{kind.name}-small",
                               mem_capacity_bytes=mem_bytes or kind.mem_capacity_bytes)
    return rail_cluster(f"tiny1x{per_node}", 1, per_node, kind, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                        K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)


def _problem(workload: str, topo, M: int, seq: int, precisions=("bf16",)):
    return make_problem(workload, topo, batch_size=1, seq_len=seq, mode="training", precisions=precisions,
                        microbatches=M, attention="flash", schedule="1f1b")


def _grid(p, M: int, options: grid.GridOptions):
    return grid.search(p, 600.0, microbatch_counts=(M,), options=options)


def test_a_context_parallel_point_scores_as_the_cluster_spaces_plan():
    """4,096 tokens fit 320 MB best split over context ranks: the grid's best is the
    cluster space's point, dp 2 x cp 2, and its score is that plan's simulated
    throughput in whole sequences (the grid does not search overlapped buckets: the
    cluster plan is replayed with them off)."""
    p = _problem(DENSE, _topology(4, mem_bytes=3.2e8), 4, 4096)
    r = _grid(p, 4, grid.GridOptions(context_parallel=(1, 2, 4)))
    assert "cp 1/2/4" in r.space and r.stopped_by == "exhausted"
    assert r.plan.predicted["context_parallel"] == 2 and plan_shape(r.plan) == "1 stages x4 replicas cp2"
    c = plan_cluster(p, time_limit_s=600, top_k=1, microbatch_sizes=(), context_parallel=(1, 2, 4))
    best = c.plans[0]
    assert (best.point.dp, best.point.cp) == (2, 2)
    plain = dataclasses.replace(best.plan, overlap_grad_reduce=False)
    assert r.throughput_per_s == pytest.approx(4 / simulate(best.problem, plain).iteration_s, rel=1e-12)
    assert r.problem is not None and r.problem.microbatches == 8   # the rank problem: 4 x cp sequences
    # without cp only recomputation or sharding fits: slower
    plain_best = _grid(p, 4, grid.GridOptions(context_parallel=()))
    assert plain_best.plan.predicted.get("context_parallel", 1) == 1
    assert plain_best.throughput_per_s < r.throughput_per_s


def test_an_expert_parallel_point_scores_as_the_cluster_spaces_plan():
    """The tiny MoE on 4 GPUs: ep 4 x dp 4 with ZeRO-3 in both searches, the same score."""
    p = _problem(MOE, _topology(4), 4, 64)
    r = _grid(p, 4, grid.GridOptions(expert_parallel=(1, 2, 4)))
    assert "ep 1/2/4" in r.space
    assert r.plan.stages[0].expert_parallel == 4 and r.plan.stages[0].zero == 3
    c = plan_cluster(p, time_limit_s=600, top_k=1, microbatch_sizes=(), expert_parallel=(1, 2, 4))
    best = c.plans[0]
    assert best.point.ep == 4
    assert r.throughput_per_s == pytest.approx(4 / simulate(best.problem, best.plan).iteration_s, rel=1e-12)
    # ep off: the best dense layout is slower
    assert _grid(p, 4, grid.GridOptions(expert_parallel=())).throughput_per_s < r.throughput_per_s


def test_an_interleaved_point_simulates_as_the_whatif():
    """pp 2 x vp 2 on 4 layers: chunk c on stage c mod 2's devices, 8 microbatches over 2
    replicas, the same iteration as ``whatif(..., vp=2)``, to the last bit."""
    topo = _topology(4)
    p = _problem("llama-256x4x4", topo, 8, 128)
    pts = [pt for pt in grid.grid_points(p, (8,), grid.GridOptions(virtual_stages=(2, 3))) if pt.vp > 1]
    assert pts and {pt.vp for pt in pts} == {2}      # vp 3: 2 x 3 chunks do not divide 4 layers
    assert all(pt.pp == 2 and pt.ep == 1 for pt in pts)
    assert not [pt for pt in grid.grid_points(p, (8,)) if pt.vp > 1]   # none unless asked
    plan = grid.grid_plan(p, 2, 1, 2, 8, "bf16", grid.device_paths(p)[0][1], vp=2)
    assert plan.schedule == "interleaved" and plan.virtual_stages == 2
    assert [s.devices for s in plan.stages] == [(0, 1), (2, 3), (0, 1), (2, 3)]
    w = whatif("llama-256x4x4", topo, dp=2, tp=1, pp=2, vp=2, global_batch=8, seq_len=128, attention="flash")
    assert simulate(p, plan).iteration_s == w.iteration_s


def test_the_fp8_recipe_is_a_precision_policy_on_h100():
    """On H100s with bf16 and fp8 allowed the grid tries the recipe (fp8 linear layers,
    the rest bf16) as a policy besides bf16, fp8 and each op's fastest; on A100s it does
    not. At hidden 2,048 the recipe's point is faster than the same point in bf16, and
    the grid's best is at least as fast."""
    p = _problem("llama-2048x2x16", _topology(2, K.H100), 4, 1024, ("bf16", "fp8"))
    assert grid.precision_policies(p) == ("fastest", "bf16", "fp8", grid.FP8_RECIPE)
    recipe = grid.grid_plan(p, 2, 1, 1, 4, grid.FP8_RECIPE, (0, 1))
    assert recipe.op_precision == fp8_training_precisions(p, "bf16")
    assert {"fp8", "bf16"} == set(recipe.op_precision)
    wide = grid.grid_plan(p, 2, 1, 1, 4, "bf16", (0, 1))
    assert simulated_throughput(p, recipe) > simulated_throughput(p, wide)
    r = _grid(p, 4, grid.GridOptions())
    assert r.throughput_per_s >= simulated_throughput(p, recipe)
    assert grid.FP8_RECIPE not in grid.precision_policies(_problem(DENSE, _topology(2), 4, 512))
