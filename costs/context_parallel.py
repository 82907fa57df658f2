"""Context parallelism (Megatron-Core's ``--context-parallel-size``; ring attention, Liu
et al. 2023): each of a group of ``cp`` ranks holds ``seq_len / cp`` tokens of every
sequence (the graph of one rank: ``workloads.zoo.attention``) and the group's ranks are
consecutive data-parallel replicas in the plan (gradients reduced and the optimizer
sharded over dp x cp, as Megatron does).

The K/V exchange the transform leaves out is timed here: the overlapped ring (``cp - 1``
steps a layer forward, twice the bytes backward, the core taking
``C + (cp - 1) max(0, x - C / cp)``) or ``all_gather`` (Llama 3's method: nothing
overlapped). The exposed part is added to the core's op times as measured times
(``Operator.times``), which the analytic model, the checker and the simulator all read:
it occupies the device, not the links. The rule in full: docs/guides/whatif-and-simulator.md,
"Context parallelism and flash attention".
"""
from __future__ import annotations

import dataclasses

import numpy as np

from distplan.core.plan import Plan
from distplan.core.errors import DistplanError
from distplan.costs.collectives import all_gather_s, reduce_scatter_s, ring_step_s
from distplan.costs.compute import tp_shard_time_s
from distplan.costs.problem import Problem
from distplan.costs.tensor_parallel import tp_divides
from distplan.workloads.graph import Graph, layer_index
from distplan.workloads.zoo.attention import CORE_NAMES

#: K/V chunks a backward ring step passes (K/V again, and their gradients dK/dV)
BWD_CHUNKS = 2
#: how a group exchanges K/V (Megatron-Core's --cp-comm-type names)
CP_COMMS = ("p2p", "all_gather")


def exposed_ring_s(core_s: float, step_s: float, cp: int) -> float:
    """Seconds a ring of ``cp`` ranks adds to an attention core of ``core_s`` whose
    ``cp - 1`` transfers each take ``step_s``: ``(cp - 1) max(0, step_s - core_s / cp)``."""
    return (cp - 1) * max(0.0, step_s - core_s / cp)


def cp_groups(plan: Plan, cp: int) -> list[list[int]]:
    """Every ring: per stage, data-parallel rank d and tensor-parallel rank j, rank j of
    replicas ``d*cp .. d*cp + cp - 1``."""
    out = []
    for st in plan.stages:
        for d in range(st.replicas // cp):
            groups = [st.replica_group(d * cp + c) for c in range(cp)]
            out += [[g[j] for g in groups] for j in range(st.tensor_parallel)]
    return out


def core_layers(graph: Graph) -> dict[int, list[int]]:
    """Layer -> the indices of its attention core's ops, in graph order."""
    out: dict[int, list[int]] = {}
    for v, op in enumerate(graph.ops):
        if op.name.rsplit(".", 1)[-1] in CORE_NAMES:
            out.setdefault(layer_index(op.name), []).append(v)
    return out


def ring_step_times(problem: Problem, plan: Plan, cp: int, kv_elems: float, q: int) -> tuple[float, float]:
    """(forward, backward) seconds of one ring step at precision index ``q``, on the
    slowest ring: a rank's K/V chunk of ``kv_elems / tp`` elements, twice that backward."""
    tp = plan.stages[0].tensor_parallel
    chunk = kv_elems / tp * float(problem.bytes_per_elem[q])
    groups = {tuple(g) for g in cp_groups(plan, cp)}
    fwd = max(ring_step_s(problem, list(g), chunk) for g in groups)
    bwd = max(ring_step_s(problem, list(g), BWD_CHUNKS * chunk) for g in groups)
    return fwd, bwd


def all_gather_times(problem: Problem, plan: Plan, cp: int, kv_elems: float, q: int) -> tuple[float, float]:
    """(forward, backward) exposed seconds of ``all_gather`` at precision index ``q`` on
    the slowest group: the all-gather of cp chunks; again, plus the reduce-scatter of dK/dV."""
    tp = plan.stages[0].tensor_parallel
    full = cp * kv_elems / tp * float(problem.bytes_per_elem[q])
    groups = [list(g) for g in {tuple(g) for g in cp_groups(plan, cp)}]
    fwd = max(all_gather_s(problem, g, full) for g in groups)
    bwd = max(all_gather_s(problem, g, full) + reduce_scatter_s(problem, g, full) for g in groups)
    return fwd, bwd


def with_kv_ring(problem: Problem, plan: Plan, cp: int, kv_elems: float, comm: str = "p2p") -> Graph:
    """The problem's graph with each attention core timed with its K/V exchange's exposed
    part (module docstring; ``comm`` one of ``CP_COMMS``): measured (kind, precision) rows
    on the core's last op (forward) and first op (backward), the per-rank time put back to
    a whole op's (the tensor-parallel split divides it again). ``kv_elems``: K and V
    elements of one rank's chunk of a microbatch, all heads. The graph as it is for cp 1."""
    if comm not in CP_COMMS:
        raise DistplanError(f"--cp-comm {comm!r} unknown; use {' or '.join(CP_COMMS)}")
    if cp == 1:
        return problem.graph
    g = problem.graph
    st = plan.stages[0]
    tp, sp = st.tensor_parallel, st.sequence_parallel
    kinds = problem.kind_names
    rows: dict[int, list[tuple[str, str, float | None, float | None]]] = {}
    for q, prec in enumerate(problem.precisions):
        x_f, x_b = (ring_step_times if comm == "p2p" else all_gather_times)(problem, plan, cp, kv_elems, q)
        for c, kind in enumerate(kinds):
            launch = float(problem.cast_fixed_s[c])
            for vs in core_layers(g).values():
                share = [tp if tp_divides(g.ops[v], sp) else 1 for v in vs]
                f = [tp_shard_time_s(float(problem.fwd_time_s[v, q, c]), launch, t) for v, t in zip(vs, share)]
                b = [tp_shard_time_s(float(problem.bwd_time_s[v, q, c]), launch, t) for v, t in zip(vs, share)]
                if not np.isfinite(sum(f)):
                    continue
                if comm == "p2p":
                    add_f = exposed_ring_s(sum(f), x_f, cp)
                    add_b = exposed_ring_s(sum(b), x_b, cp) if problem.training else 0.0
                else:
                    add_f, add_b = x_f, (x_b if problem.training else 0.0)
                for i, v in enumerate(vs):
                    fi = f[i] + (add_f if i == len(vs) - 1 else 0.0)
                    bi = b[i] + (add_b if i == 0 else 0.0)
                    rows.setdefault(v, []).append((kind, prec, (fi - launch) * share[i] + launch,
                                                   ((bi - launch) * share[i] + launch) if problem.training else None))
    ops = tuple(dataclasses.replace(op, times=op.times + tuple(rows[v])) if v in rows else op
                for v, op in enumerate(g.ops))
    return dataclasses.replace(g, ops=ops)


def kv_chunk_elems(workload: str, batch_size: int, local_tokens: int) -> float:
    """K and V elements of one rank's chunk of a microbatch, all heads."""
    from distplan.workloads.zoo import get_config
    cfg = get_config(workload)
    return float(batch_size * local_tokens * (cfg.kv_heads or cfg.heads) * (cfg.qk_head_dim + cfg.v_head_dim))
