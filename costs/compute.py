"""Operator compute time: the roofline max(flops / (peak x efficiency), bytes / mem_bw) + launch
(the efficiency the kind reaches at the precision: ``DeviceKind.efficiency_at``)."""
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
    return max(flops / (peak * kind.efficiency_at(prec)), bytes_moved / kind.mem_bw_bytes_per_s) + kind.launch_overhead_s


def op_time_s(flops: float, touched_elems: float, kind: DeviceKind, prec: str) -> float:
    """Roofline time of an operator whose memory traffic is ``touched_elems`` at ``prec``."""
    return roofline_time_s(flops, touched_elems * precision(prec).bytes_per_elem, kind, prec)


def tp_shard_time_s(task_s: float, launch_overhead_s: float, tensor_parallel: int) -> float:
    """One device's share of a task split over ``tensor_parallel`` devices: the work
    divides, the launch does not (every shard pays its own kernel launch)."""
    if tensor_parallel <= 1:
        return task_s
    return (task_s - launch_overhead_s) / tensor_parallel + launch_overhead_s


#: bytes an Adam step moves per parameter: read the gradient (b) and the fp32 master
#: weight and two moments (12), write those three back (12) and the working copy (b)
def optimizer_bytes_per_param(bytes_per_elem: int) -> float:
    return 24.0 + 2.0 * bytes_per_elem


def optimizer_step_s(param_elems: float, bytes_per_elem: int, kind: DeviceKind) -> float:
    """One Adam update of ``param_elems`` parameters on one device: memory-bound, one
    fused kernel (one launch); 0 for no parameters."""
    if param_elems <= 0:
        return 0.0
    return param_elems * optimizer_bytes_per_param(bytes_per_elem) / kind.mem_bw_bytes_per_s + kind.launch_overhead_s
