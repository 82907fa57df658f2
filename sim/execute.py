"""Execution of a :class:`sim.taskgraph.Program`: node-level arrays and the event loop.

Static servers (devices; links too in ideal mode) run their fixed sequence: a node
starts at max(server free, all inputs delivered). That is pure dataflow, so it is
computed as soon as every input time is known, without events. Links whose order
depends on time (``fifo`` arrival order, ``fair`` sharing, ``free``) take their nodes
from one heap of ``(time, priority, sequence, node)`` (``sequence`` an increasing
counter: ties at one time and priority go in the order pushed, identically on every
run); the heap is popped only when no static work is computable, so every pushed time
is >= the last popped one and arrivals are served in true time order.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from distplan.core.errors import DistplanError, InternalError
from distplan.sim.schedule import server_sequences
from distplan.sim.taskgraph import KIND_NAMES, Program

#: a transfer on a link finishes (processor-sharing links): frees bandwidth before arrivals
PRIO_DONE = 0
#: a transfer arrives at a link (or a contention-free link) and asks for service
PRIO_ARRIVE = 1


@dataclass
class Net:
    """Node-level form of a program: node id = unit * T + type; extras after U * T."""

    T: int
    U: int
    units: int  # real units (microbatches 0..M-1 live in them)
    N0: int
    N: int
    succ: list
    pending: list
    dur: list
    server: list
    seqs: list
    n_valid: int
    valid: np.ndarray  # (N0,) bool: node exists (microbatch < M)
    micro: np.ndarray  # (N0,) microbatch of each pipeline node


def expand(prog: Program, plan) -> Net:
    T, C, M = prog.T, prog.C, prog.M
    units = -(-M // C)
    pad = max((b[2] for b in prog.backpressure), default=0)
    U = units + pad
    N0 = U * T
    # An edge between two nodes of one single-slot static server is implied by the
    # server's order when that order is the schedule's (key-sorted, consistent with every
    # dependency): drop it. Explicit orders keep every edge (the user may misorder).
    if plan.schedule == "explicit":
        implied = [False] * (prog.D + prog.L)
    else:
        implied = [(s < prog.D or prog.static_links) and prog.concurrency[s] == 1 for s in range(prog.D + prog.L)]
    srv_of = prog.server
    succ_t: list[list[int]] = [[] for _ in range(T)]
    pend_t = [0] * T
    for t, ps in enumerate(prog.preds):
        for u in ps:
            if srv_of[u] == srv_of[t] and implied[srv_of[t]]:
                continue
            succ_t[u].append(t - u)
            pend_t[t] += 1
    bp_into: dict[tuple[int, int], int] = {}
    for r, target, shift, depth in prog.backpressure:
        if srv_of[r] == srv_of[target] and implied[srv_of[r]]:
            continue
        succ_t[r].append(shift * T + target - r)
        pend_t[target] += 1
        bp_into[(target, depth)] = bp_into.get((target, depth), 0) + 1
    deltas = [tuple(x) for x in succ_t]
    succ = deltas * U
    pending = pend_t * U
    if bp_into:
        for (target, depth), cnt in bp_into.items():
            p = prog.pat[target]
            for u in range(U):
                if u * C + p < depth:
                    pending[u * T + target] -= cnt
                else:
                    break
    dur = prog.dur * U
    server = prog.server * U
    t_arr = np.tile(np.arange(T), U)
    u_arr = np.repeat(np.arange(U), T)
    pat = np.asarray(prog.pat, dtype=np.int64)
    micro = u_arr * C + pat[t_arr]
    valid = micro < M
    valid[units * T:] = False
    D = prog.D
    seqs = server_sequences(prog, plan, t_arr, micro, valid)
    # collectives appended after the pipeline
    X = len(prog.x_server)
    if X:
        x_succ: list[list[int]] = [[] for _ in range(X)]
        for i, ps in enumerate(prog.x_preds):
            for a in ps:
                x_succ[a].append(i - a)
        succ.extend(tuple(x) for x in x_succ)
        pending.extend(len(ps) for ps in prog.x_preds)
        dur.extend(prog.x_dur)
        server.extend(prog.x_server)
        placed: dict[int, list[tuple[int, int]]] = {}   # device -> (pipeline node, x node) to place after it
        for i in range(X):
            s = prog.x_server[i]
            if i in prog.x_after:
                t_after, m = prog.x_after[i]
                placed.setdefault(s, []).append(((m // C) * T + t_after, N0 + i))
            elif s < D or prog.static_links:
                seqs[s].append(N0 + i)
        for s, pairs in placed.items():   # overlapped gradient reduction: right after the backward
            pos = {nid: k for k, nid in enumerate(seqs[s])}
            for after, x in sorted(pairs, key=lambda ax: -pos[ax[0]]):
                seqs[s].insert(pos[after] + 1, x)
    n_valid = int(valid.sum()) + X
    return Net(T, U, units, N0, N0 + X, succ, pending, dur, server, seqs, n_valid, valid, micro)


@dataclass
class Run:
    beg: np.ndarray  # service start per node (-1: never ran)
    fin: np.ndarray  # when successors may use the node's output
    link_busy_s: np.ndarray | None  # only for 'fair' (time with >= 1 active transfer)


def run(net: Net, prog: Program, link_model: str) -> Run:
    """Execute every node; deterministic. Raises DistplanError on a deadlocked order."""
    D, L = prog.D, prog.L
    ns = D + L
    N = net.N
    succ, dur, srv = net.succ, net.dur, net.server
    pending = list(net.pending)
    ready = [0.0] * N
    beg = [-1.0] * N
    fin = [0.0] * N
    lat = prog.server_latency
    seqs = net.seqs
    pos = [0] * ns
    free = [0.0] * ns
    waiting = [-1] * ns
    dyn = [False] * D + [not prog.static_links] * L
    conc = prog.concurrency
    slots: dict[int, list[float]] = {s: [0.0] * conc[s] for s in range(ns) if conc[s] > 1}
    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    cnt = 0
    stack = [s for s in range(ns) if seqs[s]]
    stack.reverse()
    fair = link_model == "fair"
    free_links = link_model == "free"
    lfree = [0.0] * ns
    # processor sharing state (fair)
    if fair:
        f_active: list[dict] = [dict() for _ in range(ns)]
        f_V = [0.0] * ns
        f_t = [0.0] * ns
        f_next = [-1] * ns
        f_busy = [0.0] * ns
        f_bw = [0.0] * D + list(prog.link_bw)
    done_q: list[int] = []  # finished nodes (multi-slot servers, the heap) whose successors await them
    now = 0.0
    while True:
        while stack or done_q:
            if stack:
                s = stack.pop()
                seq = seqs[s]
                i = pos[s]
                n = len(seq)
                ls = lat[s]
                if s in slots:
                    sl = slots[s]
                    last_start = free[s]
                    while i < n:
                        j = seq[i]
                        if pending[j]:
                            waiting[s] = j
                            break
                        st = ready[j]
                        k0 = min(range(len(sl)), key=sl.__getitem__)
                        if st < sl[k0]:
                            st = sl[k0]
                        if st < last_start:
                            st = last_start
                        last_start = st
                        en = st + dur[j]
                        sl[k0] = en
                        beg[j] = st
                        fin[j] = en
                        i += 1
                        done_q.append(j)
                    pos[s] = i
                    free[s] = last_start
                    # propagate below through done_q
                else:
                    f = free[s]
                    while i < n:
                        j = seq[i]
                        if pending[j]:
                            waiting[s] = j
                            break
                        st = ready[j]
                        if st < f:
                            st = f
                        f = st + dur[j]
                        beg[j] = st
                        e = f + ls
                        fin[j] = e
                        i += 1
                        # the drain below, inlined for speed: successors learn of j at once
                        for d in succ[j]:
                            k = j + d
                            if ready[k] < e:
                                ready[k] = e
                            c = pending[k] - 1
                            pending[k] = c
                            if not c:
                                s2 = srv[k]
                                if waiting[s2] == k:
                                    waiting[s2] = -1
                                    stack.append(s2)
                                elif dyn[s2]:
                                    push(heap, (ready[k], PRIO_ARRIVE, cnt, k))
                                    cnt += 1
                    pos[s] = i
                    free[s] = f
            while done_q:
                j = done_q.pop()
                e = fin[j]
                for d in succ[j]:
                    k = j + d
                    if ready[k] < e:
                        ready[k] = e
                    c = pending[k] - 1
                    pending[k] = c
                    if not c:
                        s2 = srv[k]
                        if waiting[s2] == k:
                            waiting[s2] = -1
                            stack.append(s2)
                        elif dyn[s2]:
                            push(heap, (ready[k], PRIO_ARRIVE, cnt, k))
                            cnt += 1
        if not heap:
            break
        t, prio, sq, j = pop(heap)
        if t < now:
            raise InternalError(f"event at {t!r} popped after {now!r}: the event order is broken")
        now = t
        if not fair:
            s = srv[j]
            if free_links:
                st = t
            else:
                st = lfree[s]
                if st < t:
                    st = t
            f = st + dur[j]
            lfree[s] = f
            beg[j] = st
            fin[j] = f + lat[s]
            done_q.append(j)
        elif prio == PRIO_ARRIVE:
            s = srv[j]
            _fair_advance(s, t, f_active, f_V, f_t, f_busy, f_bw)
            f_active[s][j] = f_V[s] + dur[j] * f_bw[s]
            beg[j] = t
            cnt = _fair_schedule(s, t, heap, cnt, f_active, f_V, f_next, f_bw)
        else:
            s = -1 - j
            if f_next[s] != sq:
                continue
            _fair_advance(s, t, f_active, f_V, f_t, f_busy, f_bw)
            act = f_active[s]
            vmin = min(act.values())
            tol = 1e-12 * max(abs(vmin), 1.0)
            finished = sorted(k for k, tag in act.items() if tag <= vmin + tol)
            for k in finished:
                del act[k]
                fin[k] = t + lat[s]
                done_q.append(k)
            f_next[s] = -1
            cnt = _fair_schedule(s, t, heap, cnt, f_active, f_V, f_next, f_bw)
    beg_a = np.array(beg)
    done = int(np.count_nonzero(beg_a >= 0.0))
    if done != net.n_valid:
        _deadlock(net, prog, waiting, pending, done)
    busy = np.asarray(f_busy) if fair else None
    return Run(beg_a, np.array(fin), busy)


def _fair_advance(s, t, f_active, f_V, f_t, f_busy, f_bw) -> None:
    n = len(f_active[s])
    if n:
        f_V[s] += (t - f_t[s]) * f_bw[s] / n
        f_busy[s] += t - f_t[s]
    f_t[s] = t


def _fair_schedule(s, t, heap, cnt, f_active, f_V, f_next, f_bw) -> int:
    act = f_active[s]
    if not act:
        f_next[s] = -1
        return cnt
    vmin = min(act.values())
    bw = f_bw[s]
    when = t + (max(vmin - f_V[s], 0.0) * len(act) / bw if bw > 0 else 0.0)
    heapq.heappush(heap, (when, PRIO_DONE, cnt, -1 - s))
    f_next[s] = cnt
    return cnt + 1


def _deadlock(net: Net, prog: Program, waiting, pending, done: int) -> None:
    T, C = net.T, prog.C
    for s, j in enumerate(waiting):
        if j >= 0:
            what = _describe(net, prog, j)
            where = f"device {s}" if s < prog.D else f"link {s - prog.D}"
            raise DistplanError(
                f"the plan's order deadlocks: {where} waits for {what}, whose inputs never arrive "
                f"({done} of {net.n_valid} tasks ran); reorder device_order so every task comes after "
                "the tasks it depends on")
    raise InternalError(f"simulation stalled after {done} of {net.n_valid} tasks")


def _describe(net: Net, prog: Program, nid: int) -> str:
    if nid >= net.N0:
        return f"all-reduce step node {nid - net.N0}"
    t = nid % net.T
    m = (nid // net.T) * prog.C + prog.pat[t]
    return f"{KIND_NAMES[prog.kind[t]]} of op {prog.op[t]} for microbatch {m}"


__all__ = ["Net", "Run", "expand", "run"]
