"""A solve's clock (its time limit, end to end) and its log (one line per event)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Clock:
    """Started at ``t0`` (perf_counter seconds) with ``limit_s`` seconds in all."""

    limit_s: float
    t0: float = field(default_factory=time.perf_counter)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def left_s(self) -> float:
        return self.limit_s - self.elapsed_s()

    def at(self, share: float) -> float:
        """The perf_counter instant when ``share`` of the limit has passed."""
        return self.t0 + share * self.limit_s


@dataclass(frozen=True)
class Log:
    """Lines said so far, each also handed to ``progress`` (SolveOptions.progress)."""

    progress: Callable[[str], None] | None = None
    lines: list[str] = field(default_factory=list)

    def __call__(self, msg: str) -> None:
        self.lines.append(msg)
        if self.progress is not None:
            self.progress(msg)


def fmt(x: float) -> str:
    """A period or bound in a log line."""
    return f"{x:.6g}"
