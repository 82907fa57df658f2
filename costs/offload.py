"""Offloading to host memory (``Stage.offload``): what it saves on the device, what it costs.

``optimizer`` (ZeRO-Offload's split): the fp32 master weights and Adam moments (12 B a
parameter) live on the host, the device keeps its 16-bit weights and gradients; after
the gradient reduction each device copies its gradients down the host link, the host
CPU runs Adam (memory-bound: ``compute.optimizer_bytes_per_param`` at the device
share's ``host_mem_bw_bytes_per_s``) and the updated parameters come back up, one
after the other (no overlap with the backward: an upper bound on DeepSpeed's).
``activations``: ``costs.offload_activations``. Both need a device kind with a host
link (``DeviceKind.host_link_bytes_per_s``), training, ZeRO 0; activations the 1F1B
schedule. Rules and figures: docs/guides/whatif-and-simulator.md, "Offloading".
"""
from __future__ import annotations

from distplan.core.plan import OFFLOAD, Plan
from distplan.costs.compute import optimizer_bytes_per_param
from distplan.costs.memory import OPTIMIZER_BYTES_PER_PARAM


def offloads(plan: Plan, k: int, what: str) -> bool:
    """Whether stage k keeps ``what`` (``OFFLOAD``) in host memory."""
    return what in plan.stages[k].offload


def offload_violations(problem, plan: Plan) -> list[str]:
    """What is wrong with the plan's offloading, one line each (empty: nothing)."""
    out: list[str] = []
    topo = problem.topology
    for k, st in enumerate(plan.stages):
        if not st.offload:
            continue
        bad = [x for x in st.offload if x not in OFFLOAD]
        if bad:
            out.append(f"stage {k}: offload {', '.join(map(repr, bad))} unknown; use a subset of {', '.join(OFFLOAD)}")
            continue
        if not problem.training:
            out.append(f"stage {k}: offload applies to training only (inference keeps no optimizer state "
                       "and no saved activations)")
            continue
        if st.zero:
            out.append(f"stage {k}: offload is modelled with zero 0, not zero {st.zero}")
        if "activations" in st.offload and plan.schedule != "1f1b":
            out.append(f"stage {k}: activation offload is modelled for the 1f1b schedule, not {plan.schedule!r}")
        for d in st.devices:
            kind = topo.kind_of(d)
            if not kind.host_link_bytes_per_s > 0 or ("optimizer" in st.offload and not kind.host_mem_bw_bytes_per_s > 0):
                out.append(f"stage {k}: device {topo.devices[d].name} ({kind.name}) has no host link to offload "
                           "over; give its kind host_link_GBps and host_memory_GBps, or drop the offload")
                break
    return out


def optimizer_saved_bytes(problem, plan: Plan, v: int) -> float:
    """Static bytes per device op v's stage does not hold because its optimizer state is
    on the host: 12 B a parameter, per tensor-parallel rank (0 without)."""
    k = plan.op_stage[v]
    if not problem.training or not offloads(plan, k, "optimizer"):
        return 0.0
    return float(problem.graph.ops[v].param_elems) * OPTIMIZER_BYTES_PER_PARAM / plan.stages[k].tensor_parallel


def host_optimizer_step_s(param_elems: float, param_bytes: float, kind) -> float:
    """One device's optimizer step on the host (module docstring): its gradients down
    (``param_bytes``, at the parameters' width), Adam over ``param_elems`` on the host CPU
    (24 B of fp32 state a parameter, plus reading the gradient and writing the 16-bit
    copy), the parameters up; 0 for no parameters."""
    if param_elems <= 0:
        return 0.0
    link = kind.host_link_bytes_per_s
    adam = (param_elems * optimizer_bytes_per_param(0) + 2 * param_bytes) / kind.host_mem_bw_bytes_per_s
    return param_bytes / link + adam + param_bytes / link
