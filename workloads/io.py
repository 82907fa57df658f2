"""The graph JSON format (``distplan-graph`` version 1), strict on keys, round-tripping.

    {"format": "distplan-graph", "version": 1, "name": "...", "mode": "inference",
     "batch_size": 1, "seq_len": 128,
     "ops": [{"name": "...", "kind": "matmul", "fwd_flops": 1.0, "bwd_flops": 2.0,
              "param_elems": 0, "out_elems": 0, "touched_elems": 0}],   (+ optional "send_elems", "tied_to", "tied_elems",
                                                                          "expert_param_elems", "tp_role",
                                                                          measured "fwd_s", "bwd_s" and per-kind "times")
     "tensors": [{"src": "...", "dst": "...", "elems": 0}],
     "colocate": [["op a", "op b"]],   (optional: groups of ops that share one stage)
     "tp_divides": [32, 8]}   (optional: counts a tensor-parallel degree must divide, the heads)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from distplan.core.deadline import check_fits, check_time, graph_size
from distplan.core.errors import DistplanError
from distplan.core.atomic import write_json_atomic
from distplan.core.jsonfile import read_json_file
from distplan.core.units import brief
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.profile import entry_to_dict, parse_entry

FORMAT = "distplan-graph"
VERSION = 1
_OP_KEYS = {"name", "kind", "fwd_flops", "bwd_flops", "param_elems", "out_elems", "touched_elems", "send_elems",
            "tied_to", "tied_elems", "expert_param_elems", "tp_role", "fwd_s", "bwd_s", "times"}
_OPTIONAL = {"send_elems": None, "tied_to": None, "tied_elems": 0, "expert_param_elems": 0, "tp_role": None,
             "fwd_s": None, "bwd_s": None}   # written only when not the default
_T_KEYS = {"src", "dst", "elems"}
#: loops look at the run's deadline (core.deadline) every this many items
CLOCK_EVERY = 4096
#: the least seconds per operator or tensor that reading, checking, costing and coarsening
#: a graph take (a floor: this project's 2-core machine, shared, took 6.7e-5 on a 100,000-op
#: chain), and per byte of its file (about 150 bytes an item): a graph that needs more than
#: the time left is refused up front (core.deadline.check_fits)
LOAD_S_PER_ITEM = 1e-5
LOAD_S_PER_BYTE = LOAD_S_PER_ITEM / 150
_TOP_KEYS = {"format", "version", "name", "mode", "batch_size", "seq_len", "dropout", "ops", "tensors", "colocate",
             "tp_divides"}


def graph_to_dict(g: Graph) -> dict[str, Any]:
    return {
        "format": FORMAT, "version": VERSION, "name": g.name, "mode": g.mode,
        "batch_size": g.batch_size, "seq_len": g.seq_len, **({"dropout": True} if g.dropout else {}),
        "ops": [{k: getattr(op, k) for k in ("name", "kind", "fwd_flops", "bwd_flops", "param_elems",
                                              "out_elems", "touched_elems", *_OPTIONAL)
                 if k not in _OPTIONAL or getattr(op, k) != _OPTIONAL[k]}
                | ({"times": _times_doc(op)} if op.times else {})
                for op in g.ops],
        "tensors": [{"src": t.src, "dst": t.dst, "elems": t.elems} for t in g.tensors],
        **({"colocate": [list(grp) for grp in g.colocate]} if g.colocate else {}),
        **({"tp_divides": list(g.tp_divides)} if g.tp_divides else {}),
    }


def _times_doc(op: Operator) -> dict[str, Any]:
    """An op's ``times`` rows as the JSON object a profile entry is (workloads/profile.py)."""
    per: dict[str, dict[str, tuple[float | None, float | None]]] = {}
    for k, q, f, b in op.times:
        per.setdefault(k, {})[q] = (f, b)
    return entry_to_dict(per)


def _times_rows(entry: Any, where: str) -> tuple:
    per = parse_entry(entry, where)
    return tuple((k, q, f, b) for k in sorted(per) for q, (f, b) in sorted(per[k].items()))


def _strict(d: Any, allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(d, dict):
        raise DistplanError(f"{where}: expected a JSON object")
    unknown = set(d) - allowed
    if unknown:
        raise DistplanError(f"{where}: unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
    missing = required - set(d)
    if missing:
        raise DistplanError(f"{where}: missing keys {sorted(missing)}")


def graph_from_dict(d: Any, source: str = "graph") -> Graph:
    _strict(d, _TOP_KEYS, {"format", "version", "name", "ops", "tensors"}, source)
    if d["format"] != FORMAT or d["version"] != VERSION:
        raise DistplanError(
            f"{source}: format {brief(d['format'])} v{brief(d['version'])} unsupported; expected {FORMAT} v{VERSION}"
        )
    if not isinstance(d["name"], str) or not d["name"].strip():
        raise DistplanError(f"{source}: 'name' must be a non-empty string, got {brief(d['name'])}")
    if not isinstance(d["ops"], list) or not isinstance(d["tensors"], list):
        raise DistplanError(f"{source}: 'ops' and 'tensors' must be lists")
    size = graph_size(len(d["ops"]), len(d["tensors"]))
    check_fits(source, size, LOAD_S_PER_ITEM * (len(d["ops"]) + len(d["tensors"])))
    tensors = []
    for i, td in enumerate(d["tensors"]):
        if i % CLOCK_EVERY == 0:
            check_time(f"reading the tensors of {source}", size)
        _strict(td, _T_KEYS, _T_KEYS, f"{source}: tensors[{i}]")
        tensors.append(Tensor(**td))
    widest: dict[Any, Any] = {}
    for t in tensors:
        if isinstance(t.elems, (int, float)) and not isinstance(t.elems, bool):
            widest[t.src] = max(widest.get(t.src, 0), t.elems)
    ops = []
    for i, od in enumerate(d["ops"]):
        if i % CLOCK_EVERY == 0:
            check_time(f"reading the operators of {source}", size)
        _strict(od, _OP_KEYS, {"name", "kind", "fwd_flops"}, f"{source}: ops[{i}]")
        od = dict(od)
        if not isinstance(od["kind"], str):
            raise DistplanError(f"{source}: ops[{i}]: 'kind' must be a string such as \"matmul\", "
                                f"got {brief(od['kind'])}")
        name = od["name"] if isinstance(od["name"], str) else None
        if "out_elems" not in od:
            # a tensor is (part of) its producer's output: an omitted out_elems is the widest
            od["out_elems"] = widest.get(name, 0)
        elif isinstance(od["out_elems"], (int, float)) and name in widest and widest[name] > od["out_elems"]:
            raise DistplanError(f"{source}: operator {name!r} writes out_elems {brief(od['out_elems'])} but a tensor "
                                f"it sends has {brief(widest[name])} elements; a tensor is (part of) its producer's "
                                "output: raise out_elems or shrink the tensor")
        if "times" in od:
            od["times"] = _times_rows(od["times"], f"{source}: ops[{i}] ({name!r}) times")
        ops.append(Operator(**od))
    return Graph(
        name=d["name"], ops=tuple(ops), tensors=tuple(tensors), mode=d.get("mode", "inference"),
        batch_size=_size(d.get("batch_size", 1), "batch_size", source),
        seq_len=None if d.get("seq_len") is None else _size(d["seq_len"], "seq_len", source),
        dropout=_flag(d.get("dropout", False), source),
        colocate=d.get("colocate", ()),
        tp_divides=_tp_divides(d.get("tp_divides", []), source),
    )


def _tp_divides(x: Any, source: str) -> tuple[int, ...]:
    """A graph file's ``tp_divides``: a list of whole numbers from 1 to MAX_SIZE (the heads)."""
    if not isinstance(x, list):
        raise DistplanError(f"{source}: 'tp_divides' must be a list of whole numbers (attention heads), "
                            f"got {brief(x)}")
    return tuple(_size(n, "tp_divides", source) for n in x)


#: the largest batch size or sequence length a graph file may state (no real model comes near)
MAX_SIZE = 1 << 31


def _size(x: Any, key: str, source: str) -> int:
    """A graph file's batch_size / seq_len: a whole number from 1 to MAX_SIZE (not a bool)."""
    if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_SIZE:
        raise DistplanError(f"{source}: {key} must be a whole number from 1 to {MAX_SIZE:,}, got {brief(x)}")
    return x


def _flag(x: Any, source: str) -> bool:
    if not isinstance(x, bool):
        raise DistplanError(f"{source}: 'dropout' must be true or false, got {brief(x)}")
    return x


def save_graph(g: Graph, path: str | Path) -> None:
    """Write ``g`` as a graph JSON file, atomically and as strict JSON (core.atomic)."""
    write_json_atomic(path, graph_to_dict(g), "graph file", indent=1)


def load_graph(path: str | Path) -> Graph:
    """Read a graph JSON file; every problem with the file is one DistplanError naming it."""
    p = Path(path)
    try:
        n_bytes = p.stat().st_size
    except OSError:
        n_bytes = 0   # read_json_file says what is wrong with the path
    check_fits(f"graph file {str(p)!r}", f"{n_bytes:,} bytes", LOAD_S_PER_BYTE * n_bytes)
    d = read_json_file(p, "graph file")
    try:
        return graph_from_dict(d, source=f"graph file {str(p)!r}")
    except TypeError as e:
        raise DistplanError(f"graph file {str(p)!r}: {e}") from None
