"""Run a list of RunSpecs on a local process pool (default) or an existing Dask cluster,
appending each finished run's rows to the CSV and printing one progress line per run.

Runs already complete in the CSV are skipped (resume). Results are written by the
driving process as they arrive (``as_completed``), never by the workers, so there is
one writer. Local pool: ``concurrent.futures.ProcessPoolExecutor`` with the 'spawn'
start method (HiGHS threads and fork do not mix). Dask: ``dask.distributed.Client`` on
the scheduler address (``tcp://host:8786``, or any address a Client accepts); the
workers must be able to import distplan (same checkout or an installed package).
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from distplan.studies.runner import run_one, summary
from distplan.studies.spec import RunSpec
from distplan.studies.store import append_rows, finished_keys


@dataclass(frozen=True)
class SweepReport:
    total: int
    skipped: int
    ran: int
    seconds: float
    csv_path: Path


def pending(specs: Sequence[RunSpec], csv_path: str | Path) -> list[RunSpec]:
    """The specs whose runs are not yet complete in the CSV (duplicates dropped)."""
    uniq = list({s.key(): s for s in specs}.values())
    done = finished_keys(csv_path, {s.key(): s.all_methods for s in uniq})
    return [s for s in uniq if s.key() not in done]


def run_sweep(specs: Sequence[RunSpec], csv_path: str | Path, scheduler: str | None = None,
              workers: int | None = None, progress: Callable[[str], None] | None = None,
              client=None) -> SweepReport:
    """Run every pending spec; ``scheduler`` (address) or ``client`` selects Dask."""
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    todo = pending(specs, csv_path)
    n_all = len({s.key() for s in specs})
    skipped = n_all - len(todo)
    say(f"study: {n_all} runs, {skipped} already in {csv_path}, {len(todo)} to do")
    done = 0

    def record(spec: RunSpec, rows) -> None:
        nonlocal done
        append_rows(csv_path, rows)
        done += 1
        say(f"[{skipped + done}/{n_all}] {spec.label()}: {summary(rows)} "
            f"({time.perf_counter() - t0:.0f} s elapsed)")

    if todo and (scheduler is not None or client is not None):
        _run_dask(todo, record, scheduler, client)
    elif todo:
        _run_pool(todo, record, workers)
    return SweepReport(n_all, skipped, done, time.perf_counter() - t0, Path(csv_path))


def _run_pool(todo: list[RunSpec], record, workers: int | None) -> None:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    n = max(1, min(workers or os.cpu_count() or 1, len(todo)))
    if n == 1:
        for s in todo:
            record(s, run_one(s))
        return
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as ex:
        futs = {ex.submit(run_one, s): s for s in todo}
        for f in as_completed(futs):
            record(futs[f], f.result())


def _run_dask(todo: list[RunSpec], record, scheduler: str | None, client) -> None:
    from dask.distributed import Client, as_completed

    own = client is None
    client = client or Client(scheduler)
    try:
        futs = {client.submit(run_one, s, pure=False, key=f"distplan-study-{uuid.uuid4().hex}"): s for s in todo}
        for f in as_completed(list(futs)):
            record(futs[f], f.result())
    finally:
        if own:
            client.close()


def stderr_progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
