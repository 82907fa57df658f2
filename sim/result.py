"""The outcome of one simulation run."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class SimResult:
    """What :func:`sim.simulate` measured.

    ``period_s``: steady-state time between microbatch completions. It is read from the
    in-order completion times (running maximum of ``microbatch_done_s``) once the run is
    periodic (``sim.period.steady_period``; ``steady`` True). The steady state does not
    depend on the microbatch count: when the plan's own run is too short to show it, the
    same program is run again with more microbatches (4 x rounds of fill + 64, then 4x
    more, within a budget of 1e6 nodes) for the period alone (every other figure is from
    the plan's run). Two servers whose loads nearly tie (as optimised plans often have)
    settle late, so this matters. If no periodic regime is found (``steady`` False: a
    time-dependent link order may never settle, or the longer run would exceed the node
    budget, as for large tensor-parallel plans whose all-reduce rings make the static
    order span more rounds than there are microbatches), the period is the longest run's
    average spacing over its last half past the fill, or, when that run is all fill (its
    microbatches finish in one burst), its own rate: last completion / microbatches.
    GPipe flushes every step and has no steady state: its period is ``makespan_s /
    microbatches``. In every case the period is at least the busiest server's work per
    microbatch (``sim.simulate.work_per_microbatch``: devices with their TP shares and
    casts, links with every hop and TP all-reduce step), so no plan reports a throughput
    its hardware cannot reach.
    ``throughput_per_s`` = batch_size / period_s (samples per second).
    Busy fractions are busy seconds / makespan (with the ``free`` link model overlapping
    transfers add up, so a link's figure may exceed 1).
    ``peak_memory_bytes`` counts everything resident on a device (static bytes, the
    device's own activations, received, relayed and cast tensors, gradients);
    ``peak_own_memory_bytes`` only static bytes plus own activations, the quantity
    ``costs.evaluate.plan_memory_bytes`` bounds.
    ``iteration_s``: one training step over the run's microbatches (fill, steady state,
    drain, the all-reduce left exposed, then ``optimizer_s``, the optimizer update of
    the slowest device; ``sim.iteration``); in inference the run's makespan.
    ``step_throughput_per_s`` = microbatches x batch / iteration_s: what a user's
    samples per step see, below ``throughput_per_s`` by the fill, drain and update.
    """

    makespan_s: float
    period_s: float
    throughput_per_s: float
    steady: bool
    device_busy_s: np.ndarray
    device_busy_fraction: np.ndarray
    link_busy_s: np.ndarray
    link_busy_fraction: np.ndarray
    link_bytes: np.ndarray
    peak_memory_bytes: np.ndarray
    peak_own_memory_bytes: np.ndarray
    microbatch_done_s: np.ndarray
    n_tasks: int
    n_nodes: int
    schedule: str
    microbatches: int
    events: tuple | None = field(default=None, repr=False)
    iteration_s: float = float("nan")
    optimizer_s: float = 0.0
    step_throughput_per_s: float = float("nan")

    def summary(self) -> str:
        step = (f"iteration {self.iteration_s:.6g} s ({self.step_throughput_per_s:.6g} samples/s per step, "
                f"optimizer {self.optimizer_s:.3g} s), " if self.optimizer_s > 0 else "")
        return (f"makespan {self.makespan_s:.6g} s, period {self.period_s:.6g} s"
                f"{'' if self.steady else ' (not steady)'}, throughput {self.throughput_per_s:.6g} samples/s, {step}"
                f"{self.n_tasks} operator tasks, peak memory {self.peak_memory_bytes.max(initial=0) / 2**20:.2f} MiB, "
                f"busiest device {self.device_busy_fraction.max(initial=0):.1%}, "
                f"busiest link {self.link_busy_fraction.max(initial=0):.1%}")
