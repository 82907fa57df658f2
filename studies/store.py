"""The study's CSV: one row per (run, method), appended as each run finishes.

All rows of a run are written in one ``write`` followed by flush and fsync, so an
interrupted sweep loses at most the run in flight; a torn last line (the process
killed mid-write) is detected on the next append (the file does not end in a
newline), closed off, and ignored on reading. Reading keeps the last row per
(run key, method), so a re-run supersedes an older one.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

from distplan.core.atomic import write_atomic
from distplan.studies.spec import KEY_FIELDS

FIELDS = (*KEY_FIELDS, "method", "status", "objective_s", "bound_s", "gap", "seconds", "throughput_per_s",
          "ratio_to_milp", "candidates", "rejected", "implausible", "plan_shape", "n_ops", "n_devices", "n_binaries", "n_constraints",
          "ceiling_per_s", "error", "finished_at")


def row_key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(f, "") for f in KEY_FIELDS)  # CSVs older than a key field read it as unset


def read_rows(path: str | Path) -> list[dict[str, str]]:
    """Complete rows of the CSV, the last one per (run key, method), in file order."""
    p = Path(path)
    if not p.exists():
        return []
    lines = p.read_text().splitlines()
    if not lines:
        return []
    header = next(csv.reader([lines[0]]))
    rows = []
    for line in lines[1:]:  # one physical line per row: a torn line cannot swallow the next
        vals = next(csv.reader([line]), [])
        if len(vals) == len(header):
            r = dict(zip(header, vals))
            if all(k in r for k in FIELDS) and r["finished_at"]:
                rows.append(r)
    last: dict[tuple, dict[str, str]] = {}
    for r in rows:
        last[(*row_key(r), r["method"])] = r
    return list(last.values())


def finished_keys(path: str | Path, methods_by_key: dict[tuple, tuple[str, ...]]) -> set[tuple]:
    """Keys (among ``methods_by_key``) that have a row for every one of their methods."""
    have: dict[tuple, set[str]] = {}
    for r in read_rows(path):
        have.setdefault(row_key(r), set()).add(r["method"])
    return {k for k, ms in methods_by_key.items() if set(ms) <= have.get(k, set())}


def append_rows(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` (header first if the file is new): the file is rewritten whole and
    atomically (core.atomic), so a failed write keeps every row there before. One writer
    at a time (the sweep's driver records every run)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore", lineterminator="\n")
    new = not p.exists() or p.stat().st_size == 0
    prefix = ""
    if new:
        w.writeheader()
    else:
        with p.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                prefix = "\n"  # close a torn line left by an interrupted write
    for r in rows:
        w.writerow({k: _text(r.get(k, "")) for k in FIELDS})
    old = b"" if new else p.read_bytes()
    # the whole file again, atomically (core.atomic): a failed write keeps every row there before
    write_atomic(p, old + (prefix + buf.getvalue()).encode("utf-8"), "study results")


def _text(x: Any) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x)
    return " ".join(str(x).split())  # no newlines inside a field: one row, one line
