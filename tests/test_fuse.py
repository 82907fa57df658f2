"""Kernel fusion of imported graphs (``workloads/fuse.py``, issue 12): by hand on small
chains, and as properties on random DAGs (FLOPs, backward FLOPs and parameters exact,
never more operators, memory traffic never more, tied weights valid). The invariants
hold against the graph after step 0 (``clone_input_only``: input-only tensors recomputed
by each reader, tested in tests/test_rematerialize.py), which adds its copies' work."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from distplan.workloads.coarsen import coarsen
from distplan.workloads.fuse import fuse_graph
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.rematerialize import clone_input_only

KINDS = ("matmul", "attn_score", "softmax", "layernorm", "activation", "add", "elementwise", "reshape",
         "view", "embedding", "other")


def _op(name: str, kind: str, fwd: int, reads: int, out: int, params: int = 0) -> Operator:
    if kind == "view":
        return Operator(name, "reshape", 0.0, 0.0, params, 0, 0.0)
    return Operator(name, kind, float(fwd), float(2 * fwd), params, out, float(reads + out))


@st.composite
def fine_graphs(draw) -> Graph:
    n = draw(st.integers(2, 14))
    kinds = [draw(st.sampled_from(KINDS)) for _ in range(n)]
    sizes = [draw(st.integers(1, 64)) for _ in range(n)]
    edges: list[tuple[int, int]] = []
    for v in range(1, n):
        for u in draw(st.sets(st.integers(0, v - 1), max_size=3)):
            edges.append((u, v))
    ops = []
    for v, k in enumerate(kinds):
        reads = sum(sizes[u] for u, w in edges if w == v)
        fwd = 0 if k in ("reshape", "view", "embedding") else draw(st.integers(0, 10_000))
        params = draw(st.integers(0, 50)) if k in ("matmul", "add", "layernorm", "embedding") else 0
        ops.append(_op(f"o{v}", k, fwd, reads + params, sizes[v], params))
    if n > 2 and draw(st.booleans()) and ops[-1].kind != "reshape":
        ops[-1] = Operator(**{**ops[-1].__dict__, "tied_to": "o0", "tied_elems": 7})
    tensors = [Tensor(f"o{u}", f"o{v}", sizes[u]) for u, v in edges]
    return Graph("g", tuple(ops), tuple(tensors), "training")


@settings(max_examples=150, deadline=None)
@given(fine_graphs())
def test_fusion_keeps_flops_and_params_and_never_grows(g):
    f = fuse_graph(g)
    g = clone_input_only(g)
    assert len(f.ops) <= len(g.ops)
    assert (f.fwd_flops, f.bwd_flops, f.param_elems) == (g.fwd_flops, g.bwd_flops, g.param_elems)
    assert sum(op.touched_elems for op in f.ops) <= sum(op.touched_elems for op in g.ops)
    assert sum(op.out_elems for op in f.ops) <= sum(op.out_elems for op in g.ops)
    assert all(op.tied_to is None or op.tied_to in {o.name for o in f.ops} for op in f.ops)
    assert fuse_graph(f).param_elems == f.param_elems  # fusing again is harmless
    c = coarsen(f, target_ops=max(1, len(f.ops) // 2))
    assert c.coarse.fwd_flops == f.fwd_flops


def _chain() -> Graph:
    """matmul -> bias add -> GELU as 3 element-wise nodes (x*0.5, erf(x), y*(1+e)) -> reshape
    view -> matmul; tensors of 100 elements, weights 10x10."""
    ops = [_op("mm1", "matmul", 2000, 100 + 100, 100, 100), _op("bias", "add", 100, 100 + 10, 100, 10),
           _op("half", "elementwise", 100, 100, 100), _op("erf", "activation", 400, 100, 100),
           _op("mul", "elementwise", 200, 200, 100), _op("view", "view", 0, 0, 0),
           _op("mm2", "matmul", 2000, 100 + 100, 100, 100)]
    t = [("mm1", "bias"), ("bias", "half"), ("bias", "erf"), ("half", "mul"), ("erf", "mul"),
         ("mul", "view"), ("view", "mm2")]
    return Graph("chain", tuple(ops), tuple(Tensor(a, b, 100) for a, b in t))


def test_chain_by_hand():
    f = fuse_graph(_chain())
    assert [op.name for op in f.ops] == ["mm1", "erf", "mm2"]
    mm1, gelu, mm2 = f.ops
    # the bias joins the matmul's epilogue: reads x, W, b; writes its output once
    assert (mm1.fwd_flops, mm1.param_elems, mm1.touched_elems, mm1.out_elems) == (2100, 110, 310, 100)
    # GELU's three nodes and the view: one kernel reading its input once and writing once
    assert (gelu.kind, gelu.fwd_flops, gelu.touched_elems, gelu.out_elems) == ("activation", 700, 200, 100)
    assert mm2.touched_elems == 300
    assert [(t.src, t.dst, t.elems) for t in f.tensors] == [("mm1", "erf", 100), ("erf", "mm2", 100)]


def test_no_fusion_across_a_second_path():
    """a -> b and a -> heavy -> b: contracting a and b would make a cycle; they stay apart."""
    ops = [_op("a", "add", 10, 10, 10), _op("h", "matmul", 100, 10, 10), _op("b", "add", 10, 20, 10)]
    g = Graph("g", tuple(ops), (Tensor("a", "h", 10), Tensor("h", "b", 10), Tensor("a", "b", 10)))
    assert [op.name for op in fuse_graph(g).ops] == ["a", "h", "b"]


# --- scalings by a constant (the q * d**-0.25, k * d**-0.25 of exported attention) ------------
def _scaled_attention() -> Graph:
    """q and k projections, each scaled by a constant (``sq``, ``sk``), into the score
    product, then softmax; tensors of 100 elements (scores 400)."""
    ops = [_op("x", "layernorm", 800, 100, 100), _op("q", "matmul", 2000, 200, 100, 100),
           _op("k", "matmul", 2000, 200, 100, 100), _op("sq", "elementwise", 100, 101, 100),
           _op("sk", "elementwise", 100, 101, 100), _op("score", "attn_score", 8000, 200, 400),
           _op("soft", "softmax", 2000, 400, 400)]
    t = [("x", "q", 100), ("x", "k", 100), ("q", "sq", 100), ("k", "sk", 100), ("sq", "score", 100),
         ("sk", "score", 100), ("score", "soft", 400)]
    return Graph("attn", tuple(ops), tuple(Tensor(a, b, e) for a, b, e in t))


def test_scalings_join_the_product_they_feed():
    g = _scaled_attention()
    assert len(fuse_graph(g).ops) == 7                      # unmarked: element-wise ops between two GEMMs
    f = fuse_graph(g, scalings=("sq", "sk"))
    assert [op.name for op in f.ops] == ["x", "q", "k", "score", "soft"]
    score = f.op("score")
    # the product reads q and k once each (the scalings' reads and writes vanish), plus the two scalars
    assert (score.kind, score.fwd_flops, score.touched_elems, score.out_elems) == ("attn_score", 8200, 602, 400)
    assert (f.fwd_flops, f.bwd_flops) == (g.fwd_flops, g.bwd_flops)


def test_scaling_after_a_product_is_its_epilogue():
    """matmul -> x/c -> softmax: the scaling's only producer is a product it alone reads."""
    ops = [_op("mm", "attn_score", 8000, 200, 400), _op("div", "elementwise", 400, 401, 400),
           _op("mask", "add", 400, 800, 400), _op("soft", "softmax", 2000, 400, 400)]
    t = [("mm", "div"), ("div", "mask"), ("mask", "soft")]
    g = Graph("g", tuple(ops), tuple(Tensor(a, b, 400) for a, b in t))
    f = fuse_graph(g, scalings=("div",))
    assert [op.name for op in f.ops] == ["mm", "soft"]
    assert f.op("mm").touched_elems == 200 + 400 + 1      # the scalar; the scaled scores are never written


def test_a_scaling_of_a_shared_tensor_stays_apart():
    """The product's output is read by the scaling and by another op: no epilogue."""
    ops = [_op("mm", "matmul", 2000, 200, 100, 100), _op("s", "elementwise", 100, 101, 100),
           _op("o", "other", 400, 100, 100), _op("m2", "matmul", 2000, 200, 100)]
    t = [("mm", "s"), ("mm", "o"), ("s", "m2"), ("o", "m2")]
    g = Graph("g", tuple(ops), tuple(Tensor(a, b, 100) for a, b in t))
    f = fuse_graph(g, scalings=("s",))
    assert "s" not in {op.name for op in f.ops} and f.op("m2").fwd_flops == 2100   # into the product it feeds
    ops[3] = _op("m2", "softmax", 500, 200, 100)
    g = Graph("g", tuple(ops), tuple(Tensor(a, b, 100) for a, b in t))
    assert len(fuse_graph(g, scalings=("s",)).ops) == len(fuse_graph(g).ops)


@settings(max_examples=100, deadline=None)
@given(fine_graphs(), st.data())
def test_scalings_keep_the_fusion_invariants(g, data):
    marked = data.draw(st.sets(st.sampled_from([op.name for op in g.ops if op.kind == "elementwise"] or ["-"])))
    marked -= {"-"}
    f = fuse_graph(g, scalings=sorted(marked))
    g = clone_input_only(g)
    assert len(f.ops) <= len(g.ops)
    assert (f.fwd_flops, f.bwd_flops, f.param_elems) == (g.fwd_flops, g.bwd_flops, g.param_elems)
    assert sum(op.touched_elems for op in f.ops) <= sum(op.touched_elems for op in g.ops)
    assert sum(op.out_elems for op in f.ops) <= sum(op.out_elems for op in g.ops)
