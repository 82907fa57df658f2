"""Graph and topology validation: each bad input gets a clear DistplanError."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from conftest import write_unreadable, CHIP, chain_graph
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
    ((Operator("a", "matmul", 1.0, param_elems=4, expert_param_elems=5),), (), "expert_param_elems 5 exceeds"),
    ((Operator("a", "matmul", 1.0, param_elems=4, expert_param_elems=-1),), (), "expert_param_elems must be"),
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


def test_json_round_trip_keeps_expert_param_elems(tmp_path):
    g = Graph("g", (Operator("a", "matmul", 1.0, param_elems=8, out_elems=3, expert_param_elems=6),
               Operator("b", "add", 1.0)),
              (Tensor("a", "b", 3),))
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g
    assert graph_to_dict(g)["ops"][0]["expert_param_elems"] == 6
    assert "expert_param_elems" not in graph_to_dict(g)["ops"][1]   # 0 is left out


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


# --- issue 13: graph files whose tensors disagree with their producers, and other bad files

def _doc(**op_extra):
    return {"format": "distplan-graph", "version": 1, "name": "g",
            "ops": [{"name": "a", "kind": "matmul", "fwd_flops": 1e9, **op_extra},
                    {"name": "b", "kind": "add", "fwd_flops": 1e6}],
            "tensors": [{"src": "a", "dst": "b", "elems": 100_000_000}]}


def test_omitted_out_elems_is_the_widest_tensor_it_sends():
    from distplan.workloads.io import graph_from_dict
    g = graph_from_dict(_doc())
    assert g.ops[0].out_elems == 100_000_000 and g.ops[1].out_elems == 0


@pytest.mark.parametrize("out", [0, 10, 99_999_999])
def test_a_tensor_larger_than_its_producer_is_refused(out):
    from distplan.workloads.io import graph_from_dict
    with pytest.raises(DistplanError, match=r"operator 'a' writes out_elems .* but a tensor it sends has 100000000"):
        graph_from_dict(_doc(out_elems=out))


def test_huge_numbers_are_short_in_messages():
    from distplan.workloads.io import graph_from_dict
    d = _doc()
    d["tensors"][0]["elems"] = 10**300
    with pytest.raises(DistplanError) as e:
        graph_from_dict(d)
    assert "1.00000e+300" in str(e.value) and len(str(e.value)) < 200


@pytest.mark.parametrize("name", [None, "", 3, ["x"]])
def test_graph_name_must_be_a_string(name):
    from distplan.workloads.io import graph_from_dict
    d = _doc()
    d["name"] = name
    with pytest.raises(DistplanError, match="'name' must be a non-empty string"):
        graph_from_dict(d)


def test_training_a_graph_without_backward_flops_is_refused():
    from distplan.costs.problem import build_problem
    from distplan.topologies.presets import get_topology
    from distplan.workloads.io import graph_from_dict
    g = graph_from_dict(_doc(out_elems=100_000_000)).with_mode("training")
    with pytest.raises(DistplanError, match="no backward FLOPs"):
        build_problem(g, get_topology("dgx-a100"))


@pytest.mark.parametrize("content", ["dir", b"\xff\xfe\x00bad", "[" * 100000])
def test_unreadable_graph_files_are_one_error(tmp_path, content):
    from distplan.workloads.io import load_graph
    path = tmp_path / "g.json"
    write_unreadable(path, content)
    with pytest.raises(DistplanError, match="graph file"):
        load_graph(path)


# --- issue 26: unknown op kinds and numbers whose costs overflow ---------------------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from distplan.workloads.graph import MAX_ELEMS, MAX_WORK, OP_KINDS  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(st.text(min_size=1, max_size=12).filter(lambda k: k not in OP_KINDS))
def test_an_unknown_op_kind_is_refused_by_name(kind):
    """A graph file with kind "nosuch" or "Matmul" was accepted and costed as a generic op."""
    with pytest.raises(DistplanError, match=r"operator 'a' has kind .* unknown; use one of matmul"):
        Graph("g", (Operator("a", kind, 1.0),), ())


@pytest.mark.parametrize("kind", OP_KINDS)
def test_every_known_kind_is_accepted(kind):
    assert Graph("g", (Operator("a", kind, 1.0),), ()).ops[0].kind == kind


ELEMS_FIELDS = ("param_elems", "out_elems", "touched_elems")
WORK_FIELDS = ("fwd_flops", "bwd_flops")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ELEMS_FIELDS + WORK_FIELDS),
       st.one_of(st.floats(min_value=MAX_ELEMS, max_value=1.7976931348623157e308), st.integers(min_value=2**63)))
def test_numbers_beyond_any_real_graph_are_refused(field, value):
    """out_elems 1.7e308 (a float: only ints were bounded) made the activation bytes inf;
    fwd_flops and touched_elems 1.7e308 made the task times inf."""
    if field in WORK_FIELDS and value < MAX_WORK:
        value = MAX_WORK
    op = Operator(**{"name": "a", "kind": "matmul", "fwd_flops": 1.0, field: value})
    with pytest.raises(DistplanError, match=rf"operator 'a' {field} is .*beyond any real graph"):
        Graph("g", (op,), ())


def test_graph_file_out_elems_1_7e308_is_refused(tmp_path):
    d = _doc()
    d["ops"][0]["out_elems"] = 1.7e308
    with pytest.raises(DistplanError, match="out_elems is 1.7e\\+308, beyond any real graph"):
        graph_from_dict(d)


def test_the_largest_numbers_accepted_give_finite_costs():
    """Just under the bounds, every cost the Problem holds is finite (where the device
    kind runs the precision and the op may use it)."""
    from distplan.costs.problem import build_problem
    from distplan.topologies.presets import get_topology
    big = MAX_ELEMS - 2**20
    g = Graph("g", (Operator("a", "matmul", MAX_WORK * 0.99, MAX_WORK * 0.99, big, big, float(big)),
                    Operator("b", "matmul", 1.0)), (Tensor("a", "b", big),), mode="training")
    p = build_problem(g, get_topology("mcm2x2"))
    runs = p.op_allowed[:, :, None] & p.supported[None, :, :]
    assert np.isfinite(p.fwd_time_s[runs]).all() and np.isfinite(p.bwd_time_s[runs]).all()
    for arr in (p.static_bytes, p.act_bytes, p.send_bytes, p.edge_elems):
        assert np.isfinite(arr).all()


def test_an_int_past_any_float_is_refused_by_name():
    """10**400 elements: _check_number converted it to a float for isnan (OverflowError
    traceback; the CLI fuzz found it in a graph file's tensor elems)."""
    with pytest.raises(DistplanError, match=r"operator 'a' out_elems is 1.00000e\+400, beyond any real graph"):
        Graph("g", (Operator("a", "matmul", 1.0, out_elems=10**400),), ())
    with pytest.raises(DistplanError, match=r"elems is 1.00000e\+400, beyond any real graph"):
        Graph("g", _ops("a", "b"), (Tensor("a", "b", 10**400),))
