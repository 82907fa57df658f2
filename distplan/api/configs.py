"""Named parallel configurations, simulated without a MILP: what a user of an analytic
LLM performance model asks ("dp 16 x tp 8 x pp 8, microbatch 1, global batch 1,536:
iteration time, TFLOP/s per GPU, memory, where the time goes").

``megatron_plan`` lays a graph out the way Megatron-LM does: ``pp`` stages of equal
transformer-layer counts (the embedding with the first, the head with the last; a
graph without ``l<i>.`` layer names is split by operator count), and devices in
Megatron's order, tensor-parallel ranks innermost, then data-parallel replicas, then
pipeline stages (stage k takes devices ``k*dp*tp ..``, replica r of it the ``tp``
devices from ``r*tp``); ``order="tp-pp-dp"`` puts data parallelism outermost instead, as
Llama 3 was trained (``costs.megatron``). ``vp`` > 1: Megatron's interleaved 1F1B, pp x vp
chunks of equal layer counts, chunk c on stage c mod pp's devices. ``whatif`` simulates one
optimizer step of it.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from distplan.api.context import check_cp, check_fits, rank_graph, ring_exposed_s, ring_graph
from distplan.api.experts import all_to_all_graph, check_dispatch, check_ep, expert_graph, padding_flops
from distplan.api.problem import problem as make_problem
from distplan.sim.symmetry import find_symmetry
from distplan.costs.recompute import recomputed
from distplan.core.errors import DistplanError
from distplan.core.plan import DP_ALLREDUCE, RECOMPUTE, Plan
from distplan.core.validate import check_bool, check_choice, check_int, check_str
from distplan.costs.megatron import ORDERS, check_degrees, fp8_training_precisions, megatron_plan, stage_of_ops  # noqa: F401 (re-exported)
from distplan.costs.check import interleaved_violations, plan_violations
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.expert_parallel import expert_plan
from distplan.costs.problem import Problem
from distplan.costs.sharding import check_zero
from distplan.sim import SimOptions, SimResult, simulate
from distplan.topologies.topology import Link, Topology
from distplan.workloads.graph import MODES
from distplan.workloads.zoo.attention import flash_recompute_flops

#: above this many operator tasks a configuration is refused (about a minute here)
MAX_TASKS = 20_000_000

def _unbounded_memory(problem: Problem) -> Problem:
    """The same problem with unlimited device memory (the checker then skips its bound)."""
    return dataclasses.replace(problem, device_mem_bytes=np.full_like(problem.device_mem_bytes, np.inf))


#: bandwidth of a link that costs nothing (bytes / it is below any time the simulator adds)
FREE_BW_BYTES_PER_S = 1e30


def _no_comm(topology: Topology) -> Topology:
    """The same devices (kinds, nodes) with communication that costs nothing, to split
    exposed communication from the pipeline bubble: every device on one link each way to
    a single switch, links of ``FREE_BW_BYTES_PER_S`` and no latency. With free links
    the network's shape no longer matters, and one switch keeps the copies of a
    symmetric plan alike where a hierarchy would not (a fat tree's 32-node units: the
    free run of llama3-405b on h100x16384 in Megatron's order merged 32 copies, 55 s; on
    the switch 1,024)."""
    names = {d.name for d in topology.devices}
    hub = "free-switch"
    while hub in names:
        hub += "_"
    links = tuple(Link(a, b, FREE_BW_BYTES_PER_S, 0.0) for d in topology.devices
                  for a, b in ((d.name, hub), (hub, d.name)))
    return Topology(topology.name, topology.kinds, topology.devices, links, (hub,), routing="shortest",
                    description=topology.description)


@dataclass(frozen=True)
class WhatIf:
    """One simulated step of a named configuration. Shares are of the iteration time,
    on the average device: compute (its busy time), exposed communication (what the
    same run gains when every link is free), bubble and optimizer (the rest)."""

    problem: Problem
    plan: Plan
    sim: SimResult
    iteration_s: float
    samples_per_s: float
    model_tflops_per_device: float
    peak_memory_bytes: float
    hardware_tflops_per_device: float   # with the recomputed forwards
    compute_share: float
    exposed_comm_share: float
    bubble_share: float
    global_batch: int
    bound_memory_bytes: float = math.nan   # the checker's bound (costs.evaluate.plan_memory_bytes)
    order: str = "tp-dp-pp"                # device order, innermost first (costs.megatron.ORDERS)
    cp: int = 1                            # context-parallel ranks (among the plan's replicas)
    attention: str = "explicit"            # the attention core (workloads.zoo.attention)
    ring_exposed_s: tuple[float, float] = (0.0, 0.0)   # K/V ring per layer and microbatch, fwd/bwd
    cp_comm: str = "p2p"                   # the K/V exchange (costs.context_parallel.CP_COMMS)
    ep: int = 1                            # expert-parallel ranks (among the data-parallel replicas)
    etp: int = 0                           # expert-tensor-parallel ranks (0: = tp)
    capacity_factor: float = 1.0           # routed rows per expert over the even share
    all_to_all_s: float = 0.0              # one token all-to-all (4 per MoE layer and microbatch)
    dispatcher: str = "alltoall"           # the token dispatcher (costs.expert_parallel.DISPATCHERS)
    routing: str = "uniform"               # how tokens pick experts (costs.expert_parallel.ROUTINGS)

    def table(self) -> str:
        p, s = self.problem, self.plan
        st = s.stages[0]
        cap = float(np.min(p.device_mem_bytes))
        pp, vp, cp = s.pipeline_ranks, s.virtual_stages, self.cp
        return "\n".join([
            f"{p.graph.name} ({p.graph.mode}) on {p.topology.name}: dp {st.replicas // cp} x "
            + (f"cp {cp} x " if cp > 1 else "") + f"tp {st.tensor_parallel} x "
            f"pp {pp}{f' (vp {vp})' if vp > 1 else ''} = {st.replicas * st.tensor_parallel * pp} devices, microbatch "
            f"{p.graph.batch_size}, global batch {self.global_batch} ({s.microbatches // cp} microbatches), "
            f"{s.op_precision[0]}, {s.schedule}" + (f", order {self.order}" if self.order != "tp-dp-pp" else "")
            + (f", {self.attention} attention" if cp > 1 or self.attention != "explicit" else "")
            + (f", ZeRO-{st.zero}" + (" (FSDP)" if st.zero == 3 else "") if st.zero else "")
            + (f", ep {self.ep}" if self.ep > 1 else "")
            + (f", etp {self.etp}" if self.etp and self.etp != st.tensor_parallel else "")
            + (f", capacity factor {self.capacity_factor:g}" if self.capacity_factor != 1 else "")
            + (f", {self.dispatcher} dispatcher" if self.dispatcher != "alltoall" else "")
            + (f", {self.routing} routing" if self.routing != "uniform" else "")
            + (f", offload {'+'.join(st.offload)}" if st.offload else "")
            + (", tp comm overlap" if st.tp_comm_overlap else ""),
            f"iteration        {self.iteration_s:.6g} s ({self.samples_per_s:.6g} samples/s per step; "
            f"steady {self.sim.throughput_per_s:.6g}/s)",
            f"model TFLOP/s    {self.model_tflops_per_device:.4g} per device (hardware, with recomputation: "
            f"{self.hardware_tflops_per_device:.4g})",
            f"memory           {self.peak_memory_bytes / 2**30:.2f} GiB peak per device (checker's bound "
            f"{self.bound_memory_bytes / 2**30:.2f} GiB, capacity {cap / 2**30:.1f} GiB)"
            + ("  OVER CAPACITY" if self.peak_memory_bytes > cap else ""),
            f"time             compute {self.compute_share:.1%}, exposed communication {self.exposed_comm_share:.1%}, "
            f"bubble and optimizer {self.bubble_share:.1%}",
        ] + ([f"K/V ring         exposed {self.ring_exposed_s[0] * 1e3:.4g} ms forward, "
              f"{self.ring_exposed_s[1] * 1e3:.4g} ms backward per layer and microbatch (cp {cp}, "
              + ("beyond the attention it overlaps)" if self.cp_comm == "p2p" else "all-gathered, not overlapped)")]
             if cp > 1 else [])
           + ([f"all-to-all       {self.all_to_all_s * 1e3:.4g} ms each, 4 per MoE layer and microbatch (ep "
               f"{self.ep}: dispatch and combine, forward and backward, not overlapped)"] if self.ep > 1 else []))

    def to_json(self) -> dict:
        st = self.plan.stages[0]
        return {"workload": self.problem.graph.name, "topology": self.problem.topology.name,
                "dp": st.replicas // self.cp, "cp": self.cp, "attention": self.attention,
                "tp": st.tensor_parallel, "pp": self.plan.pipeline_ranks,
                "vp": self.plan.virtual_stages, "order": self.order, "zero": st.zero,
                "microbatch_size": self.problem.graph.batch_size, "global_batch": self.global_batch,
                "microbatches": self.plan.microbatches // self.cp, "iteration_s": self.iteration_s,
                "samples_per_s": self.samples_per_s, "steady_samples_per_s": self.sim.throughput_per_s,
                "model_tflops_per_device": self.model_tflops_per_device,
                "hardware_tflops_per_device": self.hardware_tflops_per_device,
                "peak_memory_bytes": self.peak_memory_bytes, "bound_memory_bytes": self.bound_memory_bytes,
                "compute_share": self.compute_share,
                "exposed_comm_share": self.exposed_comm_share, "bubble_share": self.bubble_share,
                "optimizer_s": self.sim.optimizer_s, "ring_exposed_s": list(self.ring_exposed_s),
                "cp_comm": self.cp_comm, "ep": self.ep, "etp": self.etp or st.tensor_parallel,
                "capacity_factor": self.capacity_factor, "all_to_all_s": self.all_to_all_s,
                "dispatcher": self.dispatcher, "routing": self.routing}


def check_tp_divides_heads(workload: object, tp: int) -> None:
    """Megatron splits attention by heads: for a zoo model, ``tp`` must divide its heads
    and its key/value heads (grouped-query attention), or a DistplanError naming both
    (tp 3 on a 32-head model was simulated as if it split evenly). A graph file or
    Graph carries no head count and is not checked."""
    from distplan.workloads.zoo import get_config

    if not isinstance(workload, str) or tp == 1:
        return
    try:
        cfg = get_config(workload)
    except DistplanError:   # a graph file: no head count to check
        return
    heads = getattr(cfg, "heads", None)
    if not heads:
        return
    kv = getattr(cfg, "kv_heads", None) or heads
    if heads % tp or kv % tp:
        fits = [t for t in range(1, heads + 1) if heads % t == 0 and kv % t == 0]
        what = f"{heads} attention heads" + (f" and {kv} key/value heads" if kv != heads else "")
        raise DistplanError(f"--tp {tp} does not divide the {what} of {cfg.name!r} (Megatron splits attention by "
                            f"heads); use --tp {', '.join(map(str, fits[:8]))}{' ...' if len(fits) > 8 else ''}")


def check_whatif_options(microbatch_size: object, global_batch: object, precision: object, mode: object,
                         recompute: object, sequence_parallel: object, dp_allreduce: object,
                         overlap_grad_reduce: object, check_memory: object, breakdown: object,
                         order: object, tp_comm_overlap: object = False) -> None:
    """:func:`whatif`'s options beside the degrees, each of its type (core.validate; named
    by its flag): counts are positive ints, switches are bools ("no" and 1 were taken as
    on), names are among their choices (``global_batch="8"`` was a TypeError)."""
    check_int("--microbatch-size", microbatch_size)
    check_int("--global-batch", global_batch, optional=True)
    check_str("--precision", precision)
    check_choice("--mode", mode, MODES)
    check_choice("--recompute", recompute, RECOMPUTE)
    check_choice("--dp-allreduce", dp_allreduce, DP_ALLREDUCE)
    check_choice("--order", order, ORDERS)
    for name, flag in (("--sequence-parallel", sequence_parallel), ("--overlap-grad-reduce", overlap_grad_reduce),
                       ("check_memory", check_memory), ("breakdown", breakdown), ("--tp-comm-overlap", tp_comm_overlap)):
        check_bool(name, flag)


def whatif(workload: str, topology: str | Topology, dp: int, tp: int, pp: int, microbatch_size: int = 1,
           global_batch: int | None = None, precision: str = "bf16", mode: str = "training",
           seq_len: int | None = None, schedule: str | None = None, recompute: str = "none",
           sequence_parallel: bool = False, zero: int = 0, dp_allreduce: str = "ring",
           overlap_grad_reduce: bool = False, check_memory: bool = True, breakdown: bool = True,
           vp: int = 1, order: str = "tp-dp-pp", cp: int = 1, attention: str | None = None,
           cp_comm: str = "p2p", ep: int = 1, etp: int | None = None, capacity_factor: float = 1.0,
           offload: tuple[str, ...] = (), tp_comm_overlap: bool = False, dispatcher: str = "alltoall",
           routing: str = "uniform") -> WhatIf:
    """Simulate one step of ``workload`` under dp x tp x pp (module docstring); ``vp`` > 1:
    Megatron's interleaved 1F1B with vp chunks per stage (the microbatches per replica a
    multiple of pp); ``order``: the device order (``costs.megatron.ORDERS``).

    ``check_memory=False`` skips the checker's memory bound (costs.evaluate.plan_memory_bytes,
    the one memory model: within a few % above the simulated peak); both are reported
    (``bound_memory_bytes``, ``peak_memory_bytes``). ``breakdown=False`` skips the second simulation
    with free links: the shares are then NaN (exposed communication is not split from
    the bubble) and the call takes half the time. ``cp`` > 1: context parallelism, each
    sequence split over cp ranks (``costs.context_parallel``); ``attention``: the
    attention core, flash or explicit (default flash with cp > 1); ``cp_comm``: the K/V
    exchange, ``p2p`` (a ring overlapped with attention) or ``all_gather`` (Llama 3's).
    ``ep`` > 1: expert parallelism, each of ep data-parallel ranks holding E / ep routed
    experts, ``etp`` of the tp ranks splitting each, experts padded to ``capacity_factor``
    times their share (``costs.expert_parallel``); ``dispatcher``: Megatron's alltoall (a
    row per routed expert) or deepep (a row per destination rank, once a node over the
    network), ``routing``: uniform or contiguous (AutoModel's fake balanced gate). ``offload``: what every stage keeps in
    host memory (``core.plan.OFFLOAD``, ``costs.offload``). ``tp_comm_overlap``: every linear
    layer's tensor-parallel collective pipelined with its GEMM (``costs.tp_overlap``; needs
    tp >= 2 and sequence parallelism, the checker says so by name)."""
    check_degrees(dp, tp, pp, vp)
    check_tp_divides_heads(workload, tp)
    check_whatif_options(microbatch_size, global_batch, precision, mode, recompute, sequence_parallel,
                         dp_allreduce, overlap_grad_reduce, check_memory, breakdown, order, tp_comm_overlap)
    attention = check_cp(workload, cp, attention, cp_comm)
    check_zero(zero, dp * cp)   # ZeRO shards over dp x cp replicas, as Megatron's
    etp = check_ep(workload, ep, etp, dp, tp, capacity_factor, zero)
    dispatch = check_dispatch(workload, ep, dispatcher, routing)
    experts = ep > 1 or etp != tp or capacity_factor != 1
    if microbatch_size < 1:
        raise DistplanError(f"--microbatch-size must be >= 1, got {microbatch_size}")
    global_batch = global_batch or microbatch_size * dp * 8
    if global_batch % (microbatch_size * dp):
        raise DistplanError(f"--global-batch {global_batch} is not a multiple of --microbatch-size x --dp = "
                            f"{microbatch_size} x {dp} = {microbatch_size * dp}")
    M = global_batch // microbatch_size
    recipe = precision == "fp8" and mode == "training"   # fp8 linear layers, bf16 elsewhere
    precs = ("bf16", "fp8") if recipe else (precision,)
    graph = workload if cp == 1 and attention == "explicit" else \
        rank_graph(workload, microbatch_size, seq_len, mode, cp, attention)
    padding = 0.0   # FLOPs of capacity padding, a microbatch
    if experts:
        graph = expert_graph(workload, microbatch_size, seq_len, mode, cp, attention, ep, etp, tp, capacity_factor)
        if capacity_factor != 1:
            padding = padding_flops(graph, expert_graph(workload, microbatch_size, seq_len, mode, cp, attention, ep,
                                                        etp, tp, 1.0), mode == "training")
    M *= cp   # each of a group's cp ranks runs its share of every microbatch, as a replica
    shape = dict(batch_size=microbatch_size, seq_len=seq_len, mode=mode) if isinstance(graph, str) else {}
    p = make_problem(graph, topology, **shape, precisions=precs, microbatches=M, schedule=schedule)
    check_fits(p, dp, cp, tp, pp)
    plan = expert_plan(megatron_plan(p, dp * cp, tp, pp, precision, schedule, recompute, sequence_parallel, zero,
                                     dp_allreduce, overlap_grad_reduce, vp, order, cp, tp_comm_overlap), ep, cp)
    ring, bare = (0.0, 0.0), p
    if cp > 1:
        bare, p = p, make_problem(ring_graph(p, plan, workload, cp, cp_comm), p.topology, precisions=precs,
                                  microbatches=M, schedule=p.schedule)
        ring = ring_exposed_s(bare, p, plan)
    a2a = 0.0
    if ep > 1:   # bare keeps the graph without the all-to-alls: free links free them too
        moved, a2a = all_to_all_graph(p, plan, workload, ep, capacity_factor, cp, dispatch)
        p = make_problem(moved, p.topology, precisions=precs, microbatches=M, schedule=p.schedule)
    if recipe:
        plan = dataclasses.replace(plan, op_precision=fp8_training_precisions(p, "bf16"))
    if offload:   # the checker names what does not apply (costs.offload)
        plan = dataclasses.replace(plan, stages=tuple(dataclasses.replace(st, offload=tuple(offload))
                                                      for st in plan.stages))
    if plan.schedule == "interleaved":
        bad = interleaved_violations(p, plan)
        if bad:
            raise DistplanError("the configuration does not fit: " + "; ".join(bad[:3]))
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    copies = sym.factor if sym is not None else 1   # identical replicas/ranks simulated once
    tasks = p.n_ops * tp * M * (2 if p.training else 1) // copies
    if tasks > MAX_TASKS:
        raise DistplanError(f"this configuration expands to {tasks:,} operator tasks after merging identical "
                            f"replicas and ranks, more than the simulator takes here ({MAX_TASKS:,}); use a "
                            "smaller global batch, dp or tp")
    bound = float(np.max(plan_memory_bytes(p, plan)[sorted({d for s in plan.stages for d in s.devices})]))
    bad = plan_violations(p if check_memory else _unbounded_memory(p), plan)
    if bad:
        raise DistplanError("the configuration does not fit: " + "; ".join(bad[:3]))
    sim = simulate(p, plan)
    used = sorted({d for s in plan.stages for d in s.devices})
    busy = float(np.mean(sim.device_busy_s[used]))
    it = sim.iteration_s
    flops = (p.graph.fwd_flops + (p.graph.bwd_flops if p.training else 0.0)
             - math.fsum(map(flash_recompute_flops, p.graph.ops)) - padding) * M   # model FLOPs: no recomputation
    if breakdown:   # free links free the K/V ring too: its exposed part counts as communication, not compute
        free = simulate(make_problem(bare.graph, _no_comm(p.topology), precisions=precs, microbatches=M,
                                     schedule=p.schedule), plan)
        if cp > 1 or ep > 1:   # the compute without the exchanges' exposed part (the free run's busy time)
            busy = float(np.mean(free.device_busy_s[used]))
        comm = max(0.0, it - free.iteration_s)
        shares = (busy / it, comm / it, max(0.0, 1.0 - busy / it - comm / it))
    else:
        shares = (busy / it, math.nan, math.nan)
    again = recomputed(p, plan)
    hw = flops + M * padding + M * math.fsum(op.fwd_flops + flash_recompute_flops(op) if again[v] else flash_recompute_flops(op)
                               for v, op in enumerate(p.graph.ops))
    return WhatIf(p, plan, sim, it, global_batch / it, flops / it / len(used) / 1e12,
                  float(np.max(sim.peak_memory_bytes[used])), hw / it / len(used) / 1e12, *shares, global_batch, bound,
                  order, cp, attention, ring, cp_comm, ep, etp, capacity_factor, a2a, dispatcher, routing)
