"""Context and expert parallelism in the cluster space: which cp / ep degrees a problem
gets, and the problem of one rank, as the what-if builds it (``api.configs.whatif``).

A point with cp > 1 or ep > 1 runs the graph of one rank (``seq_len / cp`` tokens a
sequence; ``E / ep`` routed experts a layer), over ``microbatches x cp`` microbatches
shared by ``dp x cp`` replicas. Its *bare* problem (that graph, no exchange timed) orders
the search: its bound is at most the point's own, which only adds the K/V ring's exposed
part and the all-to-alls to op times (``costs.context_parallel``, ``costs.expert_parallel``).
The *timed* problem, with those times on the point's own groups (they depend on dp, tp,
pp and sequence parallelism), is the one the point is bounded, split, timed and simulated
on. Only a zoo transformer (the graph ``get_workload`` builds for its name) has a rank
graph; any other problem keeps cp = ep = 1.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.context_parallel import kv_chunk_elems, with_kv_ring
from distplan.costs.expert_parallel import expert_plan, model_dispatch, routed_row_elems, with_all_to_alls
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.workloads.graph import Graph

#: the shortest sequence whose points get cp > 1 by default (Megatron-Core's long-context runs)
DEFAULT_CP_MIN_SEQ = 8192
#: the cp degrees tried by default on a long sequence (those dividing it)
DEFAULT_CP = (2, 4, 8)


@dataclass(frozen=True)
class ZooOrigin:
    """The zoo model a problem's graph is: its name, attention core, routed experts."""

    name: str
    attention: str
    experts: int   # routed experts a layer (0: dense)


def zoo_origin(graph: Graph) -> ZooOrigin | None:
    """The zoo transformer ``graph`` is exactly (rebuilt by name and compared), or None."""
    from distplan.workloads.zoo import get_config, get_workload
    if graph.measured or graph.seq_len is None:
        return None
    try:
        cfg = get_config(graph.name)
    except DistplanError:
        return None
    if not getattr(cfg, "heads", 0):
        return None
    attention = "flash" if any(op.name.endswith(".flash_attn") for op in graph.ops) else "explicit"
    try:
        same = get_workload(graph.name, graph.batch_size, graph.seq_len, graph.mode, attention) == graph
    except DistplanError:
        return None
    return ZooOrigin(graph.name, attention, int(getattr(cfg, "experts", 0) or 0)) if same else None


def cp_degrees(problem: Problem, origin: ZooOrigin | None, asked=None) -> tuple[int, ...]:
    """The cp degrees of the space: 1, and ``asked`` (None: ``DEFAULT_CP`` when the
    sequence has at least ``DEFAULT_CP_MIN_SEQ`` tokens) where cp divides the sequence
    and fits the devices; (1,) without a zoo transformer or in inference."""
    if origin is None or not problem.training:
        if origin is None and problem.training and asked is not None and any(c > 1 for c in asked):
            raise DistplanError(f"context-parallel degrees {', '.join(map(str, asked))} asked, but "
                                f"{problem.graph.name!r} is not a zoo transformer: the cluster space builds a "
                                "context rank's graph (seq_len / cp tokens) only for the zoo's models "
                                "(python solve.py --list); an imported or measured graph plans without cp")
        return (1,)
    seq = problem.graph.seq_len
    want = asked if asked is not None else (DEFAULT_CP if seq >= DEFAULT_CP_MIN_SEQ else ())
    return tuple(sorted({1, *(c for c in want if seq % c == 0 and c <= problem.n_devices)}))


def ep_degrees(problem: Problem, origin: ZooOrigin | None, asked=None) -> tuple[int, ...]:
    """The ep degrees of the space: 1, and ``asked`` (None: every divisor of the routed
    experts) that divide the experts and fit the devices; (1,) for a dense model."""
    if origin is None or not origin.experts or not problem.training:
        if problem.training and asked is not None and any(e > 1 for e in asked):
            raise DistplanError(f"expert-parallel degrees {', '.join(map(str, asked))} asked, but "
                                f"{problem.graph.name!r} has no routed experts the cluster space can split: "
                                "expert parallelism is searched on the zoo's mixture-of-experts models "
                                "(mixtral-8x7b, qwen3-30b-a3b, deepseek-v3, deepseek-<h>x<l>x<a>x<e>); "
                                "an imported MoE graph plans as dense")
        return (1,)
    want = asked if asked is not None else range(2, origin.experts + 1)
    return tuple(sorted({1, *(e for e in want if origin.experts % e == 0 and e <= problem.n_devices)}))


def _options(problem: Problem, cp: int) -> ProblemOptions:
    return ProblemOptions(precisions=problem.precisions, microbatches=problem.microbatches * cp,
                          schedule=problem.schedule, low_bit_ops=problem.low_bit_ops, comm=problem.comm)


def rank_graph(graph: Graph, origin: ZooOrigin, cp: int, ep: int) -> Graph:
    """One rank's graph of the zoo model ``graph`` is: ``seq_len / cp`` tokens a sequence,
    ``E / ep`` routed experts a layer (no capacity padding, each expert over all tp ranks)."""
    from distplan.workloads.zoo import get_config, get_workload
    from distplan.workloads.zoo.moe import ExpertShare, build_moe
    g = get_workload(origin.name, graph.batch_size, graph.seq_len, graph.mode, origin.attention, cp)
    if ep == 1:
        return g
    moe = build_moe(get_config(origin.name), graph.batch_size, graph.seq_len, graph.mode, origin.attention, cp,
                    ExpertShare(origin.experts // ep))
    return dataclasses.replace(moe, tp_divides=g.tp_divides)


def bare_problem(problem: Problem, origin: ZooOrigin, cp: int, ep: int) -> Problem:
    """The rank's problem without the exchanges: ``microbatches x cp`` microbatches."""
    if cp == ep == 1:
        return problem
    return build_problem(rank_graph(problem.graph, origin, cp, ep), problem.topology, _options(problem, cp))


def skeleton_plan(problem: Problem, replicas: int, tp: int, pp: int, sp: bool, cp: int, ep: int) -> Plan:
    """The groups of a point (stage k on the next replicas x tp devices, as ``_plan``)."""
    n = replicas * tp
    stages = tuple(Stage(tuple(range(k * n, (k + 1) * n)), tp, sequence_parallel=sp) for k in range(pp))
    plan = Plan((0,) * problem.n_ops, (problem.precisions[0],) * problem.n_ops, stages, problem.microbatches,
                "1f1b")
    return expert_plan(plan, ep, cp)


def timed_problem(bare: Problem, origin: ZooOrigin, replicas: int, tp: int, pp: int, sp: bool, cp: int,
                  ep: int, dispatcher: str = "alltoall") -> Problem:
    """The bare problem with the K/V ring's exposed part on each attention core (cp > 1,
    Megatron-Core's p2p ring) and the all-to-alls on the expert ops (ep > 1), timed on the
    point's groups (``dispatcher``: ``costs.expert_parallel.DISPATCHERS``, balanced routing):
    the what-if's problem of the same configuration."""
    plan = skeleton_plan(bare, replicas, tp, pp, sp, cp, ep)
    p = bare
    if cp > 1:
        g = with_kv_ring(p, plan, cp, kv_chunk_elems(origin.name, p.graph.batch_size, p.graph.seq_len))
        p = build_problem(g, p.topology, _options(bare, 1))
    if ep > 1:
        g = with_all_to_alls(p, plan, ep, routed_row_elems(origin.name, p.graph, 1.0), cp,
                             model_dispatch(origin.name, dispatcher))
        p = build_problem(g, p.topology, _options(bare, 1))
    return p
