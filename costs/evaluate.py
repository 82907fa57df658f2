"""The analytic steady-state cost of a plan (``plan_cost``, seconds per microbatch): the
quantity the MILP linearises, and the memory each device is charged
(``plan_memory_bytes``, bytes).

The period is the largest device load (its stages' compute at their precisions plus the
casts on the consumer) or link load (each crossing tensor's bytes at the producer's
precision over every link of its relay hops, the gradient back in training), averaged
over one cycle of replica assignment (``Plan.cycle``). Under ``comm`` "exposed" each
transfer (per source op and receiving stage, sent directly) adds its time to both end
devices' loads instead (costs.exposed). In the simulator's ideal mode the
steady-state period equals it. Tensor parallelism is outside this model
(``costs.iteration.estimate_iteration`` covers dp x tp x pp training).

Rules: docs/concepts/milp.md, "The period it linearises".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distplan.costs.collectives import boundary_links, boundary_load_s, links_s
from distplan.costs.exposed import add_exposed_loads, transfers
from distplan.costs.memory import (StageMemory, activation_factors, follows_1f1b_phases, in_transit_sends,
                                   inflight_microbatches, remat_per_op_bytes, saved_elems, stream_activation_bytes,
                                   training_stage_memory)
from distplan.costs.offload import optimizer_saved_bytes
from distplan.costs.problem import Problem
from distplan.costs.recompute import recomputed, zero_saved_bytes
from distplan.costs.sharding import gather_memory_bytes
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.core.schedules import interleaved_early, interleaved_inflight, interleaved_order


@dataclass(frozen=True)
class PlanCost:
    period_s: float
    device_load_s: np.ndarray   # (D,) seconds of work per microbatch
    link_load_s: np.ndarray     # (L,) busy seconds per microbatch
    memory_bytes: np.ndarray    # (D,) bound on resident bytes
    sensitivity: float


def _cycle(plan: Plan) -> int:
    return plan.cycle


def plan_memory_bytes(problem: Problem, plan: Plan) -> np.ndarray:
    """Resident bytes per device (the one memory model, costs.memory): static bytes of every
    op placed there (and of the tied parameters it reads when their owner sits on another
    stage), per rank (1/tp, less the ZeRO share; ZeRO-3's gathered units on top,
    costs.sharding), plus activations. Training: the bytes
    each stage keeps for the backward (``training_stage_memory``: saved inputs, sharded by
    tp and sequence parallelism, recomputation dropping what it remakes) times the
    microbatches in flight on its replica under the schedule, and the stage's transient
    peak. Inference: the microbatches its stage may hold in flight
    (costs.memory.activation_factors: in a stream only the bytes an op sends to a later
    stage are held twice, and a stage without tensor parallelism holds its liveness peak
    and one microbatch of what it receives, costs.memory.stream_activation_bytes)."""
    mem = static_memory_bytes(problem, plan)
    if problem.training:
        mem += gather_memory_bytes(problem, plan)   # ZeRO-3's gathered units and full gradients
        act = training_activation_bytes(problem, plan)
        if any(pipeline_rule(st) for st in plan.stages) and plan.schedule != "interleaved":
            # both rules bound the simulated peak: the tighter one stands, so a plan within
            # the pipeline space's linear rows always passes and a data-parallel stage is
            # not charged every output it never keeps
            act = np.minimum(act, training_activation_bytes(problem, plan, linear=False))
        return mem + act
    K = plan.n_stages
    leaves = np.zeros(problem.n_ops, dtype=bool)
    for u, v in problem.sending_edges():
        if plan.op_stage[v] > plan.op_stage[u]:
            leaves[u] = True
    live = plan.schedule == "stream"
    by_precs: dict[tuple[str, ...], np.ndarray] = {}
    for k, stage in enumerate(plan.stages):
        seen_k: set[int] = set()
        for i in range(stage.replicas if live and stage.tensor_parallel == 1 else 0):
            precs = plan.replica_precisions(k, i)
            if precs not in by_precs:
                q = (np.arange(problem.n_ops), np.array([problem.q_index(p) for p in precs]))
                by_precs[precs] = stream_activation_bytes(
                    plan.op_stage, K, problem.act_bytes[q], problem.send_bytes[q], problem.edges, plan.microbatches,
                    problem.edge_elems * problem.bytes_per_elem[q[1][problem.edges[:, 0]]] if len(problem.edges) else None)
            for d in set(stage.replica_group(i)) - seen_k:
                mem[d] += by_precs[precs][k]
                seen_k.add(d)
    for v, k in enumerate(plan.op_stage):
        n_all, n_sent = activation_factors(plan.schedule, k, K, plan.microbatches)
        stage = plan.stages[k]
        if stage.tensor_parallel > 1:   # all-reduces between ops: a stage's microbatches overlap
            n_all, n_sent = n_all + n_sent, 0
        elif live:                      # the stage's liveness peak, counted above
            continue
        seen: set[int] = set()
        for i in range(stage.replicas):
            q = problem.q_index(plan.precision_of(v, i))
            per = problem.act_bytes[v, q] * n_all + (problem.send_bytes[v, q] * n_sent if leaves[v] else 0.0)
            for d in set(stage.replica_group(i)) - seen:
                mem[d] += per
                seen.add(d)
    return mem


def static_memory_bytes(problem: Problem, plan: Plan) -> np.ndarray:
    """Static bytes per device: each op's parameters (with gradients and optimizer state in
    training) per rank, 1/tp of them less the ZeRO share (costs.sharding), and tied parameters held where
    their owner's stage is not; each replica at its own precisions; less the optimizer
    state a stage offloads (costs.offload). The simulator holds
    exactly these (sim.taskgraph)."""
    mem = np.zeros(problem.n_devices)
    for k, st in enumerate(plan.stages):
        for i in range(st.replicas):
            precs = plan.replica_precisions(k, i)
            per = 0.0
            for v in plan.ops_in_stage(k):
                q = problem.q_index(precs[v])
                o = problem.tied_owner[v]
                tied = problem.tied_bytes[v, q] if o >= 0 and plan.op_stage[o] != k else 0.0
                per += ((problem.static_bytes[v, q] + tied) / st.tensor_parallel - zero_saved_bytes(problem, plan, v, q)
                        - optimizer_saved_bytes(problem, plan, v))
            for d in st.replica_group(i):
                mem[d] += per
    return mem


def pipeline_rule(stage) -> bool:
    """Is a training stage charged by the pipeline space's linear rule? Stages without
    tensor parallelism or recomputation (the pipeline space's, which its MILP, DP and
    heuristic linearise): ``n`` in-flight microbatches of every op's output and dropout
    extras (``Problem.act_bytes``). The simulator never holds more of a stage's own
    buffers (each microbatch's kept and unread parts are at most its outputs), so it
    bounds the simulated own peak; received copies and gradients come on top, as they
    always did here. Megatron-style stages (tensor parallelism, sequence parallelism,
    recomputation) get the saved-input model, which bounds the whole simulated peak."""
    return stage.tensor_parallel == 1 and stage.recompute == "none"


def training_activation_bytes(problem: Problem, plan: Plan, linear: bool = True) -> np.ndarray:
    """Activation bytes per device in training: per stage and replica, the pipeline
    space's linear rule (``pipeline_rule``; only where ``linear``), or ``n`` in-flight microbatches (costs.memory.
    inflight_microbatches over the replica's own microbatch count) of the stage's stash
    plus its transient peak (costs.memory.StageMemory.peak_bytes)."""
    mem = np.zeros(problem.n_devices)
    again = recomputed(problem, plan)
    K = plan.n_stages
    memo: dict[tuple[int, tuple[str, ...]], StageMemory] = {}
    saved = saved_elems(problem.graph, again)   # once per plan, for every stage
    remat: dict[tuple[int, bool, tuple[str, ...]], np.ndarray] = {}
    single = np.zeros(problem.n_devices)   # the one microbatch under way on each device (StageMemory.single)
    phases = follows_1f1b_phases(problem, plan)   # the 1F1B phase rule (one stage per device)
    chunks: dict[tuple[int, int], dict[int, tuple[StageMemory, int]]] = {}   # interleaved: (rank, replica) -> chunks
    peaks: dict[tuple[StageMemory, int, int], float] = {}   # 1F1B phase rule per (stage memory, in flight, count)
    for k, st in enumerate(plan.stages):
        counts = st.replica_counts(plan.microbatches)
        seen: set[int] = set()
        lin = linear and pipeline_rule(st) and plan.schedule != "interleaved"   # the pipeline space plans no interleaving
        for i in range(st.replicas):
            precs = plan.replica_precisions(k, i)
            if lin:   # the pipeline space's rule, which its MILP, DP and heuristic charge
                n = inflight_microbatches(plan.schedule, k, K, plan.microbatches)
                per = n * math.fsum(problem.act_bytes[v, problem.q_index(precs[v])] for v in plan.ops_in_stage(k))
                for d in set(st.replica_group(i)) - seen:
                    mem[d] += per
                    seen.add(d)
                continue
            if (k, precs) not in memo:
                qs = [problem.q_index(p) for p in precs]
                key = (st.tensor_parallel, st.sequence_parallel, precs)
                if key not in remat:
                    remat[key] = remat_per_op_bytes(problem, qs, st.tensor_parallel, st.sequence_parallel, again)
                memo[k, precs] = training_stage_memory(problem, plan, k, qs, again, saved, remat[key])
            sm = memo[k, precs]
            n = inflight_microbatches(plan.schedule, k, K, max(1, counts[i]), plan.virtual_stages)
            one_at_a_time = plan.schedule == "1f1b"
            if plan.schedule == "interleaved":   # charged over the rank's order below
                pp = K // plan.virtual_stages
                chunks.setdefault((k % pp, i), {})[k // pp] = (sm, max(1, counts[i]))
                continue
            if phases:   # replicas alike share one walk of the phases
                key = (sm, n, max(1, counts[i]))
                if key not in peaks:
                    peaks[key] = sm.peak_1f1b_bytes(n, max(1, counts[i]))
                per = peaks[key]
            else:
                per = sm.peak_bytes(n, 1 if one_at_a_time else n)
            for d in set(st.replica_group(i)) - seen:
                if one_at_a_time:   # a device runs one microbatch of one of its stages at a time:
                    mem[d] += per - sm.single + sm.stash      # every stage's stashes, and the most
                    single[d] = max(single[d], sm.single - sm.stash)   # one adds beyond its stash
                else:
                    mem[d] += per
                seen.add(d)
    ranks: dict[tuple, float] = {}   # replicas alike (most of them) walk their order once
    for (r, i), by_chunk in chunks.items():
        st = plan.stages[r]
        key = (r, tuple(sorted((j, sm) for j, (sm, _) in by_chunk.items())), max(m for _, m in by_chunk.values()))
        if key not in ranks:
            ranks[key] = interleaved_held_bytes(plan.n_stages // plan.virtual_stages, plan.virtual_stages, r,
                                                dict(key[1]), key[2])
        held = ranks[key]
        for d in set(st.replica_group(i)):
            mem[d] += held
    return mem + single


def interleaved_held_bytes(pp: int, vp: int, rank: int, by_chunk: dict[int, StageMemory], microbatches: int) -> float:
    """The most a pipeline rank's chunks hold at once over Megatron's interleaved order
    (``core.schedules.interleaved_order``, which the device runs one task at a time): the
    stashes of every microbatch in flight on each chunk, the running task's microbatch at
    its own forward or backward profile (with its own received and sent buffers), the
    inputs and gradients that may have arrived early for tasks not yet started
    (``core.schedules.interleaved_early``, from the neighbouring ranks' orders), and the
    tensors still in transit from earlier tasks (``costs.memory.in_transit_sends``). A
    gradient back for a microbatch means its forward's send arrived, and every send before
    it on that link (FIFO), so those sends and that gradient are not both charged. A
    ``StageMemory`` without ``flow`` is charged its ``single`` profile and nothing beside it."""
    sms = [by_chunk[j] for j in range(vp)]
    flows = [sm.flow for sm in sms]
    order = interleaved_order(pp, vp, rank, microbatches)
    if any(f is None for f in flows):
        return _stashes_over(order, sms, lambda i, sm: sm.single)
    early = interleaved_early(pp, vp, rank, microbatches)
    relays = sum(c * f.relayed for c, f in zip(interleaved_inflight(pp, vp, rank, microbatches), flows))
    sends = in_transit_sends(order, flows)
    f_at = {(j, x): i for i, (phase, j, x) in enumerate(order) if phase == 0}
    backward_mbs = [[x for phase, c, x in order if phase == 1 and c == j] for j in range(vp)]
    done = [0] * vp   # backwards started per chunk, the running one included

    def running(i: int, sm: StageMemory) -> float:
        phase, j, _ = order[i]
        if phase == 1:
            done[j] += 1
        e_in, e_grad = early[i]
        fwd, back = sends[i]
        # the early gradients of chunk c are for its next microbatches to run backward;
        # each needs its forward's send (at position f_at) delivered, and every send before it
        grads = [(f_at[c, backward_mbs[c][done[c] + t]], flows[c].grad_in) for c in range(vp) for t in range(e_grad[c])]
        cuts = [p for p, _ in fwd] + [len(order)]   # the sends from the cut on are still in transit
        beside = max(sum(b for p, b in fwd if p >= cut) + sum(g for p, g in grads if p < cut) for cut in cuts)
        own = flows[j].forward_peak if phase == 0 else flows[j].backward_peak
        return own + sum(a * f.received for a, f in zip(e_in, flows)) + beside + back + relays

    return _stashes_over(order, sms, running)


def _stashes_over(order, sms: list[StageMemory], running) -> float:
    """The most held over ``order``: every other microbatch in flight at its stash, the
    running task's at ``running(position, StageMemory)``."""
    top = stashed = 0.0
    for i, (phase, j, _) in enumerate(order):
        sm = sms[j]
        if phase == 0:
            stashed += sm.stash
        top = max(top, stashed - sm.stash + running(i, sm))
        if phase == 1:
            stashed -= sm.stash
    return top


def plan_sensitivity(problem: Problem, plan: Plan) -> float:
    """Sum over ops of their sensitivity at their precision; an op whose replicas run it
    at different precisions (replica groups) counts each replica's sensitivity weighted
    by its share of the step's microbatches (the part of the gradient it computes)."""
    terms = []
    for v, p in enumerate(plan.op_precision):
        st = plan.stages[plan.op_stage[v]] if 0 <= plan.op_stage[v] < plan.n_stages else None
        if st is None or st.replica_precision is None or not any(v in st.overrides(i) for i in range(st.replicas)):
            terms.append(problem.sensitivity[v, problem.q_index(p)])
            continue
        n = st.replica_counts(plan.microbatches)
        terms += [problem.sensitivity[v, problem.q_index(plan.precision_of(v, i))] * n[i] / sum(n)
                  for i in range(st.replicas)]
    return math.fsum(terms)


def plan_cost(problem: Problem, plan: Plan) -> PlanCost:
    """Analytic per-microbatch loads and period of ``plan`` (see module docstring)."""
    if any(s.tensor_parallel != 1 for s in plan.stages):
        raise DistplanError("the analytic period covers tensor_parallel = 1 only; simulate the plan instead")
    topo = problem.topology
    cyc = _cycle(plan)
    dev = np.zeros(problem.n_devices)
    link = np.zeros(len(topo.links))
    again = recomputed(problem, plan)
    exposed = problem.exposed
    pairs = transfers(problem, plan.op_stage) if exposed else None
    for m in range(cyc):
        qs = [problem.q_index(p) for p in plan.microbatch_precisions(m)]
        where = [s.replica_devices(m)[0] for s in plan.stages]
        for v, k in enumerate(plan.op_stage):
            d = where[k]
            dev[d] += problem.op_time_s(v, qs[v], problem.device_kind[d])
            if again[v]:   # its forward runs again before its backward
                dev[d] += float(problem.fwd_time_s[v, qs[v], problem.device_kind[d]])
        for e, (u, v) in enumerate(problem.edges):
            ku, kv = plan.op_stage[u], plan.op_stage[v]
            d = where[kv]
            dev[d] += problem.cast_time_s(e, qs[u], qs[v], problem.device_kind[d])
            if exposed:
                continue
            nbytes = problem.edge_elems[e] * problem.bytes_per_elem[qs[u]]
            for b in range(ku, kv):
                for l, busy in boundary_load_s(problem, where[b], where[b + 1], nbytes):
                    link[l] += busy
        if exposed:   # direct sends, per source op and receiving stage, on both end devices
            add_exposed_loads(problem, plan.op_stage, where, qs, dev, link, pairs)
    dev /= cyc
    link /= cyc
    period = float(max(dev.max(initial=0.0), link.max(initial=0.0)))
    return PlanCost(period, dev, link, plan_memory_bytes(problem, plan), plan_sensitivity(problem, plan))


def plan_latency_s(problem: Problem, plan: Plan) -> float:
    """End-to-end latency of one microbatch run alone, stage after stage (microbatch 0).

    latency = sum over stages of the stage's load (compute of its ops at their
    precisions + the casts it performs, as in :func:`plan_cost`)
            + sum over boundaries b -> b+1 that some tensor with bytes crosses (relays
              included) of: the route's link latencies + bytes_b x sum over its links of
              1 / bandwidth (store and forward; in training the gradient's reverse route
              is added the same way).
    It ignores overlap between branches of the graph: a stage starts once all its
    inputs have arrived and sends all outputs when done. The MILP's latency objective
    is exactly this quantity.
    """
    if any(s.tensor_parallel != 1 for s in plan.stages):
        raise DistplanError("the analytic latency covers tensor_parallel = 1 only; simulate the plan instead")
    qs = [problem.q_index(p) for p in plan.microbatch_precisions(0)]
    where = [s.replica_devices(0)[0] for s in plan.stages]
    total = 0.0
    for v, k in enumerate(plan.op_stage):
        total += problem.op_time_s(v, qs[v], problem.device_kind[where[k]])
    nbytes = np.zeros(max(plan.n_stages - 1, 0))
    crossed = np.zeros(max(plan.n_stages - 1, 0), dtype=bool)
    for e, (u, v) in enumerate(problem.edges):
        ku, kv = plan.op_stage[u], plan.op_stage[v]
        total += problem.cast_time_s(e, qs[u], qs[v], problem.device_kind[where[kv]])
        if problem.edge_elems[e] > 0:
            for b in range(ku, kv):
                nbytes[b] += problem.edge_elems[e] * problem.bytes_per_elem[qs[u]]
                crossed[b] = True
    for b in range(plan.n_stages - 1):
        if crossed[b]:
            total += links_s(problem, boundary_links(problem, where[b], where[b + 1]), float(nbytes[b]))
    return float(total)
