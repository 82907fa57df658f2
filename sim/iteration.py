"""One training iteration (optimizer step) from a simulated run of its microbatches.

A run of a plan's M microbatches covers the pipeline's fill, steady state and drain and
the data-parallel gradient reduction at its end; the step then adds, on every device at
once, the optimizer update (Adam, memory-bound: ``costs.compute.optimizer_step_s`` over
the parameters the device holds, tensor-parallel shares divided; a ZeRO stage updates
1/r of them) and, for ZeRO-1 and 2, the all-gather of the updated parameters over the
replicas (a ring of r-1 steps of bytes/r, each timed over its route's links, bandwidth
and latency, without contention). ``iteration_s`` = makespan + the slowest device's
share; ``step_throughput_per_s`` = M x batch / iteration_s. Inference has no optimizer.
"""
from __future__ import annotations

from distplan.core.plan import Plan
from distplan.costs.iteration import optimizer_step_per_device_s
from distplan.costs.problem import Problem


def iteration_s(problem: Problem, plan: Plan, makespan_s: float) -> tuple[float, float]:
    """(iteration seconds, the slowest device's seconds after the run)."""
    opt = float(optimizer_step_per_device_s(problem, plan).max(initial=0.0))
    return makespan_s + opt, opt
