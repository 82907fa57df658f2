"""Pipeline schedule names: the one list every layer (CLI, costs, simulator, model) reads.

- ``stream``: inference; microbatches flow through the stages back to back.
- ``gpipe``: training; every forward before any backward, per device.
- ``1f1b``: training; one forward, one backward in the steady state (PipeDream-Flush).
- ``explicit``: a plan that lists each device's task order itself (plan files only).
"""
from __future__ import annotations

INFERENCE_SCHEDULES: tuple[str, ...] = ("stream",)
TRAINING_SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b")
#: the schedules a user can request for a problem
SCHEDULES: tuple[str, ...] = INFERENCE_SCHEDULES + TRAINING_SCHEDULES
#: every schedule a plan document may name
PLAN_SCHEDULES: tuple[str, ...] = SCHEDULES + ("explicit",)


def default_schedule(training: bool) -> str:
    """``1f1b`` for training, ``stream`` for inference."""
    return "1f1b" if training else "stream"
