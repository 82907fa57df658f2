"""Operator compute time: the roofline max(flops / (peak x efficiency), bytes / mem_bw) + launch."""
from __future__ import annotations

import math

from distplan.core.precision import precision
from distplan.topologies.topology import DeviceKind


def roofline_time_s(flops: float, bytes_moved: float, kind: DeviceKind, prec: str) -> float:
    """Seconds for one task of ``flops`` and ``bytes_moved`` at ``prec`` on ``kind``.

    ``inf`` when the kind does not support ``prec``; a task with no work costs only the
    launch overhead.
    """
    peak = kind.peak_flops_per_s.get(prec)
    if peak is None:
        return math.inf
    return max(flops / (peak * kind.efficiency), bytes_moved / kind.mem_bw_bytes_per_s) + kind.launch_overhead_s


def op_time_s(flops: float, touched_elems: float, kind: DeviceKind, prec: str) -> float:
    """Roofline time of an operator whose memory traffic is ``touched_elems`` at ``prec``."""
    return roofline_time_s(flops, touched_elems * precision(prec).bytes_per_elem, kind, prec)


def tp_shard_time_s(task_s: float, launch_overhead_s: float, tensor_parallel: int) -> float:
    """One device's share of a task split over ``tensor_parallel`` devices: the work
    divides, the launch does not (every shard pays its own kernel launch)."""
    if tensor_parallel <= 1:
        return task_s
    return (task_s - launch_overhead_s) / tensor_parallel + launch_overhead_s
