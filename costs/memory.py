"""Memory an operator needs on its device, per precision.

Static bytes stay for the whole run: parameters at the operator's precision; in
training also their gradients (same precision) and Adam state kept in fp32 (master
weights, first and second moments: 12 bytes per parameter). Activation bytes are per
microbatch (the operator's outputs at its precision; for a fused/coarse operator every
intermediate it writes); a schedule keeps several microbatches in flight
(``inflight_microbatches``).

How many copies a stage holds (``activation_factors``): training stashes every output
for the backward pass, so each op holds ``n`` microbatches' activations. An inference
stream frees an output once its consumers on the stage have run; only tensors a later
stage reads stay buffered until sent, so an op holds ``n - 1`` more copies of its *sent*
bytes when some consumer sits on a later stage. The sent bytes (``send_elems``) are at
most the output: for a fused operator only the tensors that leave it.

Inference activations by liveness (``stream_activation_bytes``): a stage runs its
ops in topological (index) order, one microbatch after the other. While op t runs, the
own activations alive are t's whole output and the sent bytes of every earlier op u of
the stage that is still wanted: read by an op at index >= t (``last_reader[u] >= t``,
wherever that reader sits) or by a later stage (held until sent); the previous
microbatches' ops are done but for what waits to be sent. The stream keeps at most two
outputs of an op per device, so an op read by a later stage has at most one older copy
waiting when it is already allocated (index <= t) and two when it is not (index > t), at
most ``M - 1`` in all. The stage's activation bytes are the peak over t of

    live(t) + n1 x S + n2 x (sent bytes of its ops after t read by a later stage),

S the sent bytes of its ops read by a later stage, n1 = min(1, M - 1) (the
``activation_factors`` extra copies) and n2 = min(2, M - 1) - n1. This is what the
simulator holds (``sim.memory``: an op's output from its start, the part no other op
reads until it ends, the rest until its last local reader has finished and its first hop
is served), so it bounds the simulated peak; it never exceeds the sum of every output
plus n1 x S (what this module charged before: at each t, the ops after t count at most
once more than in that sum, the ones before t that are dead not at all). Readers count
over every tensor, zero-byte ones too (such a reader still keeps the producer's buffer).

A stage also holds what it receives or relays for one microbatch (``edge_bytes`` of the
tensors that cross into it, at the producer's precision): the next microbatch's inputs
arrive while the current one runs. This is beyond the simulator's *own* peak (its
``peak_memory_bytes`` counts such buffers in flight). The realistic simulation's flow
control (``sim.schedule.stream_flow_control``) holds a stage to one received copy of
each tensor, so a stage slower than its predecessor no longer queues microbatch after
microbatch of inputs; where the transfer cannot hide behind the stage's other ops (the
consumer op alone is most of the period) it keeps two, one beyond this charge, rather
than slow the plan down (plans the realistic simulation finds over memory are dropped).
Without the charge a plan packed to the byte by its own activations overflowed with the
first input in flight.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from distplan.core.precision import precision
from distplan.core.schedules import PLAN_SCHEDULES
from distplan.workloads.graph import graph_send_elems, send_elems  # noqa: F401  (re-exported)

OPTIMIZER_BYTES_PER_PARAM = 12


def static_bytes(param_elems: int, prec: str, training: bool) -> float:
    b = precision(prec).bytes_per_elem
    if training:
        return float(param_elems) * (2 * b + OPTIMIZER_BYTES_PER_PARAM)
    return float(param_elems) * b


def activation_bytes(out_elems: int, prec: str) -> float:
    return float(out_elems) * precision(prec).bytes_per_elem


def activation_factors(schedule: str, stage: int, n_stages: int, microbatches: int) -> tuple[int, int]:
    """(copies of every activation, extra copies of the sent bytes of an op with a consumer
    on a later stage) that stage ``stage`` holds; see the module docstring."""
    n = inflight_microbatches(schedule, stage, n_stages, microbatches)
    if schedule == "stream":
        return 1, n - 1
    return n, 0


def inflight_microbatches(schedule: str, stage: int, n_stages: int, microbatches: int) -> int:
    """Microbatches whose activations a stage may hold at once (an upper bound).

    stream (inference): 2 (double buffering); gpipe: all M; 1f1b: min(M, S - stage).
    """
    if schedule == "stream":
        return min(2, microbatches)
    if schedule == "1f1b":
        return min(microbatches, n_stages - stage)
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
    i = np.arange(len(o))
    alive = (i[None, :] < i[:, None]) & ((last[o][None, :] >= o[:, None]) | leaves[o][None, :])   # [t, u]
    n1, n2 = stream_copies(microbatches)
    held = np.where(leaves[o], send_o, 0.0)
    later = np.concatenate([np.cumsum(held[::-1])[::-1][1:], [0.0]])   # [t] = sent bytes of ops after t
    return float((act_o + alive @ send_o + n2 * later).max() + n1 * held.sum())


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
