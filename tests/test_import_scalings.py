"""Scalings by a constant fused into the matrix product next to them (issue 12): the
exporters write scaled-dot-product attention as ``Mul(q, s) @ Mul(k^T, s)`` with
``s = d**-0.25``; each scaling is the product's ``alpha`` and costs no kernel of its own.
Only a multiplication or division by a one-element constant is a scaling; a
multiplication by a vector or by another activation is not."""
from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX extra is not installed (pip install -e .[onnx])")
from onnx import TensorProto, helper  # noqa: E402

from distplan.workloads.onnx_import import import_onnx  # noqa: E402

D, S = 8, 4


def _attention_onnx(scale: str) -> onnx.ModelProto:
    """x[1,S,D] -> q = x Wq, k = x Wk; q' = scale(q), k' = scale(k^T); softmax(q' k')."""
    w = [helper.make_tensor(n, TensorProto.FLOAT, [D, D], [0.01 * i for i in range(D * D)]) for n in ("wq", "wk")]
    c = {"scalar": helper.make_tensor("c", TensorProto.FLOAT, [], [0.5]),
         "one-element": helper.make_tensor("c", TensorProto.FLOAT, [1], [0.5]),
         "vector": helper.make_tensor("c", TensorProto.FLOAT, [S], [0.5, 0.4, 0.3, 0.2])}[scale]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="mq"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="mk"),
             helper.make_node("Transpose", ["k"], ["kt"], name="tk", perm=[0, 2, 1]),
             helper.make_node("Mul", ["q", "c"] if scale != "vector" else ["q", "cq"], ["qs"], name="sq"),
             helper.make_node("Div", ["kt", "c"], ["ks"], name="sk"),
             helper.make_node("MatMul", ["qs", "ks"], ["p"], name="score"),
             helper.make_node("Softmax", ["p"], ["y"], name="soft", axis=-1)]
    inits = [*w, c]
    if scale == "vector":
        inits.append(helper.make_tensor("cq", TensorProto.FLOAT, [D], [0.5] * D))
    g = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, S])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("scale", ["scalar", "one-element"])
def test_onnx_scalings_by_a_constant_join_the_product(scale):
    m = _attention_onnx(scale)
    fine, fused = import_onnx(m, fuse=False), import_onnx(m)
    assert len(fine.ops) == 7
    assert [op.name for op in fused.ops] == ["mq", "mk", "score", "soft"]
    assert (fused.fwd_flops, fused.bwd_flops, fused.param_elems) == (fine.fwd_flops, fine.bwd_flops,
                                                                    fine.param_elems)
    score = fused.op("score")
    assert score.fwd_flops == 2 * S * S * D + 2 * S * D    # the product, and a multiply per scaled element
    # q and k are read once each; the scaled copies are never written; two reads of the scalar
    assert score.touched_elems == 2 * S * D + S * S + 2


def test_onnx_multiplying_by_a_vector_is_no_scaling():
    fused = import_onnx(_attention_onnx("vector"))
    names = [op.name for op in fused.ops]
    assert "sq" in names and "sk" in names             # Mul by a vector; Div by a vector: element-wise ops


def test_torch_scalings_join_the_product():
    torch = pytest.importorskip("torch", reason="the torch extra is not installed (pip install -e .[torch])")
    from distplan.workloads.torch_import import import_module  # noqa: PLC0415

    class Attn(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k = torch.nn.Linear(D, D, bias=False), torch.nn.Linear(D, D, bias=False)

        def forward(self, x):
            q = self.q(x) * D ** -0.25
            k = self.k(x).transpose(1, 2) / D ** 0.25
            return torch.softmax(q @ k, dim=-1) * x.sum()     # the last Mul scales by an activation

    for tracer in ("export", "fx"):
        g = import_module(Attn(), (torch.randn(1, S, D),), tracer=tracer)
        fine = import_module(Attn(), (torch.randn(1, S, D),), tracer=tracer, fuse=False)
        kinds = [op.kind for op in g.ops]
        assert kinds.count("elementwise") + kinds.count("softmax") <= 2, (tracer, kinds)
        assert kinds.count("matmul") == 2 and kinds.count("attn_score") == 1, (tracer, kinds)
        assert len(fine.ops) - len(g.ops) >= 3, (tracer, [op.name for op in g.ops])
        score = next(op for op in g.ops if op.kind == "attn_score")
        assert score.fwd_flops == 2 * S * S * D + 2 * S * D, tracer


def test_context_product_behind_a_nan_guard():
    """The dynamo exporter writes ``Where(IsNaN(p), 0, p)`` between the softmax and the
    context product; the product is still the context one."""
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="t", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["x", "xt"], ["s"], name="score"),
             helper.make_node("Softmax", ["s"], ["p"], name="soft", axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"], name="isnan"),
             helper.make_node("Where", ["nan", "zero", "p"], ["pg"], name="guard"),
             helper.make_node("MatMul", ["pg", "x"], ["y"], name="context")]
    g = helper.make_graph(nodes, "guard", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, D])], initializer=[zero])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    kinds = {op.name: op.kind for op in import_onnx(m, fuse=False).ops}
    assert (kinds["score"], kinds["context"]) == ("attn_score", "attn_context")
