"""Expert parallelism (Megatron-Core's ``--expert-model-parallel-size``; GShard, Lepikhin
et al. 2020): the ``ep`` ranks of a group are data-parallel replicas for everything but
the routed experts, of which each holds ``E / ep`` a layer (their parameters, gradients
and optimizer state; the graph of one rank: ``workloads.zoo.moe.ExpertShare``). A rank
computes ``capacity * tokens * top_k`` routed rows, its experts' share of the group's
tokens; the ep ranks of a group are consecutive data-parallel replicas (tp-cp-ep-dp-pp).

What the graph leaves out is moving the tokens: each MoE layer's forward dispatches every
routed row to its expert's rank before ``ffn1`` and combines the results back after
``ffn2`` (two all-to-alls over the group of ``capacity * tokens * top_k * hidden / tp``
elements per rank, ``costs.collectives.all_to_all_s`` on the slowest group), and the
backward does the same for their gradients. None is overlapped (Megatron's default):
the seconds are added to ffn1's and ffn2's times as measured times (``Operator.times``),
so the analytic model, the checker and the simulator read one figure.

The experts' gradients are reduced, and under ZeRO-1/2 their optimizer state sharded and
their parameters gathered, over the expert-data-parallel group only (the r / ep replicas
at the same position of their block: ``expert_plan`` marks the stages,
``costs.sharding.gradient_reductions`` splits the bytes); the rest over all r replicas.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from distplan.core.plan import Plan
from distplan.costs.collectives import all_to_all_s
from distplan.costs.compute import tp_shard_time_s
from distplan.costs.problem import Problem
from distplan.costs.tensor_parallel import tp_divides
from distplan.workloads.graph import Graph, layer_index


def ep_groups(plan: Plan, ep: int, cp: int = 1) -> list[list[int]]:
    """Every expert-parallel group: per stage, block b of ep data-parallel ranks, context
    rank c and tensor-parallel rank j, rank j of replicas ``(b*ep + e)*cp + c``."""
    out = []
    for st in plan.stages:
        for b in range(st.replicas // (ep * cp)):
            for c in range(cp):
                groups = [st.replica_group((b * ep + e) * cp + c) for e in range(ep)]
                out += [[g[j] for g in groups] for j in range(st.tensor_parallel)]
    return out


def expert_plan(plan: Plan, ep: int, cp: int = 1) -> Plan:
    """``plan`` with every stage's replicas in expert-parallel blocks of ``ep`` members
    ``cp`` replicas apart (``ep_groups``' layout; ``Stage.expert_parallel``)."""
    if ep == 1:
        return plan
    return dataclasses.replace(plan, stages=tuple(dataclasses.replace(st, expert_parallel=ep, expert_stride=cp)
                                                  for st in plan.stages))


def expert_layers(graph: Graph) -> dict[int, tuple[int, int]]:
    """MoE layer -> (its ffn1, its ffn2): the layers with a router."""
    names = {op.name: v for v, op in enumerate(graph.ops)}
    out = {}
    for op in graph.ops:
        if op.name.endswith(".router"):
            p = op.name[: -len("router")]
            out[layer_index(op.name)] = (names[p + "ffn1"], names[p + "ffn2"])
    return out


def all_to_all_times(problem: Problem, plan: Plan, ep: int, cp: int, row_elems: float, q: int) -> float:
    """Seconds of one all-to-all at precision index ``q`` on the slowest group: each rank
    sends its ``row_elems / tp`` elements (``row_elems``: a microbatch's routed rows x
    hidden on one data-parallel rank)."""
    tp = plan.stages[0].tensor_parallel
    nbytes = row_elems / tp * float(problem.bytes_per_elem[q])
    return max(all_to_all_s(problem, list(g), nbytes) for g in {tuple(g) for g in ep_groups(plan, ep, cp)})


def with_all_to_alls(problem: Problem, plan: Plan, ep: int, row_elems: float, cp: int = 1) -> Graph:
    """The problem's graph with each MoE layer's all-to-alls (module docstring) on its
    expert ops: the dispatch on ffn1's forward and on its backward, the combine on ffn2's
    forward and backward, as measured (kind, precision) rows (rows moved at ``Problem.wire_q``: bf16 under the fp8 recipe), the per-rank time put back
    to a whole op's (the tensor-parallel split divides it again). The graph as it is for
    ep 1."""
    if ep == 1:
        return problem.graph
    g = problem.graph
    st = plan.stages[0]
    tp, sp = st.tensor_parallel, st.sequence_parallel
    rows: dict[int, list[tuple[str, str, float | None, float | None]]] = {}
    for q, prec in enumerate(problem.precisions):
        x = all_to_all_times(problem, plan, ep, cp, row_elems, problem.wire_q(q))
        for c, kind in enumerate(problem.kind_names):
            launch = float(problem.cast_fixed_s[c])
            for pair in expert_layers(g).values():
                for v in pair:
                    share = tp if tp_divides(g.ops[v], sp) else 1
                    f = tp_shard_time_s(float(problem.fwd_time_s[v, q, c]), launch, share)
                    b = tp_shard_time_s(float(problem.bwd_time_s[v, q, c]), launch, share)
                    if not np.isfinite(f):
                        continue
                    whole_b = ((b + x - launch) * share + launch) if problem.training else None
                    rows.setdefault(v, []).append((kind, prec, (f + x - launch) * share + launch, whole_b))
    ops = tuple(dataclasses.replace(op, times=op.times + tuple(rows[v])) if v in rows else op
                for v, op in enumerate(g.ops))
    return dataclasses.replace(g, ops=ops)


def routed_row_elems(workload: str, graph: Graph, capacity_factor: float) -> float:
    """Elements a data-parallel rank dispatches a microbatch: its padded routed rows x hidden."""
    from distplan.workloads.zoo import get_config
    cfg = get_config(workload)
    rows = math.ceil(capacity_factor * graph.batch_size * graph.seq_len * cfg.top_k - 1e-9)
    return float(rows * cfg.hidden)
