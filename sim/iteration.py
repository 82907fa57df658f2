"""One training iteration (optimizer step) from a simulated run of its microbatches.

A run of a plan's M microbatches covers the pipeline's fill, steady state and drain and
the data-parallel gradient all-reduces at its end; the step then adds the optimizer
update, on every device at once, as long as the slowest device's (Adam, memory-bound:
``costs.compute.optimizer_step_s`` over the parameters the device holds, tensor-parallel
shares divided). ``iteration_s`` = makespan + that update; ``step_throughput_per_s`` =
M x batch / iteration_s. Inference has no optimizer: its iteration is the run.
"""
from __future__ import annotations

import numpy as np

from distplan.core.plan import Plan
from distplan.costs.compute import optimizer_step_s
from distplan.costs.problem import Problem


def optimizer_step_per_device_s(problem: Problem, plan: Plan) -> np.ndarray:
    """Seconds of the optimizer update on each device (0 in inference)."""
    out = np.zeros(problem.n_devices)
    if not problem.training:
        return out
    bytes_on = np.zeros(problem.n_devices)
    elems_on = np.zeros(problem.n_devices)
    for v, op in enumerate(problem.graph.ops):
        st = plan.stages[plan.op_stage[v]]
        b = int(problem.bytes_per_elem[problem.q_index(plan.op_precision[v])])
        for d in st.devices:
            elems_on[d] += op.param_elems / st.tensor_parallel
            bytes_on[d] += op.param_elems / st.tensor_parallel * b
    for d in range(problem.n_devices):
        if elems_on[d] > 0:
            kind = problem.topology.kind_of(d)
            # the mean bytes per element of the device's parameters
            out[d] = optimizer_step_s(elems_on[d], 0, kind) + bytes_on[d] * 2 / kind.mem_bw_bytes_per_s
    return out


def iteration_s(problem: Problem, plan: Plan, makespan_s: float) -> tuple[float, float]:
    """(iteration seconds, optimizer seconds of the slowest device)."""
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return makespan_s + opt, opt
