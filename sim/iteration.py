"""One training iteration (optimizer step) from a simulated run of its microbatches.

A run of a plan's M microbatches covers the pipeline's fill, steady state and drain and
the data-parallel gradient reduction at its end; the step then adds, on every device at
once, the optimizer update (Adam, memory-bound: ``costs.compute.optimizer_step_s`` over
the parameters the device holds, tensor-parallel shares divided; a ZeRO-1 stage updates
1/r of them) and, for ZeRO-1, the all-gather of the updated parameters over the
replicas (a ring of r-1 steps of bytes/r, each timed over its route's links, bandwidth
and latency, without contention). ``iteration_s`` = makespan + the slowest device's
share; ``step_throughput_per_s`` = M x batch / iteration_s. Inference has no optimizer.
"""
from __future__ import annotations

import numpy as np

from distplan.core.plan import Plan
from distplan.costs.compute import optimizer_step_s
from distplan.costs.problem import Problem


def _ring_step_s(problem: Problem, devs: list[int], chunk: float) -> float:
    """The slowest hop of one ring step carrying ``chunk`` bytes between neighbours."""
    topo = problem.topology
    worst = 0.0
    for i, d in enumerate(devs):
        route = topo.route(d, devs[(i + 1) % len(devs)])
        worst = max(worst, sum(chunk / float(problem.link_bw_bytes_per_s[l]) + float(problem.link_latency_s[l])
                               for l in route))
    return worst


def optimizer_step_per_device_s(problem: Problem, plan: Plan) -> np.ndarray:
    """Seconds after the run until each device has its updated parameters (0 in
    inference): its optimizer update, and under ZeRO-1 the parameters' all-gather."""
    out = np.zeros(problem.n_devices)
    if not problem.training:
        return out
    elems_on = np.zeros(problem.n_devices)
    bytes_on = np.zeros(problem.n_devices)
    gather = np.zeros(problem.n_devices)
    for k, st in enumerate(plan.stages):
        share = st.replicas if st.zero and st.replicas > 1 else 1
        stage_bytes = 0.0
        for v in plan.ops_in_stage(k):
            elems = problem.graph.ops[v].param_elems / st.tensor_parallel
            b = float(problem.bytes_per_elem[problem.q_index(plan.op_precision[v])])
            stage_bytes += elems * b
            for d in st.devices:
                elems_on[d] += elems / share
                bytes_on[d] += elems * b / share
        if share > 1 and stage_bytes > 0:
            tp = st.tensor_parallel
            for j in range(tp):
                devs = [st.devices[i * tp + j] for i in range(st.replicas)]
                t = (st.replicas - 1) * _ring_step_s(problem, devs, stage_bytes / st.replicas)
                for d in devs:
                    gather[d] = max(gather[d], t)
    for d in range(problem.n_devices):
        if elems_on[d] > 0:
            kind = problem.topology.kind_of(d)
            # Adam's 24 bytes per parameter plus the gradient read and the working copy written
            out[d] = optimizer_step_s(elems_on[d], 0, kind) + bytes_on[d] * 2 / kind.mem_bw_bytes_per_s
    return out + gather


def iteration_s(problem: Problem, plan: Plan, makespan_s: float) -> tuple[float, float]:
    """(iteration seconds, the slowest device's seconds after the run)."""
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return makespan_s + opt, opt
