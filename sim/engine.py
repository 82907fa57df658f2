"""The event queue: one heap of ``(time, priority, sequence, event)`` tuples.

``sequence`` is an increasing counter, so events at the same time and priority are
served in the order they were scheduled, identically on every run. Lower priority
values are served first at equal times; the named constants say which. Scheduling in
the past (a negative delay, or a time before ``now``) is an error. The executor's hot
loop (``sim.execute``) pushes the same tuples with ``heapq`` directly, for speed.
"""
from __future__ import annotations

import heapq
from typing import Any

#: a transfer on a link finishes (processor-sharing links): frees bandwidth before arrivals
PRIO_DONE = 0
#: a transfer arrives at a link (or a contention-free link) and asks for service
PRIO_ARRIVE = 1


class EventQueue:
    """A deterministic time-ordered heap; ``now`` is the time of the last popped event."""

    __slots__ = ("_heap", "_seq", "now")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self.now = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, delay: float, priority: int, event: Any) -> int:
        """Schedule ``event`` ``delay`` seconds after ``now``; returns its sequence number."""
        if not delay >= 0:
            raise ValueError(f"negative or NaN delay {delay!r} for event {event!r}")
        return self.schedule_at(self.now + delay, priority, event)

    def schedule_at(self, time: float, priority: int, event: Any) -> int:
        if not time >= self.now:
            raise ValueError(f"event {event!r} scheduled at {time!r}, before now = {self.now!r}")
        seq = self._seq
        self._seq += 1
        heapq.heappush(self._heap, (time, priority, seq, event))
        return seq

    def pop(self) -> tuple[float, int, int, Any]:
        item = heapq.heappop(self._heap)
        self.now = item[0]
        return item
