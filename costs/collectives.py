"""Collective and point-to-point times over a topology's routes, without contention:
store and forward per link (bytes / bandwidth + latency), ring all-reduce (2(n-1) steps
of bytes/n, each step the slowest neighbour route), and the gradient reduction over
data-parallel replicas as the simulator orders it (a flat ring, or hierarchical:
reduce-scatter inside each node, a ring across nodes on 1/g of the bytes, all-gather
inside; ZeRO-1 keeps only the reduce-scatter halves).
"""
from __future__ import annotations

import math
import time

import numpy as np

from distplan.core.errors import TimeUp
from distplan.costs.problem import Problem


def route_s(problem: Problem, a: int, b: int, nbytes: float) -> float:
    """Store and forward of ``nbytes`` from device a to b: per link bytes/bw + latency."""
    return sum(nbytes / float(problem.link_bw_bytes_per_s[l]) + float(problem.link_latency_s[l])
               for l in problem.topology.route(a, b))


def ring_step_s(problem: Problem, devs: list[int], chunk: float) -> float:
    """The slowest neighbour route of one ring step carrying ``chunk`` bytes."""
    n = len(devs)
    return max((route_s(problem, d, devs[(i + 1) % n], chunk) for i, d in enumerate(devs)), default=0.0)


def ring_parts(problem: Problem, devs: list[int], nbytes: float, steps: int) -> tuple[float, float]:
    """(time, busiest link's busy time) of ``steps`` ring steps of ``chunk = nbytes /
    len(devs)`` each, as the simulator runs them: a device forwards a chunk once it has
    arrived, so a chain of dependencies moves one position per step (the largest sum of
    ``steps`` consecutive route times), and each link carries one chunk per step
    (``steps - 1`` chunks on the busiest link after the first route); the ring takes the
    longer of the two."""
    n = len(devs)
    if n < 2 or nbytes <= 0 or steps <= 0:
        return 0.0, 0.0
    key = (tuple(devs), float(nbytes), int(steps))
    memo = problem.__dict__.setdefault("_ring_memo", {})   # the same groups and sizes recur per layer
    if key in memo:
        return memo[key]
    memo[key] = out = _ring_parts(problem, devs, nbytes, steps)
    return out


def _ring_parts(problem: Problem, devs: list[int], nbytes: float, steps: int) -> tuple[float, float]:
    n = len(devs)
    chunk = nbytes / n
    topo = problem.topology
    route_t = np.array([route_s(problem, d, devs[(i + 1) % n], chunk) for i, d in enumerate(devs)])
    # the largest sum of ``steps`` consecutive route times around the ring
    full, rest = divmod(steps, n)
    c = np.concatenate(([0.0], np.cumsum(np.concatenate((route_t, route_t)))))
    chain = full * float(route_t.sum()) + (float((c[rest:rest + n] - c[:n]).max()) if rest else 0.0)
    busiest = max(chunk / float(problem.link_bw_bytes_per_s[l])
                  for i, d in enumerate(devs) for l in topo.route(d, devs[(i + 1) % n]))
    return max(chain, (steps - 1) * busiest + float(route_t.max())), steps * busiest


def ring_s(problem: Problem, devs: list[int], nbytes: float, steps: int) -> float:
    """The time of ``ring_parts``."""
    return ring_parts(problem, devs, nbytes, steps)[0]


def ring_allreduce_s(problem: Problem, devs: list[int], nbytes: float) -> float:
    """Ring all-reduce: 2(n-1) steps of bytes/n."""
    return ring_s(problem, devs, nbytes, 2 * (len(devs) - 1))


def hierarchical_groups(topology, devs: list[int]) -> list[list[int]] | None:
    """The per-node groups (indices into ``devs``) of a hierarchical reduction, or None
    when it is a flat ring (one node, one device per node, or unequal groups)."""
    groups: dict[int, list[int]] = {}
    for i, d in enumerate(devs):
        groups.setdefault(topology.devices[d].node, []).append(i)
    sizes = {len(g) for g in groups.values()}
    if len(groups) < 2 or len(sizes) != 1 or sizes == {1}:
        return None
    return list(groups.values())


def gradient_reduction_parts(problem: Problem, devs: list[int], nbytes: float, hierarchical: bool,
                             zero: int) -> tuple[float, float]:
    """(time, busiest link's busy time) of one rank's gradient reduction of ``nbytes``
    over its replicas ``devs``."""
    r = len(devs)
    members = hierarchical_groups(problem.topology, devs) if hierarchical else None
    if members is None:
        return ring_parts(problem, devs, nbytes, (r - 1) if zero else 2 * (r - 1))
    g, n = len(members[0]), len(members)
    inside = [ring_parts(problem, [devs[i] for i in grp], nbytes, g - 1) for grp in members]
    across = [ring_parts(problem, [devs[grp[s]] for grp in members], nbytes / g, (n - 1) if zero else 2 * (n - 1))
              for s in range(g)]
    times = max(t for t, _ in inside) * (1 if zero else 2) + max(t for t, _ in across)
    busy = max(b for _, b in inside) * (1 if zero else 2) + max(b for _, b in across)
    return times, busy


def gradient_reduction_s(problem: Problem, devs: list[int], nbytes: float, hierarchical: bool,
                         zero: int) -> float:
    """The time of ``gradient_reduction_parts``."""
    return gradient_reduction_parts(problem, devs, nbytes, hierarchical, zero)[0]


# --- transfers timed one by one (replica groups: replicas that start at different times) ---

class Transfers:
    """Store-and-forward transfers over FIFO links, timed like the simulator's links:
    each link serves one transfer after another in order of arrival (ties: order of
    release), a hop is busy ``bytes / bw`` and delivered ``latency`` later, and a
    transfer starts when its release time and every transfer it waits for are past.
    Used where the closed forms above assume replicas that start together: the gradient
    reduction of replicas of different speeds, shares or precisions, and (with a
    ``walker``, ``delivered_s``) the pipeline's stage-boundary tensors of every
    microbatch, all on the same links.

    A ``gated`` transfer also waits for ``trigger(i, t)``: the device side of a joint
    run releases it (a tensor leaves when its producer is done). A transfer with an
    empty route is delivered when released (an anchor other transfers wait for)."""

    #: heap pops between two looks at the clock (``deadline_s``)
    CLOCK_EVERY = 4096

    def __init__(self, problem: Problem, deadline_s: float = math.inf):
        self.pb = problem
        self.deadline_s = deadline_s   # perf_counter seconds: past it delivered_s raises TimeUp
        self.links: list[tuple[int, ...]] = []
        self.nbytes: list[float] = []
        self.release: list[float] = []
        self.preds: list[list[int]] = []
        self.gated: list[bool] = []

    def add(self, a: int, b: int, nbytes: float, release_s: float, preds: list[int], gated: bool = False,
            route: tuple[int, ...] | None = None) -> int:
        """A transfer of ``nbytes`` from device a to b (over ``route`` when given: the
        links of a relay through several devices), after ``release_s`` and ``preds``, and
        when ``gated`` after its ``trigger``."""
        self.links.append(tuple(route) if route is not None else tuple(self.pb.topology.route(a, b)))
        self.nbytes.append(float(nbytes))
        self.release.append(float(release_s))
        self.preds.append(list(preds))
        self.gated.append(bool(gated))
        return len(self.links) - 1

    def trigger(self, i: int, t: float) -> None:
        """Release gated transfer ``i`` at ``t`` (during ``delivered_s``, from the walker;
        ``t`` is never before the last delivery the walker was told of)."""
        import heapq

        if self._ready[i] < t:
            self._ready[i] = t
        self._pending[i] -= 1
        if not self._pending[i]:
            heapq.heappush(self._heap, (self._ready[i], self._seq, i, 0))
            self._seq += 1

    def delivered_s(self, walker=None) -> list[float]:
        """When each transfer has arrived (its release time when its route is empty).
        ``walker``: the devices of a joint run, ``start()`` once (it runs every device as
        far as its inputs allow, releasing gated transfers by ``trigger``) and
        ``delivered(i, t)`` after each delivery; as in the simulator, the links' heap is
        popped only when the devices can do nothing more, so every release comes at or
        after the last delivery popped and the links serve transfers in true arrival
        order. ``self.arrived[i]`` says whether transfer i was delivered. Raises
        ``TimeUp`` once ``deadline_s`` has passed (looked at every ``CLOCK_EVERY`` pops)."""
        import heapq

        n = len(self.links)
        bw, lat = self.pb.link_bw_bytes_per_s, self.pb.link_latency_s
        bw = [float(x) for x in bw]
        lat = [float(x) for x in lat]
        succ: list[list[int]] = [[] for _ in range(n)]
        self._pending = pending = [len(p) + g for p, g in zip(self.preds, self.gated)]
        self._ready = ready = list(self.release)
        for i, ps in enumerate(self.preds):
            for j in ps:
                succ[j].append(i)
        self.done = done = [0.0] * n
        self.arrived = arrived = [False] * n
        free: dict[int, float] = {}
        self._heap = heap = []
        self._seq = 0
        for i in range(n):
            if not pending[i]:
                heap.append((ready[i], self._seq, i, 0))
                self._seq += 1
        heapq.heapify(heap)
        if walker is not None:
            walker.start()
        links, nbytes = self.links, self.nbytes
        timed, pops = math.isfinite(self.deadline_s), 0
        while heap:
            if timed:
                pops += 1
                if pops % self.CLOCK_EVERY == 0 and time.perf_counter() > self.deadline_s:
                    raise TimeUp(f"{n:,} transfers not timed by the deadline")
            t, _, i, h = heapq.heappop(heap)
            route = links[i]
            if h < len(route):
                l = route[h]
                start = free.get(l, 0.0)
                if start < t:
                    start = t
                f = start + nbytes[i] / bw[l]
                free[l] = f
                heapq.heappush(heap, (f + lat[l], self._seq, i, h + 1))
                self._seq += 1
                continue
            done[i] = t
            arrived[i] = True
            for j in succ[i]:
                if ready[j] < t:
                    ready[j] = t
                pending[j] -= 1
                if not pending[j]:
                    heapq.heappush(heap, (ready[j], self._seq, j, 0))
                    self._seq += 1
            if walker is not None:
                walker.delivered(i, t)
        return done


def ring_transfers(tr: Transfers, devs: list[int], arrived: list[tuple[float, list[int]]], chunk: float,
                   steps: int, own: list[tuple[float, list[int]]] | None = None) -> list[tuple[float, list[int]]]:
    """``steps`` ring steps of ``chunk`` bytes as transfers (the simulator's
    ``_ring_steps``): device i sends to i+1 once what it last received (``arrived[i]``, a
    (time, transfers) pair) is there, and in a reduce-scatter (``own``) its own data."""
    n = len(devs)
    for _ in range(steps):
        nxt: list[tuple[float, list[int]]] = [(0.0, [])] * n
        for i in range(n):
            t, ps = arrived[i]
            if own is not None:
                t, ps = max(t, own[i][0]), ps + own[i][1]
            x = tr.add(devs[i], devs[(i + 1) % n], chunk, t, ps)
            nxt[(i + 1) % n] = (0.0, [x])
        arrived = nxt
    return arrived


def reduction_transfers(tr: Transfers, devs: list[int], start_s: list, nbytes: float, hierarchical: bool,
                        zero: int) -> None:
    """One gradient reduction of ``nbytes`` over the replicas ``devs``, replica i's
    gradients ready at ``start_s[i]`` (a time, or a (time, transfers it waits for) pair),
    as the simulator orders it (flat ring, or reduce-scatter by node, rings across nodes,
    all-gather by node; ZeRO-1 keeps the reduce-scatter halves)."""
    r = len(devs)
    start = [(float(s[0]), list(s[1])) if isinstance(s, tuple) else (float(s), []) for s in start_s]
    members = hierarchical_groups(tr.pb.topology, devs) if hierarchical else None
    if members is None:
        ring_transfers(tr, devs, start, nbytes / r, (r - 1) if zero else 2 * (r - 1), own=start)
        return
    g = len(members[0])
    arrived = list(start)
    for grp in members:
        mine = [arrived[i] for i in grp]
        for i, a in zip(grp, ring_transfers(tr, [devs[i] for i in grp], mine, nbytes / g, g - 1, own=mine)):
            arrived[i] = a
    n_nodes = len(members)
    for s in range(g):
        col = [grp[s] for grp in members]
        out = ring_transfers(tr, [devs[i] for i in col], [arrived[i] for i in col], nbytes / g / n_nodes,
                             (n_nodes - 1) if zero else 2 * (n_nodes - 1))
        for i, a in zip(col, out):
            arrived[i] = a
    if not zero:
        for grp in members:
            ring_transfers(tr, [devs[i] for i in grp], [arrived[i] for i in grp], nbytes / g, g - 1)
