"""One study run: build the problem, run the MILP and every baseline at the run's time
limit (``distplan.api.compare``), and turn the outcome into CSV rows.

``run_one`` is a plain module-level function of a picklable RunSpec, so it runs the same
in-process, in a process pool, or on a Dask worker; within one process runs take turns
(a lock), so a Dask worker with several threads runs one at a time — start workers
with one thread each (``dask worker --nthreads 1 --nworkers N``) for parallel runs. A run whose problem cannot be built
or solved (a user-level ``DistplanError``, e.g. a model that fits no device) still
yields one row per method, with status ``error`` and the message: it is a result, and a
resumed sweep does not retry it.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any

from distplan.core.errors import DistplanError
from distplan.studies.spec import RunSpec

#: one run at a time per process: Pyomo's output capture is not thread-safe, and a run
#: sharing its process (and GIL) with another would not get its full budget anyway
_RUN_LOCK = threading.Lock()


def _base(spec: RunSpec) -> dict[str, Any]:
    return dict(zip(("workload", "topology", "precisions", "mode", "batch_size", "seq_len", "seed",
                     "time_limit_s", "candidate_budget"), spec.key()))


def build(spec: RunSpec):
    from distplan.api import problem

    return problem(spec.workload, spec.topology, batch_size=spec.batch_size, seq_len=spec.seq_len,
                   mode=spec.mode, precisions=spec.precisions, microbatches=spec.microbatches)


def run_one(spec: RunSpec) -> list[dict[str, Any]]:
    """Rows (one per method, the MILP first) for ``spec`` (serialised within a process)."""
    with _RUN_LOCK:
        return _run(spec)


def _run(spec: RunSpec) -> list[dict[str, Any]]:
    from distplan.api.compare import compare, plan_shape
    from distplan.model import SolveOptions

    base = _base(spec)
    try:
        problem = build(spec)
        opts = SolveOptions(time_limit_s=spec.time_limit_s, seed=spec.seed, threads=spec.threads,
                            top_k=spec.top_k, rel_gap=spec.rel_gap)
        c = compare(problem, spec.methods, spec.time_limit_s, seed=spec.seed, solve_options=opts,
                    candidates=spec.candidate_budget)
        if c.milp.status == "interrupted":
            # a Ctrl-C during the MILP kept its best plan (distplan.core.interrupt); a sweep
            # stops instead, and records no cut-short run (it resumes on the next call)
            raise KeyboardInterrupt
    except DistplanError as e:
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        return [{**base, "method": m, "status": "error", "error": str(e), "finished_at": now}
                for m in spec.all_methods]
    now = time.strftime("%Y-%m-%dT%H:%M:%S")
    milp = c.milp
    common = dict(n_ops=problem.n_ops, n_devices=problem.n_devices, ceiling_per_s=c.ceiling_per_s,
                  n_binaries=milp.extra.get("binaries", ""), n_constraints=milp.extra.get("constraints", ""))
    rows = []
    for r in c.rows:
        rows.append({**base, **common, "method": r.method, "status": r.status, "objective_s": r.objective_s,
                     "bound_s": r.bound_s, "gap": r.gap, "seconds": r.seconds,
                     "throughput_per_s": r.throughput_per_s, "ratio_to_milp": c.ratio(r),
                     "candidates": r.candidates, "rejected": r.rejected, "implausible": r.implausible,
                     "plan_shape": plan_shape(r.plan), "error": "", "finished_at": now})
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """One progress line: MILP throughput, status and gap, each baseline's ratio to it."""
    by = {r["method"]: r for r in rows}
    m = by.get("milp", {})
    if m.get("status") == "error":
        return f"error: {m.get('error', '')[:120]}"
    gap = m.get("gap", math.nan)
    parts = [f"milp {float(m.get('throughput_per_s', 0)):.4g}/s {m.get('status')} gap {100 * float(gap):.2f}%"]
    for name, r in by.items():
        if name != "milp":
            parts.append(f"{name} {float(r.get('ratio_to_milp', math.nan)):.3f}")
    return " | ".join(parts)
