"""Ctrl-C (SIGINT) and SIGTERM during a long run: the first one stops it with the best
result so far, a second one aborts.

``stop_on_interrupt()`` is a context manager that, in the main thread, replaces the
default SIGINT handler (and SIGTERM's default action) for its duration; nested blocks
(the CLI, ``distplan.solve``, ``distplan.api.pareto``, ``model.solve``) share one ``Stop``
and the outermost owns the handlers. SIGTERM counts as SIGINT; ``Stop.exit_status`` is
128 + the first signal's number (130, 143). A signal before ``Stop.arm()`` (nothing worth
keeping yet), or a second one, raises ``Interrupted`` (a KeyboardInterrupt;
``Stop.aborted``); a first one after it only sets ``Stop.requested``, which the long
computation sees at its next check and returns what it has; inside ``Stop.raising()``
the first one also raises at once. Outside the main thread, or for a signal whose
handler someone else replaced, the block changes nothing.
What the user sees: docs/guides/chiplets.md (time limit and Ctrl-C).
"""
from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class Interrupted(KeyboardInterrupt):
    """KeyboardInterrupt raised by a SIGINT or SIGTERM handler of ``stop_on_interrupt``."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal_name(signum))
        self.signum = int(signum)


def signal_name(signum: int | None) -> str:
    """How a message names the signal: "Ctrl-C" (SIGINT) or "SIGTERM"."""
    return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def exit_status(exc: BaseException | None = None, stop: "Stop | None" = None) -> int:
    """The exit status after an interruption: 128 + the signal (130 SIGINT, 143 SIGTERM),
    from ``stop``'s first signal or the exception's (130 when neither says)."""
    signum = stop.signum if stop is not None and stop.signum is not None else getattr(exc, "signum", None)
    return 128 + int(signum if signum is not None else signal.SIGINT)


@dataclass
class Stop:
    """What Ctrl-C asked of the run in progress (see the module docstring)."""

    requested: bool = False    # the first Ctrl-C after arm(): stop with the best so far
    armed: bool = False        # something worth keeping exists
    aborted: bool = False      # a Ctrl-C raised KeyboardInterrupt
    handled: bool = False      # a SIGINT handler of this block is installed
    notice: str | None = None  # written to stderr when a stop is requested
    signum: int | None = None  # the first signal received (SIGINT or SIGTERM)
    raise_now: bool = False    # inside raising(): a requested stop also raises at once

    @property
    def exit_status(self) -> int:
        """128 + the first signal (130 SIGINT, 143 SIGTERM)."""
        return exit_status(None, self)

    @property
    def name(self) -> str:
        """The first signal as a message says it: "Ctrl-C" or "SIGTERM"."""
        return signal_name(self.signum)

    @contextmanager
    def raising(self) -> Iterator[None]:
        """Within the block a first signal raises ``Interrupted`` at once (it still sets
        ``requested``): for a step whose partial work the caller drops."""
        before = self.raise_now
        self.raise_now = True
        try:
            yield
        finally:
            self.raise_now = before

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
            raise Interrupted(self.signum if self.signum is not None else signal.SIGINT)


_active: Stop | None = None


def _exit_at_once(signum, frame) -> None:
    """Before the command line's own handlers (while Python imports it): one line, exit
    128 + the signal; nothing was done yet."""
    try:
        os.write(2, f"interrupted ({signal_name(signum)}) while starting: nothing done\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


_exit_at_once.replaceable = True   # stop_on_interrupt takes over from it


def exit_early_on_signals() -> None:
    """For an entry script, before it imports the command line (a second or more of
    imports): a SIGINT or SIGTERM then exits at once with one line and 130 / 143 instead
    of a KeyboardInterrupt traceback from some import (or SIGTERM's silent death).
    ``stop_on_interrupt`` replaces these handlers like the defaults, and puts them back."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(s) is default:
            signal.signal(s, _exit_at_once)


def exit_quietly_on_signals(status: int) -> None:
    """For an entry script once its command is done (output flushed): a late signal
    (during the interpreter's teardown) exits with ``status``, no traceback."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) in (signal.default_int_handler, signal.SIG_DFL, _exit_at_once):
            signal.signal(s, lambda signum, frame: os._exit(status))


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
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    ours = [s for s, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
            if signal.getsignal(s) is default or getattr(signal.getsignal(s), "replaceable", False)]
    if not ours:
        yield stop
        return

    def handler(signum, frame) -> None:
        if stop.signum is None:
            stop.signum = signum
        if stop.armed and not stop.requested:
            stop.requested = True
            if stop.notice:
                note = stop.notice if signum == signal.SIGINT else stop.notice.replace("Ctrl-C", "SIGTERM")
                try:
                    os.write(2, (note + "\n").encode())
                except OSError:
                    pass
            if stop.raise_now:
                raise Interrupted(signum)
            return
        stop.aborted = True
        raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in ours}
    stop.handled = True
    _active = stop
    try:
        yield stop
    finally:
        _active = None
        for s, h in previous.items():
            signal.signal(s, h)
