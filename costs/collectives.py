"""Communication, written once: every transfer time, boundary route, collective and
reduction schedule the planner, the analytic models and the simulator use (seconds).

- Point to point (``route_s``, ``links_s``, ``path_links``): store and forward per link,
  bytes / bandwidth + latency, a relay's hops in turn.
- Stage boundaries (``boundary_links``, ``lane_boundary_links``, ``boundary_load_s``): the
  links a tensor crossing a -> b loads (the gradient's reverse route too in training);
  per byte: ``store_forward_coefficients`` (the MILP's), ``bottleneck_s_per_byte``.
- Rings without contention: ``ring_parts``, ``ring_allreduce_s`` (2(n-1) steps of
  bytes/n), ``reduce_scatter_s``, ``all_gather_s`` (n-1), ``all_to_all_s``; rings side by
  side on shared links: ``side_by_side_parts`` (each link carries all their chunks).
- The data-parallel gradient reduction, one schedule (``reduction_rings``: flat, or
  hierarchical by node; ZeRO-1 keeps the reduce-scatter) from which its closed form, its
  transfers (the simulator's and ``Transfers``'s) and its size all derive.
Semantics: docs/concepts/simulator.md. Casts are ``Problem.cast_time_s``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from distplan.costs.problem import Problem
from distplan.costs.replay import TaskNet
from distplan.costs.routes import links_s, route_s  # noqa: F401  (re-exported: the transfer formula)


# --- point to point ------------------------------------------------------------------

def path_links(topology, path: Sequence[int]) -> tuple[int, ...]:
    """The links of a relay along the devices ``path`` (each hop on its route, in turn)."""
    return tuple(l for a, b in zip(path, path[1:]) for l in topology.route(a, b))




def boundary_links(problem: Problem, a: int, b: int) -> list[int]:
    """The links a tensor crossing a stage boundary from device a to device b loads: its
    route, and in training the route back its gradient takes."""
    topo = problem.topology
    out = list(topo.route(a, b))
    if problem.training:
        out += topo.route(b, a)
    return out


def boundary_load_s(problem: Problem, a: int, b: int, nbytes: float) -> list[tuple[int, float]]:
    """(link, busy seconds) of ``nbytes`` crossing a stage boundary from device a to b on
    each of its ``boundary_links``: bytes / bandwidth (the period's link load)."""
    bw = problem.link_bw_bytes_per_s
    return [(l, nbytes / bw[l]) for l in boundary_links(problem, a, b)]


def lane_boundary_links(problem: Problem, path: Sequence[int]) -> list[list[int]]:
    """``boundary_links`` of every boundary b -> b+1 of a lane (one device per stage)."""
    return [boundary_links(problem, path[b], path[b + 1]) for b in range(len(path) - 1)]


def store_forward_coefficients(problem: Problem, links: Sequence[int]) -> tuple[float, float]:
    """(latency seconds, seconds per byte) of a store-and-forward transfer over ``links``:
    it takes latency + bytes x seconds per byte (the latency objective's linear form)."""
    lat, bw = problem.link_latency_s, problem.link_bw_bytes_per_s
    return float(sum(lat[l] for l in links)), float(sum(1.0 / bw[l] for l in links))


def bottleneck_s_per_byte(problem: Problem, links: Sequence[int]) -> float:
    """Seconds per byte on the slowest of ``links``: the steady-state load a boundary's
    bytes put on its busiest link (0 without links)."""
    bw = problem.link_bw_bytes_per_s
    return max((1.0 / bw[l] for l in links), default=0.0)


# --- collectives over a ring, without contention ---------------------------------------

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


def reduce_scatter_s(problem: Problem, devs: list[int], nbytes: float) -> float:
    """Ring reduce-scatter: n-1 steps of bytes/n (each device ends with its 1/n, summed)."""
    return ring_s(problem, devs, nbytes, len(devs) - 1)


def all_gather_s(problem: Problem, devs: list[int], nbytes: float) -> float:
    """Ring all-gather of ``nbytes`` (each device holds 1/n): n-1 steps of bytes/n in
    lockstep, each as long as the slowest neighbour route (ZeRO-1's parameter gather
    after the optimizer step)."""
    n = len(devs)
    return (n - 1) * ring_step_s(problem, devs, nbytes / n) if n > 1 else 0.0


def all_to_all_s(problem: Problem, devs: list[int], nbytes: float) -> float:
    """All-to-all of ``nbytes`` per device (1/n of it to every other device): n-1 rounds,
    round s sending devs[i] -> devs[i+s], each as long as its slowest route."""
    n = len(devs)
    return math.fsum(max(route_s(problem, devs[i], devs[(i + s) % n], nbytes / n) for i in range(n))
                     for s in range(1, n))


# --- the gradient reduction: one schedule ----------------------------------------------

#: a ring of a reduction: (member indices into the replicas, in ring order; the bytes it
#: reduces, chunk = bytes / members; steps)
Ring = tuple[tuple[int, ...], float, int]


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


def reduction_rings(topology, devs: list[int], nbytes: float, hierarchical: bool,
                    zero: int) -> list[tuple[bool, list[Ring]]]:
    """The gradient reduction of ``nbytes`` over the replicas ``devs`` as phases, one
    after another, each a list of rings that run side by side, and whether a phase's
    senders also wait for their own gradients (a reduce-scatter): a flat ring of 2(r-1)
    steps (r-1 under ZeRO-1), or hierarchical (``hierarchical_groups``): reduce-scatter
    inside each node (g-1 steps), rings across nodes, one per shard, on 1/g of the bytes,
    and unless ZeRO-1 the all-gather inside each node."""
    r = len(devs)
    members = hierarchical_groups(topology, devs) if hierarchical else None
    if members is None:
        return [(True, [(tuple(range(r)), nbytes, (r - 1) if zero else 2 * (r - 1))])]
    g, n = len(members[0]), len(members)
    inside = [(tuple(grp), nbytes, g - 1) for grp in members]
    across = [(tuple(grp[s] for grp in members), nbytes / g, (n - 1) if zero else 2 * (n - 1)) for s in range(g)]
    return [(True, inside), (False, across)] + ([] if zero else [(False, inside)])


def ring_schedule(n: int, steps: int, arrived: list, send: Callable, own: list | None = None) -> list:
    """``steps`` ring steps over n members, transfer by transfer: member i sends to i+1
    once what it last received (``arrived[i]``, a handle) is there and, in a reduce-
    scatter (``own``), its own data; ``send(i, j, preds)`` makes the transfer and returns
    its handle. Only the first ``len(arrived)`` members send (all, or the copy the
    simulator keeps under a symmetry reduction: the step from its last member lands on
    its first). Returns, per sender, the handle after which it holds the result."""
    m = len(arrived)
    for _ in range(steps):
        nxt = [None] * m
        for i in range(m):
            last = arrived[i]
            preds = [last] if own is None or own[i] == last else [last, own[i]]
            nxt[(i + 1) % m] = send(i, (i + 1) % n, preds)
        arrived = nxt
    return arrived


def allreduce_schedule(n: int, own: list, send: Callable) -> list:
    """A ring all-reduce over n members transfer by transfer (``ring_schedule``: 2(n-1)
    steps, each member also waiting for its own data, ``own[i]``): the tensor-parallel
    all-reduce whose closed form is ``ring_allreduce_s``."""
    return ring_schedule(n, 2 * (n - 1), list(own), send, own=list(own))


def reduction_schedule(topology, devs: list[int], start: list, nbytes: float, hierarchical: bool, zero: int,
                       send: Callable) -> list:
    """The gradient reduction (``reduction_rings``) transfer by transfer: replica i's
    gradients exist after handle ``start[i]``; ``send(a, b, chunk, preds)`` makes a
    transfer of ``chunk`` bytes from replica a to b after the handles ``preds`` and
    returns its handle. Only the first ``len(start)`` replicas send (the simulator's copy
    under a symmetry reduction: whole node groups of a hierarchical one). Returns, per
    sending replica, the handle after which its reduction is done."""
    held = len(start)
    arrived = list(start) + [None] * (len(devs) - held)
    for own, rings in reduction_rings(topology, devs, nbytes, hierarchical, zero):
        for members, ring_bytes, steps in rings:
            mine = [i for i in members if i < held]
            if not mine:
                continue
            got = [arrived[i] for i in mine]
            chunk = ring_bytes / len(members)

            def step(a: int, b: int, preds: list, members=members, chunk=chunk):
                return send(members[a], members[b], chunk, preds)

            for i, x in zip(mine, ring_schedule(len(members), steps, got, step, own=got if own else None)):
                arrived[i] = x
    return arrived[:held]


def reduction_size(topology, devs: list[int], hierarchical: bool, zero: int, held: int | None = None,
                   hops: bool = False) -> int:
    """How many transfers (``hops``: link hops) ``reduction_schedule`` makes when the
    first ``held`` replicas send (all by default)."""
    held = len(devs) if held is None else held
    total = 0
    for _, rings in reduction_rings(topology, devs, 1.0, hierarchical, zero):
        for members, _, steps in rings:
            n, senders = len(members), sum(1 for i in members if i < held)
            per = (sum(len(topology.route(devs[members[i]], devs[members[(i + 1) % n]])) for i in range(senders))
                   if hops else senders)
            total += steps * per
    return total


def side_by_side_parts(problem: Problem, rings: Sequence[tuple[Sequence[int], float, int]]) -> tuple[float, float]:
    """(time, busiest link's busy time) of rings (devices, bytes, steps) that run side by
    side: each ring alone (``ring_parts``), and where two hops (of the rings, or of one
    ring) share a link, that link carries every chunk they put on it, steps x bytes / n /
    bw each, so the rings last at least its whole load plus the shortest way of any of
    them onto it and the shortest off it (store and forward over the hop's other links,
    its latency). Without a shared link: the slowest ring."""
    alone = [ring_parts(problem, list(d), b, s) for d, b, s in rings]
    time, busy = max((t for t, _ in alone), default=0.0), max((b for _, b in alone), default=0.0)
    load: dict[int, float] = {}
    onto: dict[int, float] = {}
    off: dict[int, float] = {}
    uses: dict[int, int] = {}
    bw, lat = problem.link_bw_bytes_per_s, problem.link_latency_s
    topo = problem.topology
    for devs, nbytes, steps in rings:
        n = len(devs)
        if n < 2 or nbytes <= 0 or steps <= 0:
            continue
        chunk = nbytes / n
        for i, d in enumerate(devs):
            route = topo.route(d, devs[(i + 1) % n])
            hop = [chunk / float(bw[l]) + float(lat[l]) for l in route]
            before = 0.0
            for l, s_l in zip(route, hop):
                after = sum(hop) - before - s_l + float(lat[l])
                load[l] = load.get(l, 0.0) + steps * chunk / float(bw[l])
                onto[l] = min(onto.get(l, math.inf), before)
                off[l] = min(off.get(l, math.inf), after)
                uses[l] = uses.get(l, 0) + 1
                before += s_l
    for l, k in uses.items():
        if k > 1:
            time, busy = max(time, load[l] + onto[l] + off[l]), max(busy, load[l])
    return time, busy


def rings_share_links(topology, rings: Sequence[Sequence[int]]) -> bool:
    """Whether two neighbour hops of the device rings ``rings`` (one ring's, or two
    rings') cross the same link."""
    seen: set[int] = set()
    for devs in rings:
        n = len(devs)
        for i, d in enumerate(devs if n > 1 else ()):
            for l in topology.route(d, devs[(i + 1) % n]):
                if l in seen:
                    return True
                seen.add(l)
    return False


def reduction_shares_links(topology, ranks: Sequence[Sequence[int]], hierarchical: bool, zero: int) -> bool:
    """Whether some phase of the gradient reduction of every tensor-parallel rank's
    replicas ``ranks`` (``reduction_rings``, the ranks side by side) crosses a link twice."""
    return any(rings_share_links(topology, [[g[i] for i in members] for g in ranks for members, _, _ in rings])
               for _, rings in reduction_rings(topology, list(ranks[0]), 1.0, hierarchical, zero))


def reduction_closed_form_exact(problem: Problem, ranks: Sequence[Sequence[int]], hierarchical: bool,
                                zero: int) -> bool:
    """Whether ``gradient_reduction_parts`` times the reduction of every tensor-parallel
    rank's replicas ``ranks`` exactly: no phase's rings share a link and every ring's hops
    have one route profile (their links' bandwidths and latencies). Otherwise its chain
    and busiest-link terms are each a lower bound only (a flat ring of NVLink and
    InfiniBand hops, dp 4 x tp 2 on 2 x 4 A100s: 7.28 ms against 7.63 ms replayed)."""
    topo = problem.topology
    bw, lat = problem.link_bw_bytes_per_s, problem.link_latency_s
    for _, rings in reduction_rings(topo, list(ranks[0]), 1.0, hierarchical, zero):
        devs = [[g[i] for i in members] for g in ranks for members, _, _ in rings]
        if rings_share_links(topo, devs):
            return False
        for ring in devs:
            if len({tuple((float(bw[l]), float(lat[l])) for l in topo.route(a, ring[(i + 1) % len(ring)]))
                    for i, a in enumerate(ring)}) > 1:
                return False
    return True


def gradient_reduction_parts(problem: Problem, devs: list[int], nbytes: float, hierarchical: bool,
                             zero: int, ranks: Sequence[Sequence[int]] = ()) -> tuple[float, float]:
    """(time, busiest link's busy time) of one rank's gradient reduction of ``nbytes``
    over its replicas ``devs``: per phase of ``reduction_rings`` its rings side by side
    (``side_by_side_parts``; with ``ranks``, every tensor-parallel rank's replica devices,
    the other ranks' rings of the same bytes beside them), the phases one after another."""
    groups = [list(r) for r in ranks] or [list(devs)]
    times, busy = [], []
    for _, rings in reduction_rings(problem.topology, devs, nbytes, hierarchical, zero):
        t, b = side_by_side_parts(problem, [([g[i] for i in members], ring_bytes, steps)
                                            for g in groups for members, ring_bytes, steps in rings])
        times.append(t)
        busy.append(b)
    return math.fsum(times), math.fsum(busy)


def gradient_reduction_s(problem: Problem, devs: list[int], nbytes: float, hierarchical: bool,
                         zero: int) -> float:
    """The time of ``gradient_reduction_parts``."""
    return gradient_reduction_parts(problem, devs, nbytes, hierarchical, zero)[0]


def ring_lanes(problem: Problem, devs: list[int]) -> int | None:
    """The period s of a flat ring's hops when their routes repeat with it (the same
    links' bandwidths and latencies hop i as hop i mod s) and no two hops share a link:
    the ring's transfers then repeat with that period too (hop i waits only for hop
    i - 1 and its own links), so its first s senders time the reduction exactly
    (``reduction_schedule`` with s starts: one lane on a uniform ring, one node's on a
    ring across like nodes); None when the ring is not so."""
    topo, r = problem.topology, len(devs)
    routes = [tuple(topo.route(d, devs[(i + 1) % r])) for i, d in enumerate(devs)]
    links = [l for rt in routes for l in rt]
    if len(set(links)) != len(links):
        return None
    prof = [tuple((float(problem.link_bw_bytes_per_s[l]), float(problem.link_latency_s[l])) for l in rt)
            for rt in routes]
    return next(s for s in range(1, r + 1) if r % s == 0 and all(prof[i] == prof[i % s] for i in range(r)))


# --- transfers timed one by one on FIFO links (the replay kernel) ---

class Transfers(TaskNet):
    """Store-and-forward transfers over FIFO links, timed like the simulator's links (on
    its kernel, ``costs.replay``): each link serves one transfer after another in order
    of arrival (ties: order of release), a hop is busy ``bytes / bw`` and delivered
    ``latency`` later, and a transfer starts when its release time and every transfer it
    waits for are past. Used where the closed forms above assume replicas that start
    together: the gradient reduction of replicas of different speeds, shares or
    precisions, and (with ``task``: the devices of a joint run) the pipeline's
    stage-boundary tensors of every microbatch, all on the same links. A transfer with
    an empty route is delivered when released (an anchor other transfers wait for)."""

    def __init__(self, problem: Problem, deadline_s: float = math.inf):
        super().__init__(problem.n_devices, problem.link_bw_bytes_per_s, problem.link_latency_s)
        self.pb = problem
        self.deadline_s = deadline_s   # perf_counter seconds: past it delivered_s raises TimeUp

    def add(self, a: int, b: int, nbytes: float, release_s: float, preds: list[int],
            route: tuple[int, ...] | None = None) -> int:
        """A transfer of ``nbytes`` from device a to b (over ``route`` when given: the
        links of a relay through several devices), after ``release_s`` and ``preds``."""
        links = tuple(route) if route is not None else tuple(self.pb.topology.route(a, b))
        return self.transfer(links, float(nbytes), preds, release_s)

    @property
    def links(self) -> list:
        """Per item its route's links (a task: its device)."""
        return self._where

    def delivered_s(self) -> list[float]:
        """When each item has arrived (a transfer; a task: when it ends); 0 for one that
        never could (``self.arrived[i]`` says which did). Raises ``TimeUp`` once
        ``deadline_s`` has passed."""
        done, self.arrived = self.run(self.deadline_s)
        return done


def reduction_transfers(tr: Transfers, devs: list[int], start_s: list, nbytes: float, hierarchical: bool,
                        zero: int, route: Callable | None = None) -> None:
    """``reduction_schedule`` as ``tr``'s transfers: replica i's gradients ready at
    ``start_s[i]`` (a time, or a (time, transfers it waits for) pair); only the first
    ``len(start_s)`` replicas send (``ring_lanes``, or a symmetry reduction's copy with
    ``route(a, b)`` its representative links, ``costs.symmetry.Symmetry.route``)."""
    start = [(float(s[0]), list(s[1])) if isinstance(s, tuple) else (float(s), []) for s in start_s]

    def send(a: int, b: int, chunk: float, preds: list) -> tuple[float, list[int]]:
        t, ps = preds[0]
        for t2, ps2 in preds[1:]:
            t, ps = max(t, t2), ps + ps2
        links = None if route is None else route(devs[a], devs[b])
        return 0.0, [tr.add(devs[a], devs[b], chunk, t, ps, route=links)]

    reduction_schedule(tr.pb.topology, devs, start, nbytes, hierarchical, zero, send)
