"""A lower bound, in closed form, on an overlapped gradient reduction that
``costs.iteration`` times transfer by transfer (one bucket per op, ready when its last
backward ends): what the cluster space reads to drop an option that cannot enter its
best plans before timing it.

Two bounds, each holding for any order the FIFO links serve the transfers in: a link
serves one transfer at a time and none before its bucket is ready, so the last to use
link l ends no earlier than ``ready_i + (the busy seconds on l of every bucket ready at
ready_i or later)`` for every i, and is delivered ``latency_l`` later; and every
member's result is a chain of ring steps, one after another, each a transfer over a
route of the phase's ring (at least the quickest such route). The loads are the whole
rings' (every replica of each rank timed), which the symmetry copies reproduce.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.costs.collectives import hierarchical_groups, reduction_rings, reduction_shares_links
from distplan.costs.problem import Problem


def reduction_link_load(problem: Problem, groups: Sequence[Sequence[int]], hierarchical: bool,
                        zero: int) -> tuple[dict[int, float], list[tuple[int, np.ndarray, np.ndarray]]]:
    """(link -> busy seconds per byte reduced, per phase (steps, route latencies, route
    seconds per byte reduced)) of the reductions over each of ``groups`` (replica devices
    of tensor-parallel ranks, side by side; ``costs.collectives.reduction_rings``)."""
    topo = problem.topology
    bw, lat = problem.link_bw_bytes_per_s, problem.link_latency_s
    load: dict[int, float] = {}
    phases = []
    for _, rings in reduction_rings(topo, list(groups[0]), 1.0, hierarchical, zero):
        lats, spbs, steps_of = [], [], set()
        for (members, share, steps), devs in ((ring, g) for ring in rings for g in groups):
            n = len(members)
            if n < 2 or steps <= 0:
                continue
            chunk = share / n   # bytes of a chunk per byte reduced
            steps_of.add(steps)
            for i in range(n):
                route = topo.route(devs[members[i]], devs[members[(i + 1) % n]])
                for l in route:
                    load[l] = load.get(l, 0.0) + steps * chunk / float(bw[l])
                lats.append(sum(float(lat[l]) for l in route))
                spbs.append(sum(chunk / float(bw[l]) for l in route))
        if lats:
            phases.append((min(steps_of), np.array(lats), np.array(spbs)))
    return load, phases


def overlapped_reduction_lb_s(problem: Problem, groups: Sequence[Sequence[int]], hierarchical: bool, zero: int,
                              ready_s: Sequence[float], nbytes: Sequence[float]) -> float:
    """A lower bound on when the last bucket's reduction is delivered (module docstring):
    bucket i of ``nbytes[i]`` bytes (a rank's) ready at ``ready_s[i]``, reduced over each
    of ``groups`` (the ranks' replica devices whose rings are timed side by side)."""
    if len(groups[0]) < 2 or not len(ready_s):
        return 0.0
    load, phases = reduction_link_load(problem, groups, hierarchical, zero)
    order = np.argsort(np.asarray(ready_s, dtype=float), kind="stable")
    r = np.asarray(ready_s, dtype=float)[order]
    b = np.asarray(nbytes, dtype=float)[order]
    later = np.cumsum(b[::-1])[::-1]   # bytes of the buckets ready at r[i] or later
    out = 0.0
    if load:
        links = np.fromiter(load, dtype=np.int64, count=len(load))
        rho = np.fromiter(load.values(), dtype=float, count=len(load))
        ends = (r[None, :] + rho[:, None] * later[None, :]).max(axis=1)
        out = float((ends + problem.link_latency_s[links]).max())
    chain = r.copy()
    for steps, lats, spbs in phases:   # each step at least the phase's quickest route
        chain = chain + steps * (lats[None, :] + spbs[None, :] * b[:, None]).min(axis=1)
    return max(out, float(chain.max()))


def stream_rate(problem: Problem, groups: Sequence[Sequence[int]], hierarchical: bool, zero: int
                ) -> tuple[float, float]:
    """(latency seconds, seconds per byte) of the busiest link of the reductions over
    each of ``groups``: a rank's overlapped buckets, however many and whenever ready
    (from 0 on), are delivered no earlier than ``latency + rate x their bytes`` (the
    link bound of ``overlapped_reduction_lb_s`` with every bucket ready at 0). Where a
    ring hop crosses two links (store and forward), this rate is half the closed form's
    (``gradient_reduction_parts``), which charges every step the whole route."""
    if len(groups[0]) < 2:
        return 0.0, 0.0
    load, _ = reduction_link_load(problem, groups, hierarchical, zero)
    if not load:
        return 0.0, 0.0
    rate = max(load.values())
    lat = max(float(problem.link_latency_s[l]) for l, r in load.items() if r >= rate)
    return lat, float(rate)


def stage_stream(problem: Problem, tp: int, dp: int, zero: int) -> tuple[bool, float, float]:
    """(hierarchical, latency seconds, seconds per byte) of the gradient stream of a
    stage of ``dp`` replicas x ``tp`` at the representative layout (replica j's rank r on
    device j x tp + r): ``stream_rate`` over every tp rank's rings where they share links,
    else over rank 0's, of the flat ring or, where the replicas share nodes
    (``hierarchical_groups``), the hierarchical reduction, whichever streams at the lower
    rate (ties to the flat ring): the stage MILP's reduction term and its oracle's."""
    ring = [j * tp for j in range(dp)]
    ranks = [[j * tp + r for j in range(dp)] for r in range(tp)]
    best = (False, 0.0, 0.0)
    for hier in (False, True):
        if hier and hierarchical_groups(problem.topology, ring) is None:
            continue
        shared = tp > 1 and reduction_shares_links(problem.topology, ranks, hier, zero)
        lat, rate = stream_rate(problem, ranks if shared else [ring], hier, zero)
        if not hier or rate < best[2] * (1 - 1e-12):
            best = (hier, lat, rate)
    return best
