"""Zoo graphs: valid DAGs with real residual edges, JSON round trips, names and errors."""
from __future__ import annotations

import networkx as nx
import pytest

from distplan.core.errors import DistplanError
from distplan.workloads.io import graph_from_dict, graph_to_dict, load_graph, save_graph
from distplan.workloads.zoo import get_workload, list_workloads

NAMED = [n for n, _ in list_workloads() if "<" not in n]


def small(name, mode="inference"):
    """The model at a short sequence (MLPs have none) so every test stays fast."""
    return get_workload(name, seq_len=None if name.startswith("mlp") else 16, mode=mode)


@pytest.mark.parametrize("name", NAMED)
def test_valid_dag_one_source_one_sink(name):
    g = small(name)
    dg = nx.DiGraph([(t.src, t.dst) for t in g.tensors])
    dg.add_nodes_from(op.name for op in g.ops)
    assert nx.is_directed_acyclic_graph(dg) and nx.is_weakly_connected(dg)
    assert all(u < v for u, v, _ in g.edges())            # stored in topological order
    assert [n for n in dg if dg.in_degree(n) == 0] == [g.ops[0].name]
    assert [n for n in dg if dg.out_degree(n) == 0] == [g.ops[-1].name]
    assert all(op.out_elems > 0 and op.touched_elems > 0 for op in g.ops)
    # only a lone lookup (Llama: no position table, no norm) does no arithmetic
    assert all(op.fwd_flops > 0 for op in g.ops if op.kind != "embedding")
    assert all(t.elems > 0 for t in g.tensors)


def test_residual_edges_are_real():
    g = get_workload("gpt2", seq_len=8)
    preds = {t.dst: set() for t in g.tensors}
    for t in g.tensors:
        preds[t.dst].add(t.src)
    assert preds["l0.add1"] == {"embed", "l0.proj"}
    assert preds["l0.add2"] == {"l0.add1", "l0.ffn2"}
    assert preds["l1.add1"] == {"l0.add2", "l1.proj"}
    assert preds["l0.attn_context"] == {"l0.softmax", "l0.qkv"}
    b = get_workload("bert-base", seq_len=8)
    bp = {}
    for t in b.tensors:
        bp.setdefault(t.dst, set()).add(t.src)
    assert bp["l0.add1"] == {"embed", "l0.proj"}
    assert bp["l0.add2"] == {"l0.norm1", "l0.ffn2"}           # post-norm: residual after norm1
    assert bp["l1.qkv"] == {"l0.norm2"} and bp["head"] == {"l11.norm2"}


def test_tensor_sizes_bert():
    g = get_workload("bert-base", batch_size=2, seq_len=8)
    e = {(t.src, t.dst): t.elems for t in g.tensors}
    T, h = 16, 768
    assert e[("l0.qkv", "l0.attn_score")] == 2 * T * h
    assert e[("l0.qkv", "l0.attn_context")] == T * h
    assert e[("l0.attn_score", "l0.softmax")] == 2 * 12 * 8 * 8
    assert e[("l0.ffn1", "l0.act")] == T * 4 * h
    assert e[("l11.norm2", "head")] == 2 * h                  # the pooler reads the first token


@pytest.mark.parametrize("name", NAMED)
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_json_round_trip(name, mode):
    g = small(name, mode)
    back = graph_from_dict(graph_to_dict(g))
    assert back == g
    assert back.mode == mode and back.seq_len == g.seq_len and back.batch_size == g.batch_size


def test_save_and_load_file(tmp_path):
    g = get_workload("bert-base", batch_size=4, mode="training")
    save_graph(g, tmp_path / "bert.json")
    assert load_graph(tmp_path / "bert.json") == g


def test_defaults():
    assert (get_workload("bert-base").batch_size, get_workload("bert-base").seq_len) == (1, 128)
    assert get_workload("gpt2").seq_len == 1024
    assert get_workload("gpt3-175b").seq_len == 2048
    assert get_workload("llama-7b").seq_len == 2048
    assert (get_workload("mlp-xs").batch_size, get_workload("mlp-xs").seq_len) == (1024, None)


def test_names_are_case_insensitive():
    assert get_workload("BERT-Base ", seq_len=4) == get_workload("bert-base", seq_len=4)


def test_list_workloads():
    items = list_workloads()
    names = [n for n, _ in items]
    assert len(names) == len(set(names))
    assert {"bert-base", "gpt2", "gpt3-175b", "llama-7b", "mlp-large"} <= set(names)
    assert "gpt3-<hidden>x<layers>x<heads>" in names and "llama-<hidden>x<layers>x<heads>" in names
    assert all(isinstance(d, str) and d for _, d in items)


@pytest.mark.parametrize("kwargs,match", [
    (dict(name="bert-huge"), "bert-base"),
    (dict(name="gpt3-100x2x3"), "multiple of the head count"),
    (dict(name="gpt3-64x0x4"), "at least one layer"),
    (dict(name="bert-base", batch_size=0), "batch_size"),
    (dict(name="gpt2", batch_size=1.5), "batch_size"),
    (dict(name="gpt2", batch_size=True), "batch_size"),
    (dict(name="gpt2", seq_len=-3), "seq_len"),
    (dict(name="bert-base", seq_len=513), "512"),
    (dict(name="gpt2", seq_len=1025), "1024"),
    (dict(name="mlp-xs", seq_len=128), "no sequence length"),
    (dict(name="gpt2", mode="serving"), "inference"),
])
def test_user_errors(kwargs, match):
    with pytest.raises(DistplanError, match=match):
        get_workload(**kwargs)


def test_unknown_name_lists_valid_names_and_patterns():
    with pytest.raises(DistplanError) as err:
        get_workload("resnet50")
    msg = str(err.value)
    assert "resnet50" in msg and "llama-7b" in msg and "gpt3-<hidden>x<layers>x<heads>" in msg


def test_llama_has_no_position_limit():
    assert get_workload("llama-64x1x4", seq_len=8192).seq_len == 8192


def test_tensor_parallel_degrees_divide_the_heads():
    """Megatron splits attention by heads: a zoo graph states its query and key/value head
    counts (``Graph.tp_divides``), a graph file keeps them, and the cluster space, the stage
    MILP's configurations and the grid baseline only try degrees dividing both (gpt2 has 12
    heads: tp 8 on a DGX-A100 was in the space; llama3-8b's 8 key/value heads allow 1-8)."""
    import distplan
    from distplan.baselines.grid import grid_points
    from distplan.model.cluster import space_points, tp_degrees
    from distplan.model.stage_terms import tp_chain

    g = get_workload("gpt2", mode="training")
    assert g.tp_divides == (12,) and g.tp_fits(4) and not g.tp_fits(8)
    assert graph_from_dict(graph_to_dict(g)).tp_divides == (12,)
    assert g.with_mode("inference").tp_divides == (12,) and g.with_batch_size(2).tp_divides == (12,)
    assert get_workload("llama3-8b").tp_divides == (32, 8) and get_workload("mlp-xs").tp_divides == ()
    p = distplan.problem("gpt2", "dgx-a100", mode="training")
    assert tp_degrees(p) == [1, 2, 4] and tp_chain(p) == [1, 2, 4]
    assert {pt.tp for pt in space_points(p)} == {1, 2, 4}
    assert {x[1] for x in grid_points(p)} <= {1, 2, 4}
    assert tp_degrees(distplan.problem("llama3-8b", "dgx-a100", mode="training", seq_len=128)) == [1, 2, 4, 8]


@pytest.mark.parametrize("bad", [[0], [2.5], "8", [True]])
def test_a_graph_file_states_whole_head_counts(bad):
    d = graph_to_dict(get_workload("mlp-xs"))
    d["tp_divides"] = bad
    with pytest.raises(DistplanError, match="tp_divides"):
        graph_from_dict(d)
