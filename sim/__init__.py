"""sim: the exact discrete-event simulator that judges every plan.

``simulate(problem, plan, options) -> SimResult`` replays a Plan on the Problem's
hardware, reading the same numbers ``costs.evaluate.plan_cost`` linearises: operator
tasks in a static per-device order fixed by the schedule (``sim.schedule``), casts on
the consumer, store-and-forward transfers relayed stage by stage over the topology's
routes (``SimOptions.link_model``: fifo / fair / free), ring all-reduces for data and
tensor parallelism, and every buffer's lifetime (``sim.memory``). Times are seconds,
memory bytes. Guarantees: deterministic (same input, same output); the peak of each
device's own buffers never exceeds ``costs.evaluate.plan_memory_bytes`` in non-ideal
runs; in ideal mode with tensor_parallel = 1 the steady-state period equals
``plan_cost(problem, plan).period_s`` to 1e-9 (property-tested).

Semantics, schedules and the engine: docs/concepts/simulator.md, "What a plan executes".
"""
from distplan.sim.options import LINK_MODELS, SimOptions
from distplan.sim.result import SimResult
from distplan.sim.simulate import simulate

__all__ = ["simulate", "SimOptions", "SimResult", "LINK_MODELS"]
