"""Chrome / Perfetto trace export: one track per device and per link.

Open the file in ``chrome://tracing`` or https://ui.perfetto.dev. Process 0 holds the
devices (thread = device index), process 1 the links (thread = link index); every
executed node is one complete ('X') event, times in microseconds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from distplan.costs.problem import Problem
from distplan.core.atomic import write_json_atomic
from distplan.core.errors import DistplanError

PID_DEVICES = 0
PID_LINKS = 1


def chrome_trace(result_or_events: Any, problem: Problem) -> dict[str, Any]:
    """The trace document for a SimResult (simulated with ``trace=True``) or its events."""
    events = getattr(result_or_events, "events", result_or_events)
    if events is None:
        raise DistplanError("this result has no trace events; simulate with SimOptions(trace=True)")
    topo = problem.topology
    D = topo.n_devices
    out: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": PID_DEVICES, "args": {"name": "devices"}},
        {"ph": "M", "name": "process_name", "pid": PID_LINKS, "args": {"name": "links"}},
    ]
    for d, dev in enumerate(topo.devices):
        out.append({"ph": "M", "name": "thread_name", "pid": PID_DEVICES, "tid": d,
                    "args": {"name": f"{dev.name} ({dev.kind})"}})
    for i, l in enumerate(topo.links):
        out.append({"ph": "M", "name": "thread_name", "pid": PID_LINKS, "tid": i,
                    "args": {"name": f"{l.src}->{l.dst}"}})
    for server, start_s, dur_s, name, cat in events:
        pid, tid = (PID_DEVICES, server) if server < D else (PID_LINKS, server - D)
        out.append({"ph": "X", "name": name, "cat": cat, "pid": pid, "tid": tid,
                    "ts": start_s * 1e6, "dur": dur_s * 1e6})
    return {"traceEvents": out, "displayTimeUnit": "ns"}


def write_chrome_trace(result_or_events: Any, problem: Problem, path: str | Path) -> None:
    """Write :func:`chrome_trace` as JSON to ``path``, atomically (core.atomic)."""
    write_json_atomic(path, chrome_trace(result_or_events, problem), "trace file")
