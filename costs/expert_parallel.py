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

Two dispatchers (``DISPATCHERS``): Megatron's ``alltoall`` sends one row per (token, routed
expert) pair, the above. ``deepep`` (DeepSeek's DeepEP kernels, NeMo AutoModel's and
Megatron's flex dispatcher) sends a token once to each rank holding any of its experts, and
over the network once to each node holding any (to the member on the same rail), which
forwards it to that node's ranks over the scale-up switch; the network and the forwarding
run pipelined, so an all-to-all takes the slower of the two (``deepep_s``). How many ranks
and nodes a token reaches depends on the routing (``ROUTINGS``, ``token_destinations``):
``uniform``, its top-k experts drawn evenly from all E (balanced routing), or
``contiguous``, token t to experts k t .. k t + k - 1 (mod E): NeMo AutoModel's
``fake_balanced_gate``, which puts a token's experts on one or two consecutive ranks.

The experts' gradients are reduced, and under ZeRO-1/2 their optimizer state sharded and
their parameters gathered, over the expert-data-parallel group only (the r / ep replicas
at the same position of their block: ``expert_plan`` marks the stages,
``costs.sharding.gradient_reductions`` splits the bytes); the rest over all r replicas.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from distplan.core.plan import Plan
from distplan.core.errors import DistplanError
from distplan.costs.collectives import all_to_all_s, hierarchical_groups
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


#: the token dispatchers (module docstring)
DISPATCHERS = ("alltoall", "deepep")
#: how tokens pick their experts (module docstring)
ROUTINGS = ("uniform", "contiguous")


@dataclasses.dataclass(frozen=True)
class Dispatch:
    """How a MoE layer moves its tokens: the dispatcher and the routing (module docstring),
    and the model's routed experts and top-k (which the deepep counts need)."""

    dispatcher: str = "alltoall"
    routing: str = "uniform"
    experts: int = 1
    top_k: int = 1

    def __post_init__(self):
        if self.dispatcher not in DISPATCHERS:
            raise DistplanError(f"unknown dispatcher {self.dispatcher!r}; choose one of {', '.join(DISPATCHERS)}")
        if self.routing not in ROUTINGS:
            raise DistplanError(f"unknown routing {self.routing!r}; choose one of {', '.join(ROUTINGS)}")


def model_dispatch(workload: str, dispatcher: str, routing: str = "uniform") -> Dispatch:
    """How the zoo mixture-of-experts model ``workload`` moves its tokens: ``dispatcher``
    and ``routing`` with its routed experts and top-k (Megatron's alltoall needs neither)."""
    if (dispatcher, routing) == ("alltoall", "uniform"):
        return Dispatch()
    from distplan.workloads.zoo import get_config
    cfg = get_config(workload)
    return Dispatch(dispatcher, routing, cfg.experts, cfg.top_k)


def token_destinations(experts: int, top_k: int, member_nodes: Sequence[int], routing: str) -> tuple[float, float]:
    """The distinct ranks and distinct nodes one token's top-k experts lie on, on average,
    when member m of an expert-parallel group (on node ``member_nodes[m]``) holds experts
    m E/ep .. (m+1) E/ep - 1: ``uniform``, E_ranks = ep (1 - C(E - E/ep, k) / C(E, k)) and per
    node 1 - C(E - its experts, k) / C(E, k); ``contiguous``, counted over the period of
    t -> k t mod E."""
    ep = len(member_nodes)
    per = experts // ep
    if routing == "uniform":
        total = math.comb(experts, top_k)
        def hit(held: int) -> float:
            return 1.0 - math.comb(experts - held, top_k) / total
        return ep * hit(per), math.fsum(hit(n * per) for n in Counter(member_nodes).values())
    period = experts // math.gcd(top_k, experts)
    ranks = nodes = 0
    for t in range(period):
        members = {((top_k * t + i) % experts) // per for i in range(top_k)}
        ranks += len(members)
        nodes += len({member_nodes[m] for m in members})
    return ranks / period, nodes / period


def deepep_s(problem: Problem, devs: list[int], token_bytes: float, dispatch: Dispatch) -> float:
    """One DeepEP all-to-all of a group (module docstring): each rank sends ``token_bytes``
    a token. Inside one node (or one member a node, or nodes of unequal shares), one
    all-to-all of the rows the distinct destination ranks need; across nodes of equal
    shares, the slower of the network phase (per rail, the same-rail members of every
    node, the rows the distinct destination nodes need) and the forwarding inside each
    node (the rows the distinct destination ranks need)."""
    topo = problem.topology
    ranks, nodes = token_destinations(dispatch.experts, dispatch.top_k, [topo.devices[d].node for d in devs],
                                      dispatch.routing)
    groups = hierarchical_groups(topo, devs)
    if groups is None:
        return all_to_all_s(problem, devs, token_bytes * ranks)
    network = max(all_to_all_s(problem, [devs[g[j]] for g in groups], token_bytes * nodes)
                  for j in range(len(groups[0])))
    forward = max(all_to_all_s(problem, [devs[i] for i in g], token_bytes * ranks) for g in groups)
    return max(network, forward)


def all_to_all_times(problem: Problem, plan: Plan, ep: int, cp: int, row_elems: float, q: int,
                     dispatch: Dispatch = Dispatch()) -> float:
    """Seconds of one all-to-all at precision index ``q`` on the slowest group: each rank
    sends its ``row_elems / tp`` elements (``row_elems``: a microbatch's routed rows x
    hidden on one data-parallel rank), one row per routed expert (``alltoall``), or under
    ``deepep`` one per distinct destination (``deepep_s``)."""
    tp = plan.stages[0].tensor_parallel
    nbytes = row_elems / tp * float(problem.bytes_per_elem[q])
    groups = [list(g) for g in {tuple(g) for g in ep_groups(plan, ep, cp)}]
    if dispatch.dispatcher == "deepep":
        return max(deepep_s(problem, g, nbytes / dispatch.top_k, dispatch) for g in groups)
    return max(all_to_all_s(problem, g, nbytes) for g in groups)


def with_all_to_alls(problem: Problem, plan: Plan, ep: int, row_elems: float, cp: int = 1,
                     dispatch: Dispatch = Dispatch()) -> Graph:
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
        x = all_to_all_times(problem, plan, ep, cp, row_elems, problem.wire_q(q), dispatch)
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
