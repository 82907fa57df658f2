"""The outcome of one simulation run."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class SimResult:
    """What :func:`sim.simulate` measured; each field's meaning is in its docstring below.

    Busy fractions are busy seconds / makespan (with the ``free`` link model overlapping
    transfers add up, so a link's figure may exceed 1).
    """

    makespan_s: float
    period_s: float
    """Steady-state time between microbatch completions (docs/concepts/simulator.md, "The
    steady-state period"); at least the busiest server's work per microbatch."""
    throughput_per_s: float
    """batch_size / period_s (samples per second)."""
    steady: bool
    """Whether a periodic (or saturated) regime was found."""
    device_busy_s: np.ndarray
    device_busy_fraction: np.ndarray
    link_busy_s: np.ndarray
    link_busy_fraction: np.ndarray
    link_bytes: np.ndarray
    peak_memory_bytes: np.ndarray
    """Everything resident on a device (static bytes, the device's own activations,
    received, relayed and cast tensors, gradients)."""
    peak_own_memory_bytes: np.ndarray
    """Only static bytes plus own activations: what ``costs.evaluate.plan_memory_bytes``
    bounds."""
    microbatch_done_s: np.ndarray
    n_tasks: int
    n_nodes: int
    schedule: str
    microbatches: int
    events: tuple | None = field(default=None, repr=False)
    iteration_s: float = float("nan")
    """One training step over the run's microbatches (fill, steady state, drain, the
    all-reduce left exposed, then ``optimizer_s``; ``sim.iteration``); in inference the
    run's makespan."""
    optimizer_s: float = 0.0
    """The optimizer update of the slowest device."""
    step_throughput_per_s: float = float("nan")
    """microbatches x batch / iteration_s: what a user's samples per step see, below
    ``throughput_per_s`` by the fill, drain and update."""

    def summary(self) -> str:
        step = (f"iteration {self.iteration_s:.6g} s ({self.step_throughput_per_s:.6g} samples/s per step, "
                f"optimizer {self.optimizer_s:.3g} s), " if self.optimizer_s > 0 else "")
        return (f"makespan {self.makespan_s:.6g} s, period {self.period_s:.6g} s"
                f"{'' if self.steady else ' (not steady)'}, throughput {self.throughput_per_s:.6g} samples/s, {step}"
                f"{self.n_tasks} operator tasks, peak memory {self.peak_memory_bytes.max(initial=0) / 2**20:.2f} MiB, "
                f"busiest device {self.device_busy_fraction.max(initial=0):.1%}, "
                f"busiest link {self.link_busy_fraction.max(initial=0):.1%}")
