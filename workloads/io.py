"""The graph JSON format (``distplan-graph`` version 1), strict on keys, round-tripping.

    {"format": "distplan-graph", "version": 1, "name": "...", "mode": "inference",
     "batch_size": 1, "seq_len": 128,
     "ops": [{"name": "...", "kind": "matmul", "fwd_flops": 1.0, "bwd_flops": 2.0,
              "param_elems": 0, "out_elems": 0, "touched_elems": 0}],   (+ optional "send_elems", "tied_to", "tied_elems")
     "tensors": [{"src": "...", "dst": "...", "elems": 0}]}
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distplan.core.errors import DistplanError
from distplan.workloads.graph import Graph, Operator, Tensor

FORMAT = "distplan-graph"
VERSION = 1
_OP_KEYS = {"name", "kind", "fwd_flops", "bwd_flops", "param_elems", "out_elems", "touched_elems", "send_elems",
            "tied_to", "tied_elems"}
_OPTIONAL = {"send_elems": None, "tied_to": None, "tied_elems": 0}   # written only when not the default
_T_KEYS = {"src", "dst", "elems"}
_TOP_KEYS = {"format", "version", "name", "mode", "batch_size", "seq_len", "ops", "tensors"}


def graph_to_dict(g: Graph) -> dict[str, Any]:
    return {
        "format": FORMAT, "version": VERSION, "name": g.name, "mode": g.mode,
        "batch_size": g.batch_size, "seq_len": g.seq_len,
        "ops": [{k: getattr(op, k) for k in ("name", "kind", "fwd_flops", "bwd_flops", "param_elems",
                                              "out_elems", "touched_elems", *_OPTIONAL)
                 if k not in _OPTIONAL or getattr(op, k) != _OPTIONAL[k]}
                for op in g.ops],
        "tensors": [{"src": t.src, "dst": t.dst, "elems": t.elems} for t in g.tensors],
    }


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
            f"{source}: format {d['format']!r} v{d['version']} unsupported; expected {FORMAT} v{VERSION}"
        )
    ops = []
    for i, od in enumerate(d["ops"]):
        _strict(od, _OP_KEYS, {"name", "kind", "fwd_flops"}, f"{source}: ops[{i}]")
        ops.append(Operator(**od))
    tensors = []
    for i, td in enumerate(d["tensors"]):
        _strict(td, _T_KEYS, _T_KEYS, f"{source}: tensors[{i}]")
        tensors.append(Tensor(**td))
    return Graph(
        name=d["name"], ops=tuple(ops), tensors=tuple(tensors), mode=d.get("mode", "inference"),
        batch_size=d.get("batch_size", 1), seq_len=d.get("seq_len"),
    )


def save_graph(g: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_dict(g), indent=1))


def load_graph(path: str | Path) -> Graph:
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except FileNotFoundError:
        raise DistplanError(f"graph file {str(p)!r} not found") from None
    except json.JSONDecodeError as e:
        raise DistplanError(f"graph file {str(p)!r} is not valid JSON: {e}") from None
    except TypeError as e:
        raise DistplanError(f"graph file {str(p)!r}: {e}") from None
    try:
        return graph_from_dict(d, source=f"graph file {str(p)!r}")
    except TypeError as e:
        raise DistplanError(f"graph file {str(p)!r}: {e}") from None
