"""A solve's log (one line per event); its clock is ``distplan.core.clock.Clock``,
re-exported here."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from distplan.core.clock import Clock  # noqa: F401  (the one clock, re-exported)


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
