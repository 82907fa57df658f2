"""The what-if's context parallelism (``--cp``, ``--attention``): arguments checked at the
edge, the graph of one context-parallel rank, and its K/V ring timed on the plan's
groups (``costs.context_parallel``; the design: docs/guides/whatif-and-simulator.md)."""
from __future__ import annotations

from distplan.core.errors import DistplanError
from distplan.costs.context_parallel import CP_COMMS, kv_chunk_elems, with_kv_ring
from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.workloads.graph import Graph
from distplan.workloads.zoo.attention import ATTENTION


def check_cp(workload: object, cp: int, attention: str | None, comm: str = "p2p") -> str:
    """``cp`` is a positive whole number, ``attention`` one of ``ATTENTION`` (None: flash
    with cp > 1, as every long-context run uses it, else explicit), ``comm`` one of
    ``CP_COMMS``; cp > 1 or flash needs a zoo transformer. Returns the attention core."""
    if not isinstance(cp, int) or isinstance(cp, bool) or cp < 1:
        raise DistplanError(f"--cp must be a positive whole number, got {cp!r}")
    if not isinstance(comm, str) or comm not in CP_COMMS:
        raise DistplanError(f"--cp-comm {comm!r} unknown; use {' or '.join(CP_COMMS)}")
    attention = attention or ("flash" if cp > 1 else "explicit")
    if attention not in ATTENTION:
        raise DistplanError(f"--attention {attention!r} unknown; use {' or '.join(ATTENTION)}")
    if (cp > 1 or attention == "flash") and not (isinstance(workload, str) and _heads(workload)):
        raise DistplanError(f"--cp {cp} / --attention {attention} split or fuse a zoo transformer's attention; "
                            f"{workload if isinstance(workload, str) else 'this graph'!r} has none to split")
    return attention


def _heads(workload: str) -> int:
    from distplan.workloads.zoo import get_config
    try:
        return int(getattr(get_config(workload), "heads", 0) or 0)
    except DistplanError:
        return 0


def rank_graph(workload: str, batch_size: int, seq_len: int | None, mode: str, cp: int, attention: str) -> Graph:
    """One context-parallel rank's graph of ``workload``: ``seq_len / cp`` tokens a sequence."""
    from distplan.workloads.zoo import get_workload
    return get_workload(workload, batch_size, seq_len, mode, attention, cp)


def check_fits(problem: Problem, dp: int, cp: int, tp: int, pp: int) -> None:
    """dp x cp x tp x pp devices exist on the problem's topology."""
    need = dp * cp * tp * pp
    if need > problem.n_devices:
        raise DistplanError(f"dp {dp} x cp {cp} x tp {tp} x pp {pp} = {need} devices, but "
                            f"{problem.topology.name!r} has {problem.n_devices}; lower --cp or --dp")


def ring_graph(problem: Problem, plan: Plan, workload: str, cp: int, comm: str = "p2p") -> Graph:
    """The rank's graph with the K/V exchange's exposed time on each attention core."""
    g = problem.graph
    return with_kv_ring(problem, plan, cp, kv_chunk_elems(workload, g.batch_size, g.seq_len), comm)


def ring_exposed_s(bare: Problem, ringed: Problem, plan: Plan) -> tuple[float, float]:
    """(forward, backward) seconds the K/V ring adds to one layer's attention core per
    microbatch on a rank (the first core, at its precision, on stage 0's kind): what
    ``ring_graph`` put on top of the bare core's time. (0, 0) without a core."""
    from distplan.costs.context_parallel import core_layers
    cores = core_layers(bare.graph)
    if not cores:
        return 0.0, 0.0
    vs = next(iter(cores.values()))
    c = int(bare.device_kind[plan.stages[0].devices[0]])
    q = [bare.q_index(plan.op_precision[v]) for v in vs]
    tp = plan.stages[0].tensor_parallel
    out = []
    for phase in ("fwd", "bwd") if bare.training else ("fwd",):
        was = [float(getattr(bare, f"{phase}_time_s")[v, qv, c]) for v, qv in zip(vs, q)]
        now = [float(getattr(ringed, f"{phase}_time_s")[v, qv, c]) for v, qv in zip(vs, q)]
        extra = (sum(now) - sum(was)) / tp
        out.append(extra if extra > 1e-9 * sum(was) / tp else 0.0)   # rounding of the rows' round trip
    return out[0], (out[1] if bare.training else 0.0)
