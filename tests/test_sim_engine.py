"""The event queue: time order, priority and sequence tie-breaks, no scheduling in the past."""
from __future__ import annotations

import pytest

from distplan.sim.engine import PRIO_ARRIVE, PRIO_DONE, EventQueue


def test_ties_break_by_priority_then_schedule_order():
    q = EventQueue()
    q.schedule(1.0, PRIO_ARRIVE, "a1")
    q.schedule(1.0, PRIO_DONE, "d1")
    q.schedule(0.5, PRIO_ARRIVE, "early")
    q.schedule(1.0, PRIO_ARRIVE, "a2")
    q.schedule(1.0, PRIO_DONE, "d2")
    log = [q.pop()[3] for _ in range(len(q))]
    assert log == ["early", "d1", "d2", "a1", "a2"]
    assert q.now == 1.0


def test_negative_delay_and_past_times_are_rejected():
    q = EventQueue()
    q.schedule(2.0, PRIO_ARRIVE, "x")
    q.pop()
    with pytest.raises(ValueError, match="negative"):
        q.schedule(-1e-9, PRIO_ARRIVE, "y")
    with pytest.raises(ValueError, match="before now"):
        q.schedule_at(1.0, PRIO_ARRIVE, "z")
    with pytest.raises(ValueError):
        q.schedule(float("nan"), PRIO_ARRIVE, "n")
    assert q.schedule(0.0, PRIO_ARRIVE, "same time") == 1
