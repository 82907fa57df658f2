"""The analytic training iteration of a dp x tp x pp plan: what the simulator's
``iteration_s`` measures, in closed form (for planners and quick what-ifs).

Per stage k, one microbatch on one rank of one replica (devices of the stage's replica 0):
- ``F_k``: every op's forward share (``costs.compute.tp_shard_time_s``: the work divides
  over the tensor-parallel group for the ops whose role divides, the launch does not),
  the casts of incoming tensors, and the ring all-reduces Megatron's pattern needs after
  the forward (``costs.tensor_parallel``): 2(t-1) steps of bytes/t, each step the
  slowest neighbour route's sum of bytes/bandwidth + latency per link;
- ``B_k``: the backward shares, the forward again for recomputed ops, the gradient casts,
  and the backward all-reduces;
- ``c_b``: the bytes crossing boundary b -> b+1 (one rank's share) over its route,
  store and forward, both ways in training.

1F1B with m_k = M / r_k microbatches per replica: the first microbatch's forward and the
last one's backward traverse every stage (sum of F_k + B_k + 2 c_b) and in between the
pipeline advances one microbatch per period ``P = max_k (F_k + B_k)`` (m - 1 times,
m the largest m_k). Stage k's last backward ends sum_{j<k} (B_j + c_j) before stage
0's; its gradient reduction (``allreduce_s``: a ring over the replicas, or reduce-scatter
/ ring / all-gather by node when hierarchical; only the reduce-scatter under ZeRO-1)
starts then, or is overlapped with the stage's last backward (``overlap_grad_reduce``:
only the part longer than that backward is exposed). The optimizer step
(``optimizer_step_per_device_s``) follows. Ignored: link contention between transfers,
and bubbles from uneven communication inside the 1F1B window.

Mixed fleets (a problem with several device kinds) and replica groups
(``Stage.shares``, ``Stage.replica_precision``): F_{k,i} and B_{k,i} are per replica (its
devices' kind, its precisions), replica i of stage k runs n_{k,i} microbatches (its
share), and the pipeline is replayed task by task (``_replay_1f1b``): every device runs
its replicas' forwards and backwards in the simulator's 1F1B order
(``Plan.window_offsets``), a forward after the previous stage's forward of the
microbatch, a backward after the next stage's backward, each boundary adding what it
adds in the simulator (``_Lags``: each crossing tensor leaves when its producer is done,
queues store-and-forward on the route's links, and each receiving op starts when its
own inputs are there). No link contention between microbatches; otherwise it is the
simulator's run of the pipeline, and with one kind and alike replicas it reduces to
the closed form above up to those boundary effects. Replica i's gradients (each op's at
the widest precision of its replicas) are reduced by
``costs.collectives.reduction_transfers``: the simulator's ring or hierarchical steps
timed one by one over FIFO links (``Transfers``), each replica starting when its own
gradients are ready (after its last backward, or per op with ``overlap_grad_reduce``),
every stage's reductions and buckets sharing the links. That is what communication
costs where compute does not hide it: latency per hop, serialisation on shared links,
the slowest route of each ring step, the wait for the slowest replica. Measured on
``hybrid-v100-t4`` (bert-base/-large, 16 microbatches): 48 data-parallel plans equal to
the simulator to 1e-12, 30 random pipelines with and without replica groups within
3.9 % (median 0.06 %; what is left is contention between microbatches on a link). If the replay cannot run through (it always can on the simulator's
schedules) the lanes' closed form stands in: ``max over (k, i) of n_{k,i} T_{k,i} +
sum_{j != k} T_{j,l(j)} + 2 sum_b c_b`` along replica (k, i)'s first microbatch's
replicas l(j).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.costs.collectives import (Transfers, gradient_reduction_parts, reduction_transfers, ring_allreduce_s,
                                        ring_step_s, route_s)
from distplan.costs.compute import optimizer_step_s, tp_shard_time_s
from distplan.costs.problem import Problem
from distplan.costs.recompute import recomputed
from distplan.costs.tensor_parallel import tp_backward_allreduce, tp_divides, tp_forward_allreduce


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
    holds, tensor-parallel shares divided, 1/r of them under ZeRO-1) and under ZeRO-1 the
    parameters' all-gather (r-1 ring steps of bytes/r, without contention)."""
    out = np.zeros(problem.n_devices)
    if not problem.training:
        return out
    elems_on = np.zeros(problem.n_devices)
    bytes_on = np.zeros(problem.n_devices)
    gather = np.zeros(problem.n_devices)
    param = np.array([op.param_elems for op in problem.graph.ops], dtype=float)
    stage_of = np.asarray(plan.op_stage)
    for k, st in enumerate(plan.stages):
        share = st.replicas if st.zero and st.replicas > 1 else 1
        mine = stage_of == k
        elems = float(param[mine].sum()) / st.tensor_parallel
        for i in range(st.replicas):   # each replica's parameters at its own precisions
            bpe = problem.bytes_per_elem[[problem.q_index(p) for p in plan.replica_precisions(k, i)]]
            bytes_i = float((param[mine] * bpe[mine]).sum()) / st.tensor_parallel
            devs_i = list(st.replica_group(i))
            elems_on[devs_i] += elems / share
            bytes_on[devs_i] += bytes_i / share
        bpe = problem.bytes_per_elem[[problem.q_index(p) for p in plan.op_precision]]
        stage_bytes = float((param[mine] * bpe[mine]).sum()) / st.tensor_parallel
        if share > 1 and stage_bytes > 0:
            tp = st.tensor_parallel
            for j in range(tp):
                devs = [st.devices[i * tp + j] for i in range(st.replicas)]
                t = (st.replicas - 1) * ring_step_s(problem, devs, stage_bytes / st.replicas)
                gather[devs] = np.maximum(gather[devs], t)
    for d in range(problem.n_devices):
        if elems_on[d] > 0:
            kind = problem.topology.kind_of(d)
            # Adam's 24 bytes per parameter plus the gradient read and the working copy written
            out[d] = optimizer_step_s(elems_on[d], 0, kind) + bytes_on[d] * 2 / kind.mem_bw_bytes_per_s
    return out + gather


def op_rank_times(problem: Problem, G: list[int], qs: list[int], ops: list[int], sequence_parallel: bool,
                  again: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds of each op of ``ops`` for one microbatch on rank 0 of
    the tensor-parallel group ``G``: its share of the work, the recomputed forward, and
    the ring all-reduces Megatron's pattern puts after it (module docstring)."""
    tv = len(G)
    c = int(problem.device_kind[G[0]])
    launch = float(problem.cast_fixed_s[c])
    fwd = np.zeros(len(ops))
    bwd = np.zeros(len(ops))
    for i, v in enumerate(ops):
        op = problem.graph.ops[v]
        q = qs[v]
        tdiv = tv if tp_divides(op, sequence_parallel) else 1
        f = tp_shard_time_s(float(problem.fwd_time_s[v, q, c]), launch, tdiv)
        fwd[i] = f
        if problem.training:
            bwd[i] = tp_shard_time_s(float(problem.bwd_time_s[v, q, c]), launch, tdiv) + (f if again[v] else 0.0)
        if tv > 1 and tp_forward_allreduce(op):
            fwd[i] += ring_allreduce_s(problem, G, float(problem.act_bytes[v, q]))
        if problem.training and tv > 1 and tp_backward_allreduce(op):
            nb_in = sum(float(problem.edge_elems[e] * problem.bytes_per_elem[qs[int(problem.edges[e][0])]])
                        for e in problem.in_edge_ids(v))
            bwd[i] += ring_allreduce_s(problem, G, nb_in)
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
    f_op, b_op = op_rank_times(problem, G, qs, ops, st.sequence_parallel, recomputed(problem, plan))
    fwd = float(f_op.sum())
    ends = np.cumsum(b_op[::-1])[::-1]   # ops run backward last to first
    end = {v: float(ends[i]) for i, v in enumerate(ops)}
    bwd = float(b_op.sum())
    for e, (u, v) in enumerate(problem.edges.tolist()):
        if plan.op_stage[v] == k and qs[u] != qs[v] and not problem.cast_fused[e]:   # casts on the consumer
            t = tp_shard_time_s(problem.cast_time_s(e, qs[u], qs[v], c) * cast_share, launch, tv)
            fwd += t
            if problem.training:
                bwd += t
    return fwd, bwd, end


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


def estimate_iteration(problem: Problem, plan: Plan) -> IterationEstimate:
    """The analytic iteration of a training plan under 1F1B (module docstring)."""
    if not problem.training:
        raise DistplanError("the analytic iteration is for training; use costs.evaluate for inference")
    if plan.schedule != "1f1b":
        raise DistplanError(f"the analytic iteration models the 1f1b schedule, not {plan.schedule!r}")
    if replica_groups(problem, plan):
        return _estimate_groups(problem, plan)
    K = plan.n_stages
    FB = [_stage_times(problem, plan, k) for k in range(K)]
    F = np.array([x[0] for x in FB])
    B = np.array([x[1] for x in FB])
    c = np.array([_boundary_s(problem, plan, b) for b in range(K - 1)])
    m = max(-(-plan.microbatches // s.replicas) for s in plan.stages)
    period = float((F + B).max(initial=0.0))
    pipeline = float(F.sum() + B.sum() + 2 * c.sum() + (m - 1) * period)
    qs = [problem.q_index(p) for p in plan.op_precision]
    ar = np.zeros(K)
    done_after = np.zeros(K)   # the stage's reduction ends this long after its last backward
    for k, st in enumerate(plan.stages):
        if st.replicas < 2:
            continue
        devs = [st.devices[i * st.tensor_parallel] for i in range(st.replicas)]
        hier = plan.dp_allreduce == "hierarchical"

        def reduce_s(vs: list[int]) -> tuple[float, float]:
            nbytes = sum(problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[qs[v]])
                         for v in vs) / st.tensor_parallel
            return gradient_reduction_parts(problem, devs, nbytes, hier, st.zero) if nbytes > 0 else (0.0, 0.0)

        with_params = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
        ar[k] = reduce_s(with_params)[0]
        if not plan.overlap_grad_reduce:
            done_after[k] = ar[k]
            continue
        # one bucket per op, ready when the op's last backward ends; the buckets' rings
        # pipeline over the links, which carry one bucket's chunks after another
        free = finish = 0.0
        ends = FB[k][2]
        for v in sorted(with_params, key=lambda v: ends[v]):
            total, busy = reduce_s([v])
            start = max(free, ends[v])
            free = start + busy
            finish = max(finish, start + total)
        done_after[k] = max(0.0, finish - B[k])
    # stage k's last backward ends sum_{j<k} (B_j + c_j) before stage 0's
    last_b = pipeline - np.concatenate(([0.0], np.cumsum(B[:-1] + np.append(c, 0.0)[:K - 1])))
    run = float(np.max(last_b + done_after)) if K else 0.0
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return IterationEstimate(run + opt, pipeline, period, F, B, c, ar, run - pipeline, opt)


def replica_microbatch_s(problem: Problem, plan: Plan, k: int, replica: int) -> float:
    """Forward + backward seconds of one microbatch on ``replica`` of stage k (rank 0; its
    device kind and precisions, casts and tensor-parallel all-reduces included): what its
    share should follow (``core.plan.balanced_shares``)."""
    f, b, _ = _stage_times(problem, plan, k, replica)
    return f + b


def replica_groups(problem: Problem, plan: Plan) -> bool:
    """Whether the problem is a mixed fleet (several device kinds) or some stage's
    replicas differ (share, precision): the estimate then times every replica and
    replays the 1F1B order (module docstring); else the closed form."""
    return len({int(k) for k in problem.device_kind}) > 1 or any(not st.uniform for st in plan.stages)


def _estimate_groups(problem: Problem, plan: Plan) -> IterationEstimate:
    """``estimate_iteration`` for plans whose replicas differ (module docstring)."""
    K, M = plan.n_stages, plan.microbatches
    per = [[_stage_times(problem, plan, k, i) for i in range(st.replicas)] for k, st in enumerate(plan.stages)]
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
        """Replica (k, i)'s microbatches back to back, with the fill and drain of the
        other stages along microbatch m's replicas."""
        rs, cs = lane(m)
        return n[k][i] * T[k][i] + sum(T[j][rs[j]] for j in range(K) if j != k) + 2 * float(cs.sum())

    first_m = [[_first_microbatch(st, i) for i in range(st.replicas)] for st in plan.stages]
    span = [[lane_span(k, i, first_m[k][i]) for i in range(st.replicas)] for k, st in enumerate(plan.stages)]
    rs0, c = lane(0)
    F = np.array([per[k][rs0[k]][0] for k in range(K)])
    B = np.array([per[k][rs0[k]][1] for k in range(K)])
    period = max(max(row) for row in T)
    replay = _replay_1f1b(problem, plan, per, _Lags(problem, plan))
    pipeline = replay[0] if replay is not None else max(max(row) for row in span)

    def last_backward_end(k: int, i: int) -> float:
        """When replica (k, i) ends its last backward: replayed, or its lane's span (the
        slowest stage along the replicas of its last microbatch) less the backwards and
        boundaries of the earlier stages along that lane."""
        if replay is not None:
            return replay[1][k][i]
        st = plan.stages[k]
        m = max(x for x in range(M) if st.replica_of(x) == i)
        rs, cs = lane(m)
        whole = max(span[j][rs[j]] for j in range(K))
        return whole - sum(per[j][rs[j]][1] + cs[j] for j in range(k))

    tr = Transfers(problem)
    first: list[int] = []
    ends_at: list[float] = []
    for k, st in enumerate(plan.stages):
        first.append(len(tr.links))
        end_i = [last_backward_end(k, i) for i in range(st.replicas)]
        ends_at.append(max(end_i))
        if st.replicas < 2:
            continue
        wide = plan.widest_precisions(k, lambda p: problem.bytes_per_elem[problem.q_index(p)])
        ops = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
        buckets = [[v] for v in ops] if plan.overlap_grad_reduce else [ops]
        if plan.overlap_grad_reduce:   # by readiness on replica 0
            buckets.sort(key=lambda b: per[k][0][2][b[0]])
        for j in range(st.tensor_parallel):
            devs = [st.devices[i * st.tensor_parallel + j] for i in range(st.replicas)]
            for bucket in buckets:
                nbytes = sum(problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[problem.q_index(wide[v])])
                             for v in bucket) / st.tensor_parallel
                if nbytes <= 0:
                    continue
                if plan.overlap_grad_reduce:
                    start = [end_i[i] - per[k][i][1] + per[k][i][2][bucket[0]] for i in range(st.replicas)]
                else:
                    start = end_i
                reduction_transfers(tr, devs, start, nbytes, plan.dp_allreduce == "hierarchical", st.zero)
    first.append(len(tr.links))
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


class _Lags:
    """What boundary b adds to microbatch m's path, forward and backward: how much later
    the receiving stage ends than its own work after the sending stage ended. Each
    crossing tensor leaves when its producer is done (its gradient when its consumer's
    backward is), the tensors queue on the route's links (store and forward, in order of
    readiness), and each receiving op starts once its own inputs are there, as in the
    simulator; one microbatch alone on the links. A lag is negative when the receiver's
    first ops wait for nothing from the sender, -inf when no tensor crosses. A tensor
    relayed through the receiving stage counts as needed by the end of that stage."""

    def __init__(self, problem: Problem, plan: Plan):
        self.pb, self.plan = problem, plan
        self.memo: dict[tuple[int, int], tuple[float, float]] = {}
        self.again = recomputed(problem, plan)
        self.cross: list[list[int]] = [[] for _ in range(max(plan.n_stages - 1, 0))]
        for e, (u, v) in enumerate(problem.edges.tolist()):
            for b in range(plan.op_stage[u], plan.op_stage[v]):
                self.cross[b].append(e)   # an empty tensor still orders the ops (latency only)

    def __call__(self, b: int, m: int) -> tuple[float, float]:
        key = (b, m % self.plan.cycle)
        if key not in self.memo:
            self.memo[key] = self._lags(b, m)
        return self.memo[key]

    def _ops(self, k: int, m: int, qs: list[int]) -> tuple[list[int], dict[int, float], dict[int, float]]:
        """Stage k's ops on microbatch m's replica and their forward and backward seconds
        on one rank, each with the casts the simulator runs right before it (a cast of an
        input before the op's forward, of its input gradient after its backward)."""
        pb, plan = self.pb, self.plan
        st = plan.stages[k]
        G = list(st.replica_devices(m))
        ops = plan.ops_in_stage(k)
        f, bw = op_rank_times(pb, G, qs, ops, st.sequence_parallel, self.again)
        fwd = {v: float(x) for v, x in zip(ops, f)}
        bwd = {v: float(x) for v, x in zip(ops, bw)}
        c = int(pb.device_kind[G[0]])
        share = 0.5 if pb.training else 1.0
        for v in ops:
            for e in pb.in_edge_ids(v):
                u = int(pb.edges[e][0])
                if qs[u] != qs[v] and not pb.cast_fused[e]:
                    t = tp_shard_time_s(pb.cast_time_s(e, qs[u], qs[v], c) * share, float(pb.cast_fixed_s[c]), len(G))
                    fwd[v] += t
                    bwd[v] += t
        return ops, fwd, bwd

    def _queue(self, a: int, c: int, items: list[tuple[float, float, int]]) -> dict[int, float]:
        """Arrival of each (ready, bytes, edge) sent a -> c, FIFO per link."""
        pb = self.pb
        free: dict[int, float] = {}
        out = {}
        for ready, nbytes, e in sorted(items):
            t = ready
            for l in pb.topology.route(a, c):
                t = max(t, free.get(l, -math.inf))
                free[l] = t + nbytes / float(pb.link_bw_bytes_per_s[l])
                t = free[l] + float(pb.link_latency_s[l])
            out[e] = t
        return out

    def _lags(self, b: int, m: int) -> tuple[float, float]:
        pb, plan = self.pb, self.plan
        qs = [pb.q_index(p) for p in plan.microbatch_precisions(m)]
        a_dev = plan.stages[b].replica_devices(m)[0]
        c_dev = plan.stages[b + 1].replica_devices(m)[0]
        tv = plan.stages[b + 1].tensor_parallel
        p_ops, p_f, p_b = self._ops(b, m, qs)
        c_ops, c_f, c_b = self._ops(b + 1, m, qs)
        nb = {e: float(pb.edge_elems[e] * pb.bytes_per_elem[qs[int(pb.edges[e][0])]]) / tv for e in self.cross[b]}
        # forward: producer ends at 0; each tensor ready when its producer is done
        done, t = {}, 0.0
        for v in reversed(p_ops):
            done[v] = t
            t -= p_f[v]
        items = [(done.get(int(pb.edges[e][0]), 0.0), nb[e], e) for e in self.cross[b]]
        arrive = self._queue(a_dev, c_dev, items)
        t = -math.inf   # ops that wait for nothing from the sender may run early
        for v in c_ops:
            need = [arrive[e] for e in pb.in_edge_ids(v) if e in arrive]
            t = max([t] + need) + c_f[v]
        # relayed onward: in hand by the end of this stage (the next boundary sends it then)
        t = max([t] + [arrive[e] for e in self.cross[b] if plan.op_stage[int(pb.edges[e][1])] > b + 1])
        lag_f = t - sum(c_f.values())
        # backward: the receiving stage's backward ends at 0; ops run last to first; a
        # gradient cast back (a task of its own, not fused) runs after the stage's
        # backward in the simulator's order, so that gradient leaves at the end
        done, t = {}, 0.0
        for v in c_ops:
            done[v] = t
            t -= c_b[v]

        def grad_ready(e: int) -> float:
            u, v = int(pb.edges[e][0]), int(pb.edges[e][1])
            return 0.0 if qs[u] != qs[v] and not pb.cast_fused[e] else done.get(v, 0.0)

        items = [(grad_ready(e), nb[e], e) for e in self.cross[b]]
        arrive = self._queue(c_dev, a_dev, items)
        out_edges: dict[int, list[int]] = {}
        for e in self.cross[b]:
            out_edges.setdefault(int(pb.edges[e][0]), []).append(e)
        t = -math.inf
        for v in reversed(p_ops):
            t = max([t] + [arrive[e] for e in out_edges.get(v, ())]) + p_b[v]
        t = max([t] + [arrive[e] for e in self.cross[b] if plan.op_stage[int(pb.edges[e][0])] < b])
        lag_b = t - sum(p_b.values())
        return lag_f, lag_b


def _replay_1f1b(problem: Problem, plan: Plan, per, lags) -> tuple[float, list[list[float]]] | None:
    """The 1F1B run of every microbatch, task by task, without link contention: each
    device runs its replicas' forwards (round m) and backwards (round m + the stage's
    ``Plan.window_offsets``) in the simulator's order (round, then pattern, forwards
    first), a forward after the previous stage's forward of the microbatch and its
    boundary, a backward after the next stage's backward and the boundary back.
    ``per[k][i]`` = (F, B, _) of replica i of stage k; ``lags`` (``_Lags``) the time
    a boundary adds, forward and backward. Returns
    (the last task's end, the end of each replica's last backward), or None if the
    order does not run through (never for the simulator's schedules)."""
    K, M, C = plan.n_stages, plan.microbatches, plan.cycle
    off = plan.window_offsets()
    rep = [[st.replica_of(m) for m in range(M)] for st in plan.stages]
    order: dict[int, list[tuple]] = {}
    for k, st in enumerate(plan.stages):
        for m in range(M):
            dev = st.replica_group(rep[k][m])[0]
            order.setdefault(dev, []).append((m, m % C, 0, k, m))
            order.setdefault(dev, []).append((m + off[k], m % C, 1, -k, m))
    for seq in order.values():
        seq.sort()
    end: dict[tuple[int, int, int], float] = {}
    waiting: dict[tuple[int, int, int], int] = {}
    pos = dict.fromkeys(order, 0)
    free = dict.fromkeys(order, 0.0)
    stack = list(order)
    while stack:
        dev = stack.pop()
        seq = order[dev]
        while pos[dev] < len(seq):
            _, _, ph, sk, m = seq[pos[dev]]
            k = sk if ph == 0 else -sk
            i = rep[k][m]
            dep, lag = None, 0.0
            if ph == 0 and k > 0:
                dep, lag = (0, k - 1, m), lags(k - 1, m)[0]
            elif ph == 1 and k < K - 1:
                dep, lag = (1, k + 1, m), lags(k, m)[1]
            elif ph == 1:
                dep = (0, k, m)
            if dep is not None and dep not in end:
                waiting[dep] = dev
                break
            start = max(free[dev], end[dep] + lag if dep is not None else 0.0)
            if ph == 1:
                start = max(start, end.get((0, k, m), 0.0))
            free[dev] = end[(ph, k, m)] = start + per[k][i][ph]
            pos[dev] += 1
            nxt = waiting.pop((ph, k, m), None)
            if nxt is not None:
                stack.append(nxt)
    if any(pos[d] < len(seq) for d, seq in order.items()):
        return None
    last = [[0.0] * st.replicas for st in plan.stages]
    for k in range(K):
        for m in range(M):
            i = rep[k][m]
            last[k][i] = max(last[k][i], end[(1, k, m)])
    return max(end.values(), default=0.0), last


def estimate_latency(problem: Problem, plan: Plan) -> float:
    """One microbatch alone through the plan's stages (inference): every stage's forward
    on one rank (its tensor-parallel all-reduces included) and every boundary's transfer,
    one after another."""
    K = plan.n_stages
    return (math.fsum(_stage_times(problem, plan, k)[0] for k in range(K))
            + math.fsum(_boundary_s(problem, plan, b) for b in range(K - 1)))
