"""ONNX model -> Graph: shape inference, then per-node FLOPs, bytes, parameters and
activation sizes with the conventions of ``workloads/op_costs.py``.

What becomes what:
- every ONNX node that computes from at least one per-microbatch value (a graph input
  or another node's output) is one Operator (kind from its family; unknown operator
  types are kept with a pessimistic cost and a ``UnknownOperatorWarning``, never
  dropped);
- nodes computed from constants alone (``Constant``, and any node whose inputs are all
  initializers or constants, e.g. ``Identity(weight)`` or ``Transpose(weight)``) are
  folded: they run once, not per microbatch, so they are not operators; their outputs
  carry the initializers they derive from on to their consumers;
- parameters are the floating-point initializers of rank >= 1; each is counted once, on
  the first operator (in topological order) that reads it or a constant derived from
  it. Integer initializers and rank-0 scalars are constants, not parameters;
- a tensor from one operator to another becomes a ``Tensor`` edge (several tensors
  between the same two operators are summed, each distinct tensor counted once);
  graph inputs and outputs are not operators;
- ``batch_size`` is the leading dimension of the first graph input and ``seq_len`` its
  second when that input is a rank-2 integer tensor (token ids), unless given.

Symbolic dimensions must be fixed with ``input_shapes={'input': (1, 128)}``.
"""
from __future__ import annotations

import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from distplan.core.errors import DistplanError
from distplan.workloads import op_costs as oc
from distplan.workloads.graph import Graph, Operator
from distplan.workloads.import_common import (HEAD_TAIL, UnknownOperatorWarning, Walk, build_graph, check_mode,
                                              family_table)

__all__ = ["import_onnx", "UnknownOperatorWarning"]

# --- operator families ------------------------------------------------------------------
_FAMILY: dict[str, str] = family_table({
    "add": "Add Sum",
    "arith": "Sub Mul Div Neg Abs Reciprocal Floor Ceil Round Sqrt Pow Max Min Mean Clip Where "
             "Sign Mod PRelu LeakyRelu ThresholdedRelu BitShift",
    "compare": "Equal Less Greater LessOrEqual GreaterOrEqual Not And Or Xor IsNaN IsInf",
    "relu": "Relu",
    "gelu": "Gelu FastGelu BiasGelu",
    "tanh": "Tanh",
    "transcendental": "Exp Log Erf Sigmoid HardSigmoid Softplus Softsign Sin Cos Tan Asin Acos "
                      "Atan Sinh Cosh Asinh Acosh Atanh Elu Selu Celu Mish HardSwish",
    "silu": "Swish QuickGelu",
    "softmax": "Softmax LogSoftmax",
    "layernorm": "LayerNormalization SkipLayerNormalization InstanceNormalization GroupNormalization",
    "rmsnorm": "RMSNormalization SimplifiedLayerNormalization SkipSimplifiedLayerNormalization",
    "batchnorm": "BatchNormalization",
    "view": "Reshape Squeeze Unsqueeze Flatten Identity Dropout Shape Size",
    "move": "Transpose Concat Split Slice Expand Tile Cast CastLike GatherElements GatherND ScatterND ScatterElements Pad "
            "ConstantOfShape Range DepthToSpace SpaceToDepth Trilu OneHot NonZero Resize "
            "Upsample ReverseSequence Compress",
    "reduce": "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare "
              "ReduceLogSum ReduceLogSumExp ArgMax ArgMin GlobalAveragePool GlobalMaxPool CumSum TopK",
    "pool": "MaxPool AveragePool LpPool",
})
_MATMUL = {"MatMul", "MatMulInteger", "Gemm", "Conv", "ConvTranspose", "ConvInteger",
           "Attention", "MultiHeadAttention", "Einsum", "Gather"}


def _require_onnx() -> Any:
    try:
        import onnx  # noqa: PLC0415
    except ImportError:
        raise DistplanError(
            "importing an ONNX model needs the 'onnx' package: pip install -e .[onnx]"
        ) from None
    return onnx


def _load(onnx: Any, path_or_model: Any) -> tuple[Any, str]:
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model, path_or_model.graph.name or "onnx-model"
    if isinstance(path_or_model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(path_or_model)), "onnx-model"
    p = Path(path_or_model)
    if not p.is_file():
        raise DistplanError(f"ONNX file {str(p)!r} not found")
    try:
        return onnx.load(str(p)), p.stem
    except Exception as e:  # protobuf raises its own DecodeError
        raise DistplanError(f"ONNX file {str(p)!r} could not be read as a model: {e}") from None


def _dims(type_proto: Any) -> tuple[int, ...] | None:
    """Static shape of a tensor type, or None if any dimension is unknown."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    out = []
    for d in type_proto.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        out.append(int(d.dim_value))
    return tuple(out)


def _fix_inputs(onnx: Any, model: Any, input_shapes: dict[str, tuple[int, ...]] | None) -> Any:
    """Copy of the model whose graph inputs have the static shapes asked for; errors name
    any input still symbolic."""
    inits = {i.name for i in model.graph.initializer}
    given = dict(input_shapes or {})
    unknown = set(given) - {i.name for i in model.graph.input}
    if unknown:
        raise DistplanError(f"input_shapes names {sorted(unknown)}, which are not inputs of the ONNX model; "
                            f"its inputs are {[i.name for i in model.graph.input if i.name not in inits]}")
    if given:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        model = m
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        if inp.name in given:
            shape = inp.type.tensor_type.shape
            shape.ClearField("dim")
            for v in given[inp.name]:
                shape.dim.add().dim_value = int(v)
        elif _dims(inp.type) is None:
            dims = [d.dim_param or "?" for d in inp.type.tensor_type.shape.dim]
            raise DistplanError(
                f"ONNX input {inp.name!r} has a symbolic shape {dims}; give the sizes to plan for "
                f"(solve.py --input-shape {inp.name}=D1xD2..., or input_shapes={{{inp.name!r}: (...)}})"
            )
    return model


@dataclass
class _State(Walk):
    """The walk's state (values are tensor names, parameters initializer names) and what
    shape inference says of each tensor."""

    shape: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    elem_type: dict[str, int] = field(default_factory=dict)
    guessed: list[str] = field(default_factory=list)  # tensors whose shape was guessed


def _sorted_nodes(nodes: list[Any], available: set[str]) -> list[Any]:
    """The nodes in a topological order (ONNX requires one; be forgiving)."""
    out, done = [], set(available)
    pending = list(range(len(nodes)))
    while pending:
        progressed, rest = False, []
        for i in pending:
            if all(x == "" or x in done for x in nodes[i].input):
                out.append(nodes[i])
                done.update(nodes[i].output)
                progressed = True
            else:
                rest.append(i)
        if not progressed:  # inputs from outer scopes or missing: keep the given order
            out.extend(nodes[i] for i in rest)
            break
        pending = rest
    return out


def import_onnx(path_or_model: Any, mode: str = "inference", name: str | None = None,
                input_shapes: dict[str, tuple[int, ...]] | None = None,
                batch_size: int | None = None, seq_len: int | None = None) -> Graph:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as a Graph.

    ``mode`` is 'inference' or 'training' (backward FLOPs are filled either way);
    ``input_shapes`` fixes symbolic input dimensions; ``batch_size``/``seq_len`` override
    the values read from the first input.
    """
    onnx = _require_onnx()
    check_mode(mode)
    model, default_name = _load(onnx, path_or_model)
    model = _fix_inputs(onnx, model, input_shapes)
    try:
        model = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:
        raise DistplanError(f"ONNX shape inference failed on model {default_name!r}: {e}") from None
    g = model.graph
    st = _State()
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        st.shape[vi.name] = _dims(vi.type)
        st.elem_type[vi.name] = vi.type.tensor_type.elem_type
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                   onnx.TensorProto.BFLOAT16}
    for init in g.initializer:
        st.shape[init.name] = tuple(int(d) for d in init.dims)
        st.elem_type[init.name] = init.data_type
        if init.data_type in float_types and len(init.dims) >= 1:
            st.param_elems[init.name] = oc.numel(init.dims)
            st.origin[init.name] = frozenset({init.name})
        else:
            st.origin[init.name] = frozenset()
    graph_inputs = [i.name for i in g.input if i.name not in st.origin]
    outputs = {o.name for o in g.output}

    ops: list[Operator] = []
    edges: dict[tuple[int, int], int] = defaultdict(int)
    names: set[str] = set()
    for i, node in enumerate(_sorted_nodes(list(g.node), set(graph_inputs) | set(st.origin))):
        ins = [x for x in node.input if x]
        if node.op_type == "Constant" or all(x in st.origin for x in ins):
            for y in node.output:
                st.origin[y] = frozenset().union(*(st.origin[x] for x in ins)) if ins else frozenset()
                if node.op_type == "Constant" and st.shape.get(y) is None:
                    st.shape[y] = _constant_shape(node)
            continue
        v = len(ops)
        op_name = _unique(node.name or f"{node.op_type}_{i}", names)
        param, tied = st.claim([p for x in dict.fromkeys(ins) for p in sorted(st.origin.get(x, ()))
                                if p in st.param_elems], op_name)
        op, family = _cost(node, op_name, ins, param, st)
        op = oc.tie_operator(op, tied)
        ops.append(op)
        st.family.append(family)
        st.op_inputs.append(ins)
        for x in dict.fromkeys(ins):
            if x in st.producer:
                edges[(st.producer[x], v)] += _elems(x, st)
        for y in node.output:
            if y:
                st.producer[y] = v
    if not ops:
        raise DistplanError(f"ONNX model {default_name!r} has no operator that depends on an input")
    st.warn_unknown("ONNX import", "operator(s)", "type", stacklevel=2)
    if st.guessed:
        warnings.warn(
            f"ONNX import: shape inference gave no static shape for {len(st.guessed)} tensor(s) "
            f"(first: {st.guessed[0]!r}); their sizes were taken from the node's largest input",
            UnknownOperatorWarning, stacklevel=2)
    ops = _label_heads(ops, st, outputs)
    b, s = _batch_and_seq(graph_inputs, st, onnx)
    return build_graph(name or default_name, ops, edges, mode, batch_size or b, seq_len if seq_len is not None else s)


def _unique(base: str, names: set[str]) -> str:
    out, k = base, 1
    while out in names:
        k += 1
        out = f"{base}#{k}"
    names.add(out)
    return out


def _constant_shape(node: Any) -> tuple[int, ...] | None:
    for a in node.attribute:
        if a.name == "value":
            return tuple(int(d) for d in a.t.dims)
        if a.name in ("value_float", "value_int", "value_string"):
            return ()
        if a.name in ("value_floats", "value_ints", "value_strings"):
            return (len(a.floats) or len(a.ints) or len(a.strings),)
    return None


def _elems(x: str, st: _State) -> int:
    s = st.shape.get(x)
    return oc.numel(s) if s is not None else 0


def _attr(node: Any, key: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == key:
            import onnx  # noqa: PLC0415

            return onnx.helper.get_attribute_value(a)
    return default


class _NeedShape(Exception):
    pass


def _shape(x: str, st: _State) -> tuple[int, ...]:
    s = st.shape.get(x)
    if s is None:
        raise _NeedShape(x)
    return s


def _cost(node: Any, name: str, ins: list[str], param: int, st: _State) -> tuple[Operator, str]:
    """The Operator for one node and its family (see module docstring)."""
    outs = [y for y in node.output if y]
    for y in outs:
        if st.shape.get(y) is None:  # guess from the largest input, and say so
            known = [oc.numel(st.shape[x]) for x in ins if st.shape.get(x) is not None]
            st.shape[y] = (max(known, default=1),)
            st.guessed.append(y)
    in_elems = [_elems(x, st) for x in dict.fromkeys(ins)]
    out_elems = sum(_elems(y, st) for y in outs)
    t = node.op_type
    try:
        if t in _MATMUL:
            return _matmul_like(node, name, ins, param, st, in_elems, out_elems)
        fam = _FAMILY.get(t)
        if fam is not None:
            fwd = None
            if fam == "reduce":
                fwd = sum(in_elems[:1])
            elif fam == "pool":
                fwd = out_elems * oc.numel(_attr(node, "kernel_shape", []))
            return oc.family_operator(name, fam, param, in_elems, out_elems, fwd), fam
    except _NeedShape:
        pass
    st.unknown[t if not node.domain else f"{node.domain}.{t}"].append(name)
    return oc.unknown_operator(name, param, in_elems, out_elems), "other"


def _is_param_input(x: str, st: _State) -> bool:
    return bool(st.origin.get(x))


def _matmul_like(node: Any, name: str, ins: list[str], param: int, st: _State,
                 in_elems: list[int], out_elems: int) -> tuple[Operator, str]:
    t = node.op_type
    mk = oc.make_operator
    if t in ("MatMul", "MatMulInteger"):
        k = _shape(ins[0], st)[-1]
        kind = "matmul" if any(_is_param_input(x, st) for x in ins[:2]) else st.attn_kind(ins[:2])
        return mk(name, kind, oc.matmul_flops(out_elems, k), param, in_elems, out_elems), "matmul"
    if t == "Gemm":
        a = _shape(ins[0], st)
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return mk(name, "matmul", oc.matmul_flops(out_elems, k, len(ins) > 2), param, in_elems,
                  out_elems), "matmul"
    if t in ("Conv", "ConvInteger"):
        return mk(name, "conv", oc.conv_flops(out_elems, _shape(ins[1], st), len(ins) > 2), param,
                  in_elems, out_elems), "conv"
    if t == "ConvTranspose":
        w = _shape(ins[1], st)
        fwd = 2 * oc.numel(_shape(ins[0], st)) * oc.numel(w[1:]) + (out_elems if len(ins) > 2 else 0)
        return mk(name, "conv", fwd, param, in_elems, out_elems), "conv"
    if t == "Gather":
        if _is_param_input(ins[0], st):  # a lookup table: reads the gathered rows only
            idx = _elems(ins[1], st) if len(ins) > 1 else 0
            return mk(name, "embedding", 0, param, in_elems, out_elems, bwd_flops=out_elems,
                      reads=idx + out_elems), "embedding"
        return mk(name, "reshape", 0, param, in_elems, out_elems), "move"
    if t == "Einsum":
        return mk(name, "matmul", _einsum_flops(node, ins, st), param, in_elems, out_elems), "matmul"
    if t in ("Attention", "MultiHeadAttention"):
        fwd = _attention_flops(node, ins, st)
        return mk(name, "attn_score", fwd, param, in_elems, out_elems), "matmul"
    raise _NeedShape(t)


def _einsum_flops(node: Any, ins: list[str], st: _State) -> int:
    eq = _attr(node, "equation", b"")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    try:
        return oc.einsum_flops(eq, (_shape(x, st) for x in ins))
    except ValueError:  # an ellipsis: costed as an unknown operator
        raise _NeedShape("einsum with ellipsis") from None


def _attention_flops(node: Any, ins: list[str], st: _State) -> int:
    """ONNX ``Attention`` (opset 23: Q, K, V as (B, H, S, D) or (B, S, H*D)) and
    ``com.microsoft`` Attention (input, packed QKV weights, bias) / MultiHeadAttention."""
    if node.domain == "com.microsoft" and node.op_type == "Attention":
        b, s, h_in = _shape(ins[0], st)
        w = _shape(ins[1], st)
        heads = int(_attr(node, "num_heads", 1))
        hidden = w[1] // 3
        proj = oc.matmul_flops(b * s * w[1], h_in, len(ins) > 2 and bool(ins[2]))
        return proj + oc.attention_flops(b, heads, s, s, hidden // heads, hidden // heads)
    q, k, v = (_shape(x, st) for x in ins[:3])
    if len(q) == 4:
        return oc.attention_flops(q[0], q[1], q[2], k[2], q[3], v[3])
    heads = int(_attr(node, "q_num_heads", 0) or _attr(node, "num_heads", 1))
    kv_heads = int(_attr(node, "kv_num_heads", 0) or heads)
    return oc.attention_flops(q[0], heads, q[1], k[1], q[2] // heads, v[2] // kv_heads)


def _label_heads(ops: list[Operator], st: _State, outputs: set[str]) -> list[Operator]:
    """A matmul with weights whose result reaches a graph output through data movement
    and activations alone is the model's head (kind 'head')."""
    out = list(ops)
    for y in sorted(outputs):
        v = st.producer_through(y, through=HEAD_TAIL)
        if v is not None and out[v].kind == "matmul" and any(_is_param_input(x, st) for x in st.op_inputs[v]):
            out[v] = replace(out[v], kind="head")
    return out


def _batch_and_seq(graph_inputs: list[str], st: _State, onnx: Any) -> tuple[int, int | None]:
    if not graph_inputs:
        return 1, None
    s = st.shape.get(graph_inputs[0]) or ()
    b = int(s[0]) if s and s[0] >= 1 else 1
    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    seq = int(s[1]) if len(s) == 2 and st.elem_type.get(graph_inputs[0]) in ints else None
    return b, seq
