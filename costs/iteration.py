"""The analytic training iteration of a dp x tp x pp plan, in closed form.

``estimate_iteration`` returns, in seconds, what the simulator's ``SimResult.iteration_s``
measures for one optimizer step: per stage the forward ``F_k`` and backward ``B_k`` of
one microbatch on one rank (Megatron's all-reduces, casts, recomputed forwards), the
boundary transfers ``c_b``, fill + (m - 1) x ``max_k (F_k + B_k)`` + drain, each stage's
exposed gradient reduction (flat or hierarchical ring, overlapped per op, ZeRO-1's
reduce-scatter) and the optimizer step. Interleaved schedules, mixed fleets and replica
groups run jointly, task by task, on the simulator's replay kernel (``costs.replay``)
with FIFO links in the simulator's order, and so do plans whose boundary tensors crowd
a shared link (``boundaries_contend``). Ignored on homogeneous plans: bubbles from
uneven communication in the 1F1B window.

Every term, the joint run and its fallback: docs/concepts/simulator.md, "The analytic
iteration, term by term".
"""
from __future__ import annotations

import math
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distplan.core.errors import DistplanError, TimeUp
from distplan.core.plan import Plan
from distplan.core.schedules import interleaved_order
from distplan.costs.collectives import (Transfers, all_gather_s, gradient_reduction_parts, hierarchical_groups,
                                        path_links, reduction_closed_form_exact, reduction_shares_links,
                                        reduction_size, reduction_transfers, ring_allreduce_s, ring_lanes, route_s)
from distplan.costs.compute import optimizer_step_s, tp_shard_time_s
from distplan.costs.fp8 import is_fp8_linear, weight_cast_s
from distplan.costs.fsdp import fsdp_hidden_s, fsdp_stage_times, rings_contend
from distplan.costs.sharding import dense_elems, expert_data_groups, expert_reduces, gradient_reductions
from distplan.costs.offload import host_optimizer_step_s, offloads
from distplan.costs.problem import Problem
from distplan.costs.recompute import recomputed
from distplan.costs.reduction_bound import overlapped_reduction_lb_s
from distplan.costs.routes import link_loads_s
from distplan.costs.symmetry import expert_replica_copy, replica_copy
from distplan.costs.tensor_parallel import tp_backward_allreduce, tp_divides, tp_forward_allreduce
from distplan.costs.tp_overlap import overlap_chunks, overlapped_s, overlaps


@dataclass(frozen=True)
class IterationEstimate:
    """The analytic iteration and its parts (seconds)."""

    iteration_s: float
    pipeline_s: float           # fill, steady state and drain of all microbatches
    period_s: float             # one microbatch per replica in the steady state
    stage_forward_s: np.ndarray   # (K,) F_k
    stage_backward_s: np.ndarray  # (K,) B_k
    boundary_s: np.ndarray        # (K-1,) c_b, one way
    allreduce_s: np.ndarray       # (K,) the stage's gradient reduction
    exposed_allreduce_s: float
    optimizer_s: float


def optimizer_step_per_device_s(problem: Problem, plan: Plan) -> np.ndarray:
    """Seconds after the run until each device has its updated parameters (0 in
    inference): its optimizer update (Adam, memory-bound, over the parameters the device
    holds, tensor-parallel shares divided, 1/r of them under ZeRO) and under ZeRO-1 and 2
    the parameters' all-gather (r-1 ring steps of bytes/r, without contention; ZeRO-3
    gathers before each use instead); routed experts over their expert-data-parallel
    groups (``costs.sharding.gradient_reductions``: 1/(r/ep), gathered there after the
    dense rest's gather); with fp8 linear layers, Transformer Engine's cast of
    their weights to fp8 (``costs.fp8.weight_cast_s``, once a step); a stage that offloads
    its optimizer steps on the host instead (``costs.offload.host_optimizer_step_s``)."""
    out = np.zeros(problem.n_devices)
    if not problem.training:
        return out
    elems_on = np.zeros(problem.n_devices)
    bytes_on = np.zeros(problem.n_devices)
    host_elems = np.zeros(problem.n_devices)   # of those, stepped on the host (costs.offload)
    host_bytes = np.zeros(problem.n_devices)
    gather = np.zeros(problem.n_devices)
    param = np.array([op.param_elems for op in problem.graph.ops], dtype=float)
    expert = np.array([op.expert_param_elems for op in problem.graph.ops], dtype=float)
    stage_of = np.asarray(plan.op_stage)
    bpe_of: dict[tuple[str, ...], np.ndarray] = {}   # per precision tuple (replicas mostly share one)
    fused = problem.low_bit_ops == "matmul" and "fp8" in problem.precisions
    fp8_elems_on = np.zeros(problem.n_devices)
    fp8_tensors_on = np.zeros(problem.n_devices)

    def bytes_per_elem(precs: tuple[str, ...]) -> np.ndarray:
        if precs not in bpe_of:
            bpe_of[precs] = problem.bytes_per_elem[[problem.q_index(p) for p in precs]]
        return bpe_of[precs]

    for k, st in enumerate(plan.stages):
        share = st.replicas if st.zero and st.replicas > 1 else 1
        eshare = max(1, share // st.expert_parallel)   # the routed experts' ZeRO shards
        mine = stage_of == k
        elems = float(param[mine].sum()) / st.tensor_parallel
        elems_e = float(expert[mine].sum()) / st.tensor_parallel if st.expert_parallel > 1 else 0.0
        for i in range(st.replicas):   # each replica's parameters at its own precisions
            precs_i = tuple(plan.replica_precisions(k, i))
            bpe = bytes_per_elem(precs_i)
            bytes_i = float((param[mine] * bpe[mine]).sum()) / st.tensor_parallel
            devs_i = list(st.replica_group(i))
            if elems_e:
                bytes_e = float((expert[mine] * bpe[mine]).sum()) / st.tensor_parallel
                elems_on[devs_i] += (elems - elems_e) / share + elems_e / eshare
                bytes_on[devs_i] += (bytes_i - bytes_e) / share + bytes_e / eshare
            else:
                elems_on[devs_i] += elems / share
                bytes_on[devs_i] += bytes_i / share
            if offloads(plan, k, "optimizer"):   # ZeRO 0 (costs.offload): share 1, no expert shards
                host_elems[devs_i] += elems
                host_bytes[devs_i] += bytes_i
            if fused:   # Transformer Engine casts its fp8 weights once a step (costs.fp8), unsharded by ZeRO
                w8 = [v for v in np.flatnonzero(mine) if precs_i[v] == "fp8" and is_fp8_linear(problem.graph.ops[v])]
                fp8_elems_on[devs_i] += float(param[w8].sum()) / st.tensor_parallel
                fp8_tensors_on[devs_i] += len(w8)
        bpe = bytes_per_elem(tuple(plan.op_precision))
        stage_bytes = float((param[mine] * bpe[mine]).sum()) / st.tensor_parallel
        if share > 1 and stage_bytes > 0 and st.zero < 3:   # ZeRO-3 gathers before each use
            tp = st.tensor_parallel
            expert_bytes = float((expert[mine] * bpe[mine]).sum()) / tp
            t_on = np.zeros(problem.n_devices)
            for members, part in gradient_reductions(st, stage_bytes, expert_bytes):
                for j in range(tp):
                    devs = [st.devices[i * tp + j] for i in members]
                    t_on[devs] += all_gather_s(problem, devs, part)
            gather = np.maximum(gather, t_on)
    for d in range(problem.n_devices):
        if elems_on[d] > 0:
            kind = problem.topology.kind_of(d)
            # Adam's 24 bytes per parameter plus the gradient read and the working copy written
            on_device = elems_on[d] - host_elems[d]
            out[d] = (optimizer_step_s(on_device, 0, kind) + (bytes_on[d] - host_bytes[d]) * 2 / kind.mem_bw_bytes_per_s
                      if on_device > 0 else 0.0) + host_optimizer_step_s(host_elems[d], host_bytes[d], kind) \
                + weight_cast_s(fp8_elems_on[d], int(fp8_tensors_on[d]), kind.mem_bw_bytes_per_s,
                                kind.launch_overhead_s)
    return out + gather


def op_rank_times(problem: Problem, G: list[int], qs: list[int], ops: list[int], sequence_parallel: bool,
                  again: np.ndarray, tp_comm_overlap: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of each op of ``ops`` for one microbatch on rank 0 of
    the tensor-parallel group ``G``: its share of the work, the recomputed forward, and
    the ring all-reduces Megatron's pattern puts after it (module docstring), pipelined
    with the op's GEMM under ``tp_comm_overlap`` (``costs.tp_overlap``)."""
    tv = len(G)
    c = int(problem.device_kind[G[0]])
    launch = float(problem.cast_fixed_s[c])
    chunks = overlap_chunks(tv)
    fwd = np.zeros(len(ops))
    bwd = np.zeros(len(ops))

    def ring(nbytes: float) -> float:
        return ring_allreduce_s(problem, G, nbytes)

    for i, v in enumerate(ops):
        op = problem.graph.ops[v]
        q = qs[v]
        tdiv = tv if tp_divides(op, sequence_parallel) else 1
        f = tp_shard_time_s(float(problem.fwd_time_s[v, q, c]), launch, tdiv)
        b = tp_shard_time_s(float(problem.bwd_time_s[v, q, c]), launch, tdiv) if problem.training else 0.0
        pipelined = tp_comm_overlap and tv > 1 and overlaps(op)
        fwd[i] = f
        if problem.training:
            bwd[i] = b + (f if again[v] else 0.0)
        if tv > 1 and tp_forward_allreduce(op):
            nbytes = problem.collective_bytes(v, q)
            fwd[i] = overlapped_s(f, nbytes, chunks, ring) if pipelined else f + ring(nbytes)
        if problem.training and tv > 1 and tp_backward_allreduce(op):
            nb_in = sum(float(problem.edge_elems[e] * problem.bytes_per_elem[qs[int(problem.edges[e][0])]])
                        for e in problem.in_edge_ids(v))
            if pipelined and nb_in > 0:   # the recomputed forward first, then the backward's GEMMs in chunks
                bwd[i] = (f if again[v] else 0.0) + overlapped_s(b, nb_in, chunks, ring)
            else:
                bwd[i] += ring(nb_in)
    return fwd, bwd


def _first_microbatch(st, replica: int) -> int:
    """The first microbatch ``replica`` of stage ``st`` runs."""
    return next(m for m in range(st.cycle) if st.replica_of(m) == replica)


def _stage_times(problem: Problem, plan: Plan, k: int, replica: int = 0) -> tuple[float, float, dict[int, float]]:
    """(F_k, B_k, each op's backward end within B_k) of one microbatch on rank 0 of
    ``replica`` of stage k, at the precisions of its first microbatch (ops run backward
    in reverse order, the casts last)."""
    st = plan.stages[k]
    G = list(st.replica_group(replica))
    tv = len(G)
    c = int(problem.device_kind[G[0]])
    launch = float(problem.cast_fixed_s[c])
    qs = [problem.q_index(p) for p in plan.microbatch_precisions(_first_microbatch(st, replica))]
    cast_share = 0.5 if problem.training else 1.0
    ops = plan.ops_in_stage(k)
    f_op, b_op = op_rank_times(problem, G, qs, ops, st.sequence_parallel, recomputed(problem, plan),
                               st.tp_comm_overlap)
    fwd = float(f_op.sum())
    ends = np.cumsum(b_op[::-1])[::-1]   # ops run backward last to first
    end = {v: float(ends[i]) for i, v in enumerate(ops)}
    bwd = float(b_op.sum())
    gathered = fsdp_stage_times(problem, plan, k, ops, f_op, b_op, qs)   # ZeRO-3's per-unit traffic
    if gathered is not None:
        fwd, bwd = gathered
    for e, (u, v) in enumerate(problem.edges.tolist()):
        if plan.op_stage[v] == k and qs[u] != qs[v] and not problem.cast_fused[e]:   # casts on the consumer
            t = tp_shard_time_s(problem.cast_time_s(e, qs[u], qs[v], c) * cast_share, launch, tv)
            fwd += t
            if problem.training:
                bwd += t
    return fwd, bwd, end


def _fsdp_pipeline_s(problem: Problem, plan: Plan, F: np.ndarray, B: np.ndarray, c: np.ndarray, m: int) -> float:
    """The 1F1B run of a ZeRO-3 plan, whose first and last stages gather the embedding and
    the head (docs/concepts/simulator.md, "ZeRO and FSDP"): the longest over stages k of the
    fill up to k, k's m microbatches back to back and the drain back from k, each pass
    that waits for its input (the fill's and drain's, k's first forward past stage 0 and
    last backward before the last stage) hiding its first gather (``costs.fsdp``). Equal
    stages give the closed form's fill + (m - 1) x period + drain."""
    K = len(F)
    hf, hb = np.array([_fsdp_hidden(problem, plan, k) for k in range(K)]).T.reshape(2, K)
    hf[0], hb[K - 1] = 0.0, 0.0   # stage 0's forwards and the last stage's backwards never wait
    cc = np.append(c, 0.0)
    before = np.concatenate(([0.0], np.cumsum(F - hf + B - hb + 2 * cc)[:-1]))
    return float((before + m * (F + B) - hf - hb).max(initial=0.0))


def _fsdp_hidden(problem: Problem, plan: Plan, k: int) -> tuple[float, float]:
    """Stage k's ZeRO-3 first gathers a pass waiting for its input hides (costs.fsdp)."""
    st = plan.stages[k]
    G = list(st.replica_group(0))
    qs = [problem.q_index(p) for p in plan.microbatch_precisions(_first_microbatch(st, 0))]
    ops = plan.ops_in_stage(k)
    f_op, b_op = op_rank_times(problem, G, qs, ops, st.sequence_parallel, recomputed(problem, plan),
                               st.tp_comm_overlap)
    return fsdp_hidden_s(problem, plan, k, ops, f_op, b_op, qs)


def _boundary_s(problem: Problem, plan: Plan, b: int, m: int = 0) -> float:
    """One rank's bytes of microbatch ``m`` crossing stage boundary b -> b+1, store and
    forward over its route."""
    qs = [problem.q_index(p) for p in plan.microbatch_precisions(m)]
    nbytes = 0.0
    for e, (u, v) in enumerate(problem.edges.tolist()):
        if plan.op_stage[u] <= b < plan.op_stage[v]:
            tv = plan.stages[plan.op_stage[v]].tensor_parallel
            nbytes += float(problem.edge_elems[e] * problem.bytes_per_elem[qs[u]]) / tv
    if nbytes <= 0:
        return 0.0
    a, c = plan.stages[b].replica_devices(m)[0], plan.stages[b + 1].replica_devices(m)[0]
    return route_s(problem, a, c, nbytes)


#: the FIFO waits shared stage-boundary links may add, as a share of the closed form's
#: pipeline, below which the closed form stands (``boundaries_contend``)
SHARED_BOUNDARY_TOLERANCE = 1e-2


def boundary_flows(problem: Problem, plan: Plan) -> list[tuple[tuple, tuple[int, ...], float]]:
    """Every stage-boundary hop of one ``Plan.cycle`` of microbatches as the simulator
    sends it (alike replicas, the plan's op precisions): (who, links, bytes), who =
    (microbatch, 'f' tensor or 'b' gradient, boundary, from, to); a tensor goes to each
    rank j of its consumer's stage from rank j mod t of each stage on the way (bytes / t
    of the consumer's), its gradient back to each rank of the producer's."""
    K, stage_of, topo = plan.n_stages, plan.op_stage, problem.topology
    qs = [problem.q_index(p) for p in plan.op_precision]
    crossing = [(stage_of[u], stage_of[v], float(problem.edge_elems[e] * problem.bytes_per_elem[qs[u]]))
                for e, (u, v) in enumerate(problem.edges.tolist()) if stage_of[u] < stage_of[v]]
    flows: dict[tuple, float] = {}
    for m in range(plan.cycle):
        where = [plan.stages[k].replica_devices(m) for k in range(K)]
        for ku, kv, nb in crossing:
            for d, t in (("f", len(where[kv])), ("b", len(where[ku]))) if problem.training else (("f", len(where[kv])),):
                for j in range(t):
                    for b in range(ku, kv):
                        a, z = where[b][j % len(where[b])], where[b + 1][j % len(where[b + 1])]
                        key = (m, d, b) + ((a, z) if d == "f" else (z, a))
                        flows[key] = flows.get(key, 0.0) + nb / t
    return [(key, tuple(topo.route(key[3], key[4])), nb) for key, nb in flows.items()]


def boundaries_contend(problem: Problem, plan: Plan, work_s: np.ndarray, c: np.ndarray) -> bool:
    """Whether the closed form's pipeline leaves out link time, by more than
    ``SHARED_BOUNDARY_TOLERANCE`` of it where a bound is summed: the 1F1B window's round
    trips over slow boundaries pace the run (``window_pace_s`` above max F_k + B_k); some
    link carries more of the cycle's boundary bytes (``boundary_flows``,
    ``costs.routes.link_loads_s``) than a stage's work in a cycle (``work_s``: F_k + B_k
    per microbatch); or the lanes and ranks crossing a boundary together in the fill and
    drain could wait for one another on shared links (per boundary and direction, the
    most a hop finds of the others' load on its links)."""
    m = max(-(-plan.microbatches // s.replicas) for s in plan.stages)
    pipeline = float(work_s.sum() + 2 * c.sum()) + (m - 1) * float(work_s.max(initial=0.0))
    if (window_pace_s(work_s, c, m) - float(work_s.max(initial=0.0))) * (m - 1) > SHARED_BOUNDARY_TOLERANCE * pipeline:
        return True
    stage_s = max(plan.cycle / st.replicas * float(w) for st, w in zip(plan.stages, work_s))
    if len({st.tensor_parallel for st in plan.stages}) == 1:   # every hop of a boundary carries the same bytes
        per_link, per_group = _hop_structure(problem, plan)
        x = _hop_bytes(problem, plan)
        return bool((per_link @ x).max(initial=0.0) > stage_s * (1 + 1e-9)) or \
            float(per_group @ x) > SHARED_BOUNDARY_TOLERANCE * pipeline
    flows = boundary_flows(problem, plan)
    if any(total > stage_s * (1 + 1e-9) for total, _, _ in link_loads_s(problem, flows).values()):
        return True
    bw = problem.link_bw_bytes_per_s
    together: dict[tuple, list] = {}   # (direction, boundary) -> its hops
    for f in flows:
        together.setdefault(f[0][1:3], []).append(f)
    waits = 0.0
    for group in together.values():
        loads = link_loads_s(problem, group)
        waits += max(math.fsum(loads[l][0] - nb / float(bw[l]) for l in links) for _, links, nb in group)
    return waits > SHARED_BOUNDARY_TOLERANCE * pipeline


def _hop_bytes(problem: Problem, plan: Plan) -> np.ndarray:
    """(K-1,) the bytes one rank's hop carries across each boundary (every stage the
    same tensor-parallel degree t): the tensors crossing it at the plan's precisions / t."""
    t = plan.stages[0].tensor_parallel
    qs = [problem.q_index(p) for p in plan.op_precision]
    x = np.zeros(max(plan.n_stages - 1, 0))
    stage_of = plan.op_stage
    for e, (u, v) in enumerate(problem.edges.tolist()):
        if stage_of[u] < stage_of[v]:
            x[stage_of[u]:stage_of[v]] += float(problem.edge_elems[e] * problem.bytes_per_elem[qs[u]]) / t
    return x


def _hop_structure(problem: Problem, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """``boundary_flows``'s hops (one tensor-parallel degree) as seconds per byte of
    ``_hop_bytes``: (links x boundaries) each link's load over a cycle, and (boundaries,)
    per boundary the most one hop finds of the others' load on its links, both ways
    summed (the fill's and the drain's wait). It depends on the stages' devices alone
    and is kept per problem (the cluster space's splits of one point share it)."""
    key = (tuple(st.devices for st in plan.stages), plan.stages[0].tensor_parallel,
           tuple(st.replicas for st in plan.stages), plan.cycle, problem.training)
    memo = problem.__dict__.setdefault("_hop_memo", {})
    if key in memo:
        return memo[key]
    K, t, topo, bw = plan.n_stages, plan.stages[0].tensor_parallel, problem.topology, problem.link_bw_bytes_per_s
    hops: dict[tuple[str, int], set[tuple[int, int, int]]] = {}   # (direction, boundary) -> (microbatch, from, to)
    for m in range(plan.cycle):
        where = [plan.stages[k].replica_devices(m) for k in range(K)]
        for b in range(K - 1):
            for j in range(t):
                a, z = where[b][j], where[b + 1][j]
                hops.setdefault(("f", b), set()).add((m, a, z))
                if problem.training:
                    hops.setdefault(("b", b), set()).add((m, z, a))
    links = sorted({l for hs in hops.values() for _, a, z in hs for l in topo.route(a, z)})
    row = {l: i for i, l in enumerate(links)}
    per_link = np.zeros((len(links), max(K - 1, 0)))
    per_group = np.zeros(max(K - 1, 0))
    for (_, b), hs in hops.items():
        n: dict[int, int] = {}
        for _, a, z in hs:
            for l in topo.route(a, z):
                n[l] = n.get(l, 0) + 1
        for l, k in n.items():
            per_link[row[l], b] += k / float(bw[l])
        per_group[b] += max(math.fsum((n[l] - 1) / float(bw[l]) for l in topo.route(a, z)) for _, a, z in hs)
    memo[key] = per_link, per_group
    return per_link, per_group


def window_pace_s(work_s: np.ndarray, c: np.ndarray, m: int) -> float:
    """The longest 1F1B window loop per microbatch: stage k keeps w = K - k of its
    replica's microbatches in flight, so when it has more (m > w) its next forward waits
    for a backward whose round trip runs every later stage's work and both ways of every
    later boundary: (sum_{j >= k} (F_j + B_j) + 2 sum_{b >= k} c_b) / w (0 where no stage
    waits)."""
    K = len(work_s)
    after_w = np.cumsum(work_s[::-1])[::-1]
    after_c = np.concatenate((np.cumsum(c[::-1])[::-1], [0.0])) if K > 1 else np.zeros(K)
    return max(((float(after_w[k]) + 2 * float(after_c[k])) / (K - k) for k in range(K) if K - k < m), default=0.0)


class Exceeds(Exception):
    """``estimate_iteration`` proved, before timing its buckets, an iteration of at least
    ``bound_s`` >= the ``above_s`` it was given."""

    def __init__(self, bound_s: float):
        super().__init__(f"the iteration is at least {bound_s:.6g} s")
        self.bound_s = bound_s


def estimate_iteration(problem: Problem, plan: Plan, deadline_s: float = math.inf,
                       above_s: float = math.inf) -> IterationEstimate:
    """The analytic iteration of a training plan under 1F1B (module docstring). Past
    ``deadline_s`` (perf_counter seconds) the transfer-by-transfer timing of overlapped
    buckets raises ``TimeUp`` (``estimate_transfers`` says how many it will time). When
    the pipeline, the optimizer step and a bound on the overlapped buckets
    (``costs.reduction_bound``) already reach ``above_s``, raises ``Exceeds`` untimed."""
    if not problem.training:
        raise DistplanError("the analytic iteration is for training; use costs.evaluate for inference")
    if plan.schedule not in ("1f1b", "interleaved"):
        raise DistplanError(f"the analytic iteration models the 1f1b and interleaved schedules, not {plan.schedule!r}")
    if any(rings_contend(problem, st) for st in plan.stages):
        raise DistplanError("the analytic iteration times ZeRO-3 with expert parallelism where its rings cannot "
                            "queue behind one another (costs.fsdp); here the dense ring's hops differ in speed "
                            "and share links with the expert-data rings (expert groups across nodes); simulate "
                            "the plan instead")
    # expert-data-parallel reductions (ep with r / ep >= 2 replicas a group, ZeRO below 3:
    # ZeRO-3's are timed unit by unit, costs.fsdp) are timed on the closed form's path only
    experts = any(expert_reduces(st) and st.zero < 3 for st in plan.stages)
    if experts and (plan.schedule == "interleaved" or replica_groups(problem, plan)):
        raise _expert_refusal("interleaved or replica-group plans")
    if plan.schedule == "interleaved" or replica_groups(problem, plan):
        if any(st.zero >= 3 and st.replicas > 1 for st in plan.stages):
            raise DistplanError("the analytic iteration models ZeRO-3 on plain 1F1B with alike replicas only; "
                                "simulate the plan instead")
        return _estimate_groups(problem, plan)
    K = plan.n_stages
    FB = [_stage_times(problem, plan, k) for k in range(K)]
    F = np.array([x[0] for x in FB])
    B = np.array([x[1] for x in FB])
    c = np.array([_boundary_s(problem, plan, b) for b in range(K - 1)])
    m = max(-(-plan.microbatches // s.replicas) for s in plan.stages)
    period = float((F + B).max(initial=0.0))
    fsdp = any(st.zero >= 3 and st.replicas > 1 for st in plan.stages)
    if K > 1 and not fsdp and boundaries_contend(problem, plan, F + B, c):
        if experts:
            raise _expert_refusal("plans whose stage boundaries share links")
        return _estimate_groups(problem, plan)   # the links, not the stages alone, pace the run
    pipeline = float(F.sum() + B.sum() + 2 * c.sum() + (m - 1) * period)
    if any(st.zero >= 3 and st.replicas > 1 for st in plan.stages):   # gathers unbalance the stages
        pipeline = _fsdp_pipeline_s(problem, plan, F, B, c, m)
    qs = [problem.q_index(p) for p in plan.op_precision]
    ar = np.zeros(K)
    done_after = np.zeros(K)   # the stage's reduction ends this long after its last backward
    # overlapped stages: (stage, the ranks' replicas timed: rank 0's, or every rank's where
    # their rings share links, hierarchical, buckets)
    timed: list[tuple[int, list[list[int]], bool, list[tuple[int, float]]]] = []
    grouped: list[int] = []   # stages whose experts reduce over their groups (_expert_reduction_s)
    for k, st in enumerate(plan.stages):
        if st.replicas < 2 or st.zero >= 3:   # ZeRO-3: reduce-scattered unit by unit inside B_k
            continue
        if expert_reduces(st):
            grouped.append(k)
            continue
        ranks = [[st.devices[i * st.tensor_parallel + j] for i in range(st.replicas)]
                 for j in range(st.tensor_parallel)]
        devs = ranks[0]
        hier = plan.dp_allreduce == "hierarchical"

        def reduce_s(vs: list[int]) -> tuple[float, float]:
            nbytes = sum(dense_elems(st, problem.graph.ops[v]) * float(problem.bytes_per_elem[qs[v]])
                         for v in vs) / st.tensor_parallel
            return gradient_reduction_parts(problem, devs, nbytes, hier, st.zero, ranks) if nbytes > 0 else (0.0, 0.0)

        with_params = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
        ar[k] = reduce_s(with_params)[0]
        shared = len(ranks) > 1 and reduction_shares_links(problem.topology, ranks, hier, st.zero)
        if not plan.overlap_grad_reduce:
            if reduction_closed_form_exact(problem, ranks, hier, st.zero):
                done_after[k] = ar[k]
                continue
            # rings of mixed hops or sharing a link: the closed form is a bound there; one
            # bucket of every op, released at the stage's last backward, transfer by transfer
            # as the simulator runs it (dp 4 x tp 2 on 2 x 4 A100s, a flat ring: 2.4 % fast before)
            total = sum(dense_elems(st, problem.graph.ops[v]) * float(problem.bytes_per_elem[qs[v]])
                        for v in with_params) / st.tensor_parallel
            if total > 0:
                timed.append((k, ranks if shared else [devs], hier, [(float(B[k]), total)]))
            continue
        ends = FB[k][2]
        buckets = [(float(ends[v]), dense_elems(st, problem.graph.ops[v]) * float(problem.bytes_per_elem[qs[v]])
                    / st.tensor_parallel) for v in with_params]   # the simulator's order of creation
        timed.append((k, ranks if shared else [devs], hier, [(r, nb) for r, nb in buckets if nb > 0]))
    # stage k's last backward ends sum_{j<k} (B_j + c_j) before stage 0's
    last_b = pipeline - np.concatenate(([0.0], np.cumsum(B[:-1] + np.append(c, 0.0)[:K - 1])))
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    if (timed or grouped) and math.isfinite(above_s):
        after = done_after.copy()
        for k, ranks, hier, buckets in timed:
            fin = overlapped_reduction_lb_s(problem, ranks, hier, plan.stages[k].zero,
                                            [r for r, _ in buckets], [nb for _, nb in buckets])
            after[k] = max(0.0, fin - B[k])
        for k in grouped:
            after[k] = _expert_reduction_lb_s(problem, plan, k, qs, FB[k][2], float(B[k]))
        bound = (float(np.max(last_b + after)) + opt) * (1 - 1e-12)
        if bound >= above_s:
            raise Exceeds(bound)
    sym = replica_copy(problem, plan) if timed else None
    for k, ranks, hier, buckets in timed:
        # one bucket per op, ready when the op's last backward ends (times from the start
        # of that backward); the buckets' ring steps queue FIFO on the links, transfer by
        # transfer as the simulator runs them: a later bucket's steps interleave with an
        # earlier one's instead of waiting for its links to drain (with store and forward
        # over two links a hop, one ring's chain keeps each link about half busy, so the
        # drain-then-chain form overcharged a large last bucket: gpt3-1024x8x16 dp 8 on
        # a100x32, the embedding's 107 MB after 8 layers' buckets, +7.1 % on the iteration)
        st, devs = plan.stages[k], ranks[0]
        tr = Transfers(problem, deadline_s)
        held, route = _bucket_senders(problem, plan, devs, hier, sym)
        if len(ranks) > 1:   # every rank's rings, on the links they share
            held, route = len(devs), None
        for release, nbytes in buckets:
            if time.perf_counter() > deadline_s:
                raise TimeUp(f"stage {k}'s gradient buckets not timed by the deadline")
            for g in ranks:
                reduction_transfers(tr, g, [release] * held, nbytes, hier, st.zero, route)
        finish = max(tr.delivered_s(), default=0.0)
        done_after[k] = max(0.0, finish - B[k])
    copy = expert_replica_copy(problem, plan) if grouped else None   # one symmetry for every stage
    for k in grouped:
        done_after[k] = _expert_reduction_s(problem, plan, k, qs, FB[k][2], float(B[k]), deadline_s, copy)
        ar[k] = done_after[k]
    run = float(np.max(last_b + done_after)) if K else 0.0
    return IterationEstimate(run + opt, pipeline, period, F, B, c, ar, run - pipeline, opt)


def _expert_refusal(what: str) -> DistplanError:
    return DistplanError("the analytic iteration times expert-data-parallel gradient reductions (expert "
                         f"parallelism with r / ep >= 2 replicas a group) on plain 1F1B only, not on {what}; "
                         "simulate the plan instead")


def _expert_reduction_s(problem: Problem, plan: Plan, k: int, qs: Sequence[int], ends: Sequence[float],
                        backward_s: float, deadline_s: float,
                        copy: tuple[int, np.ndarray] | None = None) -> float:
    """How long after its last backward stage k's gradient reduction ends when its routed
    experts reduce over their expert-data-parallel groups: every part of every bucket
    (``sharding.gradient_reductions``: the dense bytes over all replicas, the experts'
    over each group) on every rank and replica, transfer by transfer on the links they
    share, released as the simulator releases them (after the stage's last backward, or
    with overlap after each op's, ``ends`` from the backward's start) and created in its
    order (``sim.taskgraph.allreduce``)."""
    st, tp = plan.stages[k], plan.stages[k].tensor_parallel
    hier = plan.dp_allreduce == "hierarchical"
    ops = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
    buckets = [[v] for v in ops] if plan.overlap_grad_reduce else [ops]
    tr = Transfers(problem, deadline_s)
    # ``copy``, an exact symmetry (costs.symmetry.expert_replica_copy): the first ``held``
    # replicas send, the others' traffic on representative links; None: every replica
    held, route = (st.replicas, None) if copy is None else \
        (copy[0], lambda a, b, rep=copy[1]: tuple(int(rep[l]) for l in problem.topology.route(a, b)))
    parts = []   # per bucket: (release, its bytes, its experts' bytes)
    for bucket in buckets:
        bpe = [float(problem.bytes_per_elem[qs[v]]) for v in bucket]
        parts.append((float(ends[bucket[-1]]) if plan.overlap_grad_reduce else backward_s,
                      sum(problem.graph.ops[v].param_elems * b for v, b in zip(bucket, bpe)) / tp,
                      sum(problem.graph.ops[v].expert_param_elems * b for v, b in zip(bucket, bpe)) / tp))
    # the same transfers (ZeRO-1 and ZeRO-2 both reduce-scatter) are timed once a problem
    key = (st.devices, tp, st.replicas, st.expert_parallel, st.expert_stride, st.zero > 0, hier, backward_s,
           tuple(parts), held, None if copy is None else copy[1].tobytes())
    memo = _EXPERT_REDUCTIONS.setdefault(problem, {})
    if key in memo:
        return memo[key]
    for release, nbytes, expert in parts:
        if time.perf_counter() > deadline_s:
            raise TimeUp(f"stage {k}'s gradient buckets not timed by the deadline")
        for members, part in gradient_reductions(st, nbytes, expert):
            senders = sum(1 for i in members if i < held)   # a group's members ascend
            for j in range(tp):
                devs = [st.devices[i * tp + j] for i in members]
                reduction_transfers(tr, devs, [release] * senders, part, hier, st.zero, route)
    memo[key] = max(0.0, max(tr.delivered_s(), default=0.0) - backward_s)
    return memo[key]


def _expert_reduction_lb_s(problem: Problem, plan: Plan, k: int, qs: Sequence[int], ends: Sequence[float],
                           backward_s: float) -> float:
    """A lower bound on ``_expert_reduction_s``, untimed: each part's buckets (the dense
    bytes over all replicas, the experts' over each group) on rank 0's ring alone, as if
    no other part shared its links (``costs.reduction_bound.overlapped_reduction_lb_s``),
    the latest of them."""
    st, tp = plan.stages[k], plan.stages[k].tensor_parallel
    hier = plan.dp_allreduce == "hierarchical"
    ops = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
    ready = [float(ends[v]) if plan.overlap_grad_reduce else backward_s for v in ops]
    bpe = [float(problem.bytes_per_elem[qs[v]]) for v in ops]
    dense = [dense_elems(st, problem.graph.ops[v]) * b / tp for v, b in zip(ops, bpe)]
    expert = [problem.graph.ops[v].expert_param_elems * b / tp for v, b in zip(ops, bpe)]
    parts = [(tuple(range(st.replicas)), dense)] + [(g, expert) for g in expert_data_groups(st)]
    fin = 0.0
    for members, nbytes in parts:
        keep = [i for i, nb in enumerate(nbytes) if nb > 0]
        if len(members) >= 2 and keep:
            ring = [st.devices[i * tp] for i in members]
            fin = max(fin, overlapped_reduction_lb_s(problem, [ring], hier, st.zero, [ready[i] for i in keep],
                                                     [nbytes[i] for i in keep]))
    return max(0.0, fin - backward_s)


#: problem -> the seconds ``_expert_reduction_s`` timed for it, by what they depend on
_EXPERT_REDUCTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _bucket_senders(problem: Problem, plan: Plan, devs: list[int], hier: bool,
                    sym: tuple[int, np.ndarray] | None) -> tuple[int, object]:
    """How many replicas' transfers time a stage's overlapped buckets exactly, and on
    which links: a flat ring's first ``ring_lanes`` senders on their own routes, else the
    exact symmetry reduction's copy (``costs.symmetry``: the replicas of one copy, the
    others' traffic on representative links, as the simulator runs it), else all."""
    flat = not hier or hierarchical_groups(problem.topology, devs) is None
    lanes = ring_lanes(problem, devs) if flat else None
    if lanes is not None:
        return lanes, None
    if sym is not None:
        held, rep = sym
        topo = problem.topology
        return held, lambda a, b: tuple(int(rep[l]) for l in topo.route(a, b))
    return len(devs), None


def estimate_transfers(problem: Problem, plan: Plan) -> int:
    """How many transfers ``estimate_iteration`` times one by one for ``plan`` (its
    overlapped gradient buckets, and the reductions of stages whose experts reduce over
    their groups; 0 without either): what its cost grows with, known
    before running it (gpt3-175b dp 64 x tp 4 x pp 4 with hierarchical overlapped
    buckets on a100x1024: 1.2 M transfers, ~8 s). Plans of alike replicas; replica
    groups (``_estimate_groups``) are counted as alike."""
    if not problem.training:
        return 0
    total = 0
    grouped = any(st.replicas >= 2 and st.zero < 3 and expert_reduces(st) for st in plan.stages)
    copy = expert_replica_copy(problem, plan) if grouped else None   # the block _expert_reduction_s times
    for k, st in enumerate(plan.stages):   # expert groups: every part, rank and replica (_expert_reduction_s)
        if st.replicas >= 2 and st.zero < 3 and expert_reduces(st):
            hier = plan.dp_allreduce == "hierarchical"
            buckets = sum(1 for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0) \
                if plan.overlap_grad_reduce else 1
            parts = gradient_reductions(st, 2.0, 1.0)
            held = st.replicas if copy is None else copy[0]
            total += buckets * st.tensor_parallel * sum(
                reduction_size(problem.topology, [st.devices[i * st.tensor_parallel] for i in g], hier, st.zero,
                               held=sum(1 for i in g if i < held))
                for g, _ in parts)
    sym: list = []   # replica_copy, found once when first needed
    for k, st in enumerate(plan.stages):
        r = st.replicas
        if r < 2 or st.zero >= 3 or expert_reduces(st):
            continue
        ranks = [[st.devices[i * st.tensor_parallel + j] for i in range(r)] for j in range(st.tensor_parallel)]
        devs = ranks[0]
        hier = plan.dp_allreduce == "hierarchical"
        if plan.overlap_grad_reduce:
            buckets = sum(1 for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0)
        elif reduction_closed_form_exact(problem, ranks, hier, st.zero):
            continue   # timed in closed form
        else:
            buckets = 1   # one bucket of every op, transfer by transfer
        if not sym:
            sym.append(replica_copy(problem, plan))
        held, _ = _bucket_senders(problem, plan, devs, hier, sym[0])
        sides = 1
        if len(ranks) > 1 and reduction_shares_links(problem.topology, ranks, hier, st.zero):
            sides, held = len(ranks), r   # every rank's rings (estimate_iteration)
        total += sides * buckets * reduction_size(problem.topology, devs, hier, st.zero, held=held)
    return total


def replica_microbatch_s(problem: Problem, plan: Plan, k: int, replica: int) -> float:
    """Forward + backward seconds of one microbatch on ``replica`` of stage k (rank 0; its
    device kind and precisions, casts and tensor-parallel all-reduces included): what its
    share should follow (``core.plan.balanced_shares``)."""
    f, b, _ = _stage_times(problem, plan, k, replica)
    return f + b


def replica_groups(problem: Problem, plan: Plan) -> bool:
    """Whether the problem is a mixed fleet (several device kinds), some stage's
    replicas differ (share, precision) or the stages' replica counts differ: the
    estimate then times every replica and replays the 1F1B order (module docstring);
    else the closed form (whose (m - 1) x max_k (F_k + B_k) overcharges a stage with
    more replicas and fewer microbatches each)."""
    return (len({int(k) for k in problem.device_kind}) > 1 or any(not st.uniform for st in plan.stages)
            or len({st.replicas for st in plan.stages}) > 1)


def _estimate_groups(problem: Problem, plan: Plan) -> IterationEstimate:
    """``estimate_iteration`` for plans whose replicas differ (module docstring)."""
    K, M = plan.n_stages, plan.microbatches
    per = [[_stage_times(problem, plan, k, i) for i in range(st.replicas)] for k, st in enumerate(plan.stages)]
    T = [[x[0] + x[1] for x in row] for row in per]
    rs0 = [st.replica_of(0) for st in plan.stages]
    c = np.array([_boundary_s(problem, plan, b, 0) for b in range(K - 1)])
    F = np.array([per[k][rs0[k]][0] for k in range(K)])
    B = np.array([per[k][rs0[k]][1] for k in range(K)])
    period = max(max(row) for row in T)
    run = _JointNet(problem, plan).run()
    if run is None and plan.schedule == "interleaved":
        raise DistplanError("the interleaved order did not run through")   # never: Megatron's order is live
    if run is None:   # the order did not run through (never on the simulator's schedules)
        return _estimate_lanes(problem, plan, per, F, B, c, period)
    pipeline, ends_at, reduced = run
    ar = np.zeros(K)
    finish = pipeline
    for k in range(K):
        if reduced[k] is not None:
            ar[k] = max(0.0, reduced[k] - ends_at[k])
            finish = max(finish, reduced[k])
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return IterationEstimate(finish + opt, pipeline, period, F, B, c, ar, finish - pipeline, opt)


def _estimate_lanes(problem: Problem, plan: Plan, per, F, B, c, period) -> IterationEstimate:
    """The lanes' closed form (module docstring) with the gradient reductions timed by
    ``Transfers`` from each replica's last backward: the stand-in when the joint run
    cannot run through."""
    K, M = plan.n_stages, plan.microbatches
    n = [st.replica_counts(M) for st in plan.stages]
    T = [[x[0] + x[1] for x in row] for row in per]
    lanes: dict[int, tuple[list[int], np.ndarray]] = {}

    def lane(m: int) -> tuple[list[int], np.ndarray]:
        """The replicas microbatch m runs on, stage by stage, and its boundaries' c_b."""
        m %= plan.cycle
        if m not in lanes:
            lanes[m] = ([st.replica_of(m) for st in plan.stages],
                        np.array([_boundary_s(problem, plan, b, m) for b in range(K - 1)]))
        return lanes[m]

    def lane_span(k: int, i: int, m: int) -> float:
        rs, cs = lane(m)
        return n[k][i] * T[k][i] + sum(T[j][rs[j]] for j in range(K) if j != k) + 2 * float(cs.sum())

    span = [[lane_span(k, i, _first_microbatch(st, i)) for i in range(st.replicas)] for k, st in enumerate(plan.stages)]
    pipeline = max(max(row) for row in span)

    def last_backward_end(k: int, i: int) -> float:
        st = plan.stages[k]
        m = max(x for x in range(M) if st.replica_of(x) == i)
        rs, cs = lane(m)
        whole = max(span[j][rs[j]] for j in range(K))
        return whole - sum(per[j][rs[j]][1] + cs[j] for j in range(k))

    tr = Transfers(problem)
    first: list[int] = []
    ends_at: list[float] = []
    for k, st in enumerate(plan.stages):
        first.append(len(tr))
        end_i = [last_backward_end(k, i) for i in range(st.replicas)]
        ends_at.append(max(end_i))
        if st.replicas < 2:
            continue
        wide = plan.widest_precisions(k, lambda p: problem.bytes_per_elem[problem.q_index(p)])
        ops = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
        buckets = [[v] for v in ops] if plan.overlap_grad_reduce else [ops]
        for j in range(st.tensor_parallel):
            devs = [st.devices[i * st.tensor_parallel + j] for i in range(st.replicas)]
            for bucket in buckets:
                nbytes = sum(dense_elems(st, problem.graph.ops[v])
                             * float(problem.bytes_per_elem[problem.q_index(wide[v])]) for v in bucket) / st.tensor_parallel
                if nbytes <= 0:
                    continue
                if plan.overlap_grad_reduce:
                    start = [end_i[i] - per[k][i][1] + per[k][i][2][bucket[0]] for i in range(st.replicas)]
                else:
                    start = end_i
                reduction_transfers(tr, devs, start, nbytes, plan.dp_allreduce == "hierarchical", st.zero)
    first.append(len(tr))
    done = tr.delivered_s()
    ar = np.zeros(K)
    finish = pipeline
    for k in range(K):
        got = done[first[k]:first[k + 1]]
        if got:
            ar[k] = max(0.0, max(got) - ends_at[k])
            finish = max(finish, max(got))
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return IterationEstimate(finish + opt, pipeline, period, F, B, c, ar, finish - pipeline, opt)


class _JointNet:
    """The simulator's run of a 1F1B training plan, as tasks and transfers for the replay
    kernel (``costs.replay``, the simulator's own engine).

    Every device (rank 0 of each replica) runs its replicas' forward and backward blocks in
    the simulator's order (``Plan.window_offsets``); inside a block the ops run back to
    back, each waiting for the tensors it receives. Every stage-boundary tensor of every
    microbatch is a transfer over its whole route (relays: store and forward), and every
    gradient reduction's ring steps are transfers released when the replica's gradients are
    ready, all on FIFO links in order of arrival (``costs.collectives.Transfers``), so they
    queue behind one another as in the simulator. A block is a list of segments (gates,
    seconds, sends, marks), each one kernel task; blocks are built once per stage, replica
    and precisions of the incoming tensors' producers.
    """

    def __init__(self, problem: Problem, plan: Plan):
        self.pb, self.plan = problem, plan
        self.again = recomputed(problem, plan)
        self.edges = problem.edges.tolist()
        V = problem.n_ops
        self.out_edges: list[list[int]] = [[] for _ in range(V)]
        for e, (u, _) in enumerate(self.edges):
            self.out_edges[u].append(e)
        self.blocks: dict[tuple, tuple[list, list, list]] = {}
        self.stage_ops = [plan.ops_in_stage(k) for k in range(plan.n_stages)]
        # producers of the tensors each stage receives: their precisions key its blocks
        self.feeders = [sorted({u for v in ops for e in problem.in_edge_ids(v)
                                for u in (self.edges[e][0],) if plan.op_stage[u] < k})
                        for k, ops in enumerate(self.stage_ops)]

    # --- blocks ------------------------------------------------------------------
    def _ring_profile(self, G: list[int]) -> tuple:
        """The (bandwidth, latency) of every link of a tensor-parallel group's ring hops:
        what its all-reduces' times depend on (() for one device)."""
        if len(G) < 2:
            return ()
        pb, n = self.pb, len(G)
        return tuple(tuple((float(pb.link_bw_bytes_per_s[l]), float(pb.link_latency_s[l]))
                           for l in pb.topology.route(d, G[(j + 1) % n])) for j, d in enumerate(G))

    def _block(self, k: int, i: int, qs: list[int]) -> tuple[list, list, list]:
        """(forward, backward, backward of the replica's last microbatch) segments of
        stage k on replica i at precisions ``qs``; gates and sends are (edge, direction)
        pairs ('f' tensor, 'b' gradient), marks the ops whose gradients are then ready
        (overlapped reduction: only the last backward has them)."""
        pb, plan = self.pb, self.plan
        stage_of = plan.op_stage
        ops = self.stage_ops[k]
        st = plan.stages[k]
        G = list(st.replica_group(i))
        tv = len(G)
        c = int(pb.device_kind[G[0]])
        # replicas alike in kind, tensor-parallel ring links and precisions share a block
        key = (k, c, self._ring_profile(G), tuple(qs[u] for u in self.feeders[k]), tuple(qs[v] for v in ops))
        if key in self.blocks:
            return self.blocks[key]
        launch = float(pb.cast_fixed_s[c])
        f_op, b_op = op_rank_times(pb, G, qs, ops, st.sequence_parallel, self.again, st.tp_comm_overlap)
        share = 0.5 if pb.training else 1.0

        def cast_s(e: int) -> float:
            u, v = self.edges[e]
            if qs[u] == qs[v] or pb.cast_fused[e]:
                return -1.0
            return tp_shard_time_s(pb.cast_time_s(e, qs[u], qs[v], c) * share, launch, tv)

        segs: list[list] = []

        def item(gates: list, dur: float, sends: list = (), marks: list = ()) -> None:
            if gates or not segs or segs[-1][2] or segs[-1][3]:
                if segs and not segs[-1][1] and not segs[-1][2] and not segs[-1][3]:
                    segs[-1][0].extend(gates)   # nothing to run in between: wait for all
                else:
                    segs.append([list(gates), 0.0, [], []])
            segs[-1][1] += dur
            segs[-1][2].extend(sends)
            segs[-1][3].extend(marks)

        for idx, v in enumerate(ops):
            gates = []
            for e in pb.in_edge_ids(v):
                crossing = stage_of[self.edges[e][0]] < k
                t = cast_s(e)
                if t >= 0:
                    item([(e, "f")] if crossing else [], t)
                elif crossing:
                    gates.append((e, "f"))
            # ties on a link go in the simulator's order of creation: by consumer, then edge
            sends = [(e, "f") for e in sorted((e for e in self.out_edges[v] if stage_of[self.edges[e][1]] > k),
                                               key=lambda e: (self.edges[e][1], e))]
            item(gates, float(f_op[idx]), sends)
        fwd = [tuple(s) for s in segs]
        bwd = []
        for marked in ((False, True) if plan.overlap_grad_reduce else (False,)):
            segs = []
            tail = []   # casts of crossing gradients: where the simulator creates them, with their producer

            def flush(above: int) -> None:   # the casts whose producer comes after op ``above``
                for e in sorted((e for e in tail if self.edges[e][0] > above), key=lambda e: (-self.edges[e][0], e)):
                    item([], cast_s(e), [(e, "b")])
                    tail.remove(e)

            for idx in reversed(range(len(ops))):
                v = ops[idx]
                flush(v)
                for e in self.out_edges[v]:     # casts of gradients from this stage's ops
                    w = self.edges[e][1]
                    if stage_of[w] == k and cast_s(e) >= 0:
                        item([], cast_s(e))
                gates = [(e, "b") for e in self.out_edges[v] if stage_of[self.edges[e][1]] > k]
                sends = []
                for e in pb.in_edge_ids(v):
                    if stage_of[self.edges[e][0]] < k:
                        if cast_s(e) >= 0:
                            tail.append(e)
                        else:
                            sends.append((e, "b"))
                sends.sort(key=lambda x: (-self.edges[x[0]][0], x[0]))   # by producer, last first
                marks = [v] if marked and pb.graph.ops[v].param_elems > 0 else []
                item(gates, float(b_op[idx]), sends, marks)
            flush(-1)
            bwd.append([tuple(s) for s in segs])
        out = (fwd, bwd[0], bwd[-1])
        self.blocks[key] = out
        return out

    # --- the run -------------------------------------------------------------------
    def run(self) -> tuple[float, list[float], list[float | None]] | None:
        """(the last pipeline task's end, each stage's last backward end, each stage's
        reduction end or None), or None if some device never got its inputs. Every
        segment is a task of the replay kernel (``costs.replay``) on its device, in the
        device's order; every tensor crossing a stage boundary, microbatch by microbatch,
        a transfer over its whole route waiting for its producer's segment."""
        pb, plan = self.pb, self.plan
        topo = pb.topology
        K, M, C = plan.n_stages, plan.microbatches, plan.cycle
        stage_of = plan.op_stage
        off = plan.window_offsets()
        rep = [[st.replica_of(m) for m in range(M)] for st in plan.stages]
        qi = {x: q for q, x in enumerate(pb.precisions)}
        qs_of = [[qi[x] for x in plan.microbatch_precisions(p)] for p in range(C)]
        tr = Transfers(pb)
        # every device's blocks in the simulator's order
        last_m = [{} for _ in plan.stages]
        for k in range(K):
            for m in range(M):
                last_m[k][rep[k][m]] = m
        order: dict[int, list[tuple]] = {}
        if plan.schedule == "interleaved":   # Megatron's order (core.schedules), per rank and replica
            pp, vp, r = plan.pipeline_ranks, plan.virtual_stages, plan.stages[0].replicas
            for rank in range(pp):
                for i in range(r):
                    dev = plan.stages[rank].replica_group(i)[0]
                    order[dev] = [(None, (l * r + i) % C, ph, j * pp + rank, l * r + i)
                                  for ph, j, l in interleaved_order(pp, vp, rank, M // r)]
        else:
            for k, st in enumerate(plan.stages):
                for m in range(M):
                    dev = st.replica_group(rep[k][m])[0]
                    order.setdefault(dev, []).append((m, m % C, 0, k, m))
                    order.setdefault(dev, []).append((m + off[k], m % C, 1, -k, m))
            for tasks in order.values():
                tasks.sort()
                tasks[:] = [(x, p, ph, sk if ph == 0 else -sk, m) for x, p, ph, sk, m in tasks]
        # the devices' tasks first (their inputs are waited for below), devices in index order
        segments: list[tuple[int, list, list, int, int, int, list]] = []   # (task, gates, sends, k, i, m, marks)
        block_end: dict[tuple[int, int, int], int] = {}   # (phase, stage, microbatch) -> its last task
        last_task: dict[int, int] = {}
        for dev in sorted(order):
            for _, p, ph, k, m in order[dev]:
                i = rep[k][m]
                fwd, bwd, bwd_last = self._block(k, i, qs_of[p])
                final = ph == 1 and last_m[k][i] == m
                segs = fwd if ph == 0 else bwd_last if final else bwd
                for gates, dur, sends, marks in segs:
                    t = tr.task(dev, dur)
                    segments.append((t, gates, sends, k, i, m, marks if final else []))
                    block_end[(ph, k, m)] = last_task[dev] = t
        routes: dict[tuple[int, ...], tuple[int, ...]] = {}

        def route(path: list[int]) -> tuple[int, ...]:
            key = tuple(path)
            if key not in routes:
                routes[key] = path_links(topo, path)
            return routes[key]

        def tensor(e: int, d: str, m: int, after: int) -> list[int]:
            """The transfers of edge e's tensor ('f') or gradient ('b') of microbatch m, one
            per rank of the receiving (the gradient: the producing) stage, as the simulator
            sends them: rank j from rank j mod t of each stage on the way."""
            u, v = self.edges[e]
            ku, kv = stage_of[u], stage_of[v]
            groups = [plan.stages[b].replica_devices(m) for b in range(ku, kv + 1)]
            nb = float(pb.edge_elems[e] * pb.bytes_per_elem[qs_of[m % C][u]])
            t = len(groups[-1] if d == "f" else groups[0])
            out = []
            for j in range(t):
                at = [g[j % len(g)] for g in groups]
                if d == "b":
                    at.reverse()
                out.append(tr.add(at[0], at[-1], nb / t, 0.0, [after], route=route(at)))
            return out

        # each segment's tensors leave when it ends, in its order; then the anchors after
        # which each replica's gradients are ready (an op's backward of the replica's last
        # microbatch when overlapped, else the device's last task)
        xfer: dict[tuple[int, str, int], int] = {}
        anchors: dict[tuple[int, int, int | None], list[int]] = {}   # (stage, replica, op | None)
        buckets_of = {k: self._buckets(k) for k, st in enumerate(plan.stages) if st.replicas > 1}

        def anchor(k: int, i: int, v: int | None, after: int) -> None:   # one per tensor-parallel rank
            for _ in range(plan.stages[k].tensor_parallel if v in buckets_of.get(k, {}) else 0):
                anchors.setdefault((k, i, v), []).append(tr.add(0, 0, 0.0, 0.0, [after], route=()))

        for t, gates, sends, k, i, m, marks in segments:
            for e, d in sends:
                xfer[(e, d, m)] = tensor(e, d, m, t)
            for v in marks:
                anchor(k, i, v, t)
        if not plan.overlap_grad_reduce:
            for k in (k for k, b in buckets_of.items() if None in b):
                st = plan.stages[k]
                for i in range(st.replicas):
                    anchor(k, i, None, last_task[st.replica_group(i)[0]])
        # gradient reductions, each replica's part waiting for its anchors
        red_range: list[tuple[int, int] | None] = []
        for k, st in enumerate(plan.stages):
            if st.replicas < 2:
                red_range.append(None)
                continue
            lo = len(tr)
            tp = st.tensor_parallel
            for mark, nbytes in buckets_of[k].items():
                for j in range(tp):
                    devs = [st.devices[i * tp + j] for i in range(st.replicas)]
                    start = [(0.0, [anchors[(k, i, mark)][j]]) for i in range(st.replicas)]
                    reduction_transfers(tr, devs, start, nbytes, plan.dp_allreduce == "hierarchical", st.zero)
            red_range.append((lo, len(tr)))
        for t, gates, *_, m, _marks in segments:   # a task waits for the tensors it receives, every rank's
            for e, d in gates:
                for x in xfer[(e, d, m)]:
                    tr.wait(t, x)
        done = tr.delivered_s()
        if not all(tr.arrived[t] for t in last_task.values()):
            return None
        end = max((done[s[0]] for s in segments), default=0.0)
        ends_at = [max((done[block_end[(1, k, m)]] for m in range(M) if (1, k, m) in block_end), default=0.0)
                   for k in range(K)]
        reduced = [None if r is None or r[0] == r[1] else max(done[r[0]:r[1]]) for r in red_range]
        return end, ends_at, reduced

    def _buckets(self, k: int) -> dict[int | None, float]:
        """Stage k's gradient buckets with bytes to reduce, in the simulator's order:
        anchor op -> one rank's bytes at the widest precision of the replicas; one bucket
        per op with parameters when overlapped (its anchor the op), else one of them all
        (anchor None)."""
        pb, plan = self.pb, self.plan
        wide = plan.widest_precisions(k, lambda p: pb.bytes_per_elem[pb.q_index(p)])
        ops = [v for v in plan.ops_in_stage(k) if pb.graph.ops[v].param_elems > 0]
        buckets = [[v] for v in ops] if plan.overlap_grad_reduce else [ops]
        out = {}
        for bucket in buckets:
            nbytes = sum(dense_elems(plan.stages[k], pb.graph.ops[v]) * float(pb.bytes_per_elem[pb.q_index(wide[v])])
                         for v in bucket) / plan.stages[k].tensor_parallel
            if nbytes > 0:
                out[bucket[-1] if plan.overlap_grad_reduce else None] = nbytes
        return out


def estimate_latency(problem: Problem, plan: Plan) -> float:
    """One microbatch alone through the plan's stages (inference): every stage's forward
    on one rank (its tensor-parallel all-reduces included) and every boundary's transfer,
    one after another."""
    K = plan.n_stages
    return (math.fsum(_stage_times(problem, plan, k)[0] for k in range(K))
            + math.fsum(_boundary_s(problem, plan, b) for b in range(K - 1)))
