"""Execution of a :class:`sim.taskgraph.Program`: its node-level network (``expand``:
the pattern's node types tiled over the microbatches, the collectives after them, every
server's static order) run on the replay kernel (``costs.replay``, which the analytic
iteration runs on too).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from distplan.core.errors import DistplanError, InternalError
from distplan.costs.replay import Run, Servers, replay
from distplan.sim.schedule import server_sequences
from distplan.sim.taskgraph import KIND_NAMES, Program


#: the instant (``time.perf_counter`` seconds) past which a replay raises ``TimeUp``
_STOP_AT: ContextVar[float] = ContextVar("distplan_sim_stop_at", default=math.inf)


@contextmanager
def stop_at(deadline_s: float) -> Iterator[None]:
    """Inside, every replay (``run``) raises ``core.errors.TimeUp`` once the clock passes
    ``deadline_s``: a caller with a time limit drops the simulation instead of outlasting it."""
    token = _STOP_AT.set(deadline_s)
    try:
        yield
    finally:
        _STOP_AT.reset(token)


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


def run(net: Net, prog: Program, link_model: str) -> Run:
    """Execute every node on the replay kernel (``costs.replay``); deterministic. Raises
    DistplanError on a deadlocked order."""
    D = prog.D
    servers = Servers(D, prog.server_latency, prog.concurrency, [0.0] * D + list(prog.link_bw), prog.static_links)
    r = replay(net, servers, link_model, deadline_s=_STOP_AT.get())
    if r.ran != net.n_valid:
        _deadlock(net, prog, r.waiting, r.ran)
    return r


def _deadlock(net: Net, prog: Program, waiting, done: int) -> None:
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
