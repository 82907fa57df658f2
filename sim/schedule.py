"""Schedule policy: the static order in which each server runs the task graph's nodes.

Node (t, m) of type t and microbatch m belongs to round ``m + o[t]``; each static server
runs its nodes sorted by ``(block, round, creation rank)``. ``deep`` offsets (inference,
and training in ideal mode) make every dependency between two servers advance the round,
so the steady-state period equals the busiest server's load (the MILP's period);
``1f1b`` offsets stage k's backwards by (K-1-k) x r_k (at most K-k microbatches in
flight); ``gpipe`` runs every forward before any backward; ``explicit`` follows
``plan.device_order``; ``interleaved`` runs ``core.schedules.interleaved_order``.
``stream_flow_control`` bounds each output's buffers and, in realistic runs, each
stage's queue of received tensors.

Rules: docs/concepts/simulator.md, "Schedules: the static order".
"""
from __future__ import annotations

import numpy as np

from distplan.core.errors import InternalError
from distplan.core.plan import Plan
from distplan.core.schedules import interleaved_order
from distplan.sim.taskgraph import K_B, K_CAST_B, K_CAST_F, K_F, Program


def repeats(schedule: str) -> bool:
    """Whether the static order repeats round after round for any number of microbatches
    (so a longer run reaches the steady state): not for 'gpipe' (every forward first) nor
    'explicit' (the plan's own order covers its microbatches only)."""
    return schedule not in ("gpipe", "explicit", "interleaved")


def assign_schedule(prog: Program, plan: Plan, ideal: bool) -> None:
    """Fill ``prog.offset`` (rounds) and, for ``stream``, ``prog.backpressure``."""
    if plan.schedule == "interleaved":   # the order is interleaved_positions', not rounds
        prog.offset = [0] * prog.T
    elif prog.training and prog.schedule == "1f1b" and not ideal:
        prog.offset = window_1f1b(prog, plan)
    else:
        o = deep_rounds(prog)
        if prog.schedule == "stream":
            same_round_per_device(prog, plan, o)
        prog.offset = o
    if plan.schedule == "stream":
        prog.backpressure = stream_backpressure(prog, plan) + ([] if ideal else stream_flow_control(prog, plan))


def window_1f1b(prog: Program, plan: Plan) -> list[int]:
    """Standard 1F1B per replica: forward offset 0, backward of stage k offset
    o_k = min((K-1-k) x r_k, o_{k-1}). Rounds count global microbatches and a replica of
    a stage with r_k replicas sees every r_k-th one, so (K-1-k) x r_k keeps K-1-k warm-up
    forwards (K-k microbatches in flight) on each replica, not across all of them; the
    running minimum keeps the offsets non-increasing along the pipeline (a later stage's
    backward never comes after an earlier one's in round order, which would deadlock)
    when stages have different replica counts. With uneven ``shares`` a replica sees a
    microbatch every ``cycle / its share`` rounds on average; r_k is then the longest such
    gap (``Stage.rounds_per_microbatch``), plus one round so that a forward due in the same
    round as a backward runs first (with round-robin the tie goes to the forward by
    creation order; with a pattern of uneven shares it would go to the older
    microbatch's backward): every replica keeps at least K-1-k warm-up forwards, those
    with larger shares a few more. The offsets are ``Plan.window_offsets``."""
    off = plan.window_offsets()
    o = [0] * prog.T
    for t in range(prog.T):
        if prog.phase[t] == 1:
            o[t] = off[plan.op_stage[prog.op[t]]]
    return o


def _next_on_replica(st, p: int, depth: int) -> int:
    """How many microbatches after microbatch ``p`` the ``depth``-th next one on the same
    replica of stage ``st`` comes (depth x replicas with round-robin)."""
    if st.even():
        return depth * st.replicas
    i, m, seen = st.replica_of(p), p, 0
    while seen < depth:
        m += 1
        seen += st.replica_of(m) == i
    return m - p


def deep_rounds(prog: Program) -> list[int]:
    """Longest-path rounds (a server change costs one round), device tasks delayed as late
    as their successors allow, link hops right after their producer."""
    T, D = prog.T, prog.D
    server, preds = prog.server, prog.preds
    o = [0] * T
    for t in range(T):
        s = server[t]
        best = 0
        for u in preds[t]:
            x = o[u] + (server[u] != s)
            if x > best:
                best = x
        o[t] = best
    succs: list[list[int]] = [[] for _ in range(T)]
    for t in range(T):
        for u in preds[t]:
            succs[u].append(t)
    lb = [0] * T  # latest round allowed (links), from successors
    for t in reversed(range(T)):
        s = server[t]
        bound = None
        for w in succs[t]:
            x = (lb[w] if server[w] >= D else o[w]) - (server[w] != s)
            if bound is None or x < bound:
                bound = x
        if s >= D:
            lb[t] = bound if bound is not None else o[t]
        elif bound is not None and bound > o[t]:
            o[t] = bound
    for t in range(T):  # link hops right after their producer
        if server[t] >= D:
            o[t] = max((o[u] + (server[u] != server[t]) for u in preds[t]), default=0)
    return o


def same_round_per_device(prog: Program, plan: Plan, o: list[int]) -> None:
    """Stream: a device runs all of one microbatch's tasks of a stage in one round (the
    latest any of them needs), so an output read on its own stage is consumed before the
    next microbatch's start there -- what costs.evaluate.plan_memory_bytes assumes. Devices of
    tensor-parallel stages keep per-task rounds (their all-reduces go back and forth).
    Rounds only grow, and every dependency stays satisfied (a fixpoint over the
    stages, which only send forward)."""
    server, preds, D = prog.server, prog.preds, prog.D
    tp = {d for st in plan.stages if st.tensor_parallel > 1 for d in st.devices}
    groups: dict[tuple[int, int, int], list[int]] = {}
    for t in range(prog.T):
        if server[t] < D and server[t] not in tp:
            groups.setdefault((server[t], prog.pat[t], plan.op_stage[prog.op[t]]), []).append(t)
    for _ in range(len(plan.stages) + 2):
        changed = False
        for t in range(prog.T):   # node ids are a topological order
            need = max((o[u] + (server[u] != server[t]) for u in preds[t]), default=0)
            if need > o[t]:
                o[t], changed = need, True
        for ts in groups.values():
            top = max(o[t] for t in ts)
            for t in ts:
                if o[t] < top:
                    o[t], changed = top, True
        if not changed:
            return
    raise InternalError("stream rounds did not settle")   # stages only send forward


def stream_backpressure(prog: Program, plan: Plan) -> list[tuple[int, int, int, int]]:
    """Stream: bounded output buffers. Op v's task for microbatch m + depth waits until
    the output of microbatch m has left its device (first link hop served) and been
    consumed locally. depth = 2 (double buffering) unless a consumer or the first hop
    runs r >= 2 rounds after the producer in the static order (an all-reduce or a
    round trip in between), then r + 1, so the static order can never deadlock.
    Buffers belong to a device: on a stage with R replicas, microbatch m's buffer gates
    microbatch m + depth x R, the depth-th next one on the same replica (lanes stay
    independent; with uneven shares, counted along the replica's own microbatches).
    Returns (release type, target type, unit shift, depth) per gate."""
    C, o = prog.C, prog.offset
    out = []
    for (p, v, j), (f, rel) in prog.outputs.items():
        depth = _next_on_replica(plan.stages[plan.op_stage[v]], p, max([2] + [o[r] - o[f] + 1 for r in rel]))
        target = prog.outputs[((p + depth) % C, v, j)][0]
        shift = (p + depth) // C
        for r in rel:
            out.append((r, target, shift, depth))
    return out


def stream_flow_control(prog: Program, plan: Plan) -> list[tuple[int, int, int, int]]:
    """Stream, realistic runs: bounded receive queues (credit-based flow control).

    Every hop of a received or relayed tensor waits, for microbatch m + depth, until the
    node that frees microbatch m's copy at its far end has finished: depth 1 (the one
    copy ``costs.memory.stream_activation_bytes`` charges), or 2 where depth 1 would slow
    the plan below its busiest server. Built only where it cannot deadlock (no
    tensor-parallel stage, every device in microbatch order); ideal runs do not use it.
    The rule and why: docs/concepts/simulator.md, "Stream flow control". Returns gates
    as ``stream_backpressure``."""
    if any(st.tensor_parallel > 1 for st in plan.stages) or not prog.inputs:
        return []
    rounds: dict[int, int] = {}
    for t in range(prog.T):
        s = prog.server[t]
        if s < prog.D and rounds.setdefault(s, prog.offset[t]) != prog.offset[t]:
            return []
    C, dur, server = prog.C, prog.dur, prog.server
    load = [0.0] * (prog.D + prog.L)
    for t in range(prog.T):
        load[server[t]] += dur[t] / C
    period = max(load)
    # relays: a tensor crossing several stages is stored on each device between (relay
    # buffers: allocated at a link node's arrival, freed by the next hop's first link)
    relay_of = {b.alloc: b.frees[0] for b in prog.buffers
                if b.at_arrival and len(b.frees) == 1 and server[b.alloc] >= prog.D and server[b.frees[0]] >= prog.D}
    out = []
    for (p, e, j), (first, last, release) in prog.inputs.items():
        hops = _segments(first, last, release, relay_of)
        g = _hop_gates(prog, plan, load, period, p, e, j, hops) if len(hops) > 1 else None
        out += g if g is not None else _hop_gates(prog, plan, load, period, p, e, j, [(first, last, release)])
    return out


def _hop_gates(prog: Program, plan: Plan, load: list[float], period: float, p: int, e: int, j: int,
               hops: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]] | None:
    """One gate per hop of tensor ``e``'s copy for pattern ``p`` (``_segments``): the hop's
    first link for the next microbatch on the consumer's replica waits for the node that
    frees this microbatch's copy at the hop's far end; depth 1, or 2 where that cycle is
    longer than the period. None when the next copy relays through other devices (then
    hop i of one copy is not hop i of the other)."""
    C, dur, server, lat = prog.C, prog.dur, prog.server, prog.server_latency
    first, last, release = hops[0][0], hops[-1][1], hops[-1][2]
    st = plan.stages[plan.op_stage[prog.op[release]]]
    got = []
    for a, b, free in hops:
        cycle = sum(load[server[t]] + lat[server[t]] for t in range(a, b + 1)) + dur[free]
        depth = _next_on_replica(st, p, 1 if cycle <= period * (1 + 1e-9) else 2)
        nxt = prog.inputs.get(((p + depth) % C, e, j))
        if nxt is None:
            continue
        if len(hops) > 1 and not _same_route(prog, first, last, nxt[0], nxt[1]):
            return None
        got.append((free, nxt[0] + a - first, (p + depth) // C, depth))
    return got


def _same_route(prog: Program, first: int, last: int, first2: int, last2: int) -> bool:
    """Whether two copies of a tensor take the same links (so hop i of one is hop i of the other)."""
    return last - first == last2 - first2 and all(prog.server[first + i] == prog.server[first2 + i]
                                                  for i in range(last - first + 1))


def _segments(first: int, last: int, release: int, relay_of: dict[int, int]) -> list[tuple[int, int, int]]:
    """The hops of one tensor's link nodes ``first..last`` (consecutive node types), one
    per device it is stored on: (first link, last link, the node whose end frees the
    copy at the hop's far end: the next hop's first link at a relay, ``release`` at the
    consumer)."""
    out, a = [], first
    for t in range(first, last):
        nxt = relay_of.get(t)
        if nxt is not None and nxt == t + 1:
            out.append((a, t, nxt))
            a = nxt
    out.append((a, last, release))
    return out


def server_sequences(prog: Program, plan: Plan, t_arr: np.ndarray, micro: np.ndarray,
                     valid: np.ndarray) -> list[list[int]]:
    """Per server, the pipeline node ids (``unit * T + type``; ``t_arr``, ``micro`` and
    ``valid`` per node id) it runs in its static order: devices by ``(block, R, rank)``,
    or ``plan.device_order`` for ``explicit``; links too when they are static."""
    D, T = prog.D, prog.T
    ns = D + prog.L
    seqs: list[list[int]] = [[] for _ in range(ns)]
    srv_t = np.asarray(prog.server, dtype=np.int64)
    s_arr = srv_t[t_arr]
    if plan.schedule == "explicit":
        _explicit_device_seqs(prog, plan, seqs, T)
        static_mask = valid & (s_arr >= D) if prog.static_links else np.zeros_like(valid)
    elif plan.schedule == "interleaved":
        idx = np.nonzero(valid & (s_arr < D))[0]
        tt = t_arr[idx]
        key = interleaved_positions(prog, plan, tt, micro[idx])
        _fill_by_server(seqs, idx[np.lexsort((tt, key, s_arr[idx]))], s_arr)
        return seqs
    else:
        static_mask = valid & ((s_arr < D) | prog.static_links)
    if static_mask.any():
        off = np.asarray(prog.offset, dtype=np.int64)
        block = np.asarray(prog.phase, dtype=np.int64) if prog.schedule == "gpipe" else np.zeros(T, np.int64)
        idx = np.nonzero(static_mask)[0]
        tt = t_arr[idx]
        R = micro[idx] + off[tt]
        _fill_by_server(seqs, idx[np.lexsort((tt, R, block[tt], s_arr[idx]))], s_arr)
    return seqs


def _fill_by_server(seqs: list[list[int]], idx: np.ndarray, s_arr: np.ndarray) -> None:
    """Set ``seqs[s]`` to the node ids of ``idx`` (sorted by server first) that server s runs."""
    counts = np.bincount(s_arr[idx], minlength=len(seqs))
    bounds = np.concatenate(([0], np.cumsum(counts)))
    ids = idx.tolist()
    for s in np.nonzero(counts)[0].tolist():
        seqs[s] = ids[bounds[s]:bounds[s + 1]]


def interleaved_positions(prog: Program, plan: Plan, types: np.ndarray, micro: np.ndarray) -> np.ndarray:
    """Each device node's place in its device's ``interleaved_order``: node type t of
    microbatch m belongs to chunk c = the stage of its op (pipeline rank c mod pp,
    virtual chunk c // pp), phase ``prog.phase[t]`` (casts go with their op's block),
    and the replica's (m // r)-th microbatch (round-robin, every chunk r replicas)."""
    pp, vp = plan.pipeline_ranks, plan.virtual_stages
    r = plan.stages[0].replicas
    n = plan.microbatches // r
    pos = np.zeros((pp, 2, vp, n), dtype=np.int64)
    for rank in range(pp):
        for i, (ph, j, l) in enumerate(interleaved_order(pp, vp, rank, n)):
            pos[rank, ph, j, l] = i
    chunk = np.asarray(plan.op_stage, dtype=np.int64)[np.asarray(prog.op, dtype=np.int64)]
    phase = np.asarray(prog.phase, dtype=np.int64)
    c = chunk[types]
    return pos[c % pp, phase[types], c // pp, np.minimum(micro // r, n - 1)]


def _explicit_device_seqs(prog: Program, plan: Plan, seqs: list[list[int]], T: int) -> None:
    """Each device's ``(microbatch, op, 'F' | 'B')`` list as node ids (a task's casts with it)."""
    groups: dict[tuple[int, int, str, int], list[int]] = {}
    for t in range(T):
        k = prog.kind[t]
        if k in (K_F, K_CAST_F):
            ph = "F"
        elif k in (K_B, K_CAST_B):
            ph = "B"
        else:
            continue
        groups.setdefault((prog.pat[t], prog.op[t], ph, prog.server[t]), []).append(t)
    C = prog.C
    for dev, seq in (plan.device_order or {}).items():
        out = seqs[dev]
        for m, v, ph in seq:
            base = (m // C) * T
            for t in groups.get((m % C, v, ph, dev), ()):
                out.append(base + t)
