"""Ctrl-C during a long run: the first one stops it with the best result so far, a
second one aborts.

``stop_on_interrupt()`` is a context manager that, in the main thread, replaces
Python's default SIGINT handler for its duration. Its ``Stop`` is shared by nested
blocks (the CLI, ``distplan.solve`` and ``model.solve`` each open one; the outermost
owns the handler):

- a SIGINT while nothing worth keeping exists (``Stop.armed`` is False), or a second
  SIGINT, raises KeyboardInterrupt as usual (``Stop.aborted`` is then True);
- a first SIGINT after ``Stop.arm()`` (a plan exists) only sets ``Stop.requested``:
  the long computation sees it at its next check (``model.progress.Clock.expired``,
  HiGHS's interrupt callback) and returns what it has.

Outside the main thread, or when someone else already replaced the SIGINT handler, the
block changes nothing and its Stop is never requested.
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Stop:
    """What Ctrl-C asked of the run in progress (see the module docstring)."""

    requested: bool = False    # the first Ctrl-C after arm(): stop with the best so far
    armed: bool = False        # something worth keeping exists
    aborted: bool = False      # a Ctrl-C raised KeyboardInterrupt
    handled: bool = False      # a SIGINT handler of this block is installed
    notice: str | None = None  # written to stderr when a stop is requested

    def arm(self) -> None:
        """From now on a first Ctrl-C stops gracefully instead of aborting."""
        self.armed = True

    def request(self) -> None:
        """Ask the run to stop with the best result so far (what a first Ctrl-C does)."""
        self.requested = True

    def check_abort(self) -> None:
        """Raise KeyboardInterrupt if a Ctrl-C aborted while code that swallows
        exceptions (a solver callback) was running."""
        if self.aborted:
            raise KeyboardInterrupt


_active: Stop | None = None


def current_stop() -> Stop | None:
    """The Stop of the enclosing ``stop_on_interrupt`` block of the main thread, if any."""
    return _active if threading.current_thread() is threading.main_thread() else None


@contextmanager
def stop_on_interrupt(notice: str | None = None) -> Iterator[Stop]:
    """Within the block, Ctrl-C stops gracefully once ``Stop.arm()`` was called (module
    docstring). ``notice``: a line written to stderr when the first Ctrl-C asks to stop
    (the outermost block's notice wins)."""
    global _active
    outer = current_stop()
    if outer is not None:
        yield outer
        return
    stop = Stop(notice=notice)
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield stop
        return

    def handler(signum, frame) -> None:
        if stop.armed and not stop.requested:
            stop.requested = True
            if stop.notice:
                try:
                    os.write(2, (stop.notice + "\n").encode())
                except OSError:
                    pass
            return
        stop.aborted = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    stop.handled = True
    _active = stop
    try:
        yield stop
    finally:
        _active = None
        signal.signal(signal.SIGINT, previous)
