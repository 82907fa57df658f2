"""An independent oracle for the GPU-cluster training space: every plan of the declared
space (docs/guides/gpu-training.md, "The declared space") built from the documented
rules alone (nothing here reads ``model.cluster``), judged by the checker and the
analytic iteration, the best kept. dp divides the microbatch count, tp the device count
(at most ``max_tp``), pp from 1 to the layer count, dp x tp x pp <= devices; stage k
holds devices k*dp*tp .. (k+1)*dp*tp - 1, dp replicas of tp consecutive devices; layers
(``l<i>.`` prefixes; ops before the first or after the last join it) split into pp
contiguous non-empty groups, every split; recomputation none / selective / full; ZeRO
0-2 (dp > 1; ZeRO-3 too at pp 1 with tp 1 or its rings on links of their own, one
reduction option) and sequence parallelism (tp > 1) on or off; gradient reduction (dp > 1) a flat
ring, or hierarchical when the replicas span two or more nodes with the same number (>
1) on each, overlapped or not; 1F1B, and interleaved 1F1B (pp >= 2) at each asked vp >=
2 when pp x vp divides the layers and pp the microbatches a replica (chunk c on stage c
mod pp); every op at the one training precision (its fallback where it may not);
feasible when ``costs.check.plan_violations`` (memory included) passes.
Context and expert parallelism (``parallel_plans``): the what-if's graph of one rank
(``api.context``, ``api.experts``) over microbatches x cp, dp x cp replicas (a context
rank next to the others of its sequence), the K/V ring and the all-to-alls timed on the
plan's groups, ep dividing dp and the experts, no interleaving at ep > 1.
"""
from __future__ import annotations

import itertools

from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.iteration import estimate_iteration
from distplan.costs.problem import Problem
from distplan.workloads.graph import layer_index

RECOMPUTE = ("none", "selective", "full")


def layer_groups(problem: Problem) -> list[list[int]]:
    """Op indices per layer, ops before the first layer in it and after the last in it."""
    idx = [layer_index(op.name) for op in problem.graph.ops]
    known = sorted({i for i in idx if i is not None})
    if not known:
        return [[v] for v in range(problem.n_ops)]
    pos = {x: i for i, x in enumerate(known)}
    groups: list[list[int]] = [[] for _ in known]
    last = 0
    for v, x in enumerate(idx):
        if x is not None:
            last = pos[x]
        groups[last].append(v)
    return groups


def _hierarchical(problem: Problem, devs: list[int]) -> bool:
    per_node: dict[int, int] = {}
    for d in devs:
        node = problem.topology.devices[d].node
        per_node[node] = per_node.get(node, 0) + 1
    counts = set(per_node.values())
    return len(per_node) >= 2 and len(counts) == 1 and counts != {1}


def declared_plans(problem: Problem, precision: str, max_tp: int = 64, virtual_stages=(), degrees=None,
                   tp_overlap: bool = False):
    """Every plan of the declared space (module docstring) with interleaving at
    ``virtual_stages``, in no particular order; ``degrees``: only (replicas, tp, pp, sp);
    ``tp_overlap``: each sequence-parallel plan also with every stage's tensor-parallel
    collectives pipelined with their GEMMs (``Stage.tp_comm_overlap``)."""
    N, M = problem.n_devices, problem.microbatches
    groups = layer_groups(problem)
    L = len(groups)
    named = any(layer_index(op.name) is not None for op in problem.graph.ops)
    q = problem.q_index(precision)
    op_precision = tuple(problem.precisions[problem.fallback_q(v, q)] for v in range(problem.n_ops))
    for tp in (t for t in range(1, min(N, max_tp) + 1) if N % t == 0):
        for pp in range(1, min(L, N // tp) + 1):
            for dp in (d for d in range(1, M + 1) if M % d == 0 and d * tp * pp <= N):
                if degrees is not None and degrees[:3] != (dp, tp, pp):
                    continue
                n = dp * tp
                reductions = [("ring", False)]
                if dp > 1:
                    reductions.append(("ring", True))
                    if _hierarchical(problem, [i * tp for i in range(dp)]):
                        reductions += [("hierarchical", False), ("hierarchical", True)]
                splits = [(1, (0, *cut, L)) for cut in itertools.combinations(range(1, L), pp - 1)]
                splits += [(vp, tuple(range(0, L + 1, L // (pp * vp)))) for vp in virtual_stages
                           if pp >= 2 and L % (pp * vp) == 0 and (M // dp) % pp == 0 and named]
                for vp, edges in splits:
                    op_stage = [0] * problem.n_ops
                    for k, (a, b) in enumerate(zip(edges, edges[1:])):
                        for g in groups[a:b]:
                            for v in g:
                                op_stage[v] = k
                    fsdp = pp == vp == 1 and (tp == 1 or _apart(problem, dp, tp))
                    zeros = ((0, 1, 2, 3) if fsdp else (0, 1, 2)) if dp > 1 else (0,)
                    sps = (False, True) if tp > 1 else (False,)
                    for rc, zero, sp in itertools.product(RECOMPUTE, zeros,
                                                          sps if degrees is None else (degrees[3],)):
                        for ov in ((False, True) if sp and tp_overlap else (False,)):
                            stages = tuple(Stage(tuple(range((k % pp) * n, (k % pp + 1) * n)), tp, rc, sp, zero,
                                                 tp_comm_overlap=ov) for k in range(pp * vp))
                            for how, overlap in (reductions[:1] if zero == 3 else reductions):   # ZeRO-3: no end reduction
                                yield Plan(tuple(op_stage), op_precision, stages, M,
                                           "interleaved" if vp > 1 else "1f1b", dp_allreduce=how,
                                           overlap_grad_reduce=overlap)


def _apart(problem: Problem, dp: int, tp: int) -> bool:
    """The guide's rule for ZeRO-3 with tp: every hop into device i*tp + j from
    ((i-1) mod dp)*tp + j on links of its own, none of them a tensor-parallel hop's."""
    topo = problem.topology
    hops = [l for i in range(dp) for j in range(tp) for l in topo.route(((i - 1) % dp) * tp + j, i * tp + j)]
    tp_links = {l for i in range(dp) for j in range(tp) for l in topo.route(i * tp + j, i * tp + (j + 1) % tp)}
    return len(hops) == len(set(hops)) and not tp_links.intersection(hops)


def cluster_optimum(problem: Problem, precision: str, top: int = 1, virtual_stages=(),
                    tp_overlap: bool = False) -> list[float]:
    """The ``top`` least analytic iterations over every feasible plan of the space."""
    out = [estimate_iteration(problem, plan).iteration_s
           for plan in declared_plans(problem, precision, virtual_stages=virtual_stages, tp_overlap=tp_overlap)
           if not plan_violations(problem, plan)]
    return sorted(out)[:top]


def parallel_plans(workload: str, topology, microbatches: int, seq_len: int, precision: str, cps, eps,
                   attention: str = "flash"):
    """(problem, plan) of every plan of the declared space with cp in ``cps`` and ep in
    ``eps`` (module docstring), one microbatch a sample, in no particular order."""
    from distplan.api.context import rank_graph, ring_graph
    from distplan.api.experts import all_to_all_graph, expert_graph
    from distplan.api.problem import problem as make_problem
    from distplan.costs.expert_parallel import expert_plan
    from distplan.workloads.zoo import get_config
    experts = getattr(get_config(workload), "experts", 0) or 0
    kw = dict(precisions=(precision,), schedule="1f1b")
    for cp, ep in itertools.product(cps, eps):
        if seq_len % cp or (ep > 1 and experts % ep):
            continue
        graph = expert_graph(workload, 1, seq_len, "training", cp, attention, ep, 1, 1, 1.0) if ep > 1 else \
            rank_graph(workload, 1, seq_len, "training", cp, attention)
        bare = make_problem(graph, topology, microbatches=microbatches * cp, **kw)
        N = bare.n_devices
        for tp in (t for t in range(1, N + 1) if N % t == 0 and bare.graph.tp_fits(t)):
            for pp in range(1, min(len(layer_groups(bare)), N // tp) + 1):
                for dp in (d for d in range(1, microbatches + 1) if microbatches % d == 0 and d % ep == 0
                           and d * cp * tp * pp <= N):
                    for sp in ((False, True) if tp > 1 else (False,)):
                        n = dp * cp * tp   # the groups: stage k on the next n devices
                        groups = expert_plan(Plan((0,) * bare.n_ops, (precision,) * bare.n_ops, tuple(
                            Stage(tuple(range(k * n, (k + 1) * n)), tp, sequence_parallel=sp) for k in range(pp)),
                            bare.microbatches, "1f1b"), ep, cp)
                        p = bare
                        if cp > 1:
                            p = make_problem(ring_graph(p, groups, workload, cp), topology,
                                             microbatches=microbatches * cp, **kw)
                        if ep > 1:
                            p = make_problem(all_to_all_graph(p, groups, workload, ep, 1.0, cp)[0], topology,
                                             microbatches=microbatches * cp, **kw)
                        for plan in declared_plans(p, precision, degrees=(dp * cp, tp, pp, sp)):
                            yield p, expert_plan(plan, ep, cp)
