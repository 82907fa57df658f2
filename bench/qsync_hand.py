"""A QSync-style plan built by hand with replica groups, on ``hybrid-v100-t4``.

One stage, 8 data-parallel replicas (tp 1): 4 V100 at fp16, 4 T4 with the matrix
products (kinds matmul, attn_score, attn_context, head) at int8 and the rest at fp16;
each replica's share of the 16 microbatches balanced on its seconds per microbatch
(``costs.iteration.replica_microbatch_s``, ``core.plan.balanced_shares``); gradients
reduced while the backward runs, by a ring or hierarchically. Prints, for bert-base and
bert-large training (batch 8, 16 microbatches, 128 samples per step), every variant's
simulated samples/s per optimizer step, the analytic prediction
(``costs.iteration.estimate_iteration``) beside it, the steady-state rate (batch /
simulated period, without the gradient reduction), and issue 15's references.

    python bench/qsync_hand.py [bert-base bert-large]
"""
from __future__ import annotations

import dataclasses
import sys
import time

import distplan
from distplan.core.plan import Plan, Stage, balanced_shares
from distplan.costs.check import check_plan
from distplan.costs.iteration import estimate_iteration, replica_microbatch_s
from distplan.costs.problem import Problem
from distplan.sim import simulate

#: operator kinds the T4 replicas run at int8 (QSync lowers the matrix products)
LOW_KINDS = ("matmul", "attn_score", "attn_context", "head")
#: issue 15's references (samples/s): the grid baseline, and the fleet's ideal (total
#: work / sum of device speeds, T4 at int8)
GRID = {"bert-base": 4597.0, "bert-large": 1693.0}
IDEAL = {"bert-base": 6378.0, "bert-large": 2043.0}


def qsync_plan(problem: Problem, overlap: bool = True, dp_allreduce: str = "ring", int8: bool = True) -> Plan:
    """The hand-built plan (module docstring) for a problem on ``hybrid-v100-t4``
    (``int8=False``: every replica at fp16, for comparison)."""
    topo, V = problem.topology, problem.n_ops
    low = {v: "int8" for v, op in enumerate(problem.graph.ops) if op.kind in LOW_KINDS} if int8 else {}
    over = [low if topo.kind_of(d).supports("int8") else {} for d in range(topo.n_devices)]   # the T4s
    stage = Stage(tuple(range(topo.n_devices)), replica_precision=tuple(over))
    plan = Plan((0,) * V, ("fp16",) * V, (stage,), problem.microbatches, "1f1b",
                dp_allreduce=dp_allreduce, overlap_grad_reduce=overlap)
    seconds = [replica_microbatch_s(problem, plan, 0, i) for i in range(stage.replicas)]
    shares = balanced_shares(seconds, problem.microbatches)
    return dataclasses.replace(plan, stages=(dataclasses.replace(stage, shares=shares),))


def main(workloads: list[str]) -> None:
    for wl in workloads:
        pb = distplan.problem(wl, "hybrid-v100-t4", mode="training", batch_size=8, precisions="fp16,int8",
                              microbatches=16)
        samples = pb.microbatches * pb.graph.batch_size
        ref = qsync_plan(pb)
        kinds = [pb.topology.kind_of(d).name for d in range(pb.n_devices)]
        per = {k: replica_microbatch_s(pb, ref, 0, d) for d, k in enumerate(kinds)}
        print(f"\n{wl}: {samples} samples per step; seconds per microbatch "
              + ", ".join(f"{k} {t * 1e3:.2f} ms" for k, t in per.items())
              + f"; shares {list(ref.stages[0].shares)}")
        print(f"{'variant':44s} {'sim samples/s':>13s} {'model samples/s':>15s} {'error':>7s} "
              f"{'iteration ms':>12s} {'compute ms':>10s} {'exposed comm ms':>15s} {'steady/s':>9s}")
        best = 0.0
        variants = [(a, o, True) for a in ("ring", "hierarchical") for o in (True, False)]
        for ar, ov, i8 in variants + [("hierarchical", True, False)]:   # last: T4 at fp16 too
            plan = qsync_plan(pb, ov, ar, i8)
            check_plan(pb, plan, memory_bound=False)
            t0 = time.perf_counter()
            r = simulate(pb, plan)
            est = estimate_iteration(pb, plan)
            sim_sps = samples / r.iteration_s
            if i8:
                best = max(best, sim_sps)
            name = ar + (" overlapped" if ov else "") + ("" if i8 else f", fp16 {list(plan.stages[0].shares)}")
            print(f"{name:44s} {sim_sps:13,.0f} {samples / est.iteration_s:15,.0f} "
                  f"{(est.iteration_s / r.iteration_s - 1) * 100:+6.2f}% {r.iteration_s * 1e3:12.2f} "
                  f"{est.pipeline_s * 1e3:10.2f} {est.exposed_allreduce_s * 1e3:15.2f} {r.throughput_per_s:9,.0f}"
                  f"   ({time.perf_counter() - t0:.1f} s)")
        print(f"best hand plan {best:,.0f}/s per step; issue 15 as filed: grid baseline {GRID.get(wl, float('nan')):,.0f}/s, "
              f"fleet ideal {IDEAL.get(wl, float('nan')):,.0f}/s")


if __name__ == "__main__":
    main(sys.argv[1:] or ["bert-base", "bert-large"])
