"""Communication costs: point-to-point transfers, collectives and precision casts."""
from __future__ import annotations

import math
from collections.abc import Sequence

from distplan.core.precision import precision
from distplan.topologies.topology import DeviceKind, Topology


def transfer_time_s(topology: Topology, a: int, b: int, n_bytes: float) -> float:
    """Store-and-forward time of ``n_bytes`` from device ``a`` to ``b``: sum over hops of
    (latency + bytes / bandwidth); 0 on the same device."""
    return math.fsum(
        topology.links[i].latency_s + n_bytes / topology.links[i].bw_bytes_per_s
        for i in topology.route(a, b)
    )


def ring_allreduce_time_s(topology: Topology, devices: Sequence[int], n_bytes: float) -> float:
    """Ring all-reduce over ``devices`` in the given ring order: 2(n-1) steps, each moving
    n_bytes/n from every device to its successor; a step lasts as long as its slowest hop."""
    n = len(devices)
    if n <= 1 or n_bytes == 0:
        return 0.0
    chunk = n_bytes / n
    step = max(transfer_time_s(topology, devices[i], devices[(i + 1) % n], chunk) for i in range(n))
    return 2 * (n - 1) * step


def hierarchical_allreduce_time_s(topology: Topology, devices: Sequence[int], n_bytes: float) -> float:
    """Two-level all-reduce: reduce-scatter inside each node, all-reduce of the shard
    across nodes (one device per node), all-gather inside each node."""
    nodes: dict[int, list[int]] = {}
    for d in devices:
        nodes.setdefault(topology.devices[d].node, []).append(d)
    groups = list(nodes.values())
    if len(groups) == 1:
        return ring_allreduce_time_s(topology, devices, n_bytes)
    local = max(len(g) for g in groups)
    # reduce-scatter + all-gather inside a node each take half a ring all-reduce
    intra = max(ring_allreduce_time_s(topology, g, n_bytes) for g in groups)
    leaders = [g[0] for g in groups]
    inter = ring_allreduce_time_s(topology, leaders, n_bytes / local)
    return intra + inter


def cast_time_s(elems: float, src: str, dst: str, kind: DeviceKind) -> float:
    """Precision cast of ``elems`` on ``kind``: memory-bound read at ``src`` plus write at
    ``dst``, plus one launch; zero when the precisions agree."""
    if src == dst:
        return 0.0
    moved = elems * (precision(src).bytes_per_elem + precision(dst).bytes_per_elem)
    return moved / kind.mem_bw_bytes_per_s + kind.launch_overhead_s
