"""sim: the exact discrete-event simulator that judges every plan.

``simulate(problem, plan, options) -> SimResult`` replays a Plan on the Problem's
hardware: devices run operator tasks (and precision casts) one at a time in a static
per-device order set by the schedule; tensors cross stage boundaries hop by hop, store
and forward on every link of every route; training adds backward tasks, gradient
transfers on the reverse hops and a ring all-reduce of each data-parallel stage's
gradients. See ``sim.program`` (what runs where and in which order), ``sim.execute``
(the event loop), ``sim.memory``, ``sim.period`` and ``sim.options``.
"""
from sim.options import LINK_MODELS, SimOptions
from sim.result import SimResult
from sim.simulate import simulate

__all__ = ["simulate", "SimOptions", "SimResult", "LINK_MODELS"]
