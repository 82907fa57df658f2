"""Measured per-operator times: the ``distplan-profile`` file (version 1), strict on keys.

Keyed by operator name, then device kind name, then optionally the precision (a
precision's own ``fwd_s``/``bwd_s`` wins over the kind's). Seconds per microbatch, at
the graph's batch size; finite and >= 0. Kinds a topology does not have are not read;
what the profile does not give (an op, a kind, a precision, a backward) falls back to
the roofline (costs.compute.op_time_s). ``apply_profile(graph, profile)`` puts the times
on the graph's operators (``Operator.times``), so a graph file, a plan file and every
planner carry them.

Format, checks and an example: docs/guides/own-model.md, "Bring measured costs".
"""
from __future__ import annotations

import dataclasses
import difflib
import math
from pathlib import Path
from typing import Any

from distplan.core.atomic import write_json_atomic
from distplan.core.errors import DistplanError
from distplan.core.jsonfile import read_json_file
from distplan.core.precision import PRECISION_NAMES
from distplan.core.units import brief
from distplan.workloads.graph import Graph

FORMAT = "distplan-profile"
VERSION = 1
_TIME_KEYS = ("fwd_s", "bwd_s")


@dataclasses.dataclass(frozen=True)
class Profile:
    """Measured times: ``times[op][kind][precision] = (fwd_s, bwd_s)``, precision "" for
    every precision, a None time for "not measured". ``source``: where it was read."""

    times: dict[str, dict[str, dict[str, tuple[float | None, float | None]]]]
    source: str = "profile"

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({k for per_kind in self.times.values() for k in per_kind}))

    def entries(self) -> int:
        """Number of (op, kind, precision) entries."""
        return sum(len(per_prec) for per_kind in self.times.values() for per_prec in per_kind.values())


def _time(x: Any, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise DistplanError(f"{where} must be a number of seconds, got {brief(x)}")
    if not math.isfinite(x) or x < 0:
        raise DistplanError(f"{where} must be finite and >= 0 seconds, got {brief(x)}")
    return float(x)


def _pair(d: dict, where: str) -> tuple[float | None, float | None]:
    t = tuple(_time(d[k], f"{where}: {k}") if k in d else None for k in _TIME_KEYS)
    return t  # type: ignore[return-value]


def parse_entry(entry: Any, where: str) -> dict[str, dict[str, tuple[float | None, float | None]]]:
    """One op's ``{kind: {...}}`` object (as in a profile or a graph file's ``times``),
    checked: kind -> precision ("" for every precision) -> (fwd_s, bwd_s)."""
    if not isinstance(entry, dict) or not entry:
        raise DistplanError(f"{where}: expected an object of device kind -> times, got {brief(entry)}")
    out: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    for kind, body in entry.items():
        wk = f"{where}, kind {kind!r}"
        if not isinstance(kind, str) or not kind.strip():
            raise DistplanError(f"{where}: a device kind name must be a non-empty string, got {brief(kind)}")
        if not isinstance(body, dict) or not body:
            raise DistplanError(f"{wk}: expected an object of fwd_s/bwd_s or precision -> {{fwd_s, bwd_s}}, "
                                f"got {brief(body)}")
        per: dict[str, tuple[float | None, float | None]] = {}
        for key, val in body.items():
            if key in _TIME_KEYS:
                continue
            if key not in PRECISION_NAMES:
                close = difflib.get_close_matches(str(key), [*_TIME_KEYS, *PRECISION_NAMES], n=3)
                raise DistplanError(f"{wk}: unknown key {key!r}; a kind holds fwd_s, bwd_s or precision names "
                                    f"({', '.join(PRECISION_NAMES)})" + (f"; did you mean {', '.join(close)}?"
                                                                         if close else ""))
            wp = f"{wk}, {key}"
            if not isinstance(val, dict) or not val or set(val) - set(_TIME_KEYS):
                bad = sorted(set(val) - set(_TIME_KEYS)) if isinstance(val, dict) else None
                raise DistplanError(f"{wp}: expected {{\"fwd_s\": ..., \"bwd_s\": ...}}"
                                    + (f"; unknown keys {bad}" if bad else f", got {brief(val)}"))
            per[key] = _pair(val, wp)
        if any(k in body for k in _TIME_KEYS):
            per[""] = _pair(body, wk)
        out[kind] = per
    return out


def entry_to_dict(per_kind: dict[str, dict[str, tuple[float | None, float | None]]]) -> dict[str, Any]:
    """The JSON object of one op's times (the inverse of :func:`parse_entry`)."""
    out: dict[str, Any] = {}
    for kind in sorted(per_kind):
        body: dict[str, Any] = {}
        for prec in sorted(per_kind[kind], key=lambda p: (p != "", p)):
            t = {k: x for k, x in zip(_TIME_KEYS, per_kind[kind][prec]) if x is not None}
            if prec:
                body[prec] = t
            else:
                body.update(t)
        out[kind] = body
    return out


def profile_from_dict(d: Any, source: str = "profile") -> Profile:
    """A profile document, checked; every problem is a DistplanError naming the op, kind and key."""
    if not isinstance(d, dict):
        raise DistplanError(f"{source}: expected a JSON object")
    unknown = set(d) - {"format", "version", "ops", "meta"}
    if unknown:
        raise DistplanError(f"{source}: unknown keys {sorted(unknown)}; allowed format, version, ops, meta")
    if d.get("format") != FORMAT or d.get("version") != VERSION:
        raise DistplanError(f"{source}: format {brief(d.get('format'))} v{brief(d.get('version'))} unsupported; "
                            f"expected {FORMAT} v{VERSION}")
    ops = d.get("ops")
    if not isinstance(ops, dict) or not ops:
        raise DistplanError(f"{source}: 'ops' must be a non-empty object of operator name -> device kind -> times")
    times = {}
    for name, entry in ops.items():
        times[name] = parse_entry(entry, f"{source}: op {name!r}")
    return Profile(times, source)


def profile_to_dict(p: Profile, meta: dict | None = None) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, **({"meta": meta} if meta else {}),
            "ops": {name: entry_to_dict(p.times[name]) for name in p.times}}


def save_profile(p: Profile, path: str | Path, meta: dict | None = None) -> None:
    """Write ``p`` as a profile file, atomically (core.atomic); ``meta``: free-form notes
    (device, torch version, runs), kept in the file and not read back."""
    write_json_atomic(path, profile_to_dict(p, meta), "profile file", indent=1)


def load_profile(path: str | Path) -> Profile:
    """Read a profile file; every problem with it is one DistplanError naming the file."""
    src = f"profile file {str(path)!r}"
    return profile_from_dict(read_json_file(Path(path), "profile file"), source=src)


def as_profile(profile: "Profile | dict | str | Path") -> Profile:
    """A Profile, a profile document (dict) or the path of a profile file, as a Profile."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, dict):
        return profile_from_dict(profile)
    if isinstance(profile, (str, Path)):
        return load_profile(profile)
    raise DistplanError(f"profile must be a path, a profile document (dict) or a Profile, got "
                        f"{type(profile).__name__}")


def apply_profile(graph: Graph, profile: "Profile | dict | str | Path") -> Graph:
    """``graph`` with the profile's times on its operators (``Operator.times``; a
    profile entry replaces the graph's own for that kind and precision). Every op the
    profile names must be in the graph (else a DistplanError listing close names)."""
    p = as_profile(profile)
    names = [op.name for op in graph.ops]
    have = set(names)
    for name in p.times:
        if name not in have:
            close = difflib.get_close_matches(name, names, n=4, cutoff=0.5)
            raise DistplanError(f"{p.source}: op {name!r} is not in graph {graph.name!r} ({len(names)} ops)"
                                + (f"; close names: {', '.join(close)}" if close else
                                   f"; its ops are e.g. {', '.join(names[:4])}"))
    ops = []
    for op in graph.ops:
        entry = p.times.get(op.name)
        if entry is None:
            ops.append(op)
            continue
        rows = {(k, q): (f, b) for k, q, f, b in op.times}
        for kind, per in entry.items():
            for prec, (f, b) in per.items():
                rows[(kind, prec)] = (f, b)
        ops.append(dataclasses.replace(op, times=tuple((k, q, f, b) for (k, q), (f, b) in sorted(rows.items()))))
    return Graph(graph.name, tuple(ops), graph.tensors, graph.mode, graph.batch_size, graph.seq_len,
                 graph.import_warnings, dropout=graph.dropout, colocate=graph.colocate, tp_divides=graph.tp_divides)


def graph_profile(graph: Graph) -> Profile:
    """The per-kind times a graph's operators carry (``Operator.times``), as a Profile."""
    times: dict[str, dict[str, dict[str, tuple[float | None, float | None]]]] = {}
    for op in graph.ops:
        for k, q, f, b in op.times:
            times.setdefault(op.name, {}).setdefault(k, {})[q] = (f, b)
    return Profile(times, f"graph {graph.name!r}")


def check_kinds(profile: Profile, kind_names: tuple[str, ...] | list[str], topology: str) -> None:
    """A profile that names none of a topology's device kinds is a mistake (a typo, or
    the wrong machine): a DistplanError listing both sides."""
    if not profile.kinds or set(profile.kinds) & set(kind_names):
        return
    hints = [f"{k!r} -> {c[0]!r}?" for k in profile.kinds
             for c in [difflib.get_close_matches(k, list(kind_names), n=1, cutoff=0.5)] if c]
    raise DistplanError(f"{profile.source}: its device kinds ({', '.join(profile.kinds)}) are none of topology "
                        f"{topology!r}'s ({', '.join(kind_names)}), so it would change nothing"
                        + (f" ({'; '.join(hints)})" if hints else ""))


__all__ = ["FORMAT", "VERSION", "Profile", "apply_profile", "as_profile", "check_kinds", "entry_to_dict",
           "graph_profile", "load_profile", "parse_entry", "profile_from_dict", "profile_to_dict", "save_profile"]
