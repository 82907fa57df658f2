"""The run's deadline in the phases before and around the solve: reading, validating,
fusing, coarsening and costing a graph, and building the MILP.

A command line's ``--time-limit`` counts from the process's start, loading included
(issue 26). The solve has its own clock (``core.clock.Clock``); the layers below it
(workloads, costs) cannot see that clock, so the run's deadline is ambient: the CLI (and
``distplan.solve``) sets it with :func:`deadline_at`, and every long loop calls
:func:`check_time` every few thousand steps. Past the deadline it raises a
``DistplanError`` that names the phase, the size of what it was working on and the
limit: ``solve.py`` prints it as one ``error:`` line and exits 2. Without a deadline set
(a notebook calling ``distplan.problem``) nothing is ever cut short.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from distplan.core.errors import DistplanError


@dataclass(frozen=True)
class Deadline:
    """``at_s``: the perf_counter instant the limit and its grace (``grace_s``) end;
    ``limit_s``: the limit itself and ``started_s`` when it started counting. An inactive deadline
    (``active`` False) cuts nothing short: it is the run's limit, which a deadline set
    inside it names in its message (``solve.py``'s 20 s from the process's start, not the
    solve's remaining 1.9 s)."""

    at_s: float
    limit_s: float
    started_s: float
    active: bool = True

    def left_s(self) -> float:
        return self.at_s - time.perf_counter()


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("distplan_deadline", default=None)


def grace_s(limit_s: float) -> float:
    """How far past its limit a phase that has no plan yet may run before it gives up
    (10 % + 3 s: within issue 26's bound of 10 % + 5 s, 2 s kept for what follows). A
    small graph on a loaded machine then still gets its plan, late by a second, rather
    than an error; what cannot finish by then stops with one."""
    return 0.1 * limit_s + 3.0


@contextlib.contextmanager
def deadline_at(started_s: float, limit_s: float, active: bool = True) -> Iterator[Deadline]:
    """Within the block, :func:`check_time` fails once ``limit_s`` seconds have passed
    since ``started_s`` (perf_counter seconds); ``active`` False: nothing fails, the
    deadline only names the run's limit (and caps the deadline) for one set inside it.
    The earlier of the two wins; an outer one's limit and start are the ones messages name."""
    d = Deadline(started_s + limit_s + grace_s(limit_s), limit_s, started_s, active)
    outer = _CURRENT.get()
    if outer is not None:
        d = Deadline(min(outer.at_s, d.at_s), outer.limit_s, outer.started_s, active or outer.active)
    token = _CURRENT.set(d)
    try:
        yield d
    finally:
        _CURRENT.reset(token)


def current_deadline() -> Deadline | None:
    """The deadline set by the innermost :func:`deadline_at`, or None."""
    return _CURRENT.get()


def seconds_left() -> float:
    """Seconds until the current deadline (inf without one)."""
    d = _CURRENT.get()
    return math.inf if d is None or not d.active else d.left_s()


def check_time(phase: str, size: str) -> None:
    """Raise a DistplanError if the current deadline has passed: ``phase`` says what was
    running ("coarsening the graph"), ``size`` what it worked on ("100,000 ops, 99,999
    tensors")."""
    d = _CURRENT.get()
    if d is None or not d.active:
        return
    now = time.perf_counter()
    if now >= d.at_s:
        raise DistplanError(f"the time limit of {d.limit_s:g} s ran out while {phase} ({size}), "
                            f"{now - d.started_s:.1f} s after the start; raise --time-limit, or give a smaller "
                            "graph (fewer ops, or a coarser export)")


def graph_size(n_ops: int, n_tensors: int) -> str:
    """``"100,000 ops, 99,999 tensors"``: a graph's size in a message."""
    return f"{n_ops:,} ops, {n_tensors:,} tensors"


def check_fits(what: str, size: str, need_s: float) -> None:
    """Refuse up front what cannot be done in the time left of the current deadline:
    ``what`` ("graph file 'x.json'") of ``size`` needs at least ``need_s`` seconds (a
    floor: the caller's forecast on a fast machine), so the run would end past its limit."""
    d = _CURRENT.get()
    if d is None or not d.active:
        return
    left = d.started_s + d.limit_s - time.perf_counter()   # the limit itself: no grace for a forecast
    if need_s > left:
        raise DistplanError(f"{what} has {size}: reading, checking, costing and coarsening that takes at least "
                            f"{need_s:.0f} s, more than the {max(left, 0.0):.1f} s left of the time limit of "
                            f"{d.limit_s:g} s; raise --time-limit to at least "
                            f"{math.ceil(need_s + (d.limit_s - max(left, 0.0)) + 1):g} s, or give a smaller graph")
