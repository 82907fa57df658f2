"""HiGHS runs a Ctrl-C can stop (distplan.core.interrupt): ``run_watched`` runs
``h.run()`` in a worker thread while the main thread waits and sees the signal, and
``interrupt_on_stop`` makes HiGHS stop at its next interrupt callback once a stop is
requested (it then returns its incumbent and dual bound). HiGHS calls none during its
root LP, which can last many seconds, so after ``ABANDON_AFTER_S`` a run is left to
finish on its own; ``abandoned_alive()`` tells a command line whether to leave with
``os._exit`` rather than wait for it. Used by the Pyomo-built MILPs (``model.highs``)
and the stage MILP, built in highspy directly (``model.stage_milp``).
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import highspy

from distplan.core.interrupt import Stop

#: seconds a requested stop waits for HiGHS's own interrupt before leaving it running
ABANDON_AFTER_S = 1.0

_abandoned: list[threading.Thread] = []


def abandoned_alive() -> int:
    """HiGHS runs left running after a Ctrl-C that have not finished yet."""
    _abandoned[:] = [t for t in _abandoned if t.is_alive()]
    return len(_abandoned)


def run_watched(h: "highspy.Highs", stop: Stop | None, abandon_at: float = math.inf
                ) -> tuple[bool, threading.Thread | None]:
    """``h.run()`` in a worker thread while this (main) thread waits and sees Ctrl-C
    (module docstring): (True, None) when it finished, (False, its thread) when a
    requested stop left it running after ``ABANDON_AFTER_S``, or it still ran at
    ``abandon_at`` (a perf_counter instant: HiGHS 1.16 can overrun its own time limit
    in root cut separation, which calls no callback: 19.3 s asked, 117.7 s taken on
    llama3-70b h100x16's stage MILP); the instance is then never used again
    (``abandoned_alive``)."""
    done = threading.Event()
    failed: list[BaseException] = []

    def work() -> None:
        try:
            h.run()
        except BaseException as e:   # raised again in the waiting thread
            failed.append(e)
        finally:
            done.set()

    th = threading.Thread(target=work, name="distplan-highs")
    th.start()
    left = None
    try:
        while not done.wait(0.05):
            if stop is not None and stop.requested and not done.wait(ABANDON_AFTER_S):
                break
            if time.perf_counter() > abandon_at:
                break
    finally:
        if not done.is_set():   # a requested stop, or KeyboardInterrupt (abort)
            left = th
            _abandoned.append(th)
    if failed:
        raise failed[0]
    return done.is_set(), left


def interrupt_on_stop(h: "highspy.Highs", stop_of: Callable[[], Stop | None]) -> None:
    """Make HiGHS stop at its next interrupt callback once ``stop_of()`` asks to (it then
    returns its incumbent and bound, status kInterrupt)."""
    def on_interrupt(e) -> None:
        stop = stop_of()
        if stop is not None and (stop.requested or stop.aborted):
            e.interrupt()
    h.cbMipInterrupt.subscribe(on_interrupt)
