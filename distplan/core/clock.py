"""The one clock of a search, in every plan space and baseline: its start, its limit,
Ctrl-C, and what it cut short (issue 23)."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from distplan.core.interrupt import Stop


@dataclass(frozen=True)
class Clock:
    """Started at ``t0`` (perf_counter seconds) with ``limit_s`` seconds in all (inf: no
    limit). ``stop``: the Ctrl-C state (distplan.core.interrupt); a requested stop makes
    the clock expire at once. ``cut_short``: what the search left undone because the clock
    expired, one line each (SearchResult.cut_short)."""

    limit_s: float
    t0: float = field(default_factory=time.perf_counter)
    stop: Stop = field(default_factory=Stop)
    cut_short: list[str] = field(default_factory=list)

    @classmethod
    def until(cls, deadline: float, stop: Stop | None = None) -> Clock:
        """A clock started now that ends at the perf_counter instant ``deadline`` (inf: never)."""
        t0 = time.perf_counter()
        return cls(deadline - t0 if math.isfinite(deadline) else math.inf, t0, stop if stop is not None else Stop())

    @property
    def deadline(self) -> float:
        """The perf_counter instant the time limit ends."""
        return self.t0 + self.limit_s

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def remaining_s(self) -> float:
        """Seconds left (0 once a stop was requested)."""
        return 0.0 if self.stop.requested else self.limit_s - self.elapsed_s()

    left_s = remaining_s

    def expired(self) -> bool:
        """The time limit passed or Ctrl-C asked to stop."""
        return self.stop.requested or time.perf_counter() >= self.deadline

    def at(self, share: float) -> float:
        """The perf_counter instant when ``share`` of the limit has passed."""
        return self.t0 + share * self.limit_s

    def why(self) -> str:
        """The status a search cut short reports: "interrupted" (Ctrl-C) or "time_limit"."""
        return "interrupted" if self.stop.requested else "time_limit"

    def cut(self, what: str, say: Callable[[str], None] | None = None) -> None:
        """Record (and say) something left undone because the clock expired."""
        line = f"{what} ({'interrupted' if self.stop.requested else 'time limit'})"
        self.cut_short.append(line)
        if say is not None:
            say("cut short: " + line)
