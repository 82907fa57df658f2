"""What an importer's fine graph must not make a pipeline pay (issue 12, found on GPT-2
exported by torch.onnx): an input-only attention mask sent from layer 0 to every later
layer (``workloads/rematerialize.py``), a residual stream fused with its normalisation
so that every cut sends both, a transpose chain left between a projection and the score
product, and a position-embedding table stored at 16 bits because an ``add`` reads it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings

from distplan.workloads.fuse import fuse_graph
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.rematerialize import clone_input_only, input_only

S2 = 64   # elements of the mask (8 x 8 tokens)


def _op(name: str, kind: str, fwd: float, touched: float, out: int, params: int = 0) -> Operator:
    return Operator(name, kind, float(fwd), float(2 * fwd), params, out, float(touched))


def _masked_layers(n: int = 3) -> Graph:
    """A mask built from the inputs (``iota`` view, ``tri`` compare: 64 FLOPs) read by the
    score add of n layers: x -> [score_i -> add_i (+mask) -> soft_i -> proj_i] -> ..."""
    ops = [_op("x", "embedding", 0, 16, 8, params=100), _op("iota", "reshape", 0, 16, 8),
           _op("tri", "elementwise", S2, 8 + S2, S2)]
    t = [("iota", "tri", 8)]
    prev = "x"
    for i in range(n):
        ops += [_op(f"score{i}", "attn_score", 1000, 16 + S2, S2), _op(f"add{i}", "add", S2, 3 * S2, S2),
                _op(f"soft{i}", "softmax", 5 * S2, 2 * S2, S2), _op(f"proj{i}", "matmul", 1000, S2 + 8 + 64, 8, 64)]
        t += [(prev, f"score{i}", 8), (f"score{i}", f"add{i}", S2), ("tri", f"add{i}", S2),
              (f"add{i}", f"soft{i}", S2), (f"soft{i}", f"proj{i}", S2)]
        prev = f"proj{i}"
    return Graph("masked", tuple(ops), tuple(Tensor(a, b, e) for a, b, e in t))


def test_mask_is_recomputed_by_each_reader_not_sent():
    g = _masked_layers(3)
    assert {g.ops[v].name for v in input_only(g)} == {"iota", "tri"}
    c = clone_input_only(g)
    assert len(c.ops) == len(g.ops) + 2 * 2                    # layers 1 and 2 get iota and tri each
    assert c.fwd_flops == g.fwd_flops + 2 * S2                 # each copy recomputes the 64-FLOP compare
    assert c.param_elems == g.param_elems
    assert {t.src for t in c.tensors if t.dst == "add1"} == {"score1", "tri~add1"}
    f = fuse_graph(g)
    # one softmax kernel per layer holds its own copy; no mask tensor leaves layer 0
    assert [op.name for op in f.ops] == ["x", "score0", "soft0", "proj0", "score1", "soft1", "proj1",
                                         "score2", "soft2", "proj2"]
    chain = ["x"] + [f"{k}{i}" for i in range(3) for k in ("score", "soft", "proj")]
    assert [(t.src, t.dst) for t in f.tensors] == list(zip(chain, chain[1:]))   # the mask edges are gone
    assert f.fwd_flops == g.fwd_flops + 2 * S2
    # layer 1's kernel: add + softmax + its mask copy; reads the scores and the 8-element iota
    # input, writes the probabilities; the mask never goes through memory
    assert f.op("soft1").touched_elems == S2 + 8 + S2
    assert f.op("soft0").touched_elems == S2 + 8 + S2        # the original is fused into layer 0 alike


def _expanded_mask_layers(n: int = 3) -> Graph:
    """The legacy exporter's mask (BERT-base by ``torch.onnx.export(..., dynamo=False)``):
    one boolean mask expanded once (``cast`` of the input, ``expand``) and a ``where_i``
    per layer that turns it into the additive mask its score add reads; the tensor the
    layers share is ``expand``'s, behind single-reader ``where`` ops."""
    ops = [_op("x", "embedding", 0, 16, 8, params=100), _op("cast", "reshape", 0, 16, 8),
           _op("expand", "reshape", 0, 8 + S2, S2)]
    t = [("cast", "expand", 8)]
    prev = "x"
    for i in range(n):
        ops += [_op(f"where{i}", "elementwise", S2, 2 * S2, S2), _op(f"score{i}", "attn_score", 1000, 16 + S2, S2),
                _op(f"add{i}", "add", S2, 3 * S2, S2), _op(f"soft{i}", "softmax", 5 * S2, 2 * S2, S2),
                _op(f"proj{i}", "matmul", 1000, S2 + 8 + 64, 8, 64)]
        t += [("expand", f"where{i}", S2), (prev, f"score{i}", 8), (f"score{i}", f"add{i}", S2),
              (f"where{i}", f"add{i}", S2), (f"add{i}", f"soft{i}", S2), (f"soft{i}", f"proj{i}", S2)]
        prev = f"proj{i}"
    return Graph("expanded-mask", tuple(ops), tuple(Tensor(a, b, e) for a, b, e in t))


def test_a_mask_shared_behind_per_layer_wheres_is_recomputed_too():
    """Issue 21: sent from layer 0 to the layers of three later stages, this 32 KB mask
    made BERT-base's legacy export simulate 22 % slower than its MILP period on mcm4x4
    (the stage 3 receivers' flow control and the producer's double buffer made one credit
    loop of the whole pipeline). Each later layer now copies cast -> expand -> where."""
    g = _expanded_mask_layers(3)
    assert {g.ops[v].name for v in input_only(g)} == {"cast", "expand", "where0", "where1", "where2"}
    c = clone_input_only(g)
    names = {op.name for op in c.ops}
    assert {"where1", "where2"}.isdisjoint(names)                 # their readers run copies: dropped
    assert {"cast", "expand", "where0"} <= names                  # layer 0 keeps the originals
    assert {"cast~add1", "expand~add1", "where1~add1", "cast~add2", "expand~add2", "where2~add2"} <= names
    assert len(c.ops) == len(g.ops) + 2 * 3 - 2
    assert c.fwd_flops == g.fwd_flops                             # the copies' where replaces the original's
    assert {t.src for t in c.tensors if t.dst == "add2"} == {"score2", "where2~add2"}
    f = fuse_graph(g)
    chain = ["x"] + [f"{k}{i}" for i in range(3) for k in ("score", "soft", "proj")]
    assert [op.name for op in f.ops] == chain
    assert [(t.src, t.dst) for t in f.tensors] == list(zip(chain, chain[1:]))   # no mask leaves layer 0


def test_a_product_reading_the_mask_keeps_the_one_tensor():
    """A copy that cannot fuse into its reader would be one more kernel: no copy."""
    ops = [_op("m", "elementwise", 10, 20, 10), _op("a", "matmul", 100, 30, 10), _op("b", "matmul", 100, 30, 10)]
    g = Graph("g", tuple(ops), (Tensor("m", "a", 10), Tensor("m", "b", 10)))
    assert clone_input_only(g) is g


def test_a_cone_past_the_limit_is_left_alone():
    g = _masked_layers(2)
    assert len(clone_input_only(g, max_cone_ops=1).ops) == len(g.ops)
    assert len(clone_input_only(g, max_cone_ops=2).ops) == len(g.ops) + 2


def test_weights_and_activations_are_never_copied():
    """A cheap op with parameters, or one reading a computed activation, is not input-only."""
    ops = [_op("x", "matmul", 100, 10, 10, params=5), _op("bias", "add", 10, 20, 10, params=10),
           _op("a1", "add", 10, 20, 10), _op("a2", "add", 10, 20, 10)]
    g = Graph("g", tuple(ops), (Tensor("x", "a1", 10), Tensor("bias", "a1", 10), Tensor("bias", "a2", 10)))
    assert input_only(g) == set()
    assert clone_input_only(g) is g


@settings(max_examples=150, deadline=None)
@given(__import__("test_fuse").fine_graphs())
def test_copies_are_of_input_only_ops_and_keep_the_graph(g):
    c = clone_input_only(g)
    cheap = {g.ops[v].name for v in input_only(g)}
    names = {op.name for op in g.ops}
    copies = [op for op in c.ops if op.name not in names]
    assert all(op.name.split("~")[0] in cheap for op in copies)
    assert c.param_elems == g.param_elems
    dropped = [op for op in g.ops if op.name not in {o.name for o in c.ops}]   # originals no reader reads
    assert all(op.name in cheap for op in dropped)
    assert c.fwd_flops == pytest.approx(g.fwd_flops + sum(op.fwd_flops for op in copies)
                                        - sum(op.fwd_flops for op in dropped))
    # every tensor a copy feeds ends in an element-wise reader or another copy, with the original's size
    size = {(t.src, t.dst): t.elems for t in g.tensors}
    for t in c.tensors:
        if t.src not in names:
            orig_dst = t.dst if t.dst in names else t.dst.split("~")[0]
            assert size[(t.src.split("~")[0], orig_dst)] == t.elems


# --- the residual stream and its normalisation --------------------------------------------
def _pre_norm() -> Graph:
    """proj -> add (residual) -> norm -> ffn, and add -> add2 (the stream goes on)."""
    ops = [_op("r", "embedding", 0, 16, 8, params=80), _op("proj", "matmul", 1000, 80, 8, 64),
           _op("add", "add", 8, 24, 8), _op("norm", "layernorm", 64, 16, 8, params=16),
           _op("ffn", "matmul", 1000, 80, 8, 64), _op("add2", "add", 8, 24, 8)]
    t = [("r", "proj"), ("r", "add"), ("proj", "add"), ("add", "norm"), ("norm", "ffn"), ("add", "add2"),
         ("ffn", "add2")]
    return Graph("prenorm", tuple(ops), tuple(Tensor(a, b, 8) for a, b in t))


def test_a_norm_of_a_residual_stream_is_its_own_kernel():
    f = fuse_graph(_pre_norm())
    assert "add" in {op.name for op in f.ops} and "norm" in {op.name for op in f.ops}
    # a cut after the add sends the stream alone (8 elements), as Megatron's stages do
    assert sorted((t.src, t.dst, t.elems) for t in f.tensors if t.src == "add") == [
        ("add", "add2", 8), ("add", "norm", 8)]


def test_a_norm_alone_behind_its_add_fuses():
    """Post-norm (BERT): the add's only reader is the norm, one kernel."""
    ops = [_op("r", "embedding", 0, 16, 8, params=80), _op("proj", "matmul", 1000, 80, 8, 64),
           _op("add", "add", 8, 24, 8), _op("norm", "layernorm", 64, 16, 8, params=16),
           _op("ffn", "matmul", 1000, 80, 8, 64)]
    t = [("r", "proj"), ("r", "add"), ("proj", "add"), ("add", "norm"), ("norm", "ffn")]
    f = fuse_graph(Graph("postnorm", tuple(ops), tuple(Tensor(a, b, 8) for a, b in t)))
    assert [op.name for op in f.ops] == ["r", "proj", "norm", "ffn"]


# --- a chain of layout moves in front of a scaled product ---------------------------------
def test_a_transpose_chain_before_a_scaling_joins_the_product():
    """qkv -> split -> view -> transpose -> view -> transpose -> *c -> score: every move and
    the scaling become the score product's operand layout and alpha (the exporter's K path)."""
    ops = [_op("qkv", "matmul", 3000, 100, 30, 90), _op("split", "reshape", 0, 60, 30),
           Operator("v1", "reshape", 0.0, 0.0, 0, 0, 0.0), _op("t1", "reshape", 0, 20, 10),
           Operator("v2", "reshape", 0.0, 0.0, 0, 0, 0.0), _op("t2", "reshape", 0, 20, 10),
           _op("sk", "elementwise", 10, 21, 10), _op("score", "attn_score", 2000, 20, 100),
           _op("ctx", "attn_context", 2000, 110, 10)]
    t = [("qkv", "split", 30), ("split", "v1", 10), ("v1", "t1", 10), ("t1", "v2", 10), ("v2", "t2", 10),
         ("t2", "sk", 10), ("sk", "score", 10), ("split", "score", 10), ("split", "ctx", 10),
         ("score", "ctx", 100)]
    g = Graph("k", tuple(ops), tuple(Tensor(a, b, e) for a, b, e in t))
    f = fuse_graph(g, scalings=("sk",))
    assert [op.name for op in f.ops] == ["qkv", "score", "ctx"]
    assert f.fwd_flops == g.fwd_flops


# --- a position-embedding table read at constant rows (ONNX) ------------------------------
def test_position_table_add_is_a_lookup():
    onnx = pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
    from onnx import TensorProto, helper  # noqa: PLC0415

    from distplan.workloads.onnx_import import import_onnx  # noqa: PLC0415

    def table(name, dims):
        t = TensorProto()
        t.name, t.data_type = name, TensorProto.FLOAT
        t.dims.extend(dims)
        t.raw_data = bytes(4 * dims[0] * dims[1])
        return t

    pos = helper.make_tensor("pos", TensorProto.INT64, [4], [0, 1, 2, 3])
    nodes = [helper.make_node("Gather", ["wte", "ids"], ["tok"], name="tok"),
             helper.make_node("Gather", ["wpe", "pos"], ["rows"], name="rows"),
             helper.make_node("Unsqueeze", ["rows", "zero"], ["rows1"], name="unsq"),
             helper.make_node("Add", ["tok", "rows1"], ["h"], name="add_pos"),
             helper.make_node("MatMul", ["h", "w"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6])],
        initializer=[table("wte", (50, 6)), table("wpe", (16, 6)), table("w", (6, 6)), pos,
                     helper.make_tensor("zero", TensorProto.INT64, [1], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    fine = import_onnx(model, fuse=False)
    add = fine.op("add_pos")
    assert (add.kind, add.param_elems) == ("embedding", 16 * 6)    # stored like the token table
    g = import_onnx(model)       # the two lookups summed: one gather kernel, as the zoo's embed
    assert [(op.name, op.kind, op.param_elems) for op in g.ops] == [("tok", "embedding", 50 * 6 + 16 * 6),
                                                                    ("mm", "head", 36)]
