"""The simulator's nodes of a collective: the transfers ``costs.collectives`` schedules
(``allreduce_schedule``, ``reduction_schedule``), each one node per link of its route (a
link serves ``bytes / bandwidth`` and delivers ``latency`` later), so the simulator runs
the schedule the analytic models time. ``b`` is the task-graph builder
(``sim.taskgraph._Builder``): its ``chain`` makes pattern nodes, its ``_x_add`` the
collective nodes after the pipeline, its ``route`` the (representative) links.
"""
from __future__ import annotations

from distplan.costs.collectives import allreduce_schedule, reduction_schedule, ring_schedule


def ring_nodes(b, devs: list[int], own: list[int], nbytes: float, p: int, phase: int, op: int) -> list[int]:
    """Ring all-reduce of ``nbytes`` over ``devs`` as pattern ``p``'s nodes (a tensor-
    parallel group): 2(n-1) steps, each device sending nbytes/n to its successor once it
    holds its own data (``own[i]`` done) and the previous step's chunk (``own`` holds
    every rank, or the copy's first u ranks under a rank reduction: by symmetry rank
    n-1's chunk reaches rank 0 when rank u-1's reaches rank u). Returns, per simulated
    device, the node after which it holds the reduced data."""
    n = len(devs)
    chunk = nbytes / n

    def send(i: int, j: int, preds: list[int]) -> int:
        return b.chain(preds, [devs[i], devs[j]], chunk, p, phase, -1, op)[0]

    return allreduce_schedule(n, own, send)


def ring_nodes_after(b, devs: list[int], arrived: list[int], own: list[int], nbytes: float, p: int, phase: int,
                     op: int) -> list[int]:
    """As ``ring_nodes``, each device's first send also after ``arrived[i]`` (the ring
    before it on the same group: a pipelined collective's last chunk, ``costs.tp_overlap``)."""
    n = len(devs)
    chunk = nbytes / n

    def send(i: int, j: int, preds: list[int]) -> int:
        return b.chain(preds, [devs[i], devs[j]], chunk, p, phase, -1, op)[0]

    return ring_schedule(n, 2 * (n - 1), list(arrived), send, own=list(own))


def reduction_nodes(b, devs: list[int], start: list[int], nbytes: float, k: int, zero: int) -> None:
    """Stage k's gradient reduction of ``nbytes`` over ``devs`` (every replica's device of
    one rank) as collective nodes, from ``start`` (per simulated replica: all, or the
    copy's ``len(start)`` first under a replica reduction, whole node groups of a
    hierarchical one, ``sim.symmetry``)."""
    hierarchical = b.plan.dp_allreduce == "hierarchical"

    def send(i: int, j: int, chunk: float, preds: list[int]) -> int:
        last = preds[0]
        for h, l in enumerate(b.route(devs[i], devs[j])):
            last = b._x_add(b.D + l, chunk / b.bw[l], chunk, preds if h == 0 else [last], k)
        return last

    reduction_schedule(b.topo, devs, start, nbytes, hierarchical, zero, send)
