"""The what-if's expert parallelism (``--ep``, ``--etp``, ``--capacity-factor``,
``--ep-dispatcher``, ``--routing``): arguments
checked at the edge, the graph of one expert-parallel rank, and its all-to-alls timed on
the plan's groups (``costs.expert_parallel``; the design: docs/guides/whatif-and-simulator.md)."""
from __future__ import annotations

import math

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.costs.expert_parallel import (DISPATCHERS, ROUTINGS, Dispatch, all_to_all_times, model_dispatch,
                                            routed_row_elems, with_all_to_alls)
from distplan.costs.problem import Problem
from distplan.workloads.graph import Graph


def _moe_config(workload: object):
    from distplan.workloads.zoo import get_config
    from distplan.workloads.zoo.moe import MoEConfig
    if not isinstance(workload, str):
        return None
    try:
        cfg = get_config(workload)
    except DistplanError:
        return None
    return cfg if isinstance(cfg, MoEConfig) else None


def _whole(flag: str, v: object) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise DistplanError(f"{flag} must be a positive whole number, got {v!r}")
    return v


def check_ep(workload: object, ep: int, etp: int | None, dp: int, tp: int, capacity_factor: float,
             zero: int) -> int:
    """``ep`` divides ``dp`` and the model's routed experts, ``etp`` (None: tp) divides
    ``tp``, the capacity factor is a positive finite number; ep > 1, etp != tp or a
    capacity factor need a zoo MoE model (under ZeRO the experts shard, and under ZeRO-3
    gather, over their dp x cp / ep replicas: ``costs.sharding``). Returns etp."""
    _whole("--ep", ep)
    etp = tp if etp is None else _whole("--etp", etp)
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or not math.isfinite(capacity_factor) or capacity_factor <= 0:
        raise DistplanError(f"--capacity-factor must be a positive finite number, got {capacity_factor!r}")
    if ep == 1 and etp == tp and capacity_factor == 1:
        return etp
    cfg = _moe_config(workload)
    if cfg is None:
        name = workload if isinstance(workload, str) else "this graph"
        raise DistplanError(f"--ep {ep} / --etp {etp} / --capacity-factor {capacity_factor} split a zoo "
                            f"mixture-of-experts model's experts; {name!r} has none (dense: use --ep 1)")
    if dp % ep:
        raise DistplanError(f"--ep {ep} does not divide --dp {dp} (the expert-parallel ranks are data-parallel "
                            "replicas for the rest of the model)")
    if cfg.experts % ep:
        raise DistplanError(f"--ep {ep} does not divide the {cfg.experts} routed experts of {cfg.name!r}")
    if tp % etp:
        raise DistplanError(f"--etp {etp} does not divide --tp {tp} (each expert is split over etp of the "
                            "tensor-parallel ranks)")
    return etp


def check_dispatch(workload: object, ep: int, dispatcher: str, routing: str) -> Dispatch:
    """The dispatch of ``workload``'s tokens (``costs.expert_parallel.Dispatch``): a known
    dispatcher and routing; other than Megatron's alltoall with uniform routing they need
    --ep >= 2 (one rank moves no tokens)."""
    if dispatcher not in DISPATCHERS:
        raise DistplanError(f"--ep-dispatcher must be one of {', '.join(DISPATCHERS)}, got {dispatcher!r}")
    if routing not in ROUTINGS:
        raise DistplanError(f"--routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
    if ep == 1:
        if (dispatcher, routing) != ("alltoall", "uniform"):
            raise DistplanError(f"--ep-dispatcher {dispatcher} / --routing {routing} move tokens between "
                                "expert-parallel ranks: they need --ep >= 2")
        return Dispatch()
    return model_dispatch(workload, dispatcher, routing)


def expert_graph(workload: str, batch_size: int, seq_len: int | None, mode: str, cp: int, attention: str,
                 ep: int, etp: int, tp: int, capacity_factor: float) -> Graph:
    """One expert-parallel rank's graph of ``workload``: E / ep routed experts a layer at
    tp / etp times the tensor-parallel split's weights, capacity-padded rows."""
    from distplan.workloads.zoo import get_config, get_workload
    from distplan.workloads.zoo.moe import ExpertShare, build_moe
    checked = get_workload(workload, batch_size, seq_len, mode, attention, cp)   # the shape's checks
    cfg = get_config(workload)
    share = ExpertShare(cfg.experts // ep, float(capacity_factor), tp // etp)
    return build_moe(cfg, batch_size, checked.seq_len * cp, mode, attention, cp, share)


def all_to_all_graph(problem: Problem, plan: Plan, workload: str, ep: int, capacity_factor: float,
                     cp: int = 1, dispatch: Dispatch = Dispatch()) -> tuple[Graph, float]:
    """The rank's graph with each MoE layer's four all-to-alls on its expert ops, and the
    seconds of one (at the first precision)."""
    rows = routed_row_elems(workload, problem.graph, capacity_factor)
    return (with_all_to_alls(problem, plan, ep, rows, cp, dispatch),
            all_to_all_times(problem, plan, ep, cp, rows, 0, dispatch))


def padding_flops(graph: Graph, unpadded: Graph, training: bool) -> float:
    """FLOPs a microbatch spends on capacity padding: the rank's graph against the same
    graph at capacity factor 1 (model FLOPs leave them out)."""
    def total(g: Graph) -> float:
        return g.fwd_flops + (g.bwd_flops if training else 0.0)
    return total(graph) - total(unpadded)
