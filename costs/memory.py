"""Memory an operator needs on its device, per precision, in bytes.

Static bytes stay for the whole run: parameters at the operator's precision, in training
also their gradients and fp32 Adam state (12 bytes per parameter). Activation bytes are
per microbatch, times the schedule's in-flight copies (``activation_factors``): training
stashes what each backward needs for ``n`` microbatches; an inference stage is charged
its liveness peak in topological order (``stream_activation_bytes``), plus one
microbatch of what it receives or relays (``edge_bytes``). The charge bounds the
simulator's own peak (``sim.memory``), which frees buffers by the same rules.

Rules and formulas: docs/concepts/milp.md ("Memory") and docs/concepts/simulator.md
("Memory: one model, two charges").
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distplan.core.precision import precision
from distplan.core.schedules import PLAN_SCHEDULES, interleaved_inflight
from distplan.costs.routes import route_s
from distplan.costs.tensor_parallel import tp_output_share
from distplan.workloads.graph import graph_send_elems, send_elems  # noqa: F401  (re-exported)

OPTIMIZER_BYTES_PER_PARAM = 12
#: what an op keeps for its backward (training, below): nothing, or its output
NO_SAVE_KINDS = frozenset({"add", "reshape"})
OUTPUT_SAVE_KINDS = frozenset({"softmax"})
MASK_BYTES_PER_ELEM = 1.0   # a dropout mask (torch.bool / uint8)


#: fp8 training: an fp8 matrix product keeps 16-bit weights (as Transformer Engine
#: does) with fp8 copies of them and of their transpose cached across microbatches
FP8_TRAINING_WEIGHT_BYTES = 2
FP8_TRAINING_COPIES = 2


def static_bytes(param_elems: int, prec: str, training: bool) -> float:
    """Bytes of ``param_elems`` parameters at ``prec``; training adds their gradients
    (same width) and Adam's fp32 master weights and moments (12 B). fp8 in training
    keeps 16-bit weights plus two 1-byte copies, and fp8 gradients (reduced at fp8, as
    FP8-LM does; Transformer Engine keeps them 16-bit): 17 B a parameter, bf16's 16 + 1."""
    b = precision(prec).bytes_per_elem
    if training:
        if prec == "fp8":
            return float(param_elems) * (FP8_TRAINING_WEIGHT_BYTES + b + OPTIMIZER_BYTES_PER_PARAM
                                         + FP8_TRAINING_COPIES * b)
        return float(param_elems) * (2 * b + OPTIMIZER_BYTES_PER_PARAM)
    return float(param_elems) * b


def activation_bytes(out_elems: int, prec: str) -> float:
    return float(out_elems) * precision(prec).bytes_per_elem


def dropout_extra_bytes(op, prec: str) -> float:
    """Bytes a training op keeps beside its output under dropout (module docstring,
    ``saved_elems``): a softmax its 1-byte mask and the dropped-out scores, a
    row-parallel output its 1-byte mask."""
    if op.kind in OUTPUT_SAVE_KINDS:
        return float(op.out_elems) * (precision(prec).bytes_per_elem + MASK_BYTES_PER_ELEM)
    if op.tp_role == "row":
        return float(op.out_elems) * MASK_BYTES_PER_ELEM
    return 0.0


def activation_factors(schedule: str, stage: int, n_stages: int, microbatches: int) -> tuple[int, int]:
    """(copies of every activation, extra copies of the sent bytes of an op with a consumer
    on a later stage) that stage ``stage`` holds; see the module docstring."""
    n = inflight_microbatches(schedule, stage, n_stages, microbatches)
    if schedule == "stream":
        return 1, n - 1
    return n, 0


def inflight_microbatches(schedule: str, stage: int, n_stages: int, microbatches: int, virtual: int = 1) -> int:
    """Microbatches whose activations a stage may hold at once (an upper bound).

    stream (inference): 2 (double buffering); gpipe: all M; 1f1b: min(M, S - stage);
    interleaved (``virtual`` chunks per rank, S / virtual ranks; ``stage`` the chunk, M
    the replica's microbatches): the most the chunk holds over Megatron's order
    (``core.schedules.interleaved_inflight``, exact for the order the device runs).
    """
    if schedule == "stream":
        return min(2, microbatches)
    if schedule == "1f1b":
        return min(microbatches, n_stages - stage)
    if schedule == "interleaved":
        pp = n_stages // virtual
        return interleaved_inflight(pp, virtual, stage % pp, microbatches)[stage // pp]
    if schedule in PLAN_SCHEDULES:  # gpipe, explicit
        return microbatches
    raise ValueError(f"unknown schedule {schedule!r}")


def contiguous_sent_bytes(edges: np.ndarray, send: np.ndarray) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i <= j) is the sent bytes of ops i..j-1 (a contiguous
    run of the topological order) that some op at position >= j reads; ``edges`` (E, 2)
    (u, v) pairs, ``send[v]`` the op's sent bytes."""
    V = len(send)
    last = np.full(V, -1)
    for u, w in edges:
        last[u] = max(last[u], w)
    out = np.zeros((V + 1, V + 1))
    for j in range(V + 1):
        cs = np.concatenate([[0.0], np.cumsum(np.where(last[:j] >= j, send[:j], 0.0))])
        out[: j + 1, j] = cs[j] - cs
    return out


def contiguous_tied_bytes(tied_owner: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i <= j) sums ``tied[v]`` over ops v in i..j-1 whose
    tied weights' owner ``tied_owner[v]`` (-1: none) lies outside i..j-1."""
    V = len(tied)
    out = np.zeros((V + 1, V + 1))
    i = np.arange(V + 1)[:, None]
    j = np.arange(V + 1)[None, :]
    for v, o in enumerate(tied_owner):
        if o >= 0 and tied[v] > 0:
            out += tied[v] * ((i <= v) & (v < j) & ~((i <= o) & (o < j)))
    return out


def last_reader(n_ops: int, edges: np.ndarray) -> np.ndarray:
    """(V,) the largest index of an op reading op u's output (-1: none), over ``edges`` (u, v)."""
    last = np.full(n_ops, -1, dtype=np.int64)
    if len(edges):
        np.maximum.at(last, np.asarray(edges[:, 0], dtype=np.int64), np.asarray(edges[:, 1], dtype=np.int64))
    return last


def stream_copies(microbatches: int) -> tuple[int, int]:
    """(n1, n2) of the module docstring: older copies of the sent bytes of every op read by
    a later stage, and one more for those not yet run in the current microbatch."""
    n1 = min(1, microbatches - 1)
    return n1, min(2, microbatches - 1) - n1


def stream_live_peak_bytes(ops: Sequence[int], act: np.ndarray, send: np.ndarray, last: np.ndarray,
                           leaves: np.ndarray, microbatches: int = 1) -> float:
    """Most own activation bytes alive at once while the stage runs ``ops`` (ascending
    indices), ``leaves[u]``: read by a later stage: max over t of ``act[t]`` + ``send[u]``
    of every earlier u with ``last[u] >= t`` or ``leaves[u]``, plus the older copies of
    the sent bytes (``stream_copies``; module docstring)."""
    o = np.asarray(ops, dtype=np.int64)
    if not len(o):
        return 0.0
    act_o, send_o = np.asarray(act, dtype=float)[o], np.asarray(send, dtype=float)[o]
    n1, n2 = stream_copies(microbatches)
    held = np.where(leaves[o], send_o, 0.0)
    later = np.concatenate([np.cumsum(held[::-1])[::-1][1:], [0.0]])   # [t] = sent bytes of ops after t
    if len(o) > DENSE_LIVENESS_OPS:
        sent_alive = _alive_sums(o, send_o, last, leaves)
    else:
        i = np.arange(len(o))
        alive = (i[None, :] < i[:, None]) & ((last[o][None, :] >= o[:, None]) | leaves[o][None, :])   # [t, u]
        sent_alive = alive @ send_o
    return float((act_o + sent_alive + n2 * later).max() + n1 * held.sum())


#: stages of more ops get the liveness sums by intervals (``_alive_sums``) instead of the
#: (ops x ops) matrix: a 25,000-op stage of a 100,000-op chain made that 625 M entries per
#: call, minutes per plan
DENSE_LIVENESS_OPS = 4096


def _alive_sums(o: np.ndarray, send_o: np.ndarray, last: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """[t] = sum of ``send_o[u]`` over the stage's earlier ops u alive at t (``last[u] >=
    o[t]`` or ``leaves[u]``), as ``stream_live_peak_bytes``'s matrix product, in
    O(n log n): since ``o`` ascends, a u that does not leave the stage is alive over the
    run of positions from u + 1 to the last t with ``o[t] <= last[u]`` (a difference
    array); one that leaves is alive at every later t."""
    n = len(o)
    lv = leaves[o]
    diff = np.zeros(n + 1)
    pos = np.arange(n)
    stop = np.searchsorted(o, last[o], side="right")   # first position past u's last reader
    stay = ~lv & (stop > pos + 1)
    np.add.at(diff, pos[stay] + 1, send_o[stay])
    np.add.at(diff, stop[stay], -send_o[stay])
    diff[pos[lv] + 1] += send_o[lv]
    return np.cumsum(diff[:n])


def stream_activation_bytes(op_stage: Sequence[int], n_stages: int, act: np.ndarray, send: np.ndarray,
                            edges: np.ndarray, microbatches: int, edge_bytes: np.ndarray | None = None) -> np.ndarray:
    """(K,) activation bytes each stage of an inference stream holds (module docstring):
    ``act[v]``, ``send[v]`` at v's precision, ``edges`` every tensor (u, v); with
    ``edge_bytes[e]`` (at the producer's precision), plus what crosses into the stage."""
    stage = np.asarray(op_stage, dtype=np.int64)
    last = last_reader(len(stage), edges)
    leaves = np.zeros(len(stage), dtype=bool)
    arrive = np.zeros(n_stages + 1)
    if len(edges):
        u, w = np.asarray(edges[:, 0], dtype=np.int64), np.asarray(edges[:, 1], dtype=np.int64)
        leaves[u[stage[w] > stage[u]]] = True
        if edge_bytes is not None:   # tensor e is received or relayed by stages stage[u]+1 .. stage[w]
            np.add.at(arrive, stage[u] + 1, edge_bytes)
            np.add.at(arrive, stage[w] + 1, -np.asarray(edge_bytes, dtype=float))
    return np.array([stream_live_peak_bytes(np.flatnonzero(stage == k), act, send, last, leaves, microbatches)
                     for k in range(n_stages)]) + np.cumsum(arrive)[:n_stages]


def contiguous_live_peak_bytes(edges: np.ndarray, act: np.ndarray, send: np.ndarray) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i < j) is the liveness peak of one microbatch on ops
    i..j-1 (a contiguous run of the topological order, the next run on a later stage), no
    older copies: max over t of ``act[t]`` + ``send[u]`` of the earlier u with ``last[u] >=
    t`` (an op read by a later stage is read at an index >= j > t); 0 for i >= j."""
    V = len(act)
    last = last_reader(V, edges)
    t = np.arange(V)
    w = np.where((t[None, :] < t[:, None]) & (last[None, :] >= t[:, None]), send[None, :], 0.0)   # [t, u]
    suffix = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]          # [t, i] = sum_{u >= i} w[t, u]
    live = np.full((V + 1, V), -np.inf)
    for i in range(V):
        live[i, i:] = act[i:] + suffix[i:, i]
    out = np.zeros((V + 1, V + 1))
    out[:V, 1:] = np.maximum.accumulate(live, axis=1)[:V]
    return np.where(np.arange(V + 1)[:, None] < np.arange(V + 1)[None, :], np.maximum(out, 0.0), 0.0)


def contiguous_stream_bytes(edges: np.ndarray, act: np.ndarray, send: np.ndarray, microbatches: int) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i < j) is ``stream_activation_bytes`` of a stage
    holding ops i..j-1 (a contiguous run of the topological order, the next run on a later
    stage): an op of the run is read by a later stage iff ``last_reader >= j``."""
    V = len(act)
    n1, n2 = stream_copies(microbatches)
    live = contiguous_live_peak_bytes(edges, act, send)
    if n1 == 0 and n2 == 0:
        return live
    last = last_reader(V, edges)
    t = np.arange(V)
    w = np.where((t[None, :] < t[:, None]) & (last[None, :] >= t[:, None]), send[None, :], 0.0)
    suffix = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]
    at = np.full((V + 1, V), -np.inf)          # [i, t]: live bytes while t runs, the run starting at i
    for i in range(V):
        at[i, i:] = act[i:] + suffix[i:, i]
    out = np.zeros((V + 1, V + 1))
    for j in range(1, V + 1):
        held = np.where(last[:j] >= j, send[:j], 0.0)                    # read by a later stage
        after = np.concatenate([np.cumsum(held[::-1])[::-1][1:], [0.0]])   # [t]: held by ops after t
        before = np.concatenate([[0.0], np.cumsum(held)])                 # [i]: held by ops before i
        out[:j, j] = (at[:j, :j] + n2 * after[None, :]).max(axis=1) + n1 * (before[j] - before[:j])
    return out


# --- training: what each operator saves for its backward --------------------------------
#
# Autograd's rule, as Korthikanti et al. 2022 (arXiv 2205.05198, section 4) count it: an
# operator keeps the inputs its backward needs, not its output. Matrix products, norms and
# activations keep their inputs; a softmax keeps its output; a residual add or a view
# keeps nothing; a fused operator also keeps what it writes inside itself; an operator
# nobody reads (the LM head's logits) is kept for the loss. With dropout (``Graph.dropout``)
# a softmax also keeps its 1-byte mask and the dropped-out scores, and a row-parallel
# output (attention projection, FFN-down) its 1-byte mask. A recomputed operator
# (``costs.recompute``) keeps nothing of its own, and its inputs only when their producer
# is not recomputed (the checkpoint it recomputes from); a tensor made by a recomputed
# operator is made again in the backward, so nobody keeps it. Several readers of one
# tensor on its producer's stage keep it once (at most the producer's output); a reader
# on a later stage keeps its own received copy.
#
# Bytes per rank: a tensor's elements at its producer's precision times the share a rank
# holds (``tp_output_share``: 1/t for sharded outputs, and for the replicated ones under
# sequence parallelism); a copy received from another stage is 1/t of the tensor (the
# simulator sends each rank its shard). On the zoo's GPT layer this is exactly
# Korthikanti's sbh(34 + 5as/h) (no parallelism), sbh(10 + 24/t + 5as/(ht)) (tp),
# sbh(34 + 5as/h)/t (tp + sp), 34sbh/t (tp + sp + selective) and 2sbh (full) per layer.



def saved_elems(graph, again: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(edge_saved (E,), own (V,), extra (V,), mask (V,)) elements kept for the backward per
    microbatch (rules above): ``edge_saved[e]`` of tensor e by its reader, ``own[v]`` of
    v's output by v itself (what the readers on v's stage and v keep of v's output is
    at most v's ``out_elems``: ``kept_output_elems``), ``extra[v]`` further elements at v's precision (dropout
    output), ``mask[v]`` 1-byte mask elements. ``again[v]``: v is recomputed."""
    ops = graph.ops
    V = len(ops)
    edges = graph.edges()
    E = len(edges)
    saved = np.zeros(E)
    own = np.zeros(V)
    readers = np.zeros(V, dtype=np.int64)
    out_sum = np.zeros(V)
    for u, _, x in edges:
        readers[u] += 1
        out_sum[u] += x
    for e, (u, w, x) in enumerate(edges):
        if again[u]:
            continue
        if again[w] or (ops[w].kind not in NO_SAVE_KINDS and ops[w].kind not in OUTPUT_SAVE_KINDS):
            saved[e] = x
    for v, op in enumerate(ops):
        if again[v] or op.kind in NO_SAVE_KINDS:
            continue
        inner = max(0.0, op.out_elems - min(float(op.out_elems), out_sum[v])) if readers[v] else float(op.out_elems)
        own[v] = (op.out_elems if op.kind in OUTPUT_SAVE_KINDS else 0.0) + inner
    extra = np.zeros(V)
    mask = np.zeros(V)
    if getattr(graph, "dropout", False):
        for v, op in enumerate(ops):
            if again[v]:
                continue
            if op.kind in OUTPUT_SAVE_KINDS:
                extra[v], mask[v] = op.out_elems, op.out_elems
            elif op.tp_role == "row":
                mask[v] = op.out_elems
    return saved, own, extra, mask


def one_f_one_b_order(inflight: int, microbatches: int) -> tuple[tuple[int, int, int], ...]:
    """A stage's tasks in the simulator's 1F1B order, as ``(phase, 0, microbatch)``: ``inflight``
    warm-up forwards, then a backward and a forward in turn, then the cool-down backwards."""
    n, M = inflight, microbatches
    steady = [t for j in range(M - n) for t in ((1, 0, j), (0, 0, j + n))]
    return tuple([(0, 0, x) for x in range(n)] + steady + [(1, 0, j) for j in range(M - n, M)])


def in_transit_sends(order: Sequence[tuple[int, int, int]], flows: Sequence["Flow"]) -> list[tuple[list[tuple[int, float]], float]]:
    """Per task of a device's order (``(phase, chunk, microbatch)``): the earlier forwards'
    sends still on their link when it starts, as (task position, bytes) in link order, and
    the bytes of gradients back still on theirs. Each link serves one direction of the
    device's sends in order (FIFO), a forward's send taking its chunk's ``out_s``, a
    backward's ``back_s``; the tasks run back to back at their compute times, the fastest
    the device can go, which no slower real run can exceed (a send waits less, and more
    time has passed since it left), so a real run's sends in transit are among these."""
    now = 0.0
    free = [0.0, 0.0]                                  # when each link finishes its queue
    queued: list[tuple[int, float, int, float]] = []   # (direction, end of transfer, position, bytes)
    out = []
    for i, (phase, j, _) in enumerate(order):
        queued = [q for q in queued if q[1] > now]
        out.append(([(pos, b) for d, _, pos, b in queued if d == 0], sum(b for d, _, _, b in queued if d == 1)))
        f = flows[j]
        now += f.forward_s if phase == 0 else f.backward_s
        link_s, nbytes = (f.out_s, f.sent) if phase == 0 else (f.back_s, f.grad_out)
        if nbytes > 0:
            free[phase] = max(free[phase], now) + link_s
            queued.append((phase, free[phase], i, nbytes))
    return out


def in_transit_bytes(order: Sequence[tuple[int, int, int]], flows: Sequence["Flow"]) -> np.ndarray:
    """[direction, task]: ``in_transit_sends`` summed, forward outputs (row 0) and
    gradients back (row 1)."""
    sends = in_transit_sends(order, flows)
    return np.array([[sum(b for _, b in fwd) for fwd, _ in sends], [back for _, back in sends]]).reshape(2, len(order))


@dataclass(frozen=True)
class StageMemory:
    """Per-rank bytes of one training stage (one replica's precisions) per microbatch:
    ``stash`` kept for the backward; ``single`` the most one microbatch holds at once
    over its own forward and backward (what it has kept so far, or still keeps, plus its
    outputs before their local readers ran, its gradients, and what recomputation makes
    again); ``forward``/``backward`` the most its forward or backward adds beyond the
    stash; ``boundary`` received copies nobody keeps and relayed tensors, which may wait
    while a microbatch is in flight; ``sending`` the tensors sent on and the gradients
    sent back or received for them, which pile up only behind a slow link (``keeps_up``
    False: the link needs longer per microbatch than the stage's compute, or overlapped
    reductions share it), else at most two microbatches' worth. ``flow`` splits the
    boundary traffic by kind for the 1F1B phase rule (``peak_1f1b_bytes``)."""

    stash: float
    single: float
    forward: float
    backward: float
    boundary: float
    sending: float = 0.0
    keeps_up: bool = False
    flow: "Flow | None" = None

    def peak_bytes(self, inflight: int, overlapping: int) -> float:
        """Bytes the stage holds at most with ``inflight`` microbatches in flight. Under
        1F1B (``overlapping`` 1) a device runs one microbatch's tasks in order, the others
        stashed; under GPipe's rounds a device may run ahead while a collective is
        pending, so up to ``overlapping`` microbatches' work is under way at once."""
        sends = min(inflight, 2) if self.keeps_up else inflight
        if overlapping <= 1:
            return (inflight - 1) * self.stash + self.single + inflight * self.boundary + sends * self.sending
        return inflight * (self.stash + self.boundary + self.sending) + overlapping * max(self.forward, self.backward)

    def peak_1f1b_bytes(self, inflight: int, microbatches: int) -> float:
        """The most a stage holds under the simulator's 1F1B order (``inflight`` = min(M,
        K - k) warm-up forwards, then one backward and one forward, then the cool-down
        backwards), phase by phase: the other microbatches' stashes, tensors and gradients
        that the order and the data dependencies let be alive at once beside the current
        microbatch's own profile (docs/concepts/memory.md, "1F1B phases"). Needs ``flow``."""
        f = self.flow
        n, M = inflight, microbatches
        S, R = self.stash, f.received
        fs, gr, gs = f.sent, f.grad_in, f.grad_out
        transit = in_transit_bytes(one_f_one_b_order(n, M), [f])   # sends still on their links
        peaks = []
        for i in range(n):   # warm-up forward i: i stashes, the mbs up to min(n, M-1) may have arrived
            others = i if not self.keeps_up else min(i, 1)
            early = max(0, min(n, M - 1) - i)
            # a gradient back means the next stage ran every forward up to it: no send in transit
            peaks.append(i * S + early * R + f.forward_peak + max(min(others * fs, transit[0, i]),
                                                                  max(0, i - n + 3) * gr))
        if M > n:   # steady state: forward x = j+n-1 after backward j-1, then backward j
            # a sent tensor still in transit holds back the next stage, so no gradient that
            # needs it has come back; a gradient still in transit to the previous stage holds
            # back the forward that would send the next microbatch's input
            peaks.append((n - 1) * S + f.forward_peak + max(fs, 2 * gr) + max(2 * gs, R))
            ahead = max(gs, R) + f.backward_peak
            ahead = max(ahead, 2 * R + f.backward_after)   # j+n+1 arrives only after every gradient of j left
            peaks.append((n - 1) * S + (max(fs, gr) if f.grad_first else 2 * fs + gr) + ahead)
        for c in range(n):   # cool-down backward M-n+c: the next stage may have sent every gradient
            back = c + 1 if not self.keeps_up else min(c + 1, 1)
            peaks.append((n - 1 - c) * S + max(fs, (n - 1 - c) * gr) + f.backward_peak
                         + min(back * gs, transit[1, 2 * M - n + c]))
        return max(peaks) + n * f.relayed


@dataclass(frozen=True)
class Flow:
    """Per microbatch and rank, what crosses a stage's boundaries (bytes): ``received``
    tensors from the previous stage (kept or not), ``relayed`` ones passing through (both
    ways), ``sent`` outputs to the next stage not kept for the backward (alive until their
    transfer ends), ``grad_in`` gradients received for them, ``grad_out`` gradients sent
    back; ``forward_peak``/``backward_peak`` the stage's own microbatch profile with its
    own such buffers; ``grad_first`` whether the stage's first backward task reads a
    received gradient (so it starts only once the next stage's backward has)."""

    received: float
    relayed: float
    sent: float
    grad_in: float
    grad_out: float
    forward_peak: float
    backward_peak: float
    grad_first: bool
    backward_after: float = 0.0   # the backward's profile after its last gradient sent back
    out_s: float = 0.0            # link time per microbatch of the tensors sent on
    back_s: float = 0.0           # of the gradients sent back
    forward_s: float = 0.0        # the stage's compute per microbatch, forward
    backward_s: float = 0.0       # and backward


def _share(problem, v: int, tp: int, sp: bool) -> float:
    return tp_output_share(problem.graph.ops[v], tp, sp) if tp > 1 else 1.0


def kept_output_elems(graph, own: np.ndarray, saved: np.ndarray, local: np.ndarray | None = None) -> np.ndarray:
    """(V,) elements of each op's output its stage keeps: what it and its readers keep (only
    the readers with ``local[e]``, on its stage; all when None), at most the output."""
    kept = own.copy()
    for e, (u, _, _) in enumerate(graph.edges()):
        if local is None or local[e]:
            kept[u] += saved[e]
    return np.minimum(kept, [float(op.out_elems) for op in graph.ops])


def held_per_op_bytes(problem, qs: Sequence[int], tp: int, sp: bool, again: np.ndarray,
                      outside: np.ndarray | None = None) -> np.ndarray:
    """(V,) bytes op v's stage keeps for v's backward per microbatch on one rank (the
    cluster space's per-layer sums; the plan-exact form is ``training_stage_memory``): v's
    saved inputs, its own output and extras, every reader on its producer's stage, or,
    for the tensors ``outside[e]``, as a received copy (1/tp of it, not shared)."""
    saved, own, extra, mask = saved_elems(problem.graph, again)
    bpe = problem.bytes_per_elem
    V = problem.n_ops
    share = np.array([_share(problem, v, tp, sp) for v in range(V)])
    q = np.asarray(qs, dtype=np.int64)
    # a reader's claim on its input, scaled down where the readers and the producer
    # together claim more than the producer's output
    claims = kept_output_elems(problem.graph, own, saved) / np.maximum(
        own + np.bincount(problem.edges[:, 0], weights=saved, minlength=V) if len(saved) else own, 1e-300)
    scale = np.minimum(1.0, claims)
    out = (own * scale + extra) * bpe[q] * share + mask * MASK_BYTES_PER_ELEM * share
    for e, (u, w) in enumerate(problem.edges.tolist()):
        if outside is not None and outside[e]:
            out[w] += (problem.edge_elems[e] * bpe[q[u]] / tp) if saved[e] > 0 else 0.0
        else:
            out[w] += saved[e] * scale[u] * bpe[q[u]] * share[u]
    return out


def remat_per_op_bytes(problem, qs: Sequence[int], tp: int, sp: bool, again: np.ndarray) -> np.ndarray:
    """(V,) bytes a recomputed op's backward makes again (what it would keep without
    recomputation); 0 for the others."""
    if not again.any():
        return np.zeros(problem.n_ops)
    full = held_per_op_bytes(problem, qs, tp, sp, np.zeros(problem.n_ops, dtype=bool))
    return np.where(again, full, 0.0)


def remat_groups(problem, ops: Sequence[int]) -> dict[object, list[int]]:
    """The ops of one stage grouped as recomputation remakes them together: by layer
    (``l<i>.``), the rest one group."""
    from distplan.workloads.graph import layer_index
    groups: dict[object, list[int]] = {}
    for v in ops:
        groups.setdefault(layer_index(problem.graph.ops[v].name), []).append(v)
    return groups


def _not_after(n: int, local_edges: list[tuple[int, int]]) -> np.ndarray:
    """[t, u]: op u (later on the stage) does not depend on op t, so it may run before t."""
    reach = np.zeros((n, n), dtype=bool)   # [t, u]: u depends on t (a path t -> u on the stage)
    children: list[list[int]] = [[] for _ in range(n)]
    for a, b in local_edges:
        children[a].append(b)
    for t in range(n - 1, -1, -1):
        for c in children[t]:
            reach[t, c] = True
            reach[t] |= reach[c]
    later = np.triu(np.ones((n, n), dtype=bool), 1)
    return later & ~reach


def training_stage_memory(problem, plan, k: int, qs: Sequence[int], again: np.ndarray,
                          saved: tuple | None = None, remat: np.ndarray | None = None) -> StageMemory:
    """Per-rank stash and transient bytes of training stage ``k`` under ``plan`` at the
    per-op precision indices ``qs`` (one replica's): the rules above, with received copies
    on the reader's stage (1/t of the tensor) and the producer's copy kept only for
    readers on its own stage. The simulator (``sim.taskgraph``) allocates these buffers.
    ``saved`` (``saved_elems``) and ``remat`` (``remat_per_op_bytes`` at the stage's tp,
    sequence parallelism and ``qs``) are computed here when not given (callers that ask
    for several stages of one plan pass them)."""
    saved, own, extra, mask = saved if saved is not None else saved_elems(problem.graph, again)
    st = plan.stages[k]
    tp, sp = st.tensor_parallel, st.sequence_parallel
    bpe = problem.bytes_per_elem
    q = np.asarray(qs, dtype=np.int64)
    stage = np.asarray(plan.op_stage, dtype=np.int64)
    ops = np.flatnonzero(stage == k)
    share = {int(v): _share(problem, int(v), tp, sp) for v in ops}
    edges = problem.edges.tolist()
    elems = problem.edge_elems
    stash = 0.0
    for v in ops:
        stash += (extra[v] * bpe[q[v]] + mask[v] * MASK_BYTES_PER_ELEM) * share[int(v)]
    # per op on the stage: its output bytes not kept (freed in the forward) and its readers
    out_b = {int(v): problem.graph.ops[v].out_elems * bpe[q[v]] * share[int(v)] for v in ops}
    local = np.array([stage[u] == k and stage[w] == k for u, w in edges], dtype=bool)
    kept_el = kept_output_elems(problem.graph, own, saved, local)
    kept_out = {int(v): kept_el[v] * bpe[q[v]] * share[int(v)] for v in ops}
    stash += sum(kept_out.values())
    order = [int(v) for v in ops]
    pos = {v: i for i, v in enumerate(order)}
    n = len(order)
    last_local = np.arange(n)
    own_kept = np.array([kept_out[v] + (extra[v] * bpe[q[v]] + mask[v] * MASK_BYTES_PER_ELEM) * share[v]
                         for v in order])   # freed by the op's own backward
    recv_kept = np.zeros(n)                  # received copies, freed by their reader's backward
    grads = np.zeros(n + 1)                  # gradient buffers alive from the reader's backward to the producer's
    boundary = 0.0       # received copies nobody keeps and relays: per microbatch in flight
    sending = 0.0        # tensors sent on and gradients sent back or received for them
    out_s = back_s = 0.0   # their link time per microbatch, forward and back
    sends = set()
    received = relayed = grad_in = grad_out = 0.0
    unkept_to = np.zeros(n)    # [t]: received copies nobody keeps whose reader is op t
    grad_in_at = np.zeros(n)   # [t]: gradients received for op t's sent output (freed by its backward)
    grad_out_at = np.zeros(n)  # [t]: gradients op t's backward sends back
    back_at_s = np.zeros(n)    # [t]: and their link time
    here = st.replica_group(0)[0]
    for e, (u, w) in enumerate(edges):
        su, sw = stage[u], stage[w]
        b = elems[e] * bpe[q[u]] / tp
        if sw == k and su == k:
            last_local[pos[u]] = max(last_local[pos[u]], pos[w])
            grads[pos[u]] += b
            grads[pos[w] + 1] -= b
        elif sw == k and su < k:     # received (kept for the backward, or until read), its gradient sent back
            sending += b
            received += b
            grad_out += b
            grad_out_at[pos[w]] += b
            link_s = route_s(problem, here, plan.stages[k - 1].replica_group(0)[0], b)
            back_s += link_s
            back_at_s[pos[w]] += link_s
            if saved[e] > 0:
                stash += b
                recv_kept[pos[w]] += b
            else:
                boundary += b
                unkept_to[pos[w]] += b
        elif su == k and sw > k:     # sent, its gradient received
            sends.add(u)
            sending += b
            grad_in += b
            grad_in_at[pos[u]] += b
        elif su < k < sw:            # relayed through this stage, both ways in training
            boundary += 2 * b
            relayed += 2 * b
    rest = np.array([max(0.0, out_b[v] - kept_out[v]) for v in order])
    sending += float(sum(rest[pos[u]] for u in sends))
    if k + 1 < plan.n_stages:
        nxt = plan.stages[k + 1].replica_group(0)[0]
        out_s = sum(route_s(problem, here, nxt, elems[e] * bpe[q[u]] / tp)
                    for e, (u, w) in enumerate(edges) if stage[u] == k and stage[w] > k)
    kind = int(problem.device_kind[here])
    f_s = sum(float(problem.fwd_time_s[v, q[v], kind]) for v in order) / tp
    b_s = sum(float(problem.bwd_time_s[v, q[v], kind]) for v in order) / tp
    # a send waits on its link only behind this stage's earlier sends when the link
    # carries a microbatch's tensors faster than the stage computes one (no reduction
    # overlapped with the pipeline shares it): then at most two are alive at once
    keeps_up = not plan.overlap_grad_reduce and out_s <= f_s and back_s <= b_s
    i = np.arange(n)
    alive = (i[None, :] < i[:, None]) & (last_local[None, :] >= i[:, None])     # [t, u]: u's rest alive while t runs
    live = rest + alive.astype(float) @ rest
    grads = np.cumsum(grads)[:n]
    if remat is None:
        remat = remat_per_op_bytes(problem, q, tp, sp, again)
    ws = np.zeros(n)
    for g in remat_groups(problem, order).values():
        lo, hi = pos[min(g)], pos[max(g)]
        ws[lo:hi + 1] += float(remat[g].sum())
    kept_to = np.cumsum(own_kept + recv_kept)        # [t]: kept by ops up to t
    # a device runs a stage's ready ops first: while op t waits on a collective or a received
    # input, a later op that does not depend on t may run (and keep its output) before it
    ahead = _not_after(n, [(pos[u], pos[w]) for u, w in edges if stage[u] == k and stage[w] == k])
    fwd_profile = (kept_to + recv_kept.sum() - np.cumsum(recv_kept) + live   # received copies may arrive early
                   + ahead.astype(float) @ (own_kept + rest))
    bwd_profile = kept_to + grads + ws
    single = float(max(fwd_profile.max(initial=0.0), bwd_profile.max(initial=0.0), stash))
    fwd, bwd = float(live.max(initial=0.0)), float((grads + ws).max(initial=0.0))
    # the microbatch's own boundary buffers: a sent output past its local readers until its
    # transfer ends, an unkept received copy until its reader ran; in the backward (ops in
    # reverse) a received gradient until its op's backward, a gradient sent back after it
    sent_rest = float(sum(rest[pos[u]] for u in sends))
    gone = np.zeros(n)
    for u in sends:
        t = int(last_local[pos[u]]) + 1
        if t < n:
            gone[t] += rest[pos[u]]
    fwd_own = fwd_profile + np.cumsum(gone) + (unkept_to.sum() - np.cumsum(unkept_to) + unkept_to)
    # a gradient sent back is gone once its link's queue has drained (sent_back_alive): the
    # link carries the device's gradients back only, each backward's in at most its compute
    # time, so at most the longest backward's worth waits when a backward starts
    queued_s, back_ok = back_s, not plan.overlap_grad_reduce and back_s <= b_s
    if back_ok and plan.schedule == "interleaved":   # the rank's other chunks share the link
        pp = plan.n_stages // plan.virtual_stages
        times = [(back_s, b_s) if c == k else _back_times(problem, plan, c, q)
                 for c in range(k % pp, plan.n_stages, pp)]
        queued_s = max(t[0] for t in times)
        back_ok = all(t[0] <= t[1] for t in times)
    if back_ok:
        bwd_dur = np.array([float(problem.bwd_time_s[v, q[v], kind]) / tp for v in order])
        out_alive = sent_back_alive(n, [(pos[u], pos[w]) for u, w in edges if stage[u] == k and stage[w] == k],
                                    grad_out_at, back_at_s, bwd_dur, queued_s)
    else:
        out_alive = grad_out_at.sum() - np.cumsum(grad_out_at) + grad_out_at
    bwd_own = bwd_profile + np.cumsum(grad_in_at) + out_alive
    first_back = min((pos[w] for u, w in edges if stage[w] == k and stage[u] < k), default=0)
    flow = Flow(received, relayed, sent_rest, grad_in, grad_out, float(max(fwd_own.max(initial=0.0), stash)),
                float(max(bwd_own.max(initial=0.0), stash)), bool(n) and order[-1] in sends,
                float(bwd_own[:first_back].max(initial=0.0)), float(out_s), float(back_s), float(f_s), float(b_s))
    return StageMemory(stash, single, fwd, bwd, boundary, sending, keeps_up, flow)


def _back_times(problem, plan, k: int, q: np.ndarray) -> tuple[float, float]:
    """(link time of the gradients stage ``k`` sends back per microbatch, its backward
    compute per microbatch), per rank, at the per-op precision indices ``q``."""
    st = plan.stages[k]
    tp, stage, bpe = st.tensor_parallel, plan.op_stage, problem.bytes_per_elem
    here = st.replica_group(0)[0]
    back = sum(route_s(problem, here, plan.stages[k - 1].replica_group(0)[0], problem.edge_elems[e] * bpe[q[u]] / tp)
               for e, (u, w) in enumerate(problem.edges.tolist()) if stage[w] == k and stage[u] < k)
    kind = int(problem.device_kind[here])
    return float(back), sum(float(problem.bwd_time_s[v, q[v], kind]) for v in range(problem.n_ops) if stage[v] == k) / tp


def sent_back_alive(n: int, local_edges: list[tuple[int, int]], grad_out_at: np.ndarray, link_at_s: np.ndarray,
                    bwd_s: np.ndarray, queued_s: float) -> np.ndarray:
    """[t]: bytes of gradients sent back that are alive while op t's backward runs (ops in
    stage order 0..n-1, backwards in reverse). Op i's gradient back (``link_at_s[i]`` on the
    link) is alive from its own backward on until its transfer ends: at most the link's
    queue later, which is what is left of ``queued_s`` (the earlier microbatches' sends)
    after the backwards that must run before i, plus this backward's sends from i and
    from every op that may run its backward before i (all but i's ancestors). An op t
    upstream of i starts its backward only after every backward on a path from t to i
    (``bwd_s`` each), so where that path is as long, it is gone."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, w in local_edges:
        succ[u].append(w)
    to_end = np.zeros(n)   # the longest chain of backwards from the backward's start to op i's end
    for i in range(n - 1, -1, -1):
        to_end[i] = bwd_s[i] + max((to_end[w] for w in succ[i]), default=0.0)
    alive = np.zeros(n)
    for i in np.flatnonzero(grad_out_at > 0):
        dist = np.full(n, -1.0)   # longest path of backwards strictly between t and i; -1: no path
        dist[i] = 0.0
        for t in range(i - 1, -1, -1):
            dist[t] = max((dist[w] + (bwd_s[w] if w != i else 0.0) for w in succ[t] if w <= i and dist[w] >= 0),
                          default=-1.0)
        # ahead of i's send on the link: what is left of the earlier queue, and the sends of
        # every op that may run its backward first (all but i's ancestors)
        window = max(0.0, queued_s - to_end[i]) + float(link_at_s[dist < 0].sum()) + float(link_at_s[i])
        gone = (dist >= window) & (np.arange(n) < i)
        alive[: i + 1] += np.where(gone[: i + 1], 0.0, grad_out_at[i])
    return alive


def follows_1f1b_phases(problem, plan) -> bool:
    """Whether ``StageMemory.peak_1f1b_bytes`` holds for ``plan``: the simulator's plain
    1F1B order on single-task devices, one stage per device, equal replicas (round-robin)
    and tp on every stage, stages contiguous in op order, and every tensor either local or
    sent to the next stage (no relays, so each boundary buffer waits on one neighbour)."""
    if plan.schedule != "1f1b" or getattr(plan, "virtual_stages", 1) != 1 or not plan.stages:
        return False
    st0 = plan.stages[0]
    if any(s.replicas != st0.replicas or s.tensor_parallel != st0.tensor_parallel or not s.even()
           for s in plan.stages):
        return False
    devs = [d for s in plan.stages for d in s.devices]
    if len(devs) != len(set(devs)):
        return False
    if any(int(problem.topology.kind_of(d).concurrency) != 1 for d in devs):
        return False
    stage = np.asarray(plan.op_stage, dtype=np.int64)
    if (stage < 0).any() or (np.diff(stage) < 0).any():
        return False
    if len(problem.edges):
        gap = stage[problem.edges[:, 1]] - stage[problem.edges[:, 0]]
        if ((gap != 0) & (gap != 1)).any():
            return False
    return True
