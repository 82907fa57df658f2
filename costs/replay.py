"""The replay kernel: one dataflow / FIFO-link engine under the simulator (``sim.execute``)
and the analytic iteration (``costs.collectives.Transfers``, ``TaskNet``).

Nodes run on servers (devices ``0 .. n_devices-1``, then links): a node starts when its
server is free and every node it waits for has finished, is busy ``dur`` seconds, and
its successors may use it ``latency_s[server]`` later. Static servers run a fixed
sequence each (pure dataflow); time-ordered links (``fifo``, ``fair``, ``free``) take
nodes from one ``(time, priority, sequence, node)`` heap, popped only when no static
work is computable, so arrivals are served in true time order and ties go in push
order: deterministic. ``TaskNet`` builds a network from tasks and transfers (one node
per link of a route, store and forward).

Details: docs/concepts/simulator.md, "What a plan executes" (engine).
"""
from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Protocol

import numpy as np

from distplan.core.errors import InternalError, TimeUp

#: a transfer on a link finishes (processor-sharing links): frees bandwidth before arrivals
PRIO_DONE = 0
#: a transfer arrives at a link (or a contention-free link) and asks for service
PRIO_ARRIVE = 1
#: heap pops between two looks at the clock (``deadline_s``)
CLOCK_EVERY = 4096


class Network(Protocol):
    """What the kernel reads of a network (``sim.execute.Net``, ``TaskNet``)."""

    succ: list          # per node: its successors as offsets (successor id - node id)
    pending: list       # per node: how many nodes it waits for
    dur: list           # per node: seconds its server is busy with it
    server: list        # per node: its server
    seqs: list          # per server: its static order of nodes (empty: served from the heap)
    n_valid: int        # nodes that must run for the run to be complete


@dataclass(frozen=True)
class Servers:
    """The servers of a network: ``n_devices`` devices, then links; per server its
    delivery latency, its slots (a device running several nodes at once) and (links,
    for ``fair``) its bandwidth; ``static_links``: links run their ``seqs`` too."""

    n_devices: int
    latency_s: Sequence[float]
    concurrency: Sequence[int]
    bw_bytes_per_s: Sequence[float]
    static_links: bool = False


@dataclass
class Run:
    """A replay: per node its service start (-1: never ran) and when successors may use
    it; ``link_busy_s`` only for ``fair`` (time with >= 1 active transfer); per server the
    node it was left waiting for (-1: none); how many nodes ran."""

    beg: np.ndarray
    fin: np.ndarray
    link_busy_s: np.ndarray | None
    waiting: list[int]
    ran: int


def replay(net: Network, servers: Servers, link_model: str = "fifo", release_s: Sequence[float] | None = None,
           sources: Sequence[int] = (), deadline_s: float = math.inf) -> Run:
    """Execute every node it can; deterministic. ``release_s``: per node, the earliest
    time it may start (0 by default); ``sources``: heap-served nodes that wait for
    nothing, pushed first in that order. Past ``deadline_s`` (perf_counter seconds,
    looked at every ``CLOCK_EVERY`` pops) raises ``TimeUp``."""
    beg, fin, busy, waiting = _events(net, servers, link_model, release_s, sources, deadline_s)
    beg_a = np.array(beg)
    return Run(beg_a, np.array(fin), busy, waiting, int(np.count_nonzero(beg_a >= 0.0)))


def _events(net: Network, servers: Servers, link_model: str, release_s: Sequence[float] | None,
            sources: Sequence[int], deadline_s: float) -> tuple[list[float], list[float], np.ndarray | None, list[int]]:
    """``replay``'s event loop: (start per node, -1 if it never ran; when successors may
    use it; the fair links' busy time or None; per server the node it waits for)."""
    D = servers.n_devices
    ns = len(servers.latency_s)
    N = len(net.dur)
    succ, dur, srv = net.succ, net.dur, net.server
    pending = list(net.pending)
    ready = list(release_s) if release_s is not None else [0.0] * N
    beg = [-1.0] * N
    fin = [0.0] * N
    lat = servers.latency_s
    seqs = net.seqs
    pos = [0] * ns
    free = [0.0] * ns
    waiting = [-1] * ns
    dyn = [False] * D + [not servers.static_links] * (ns - D)
    conc = servers.concurrency
    slots: dict[int, list[float]] = {s: [0.0] * conc[s] for s in range(ns) if conc[s] > 1}
    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    cnt = 0
    for j in sources:
        push(heap, (ready[j], PRIO_ARRIVE, cnt, j))
        cnt += 1
    stack = [s for s in range(ns) if seqs[s]]
    stack.reverse()
    fair = link_model == "fair"
    free_links = link_model == "free"
    timed, pops = math.isfinite(deadline_s), 0
    lfree = [0.0] * ns
    # processor sharing state (fair)
    if fair:
        f_active: list[dict] = [dict() for _ in range(ns)]
        f_V = [0.0] * ns
        f_t = [0.0] * ns
        f_next = [-1] * ns
        f_busy = [0.0] * ns
        f_bw = [float(x) for x in servers.bw_bytes_per_s]
    done_q: list[int] = []  # finished nodes (multi-slot servers, the heap) whose successors await them
    now = 0.0
    while True:
        while stack or done_q:
            if timed:   # a static order can run most nodes without a heap pop
                pops += 1
                if pops % CLOCK_EVERY == 0 and time.perf_counter() > deadline_s:
                    raise TimeUp(f"{N:,} replay nodes not run by the deadline")
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
        if timed:
            pops += 1
            if pops % CLOCK_EVERY == 0 and time.perf_counter() > deadline_s:
                raise TimeUp(f"{N:,} replay nodes not run by the deadline")
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
            e = f + lat[s]
            fin[j] = e
            # the drain of done_q, inlined (the stack and done_q are empty here)
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
    return beg, fin, (np.asarray(f_busy) if fair else None), waiting


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


class TaskNet:
    """Items that wait for items, replayed by the kernel: tasks on devices (a device
    runs its tasks in the order they were added) and store-and-forward transfers over
    FIFO links (one node per link of the route: busy ``bytes / bandwidth``, delivered
    ``latency`` later; an empty route is delivered when released, an anchor other
    items wait for). A transfer starts at ``release_s`` once every item it waits for is
    done; an item's successors learn of it in the order they were made to wait for it.
    Items are recorded as given and become the kernel's nodes in ``run``."""

    def __init__(self, n_devices: int, link_bw_bytes_per_s: Sequence[float], link_latency_s: Sequence[float]):
        self.n_devices = D = int(n_devices)
        self.bw = [float(x) for x in link_bw_bytes_per_s]
        L = len(self.bw)
        self.anchor_server = D + L   # a link of no latency that never queues: empty routes
        self.servers = Servers(D, [0.0] * D + [float(x) for x in link_latency_s] + [0.0], [1] * (D + L + 1),
                               [0.0] * D + self.bw + [0.0])
        # per item: a device (a task) or a route (a transfer); seconds or bytes; release
        self._where: list[int | tuple[int, ...]] = []
        self._size: list[float] = []
        self._release: list[float] = []
        self._waits: list[tuple[int, int]] = []   # (item, the item it waits for), in the order made
        self._free: list[int] = []   # transfers made without anything to wait for (in order)

    def __len__(self) -> int:
        """How many items there are."""
        return len(self._where)

    def task(self, device: int, dur_s: float, after: Sequence[int] = ()) -> int:
        """A task of ``dur_s`` seconds on ``device``, after the items ``after``; its item."""
        i = len(self._where)
        self._where.append(int(device))
        self._size.append(float(dur_s))
        self._release.append(0.0)
        for a in after:
            self._waits.append((i, a))
        return i

    def transfer(self, links: Sequence[int], nbytes: float, after: Sequence[int] = (), release_s: float = 0.0) -> int:
        """A transfer of ``nbytes`` over ``links`` in turn, at ``release_s`` after the
        items ``after``; its item."""
        i = len(self._where)
        self._where.append(links if links.__class__ is tuple else tuple(links))
        self._size.append(float(nbytes))
        self._release.append(float(release_s))
        if after:
            for a in after:
                self._waits.append((i, a))
        else:
            self._free.append(i)
        return i

    def wait(self, item: int, for_item: int) -> None:
        """``item`` also waits for ``for_item``."""
        self._waits.append((item, for_item))

    def run(self, deadline_s: float = math.inf) -> tuple[list[float], list[bool]]:
        """(when each item is done: a task's end, a transfer's delivery, 0 if it never
        ran; whether it ran). Past ``deadline_s`` raises ``TimeUp``."""
        D, bw, anchor = self.n_devices, self.bw, self.anchor_server
        # per node; successors start as shared tuples ((1,): the next hop), waits add to them
        succ: list[tuple[int, ...]] = []
        dur: list[float] = []
        server: list[int] = []
        release: list[float] = []
        pending: list[int] = []
        seqs: list[list[int]] = [[] for _ in self.servers.latency_s]
        first: list[int] = []
        last: list[int] = []
        first_add, last_add, dur_add, server_add = first.append, last.append, dur.append, server.append
        chains: dict[int, tuple] = {}
        n = 0
        for where, size, rel in zip(self._where, self._size, self._release):
            first_add(n)
            release.append(rel)
            if where.__class__ is int:   # a task
                dur_add(size)
                server_add(where)
                seqs[where].append(n)
                succ.append(())
                pending.append(0)
                n += 1
            elif not where:               # an anchor
                dur_add(0.0)
                server_add(anchor)
                succ.append(())
                pending.append(0)
                n += 1
            else:                          # a hop per link, each waiting for the one before
                h = len(where)
                for l in where:
                    dur_add(size / bw[l])
                    server_add(l + D)
                c = chains.get(h)
                if c is None:
                    c = chains[h] = (((1,),) * (h - 1) + ((),), (0,) + (1,) * (h - 1), (0.0,) * (h - 1))
                succ.extend(c[0])
                pending.extend(c[1])
                release.extend(c[2])
                n += h
            last_add(n - 1)
        for i, a in self._waits:
            j, la = first[i], last[a]
            succ[la] = succ[la] + (j - la,)
            pending[j] += 1
        sources = [first[i] for i in self._free if not pending[first[i]]]
        net = _Built(succ, pending, dur, server, seqs, n)
        beg, fin, _, _ = _events(net, self.servers, "fifo", release, sources, deadline_s)
        if not last:
            return [], []
        pick = itemgetter(*last) if len(last) > 1 else (lambda x: (x[last[0]],))
        return list(pick(fin)), [b >= 0.0 for b in pick(beg)]


@dataclass
class _Built:
    """A ``TaskNet``'s nodes as the kernel reads them (``Network``)."""

    succ: list
    pending: list
    dur: list
    server: list
    seqs: list
    n_valid: int


__all__ = ["CLOCK_EVERY", "PRIO_ARRIVE", "PRIO_DONE", "Network", "Run", "Servers", "TaskNet", "replay"]
