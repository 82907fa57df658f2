"""Collective and point-to-point times over a topology's routes, without contention:
store and forward per link (bytes / bandwidth + latency), ring all-reduce (2(n-1) steps
of bytes/n, each step the slowest neighbour route), and the gradient reduction over
data-parallel replicas as the simulator orders it (a flat ring, or hierarchical:
reduce-scatter inside each node, a ring across nodes on 1/g of the bytes, all-gather
inside; ZeRO-1 keeps only the reduce-scatter halves).
"""
from __future__ import annotations

import numpy as np

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
