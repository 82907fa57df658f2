"""Graph and topology validation: each bad input gets a clear DistplanError."""
from __future__ import annotations

import json
import math

import pytest

from conftest import CHIP, chain_graph
from distplan.core.errors import DistplanError
from distplan.topologies.topology import Device, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import graph_from_dict, graph_to_dict, load_graph, save_graph


def _ops(*names):
    return tuple(Operator(n, "matmul", 1.0) for n in names)


@pytest.mark.parametrize("ops,tensors,match", [
    (_ops("a", "b"), (Tensor("a", "b", 1), Tensor("b", "a", 1)), "cycle"),
    (_ops("a", "a"), (), "duplicate operator"),
    (_ops("a"), (Tensor("a", "zz", 1),), "unknown operator 'zz'"),
    (_ops("a", "b"), (Tensor("a", "b", -1),), "elems must be finite and >= 0"),
    ((Operator("a", "matmul", math.nan),), (), "fwd_flops must be finite"),
    ((Operator("a", "matmul", math.inf),), (), "fwd_flops must be finite"),
    (_ops("a", "b"), (Tensor("a", "b", 1), Tensor("a", "b", 2)), "duplicate tensor"),
    (_ops("a"), (Tensor("a", "a", 1),), "self-loop"),
    ((Operator("a", "matmul", 1.0, out_elems=4, send_elems=5),), (), "send_elems 5 exceeds out_elems 4"),
    ((Operator("a", "matmul", 1.0, out_elems=4, send_elems=-1),), (), "send_elems must be finite"),
])
def test_graph_errors(ops, tensors, match):
    with pytest.raises(DistplanError, match=match):
        Graph("g", ops, tensors)


def test_topological_order_is_stable():
    g = Graph("g", _ops("c", "b", "a"), (Tensor("a", "c", 1),))
    assert [o.name for o in g.ops] == ["b", "a", "c"]


def test_json_round_trip(tmp_path):
    g = chain_graph(5, mode="training")
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g
    d = graph_to_dict(g)
    d["ops"][0]["flops"] = 3
    with pytest.raises(DistplanError, match="unknown keys"):
        graph_from_dict(d)


def test_json_round_trip_keeps_send_elems(tmp_path):
    g = Graph("g", (Operator("a", "matmul", 1.0, out_elems=8, send_elems=3), Operator("b", "add", 1.0)),
              (Tensor("a", "b", 3),))
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g
    assert "send_elems" not in graph_to_dict(chain_graph(2))["ops"][0]   # None is left out


def test_cyclic_file(tmp_path):
    d = graph_to_dict(chain_graph(3))
    d["tensors"].append({"src": "o2", "dst": "o0", "elems": 1})
    (tmp_path / "c.json").write_text(json.dumps(d))
    with pytest.raises(DistplanError, match="cycle"):
        load_graph(tmp_path / "c.json")


@pytest.mark.parametrize("links,kind,match", [
    ((Link("a", "b", -1.0),), "chip", "bandwidth must be > 0"),
    ((Link("a", "b", 0.0),), "chip", "bandwidth must be > 0"),
    ((Link("a", "b", 1.0),), "chip", "cannot reach"),
    ((Link("a", "b", 1.0), Link("b", "a", 1.0)), "gpu", "unknown kind 'gpu'"),
])
def test_topology_errors(links, kind, match):
    with pytest.raises(DistplanError, match=match):
        Topology("t", {"chip": CHIP}, (Device("a", kind), Device("b", "chip")), links)
