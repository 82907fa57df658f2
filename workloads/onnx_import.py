"""ONNX model -> Graph: constant folding and shape inference (``onnx_fold.py``), then
per-node FLOPs, bytes, parameters and activation sizes with the conventions of
``workloads/op_costs.py``.

Every node that computes from a per-microbatch value is one operator (unknown types
kept with a pessimistic cost and an ``UnknownOperatorWarning``, never dropped); nodes
computed from constants alone are folded. Every tensor a cost depends on has a static
shape, or the import stops with a one-line error naming it. Parameters are the
floating-point initializers of more than one element, each counted once, read by what
the exporter recorded and by value (ties, masks, position encodings, folded expands).
Symbolic dimensions must be fixed with ``input_shapes={'input': (1, 128)}``.

Rules: docs/IMPORT.md, "ONNX: what becomes what".
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from distplan.core.deadline import check_time
from distplan.core.errors import DistplanError
from distplan.workloads import op_costs as oc
from distplan.workloads.graph import Graph, Operator, unique_name
from distplan.workloads.import_common import (HEAD_TAIL, MOVES, UnknownOperatorWarning, Walk, build_graph,
                                              check_mode, family_table)
from distplan.workloads.fuse import fuse_graph
from distplan.workloads.onnx_fold import fold_and_infer
from distplan.workloads.onnx_fold import static_dims as _dims

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
            "ConstantOfShape Range DepthToSpace SpaceToDepth Trilu OneHot NonZero "
            "ReverseSequence Compress GatherBlockQuantized",
    "reduce": "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceSumSquare "
              "ReduceLogSum ReduceLogSumExp ArgMax ArgMin GlobalAveragePool GlobalMaxPool CumSum TopK",
    "pool": "MaxPool AveragePool LpPool",
})
_MATMUL = {"MatMul", "MatMulInteger", "Gemm", "Conv", "ConvTranspose", "ConvInteger",
           "Attention", "MultiHeadAttention", "Einsum", "Gather", "LSTM", "GRU", "RNN", "Resize", "Upsample"}
#: operators whose leading inputs alone are read as weights: recurrent layers (X, W, R, B;
#: not sequence_lens nor the initial states) and batch norm (X, scale, B; its running mean
#: and variance are buffers, statistics of the training data, not parameters)
_WEIGHT_INPUTS = {"LSTM": 4, "GRU": 4, "RNN": 4, "BatchNormalization": 3}
#: scatters that combine the updates with the data (one FLOP per update element)
_SCATTERS = {"ScatterND", "ScatterElements"}
#: operators that read weights as their second and later inputs
_PRODUCT_TYPES = {"MatMul", "MatMulInteger", "Gemm", "Conv", "ConvTranspose", "ConvInteger", "Einsum"}
#: folded from constants, their outputs are position encodings (rotary cos / sin tables
#: computed from a frequency buffer), not parameters
_POSITIONAL = {"Cos", "Sin"}


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
    guessed: dict[str, str] = field(default_factory=dict)  # tensor sized by rule of thumb -> the unknown op behind it
    made_by: dict[str, str] = field(default_factory=dict)  # tensor -> "<op type> node '<name>'"
    initializer: dict[str, Any] = field(default_factory=dict)  # parameter -> its TensorProto (values read lazily)
    scaling: set[int] = field(default_factory=set)  # ops that multiply or divide by a constant scalar


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
        if not progressed:  # inputs from outer scopes or missing: keep the given order, unless a cycle
            _refuse_cycle([nodes[i] for i in rest])
            out.extend(nodes[i] for i in rest)
            break
        pending = rest
    return out


def _refuse_cycle(stuck: list[Any]) -> None:
    """Nodes no topological order can place: those waiting only on names nobody makes (an
    outer scope's, or missing) are forgiven; a cycle among them is a DistplanError naming
    its nodes (a cyclic model was imported as one operator, the cycle fused away)."""
    maker = {y: i for i, n in enumerate(stuck) for y in n.output if y}
    need = [{maker[x] for x in n.input if x in maker} for n in stuck]
    placed, progressed = set(), True
    while progressed:
        progressed = False
        for i, deps in enumerate(need):
            if i not in placed and deps <= placed:
                placed.add(i)
                progressed = True
    cyc = [n.name or f"{n.op_type} #{i}" for i, n in enumerate(stuck) if i not in placed]
    if cyc:
        shown = ", ".join(map(repr, cyc[:4])) + (" ..." if len(cyc) > 4 else "")
        raise DistplanError(f"the ONNX graph has a cycle through node(s) {shown}: each reads what another "
                            "makes; an ONNX graph is acyclic (loops belong in a Loop node's body)")


def import_onnx(path_or_model: Any, mode: str = "inference", name: str | None = None,
                input_shapes: dict[str, tuple[int, ...]] | None = None,
                batch_size: int | None = None, seq_len: int | None = None, fuse: bool = True) -> Graph:
    """Import an ONNX model (path, bytes or ``onnx.ModelProto``) as a Graph.

    ``mode`` is 'inference' or 'training' (backward FLOPs are filled either way);
    ``input_shapes`` fixes symbolic input dimensions; ``batch_size``/``seq_len`` override
    the values read from the first input; ``fuse`` contracts the graph to the kernels a
    compiler would launch (``workloads/fuse.py``; False: one operator per ONNX node).
    """
    onnx = _require_onnx()
    check_mode(mode)
    model, default_name = _load(onnx, path_or_model)
    model = _fix_inputs(onnx, model, input_shapes)
    g = model.graph
    st = _State()
    st.shape, st.elem_type = fold_and_infer(onnx, model, default_name)
    _read_parameters(onnx, g, st)
    graph_inputs = [i.name for i in g.input if i.name not in st.origin]
    outputs = {o.name for o in g.output}

    ops: list[Operator] = []
    edges: dict[tuple[int, int], int] = defaultdict(int)
    names: set[str] = set()
    scalings: list[str] = []   # Mul/Div/Neg by a constant scalar (a matrix product's alpha when fused)
    looked: set[str] = set()   # rows of a parameter table at constant indices (position embeddings)
    nodes = _sorted_nodes(list(g.node), set(graph_inputs) | set(st.origin))
    for i, node in enumerate(nodes):
        if i % 4096 == 0:
            check_time(f"importing ONNX model {default_name!r}", f"{len(nodes):,} nodes")
        ins = [x for x in node.input if x]
        if _is_shape_query(node, ins, st):  # Shape(x) / Size(x) of a static x: a constant, no parameter
            for y in node.output:
                st.origin[y] = frozenset()
            continue
        if node.op_type == "Constant" or all(x in st.origin for x in ins):
            looked_up = _is_lookup(node, ins, st, looked)
            for y in node.output:
                st.origin[y] = (frozenset().union(*(st.origin[x] for x in ins))
                                if ins and node.op_type not in _POSITIONAL else frozenset())
                if node.op_type == "Constant" and st.shape.get(y) is None:
                    st.shape[y] = _constant_shape(node)
                if looked_up:
                    looked.add(y)
            continue
        v = len(ops)
        op_name = unique_name(node.name or f"{node.op_type}_{i}", names)
        for y in node.output:
            if y:
                st.made_by[y] = f"{node.op_type} node {op_name!r}"
        if _FAMILY.get(node.op_type) == "add" and any(_adds_to_scores(x, ops, st) for x in ins):
            _score_constants(ins, st)
        weights = ([x for x in node.input[:_WEIGHT_INPUTS[node.op_type]] if x] if node.op_type in _WEIGHT_INPUTS
                   else ins)   # not a recurrent layer's initial states, nor batch norm's running statistics
        param, tied = st.claim([p for x in dict.fromkeys(weights) for p in sorted(st.origin.get(x, ()))
                                if p in st.param_elems], op_name)
        op, family = _cost(node, op_name, ins, param, st)
        if family == "add" and any(x in looked for x in ins):
            op = replace(op, kind="embedding")   # x + table[constant rows]: a lookup, stored as one
        op = oc.tie_operator(op, tied)
        ops.append(op)
        if _is_scaling(node, ins, st):
            scalings.append(op_name)
            st.scaling.add(v)
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
    said = st.warn_unknown("ONNX import", "operator(s)", "type", stacklevel=2)
    if st.guessed:
        first = next(iter(st.guessed))
        said.append(
            f"ONNX import: shape inference gave no static shape for {len(st.guessed)} tensor(s) behind "
            f"operators of unknown type (first: {first!r}, behind {st.guessed[first]!r}); each was taken to be "
            f"as large as its operator's largest input")
        warnings.warn(said[-1], UnknownOperatorWarning, stacklevel=2)
    ops = _label_heads(ops, st, outputs)
    b, s = _batch_and_seq(graph_inputs, st, onnx)
    g = build_graph(name or default_name, ops, edges, mode, batch_size or b, seq_len if seq_len is not None else s,
                    said)
    return fuse_graph(g, scalings) if fuse else g


def _is_lookup(node: Any, ins: list[str], st: _State, looked: set[str]) -> bool:
    """A constant-input node that gathers rows of a parameter table (GPT-2's position
    embedding at the folded positions 0..S-1), or a view or cast of such rows."""
    if node.op_type == "Gather":
        return bool(ins) and bool(st.origin.get(ins[0]))
    return _FAMILY.get(node.op_type) in ("view", "move") and bool(ins) and ins[0] in looked


def _is_scaling(node: Any, ins: list[str], st: _State) -> bool:
    """The node multiplies (or divides) its one activation input by a constant scalar:
    ``Mul(x, c)``, ``Mul(c, x)``, ``Div(x, c)``, ``Neg(x)`` with ``c`` a one-element constant."""
    t = node.op_type
    if t not in ("Mul", "Div", "Neg") or len(ins) != (1 if t == "Neg" else 2):
        return False
    consts = [i for i, x in enumerate(ins) if x in st.origin]
    if len(consts) != len(ins) - 1 or (t == "Div" and consts != [1]):
        return False
    return all(st.shape.get(ins[i]) is not None and oc.numel(st.shape[ins[i]]) == 1 for i in consts)


def _adds_to_scores(x: str, ops: list[Operator], st: _State, limit: int = 8) -> bool:
    """``x`` holds attention scores: a score product's output, as it is, viewed or moved
    (Swin adds its shift mask to a reshaped copy), with a bias already added, or
    soft-capped (Gemma-2's ``tanh(s / cap) * cap``: a tanh between scalings by a
    constant), looking back through up to ``limit`` such ops."""
    for _ in range(limit):
        v = st.producer.get(x)
        if v is None:
            return False
        if ops[v].kind == "attn_score":
            return True
        if not (st.family[v] in MOVES | {"add", "tanh"} or v in st.scaling):
            return False
        x = next((y for y in st.op_inputs[v] if y in st.producer), None)
    return False


#: values at least this large in magnitude (or not finite) in a constant added to scores
#: are masked positions (-100 in Swin, -1e4, finfo.min; exp(-50) is 2e-22: no learned
#: position bias is that large)
_MASKED = 50.0


def _score_constants(ins: list[str], st: _State) -> None:
    """Initializers added to attention scores that the exporter computed from constants.

    A floating-point initializer of rank >= 2 added to attention scores (as it is or
    through folded constants) that no operator read before is read by its values: a mask
    (its unmasked values whole numbers: GPT-2's causal mask, BERT's padding mask, Swin's
    shifted-window mask) or a constant-filled one (a fresh zero bias) is not a parameter; a
    learned position bias folded with its lookup (T5's bucket table, Swin's relative
    position table) counts its distinct values, the table entries it holds, masked
    positions left out. A table the exporter kept, looked up by a ``Gather`` the importer
    folds, stays a parameter as it is. Table rows no position pair reads are not in the file
    and cannot be counted. The import rules: docs/IMPORT.md.
    """
    import numpy as np  # noqa: PLC0415
    from onnx import numpy_helper  # noqa: PLC0415

    for x in ins:
        for p in st.origin.get(x, ()):
            if p not in st.param_elems or p in st.claimed or len(st.shape[p]) < 2:
                continue
            if p in st.copies:
                del st.param_elems[p]
                st.copies.discard(p)
                continue
            try:
                a = numpy_helper.to_array(st.initializer[p])
            except (KeyError, ValueError):   # no values (a model built for its shapes): the old rule
                if st.shape[p][0] == 1:
                    del st.param_elems[p]
                continue
            kept = a[np.isfinite(a) & (np.abs(a) < _MASKED)]
            if not kept.size or bool(np.all(kept == np.round(kept))):
                del st.param_elems[p]
            else:
                st.param_elems[p] = min(st.param_elems[p], int(np.unique(kept).size))


def _read_parameters(onnx: Any, g: Any, st: _State) -> None:
    """Parameters, ties and merged copies among the initializers (see the module docstring)."""
    from onnx import numpy_helper  # noqa: PLC0415

    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                   onnx.TensorProto.BFLOAT16}
    kinds = _export_kinds(g)
    weights = []
    for init in g.initializer:
        st.shape[init.name] = tuple(int(d) for d in init.dims)
        st.elem_type[init.name] = init.data_type
        kind = kinds.get(init.name)
        if init.data_type in float_types and (kind == "PARAMETER" or (
                kind is None and len(init.dims) >= 1 and oc.numel(init.dims) > 1)):
            st.param_elems[init.name] = oc.numel(init.dims)
            st.initializer[init.name] = init
            st.origin[init.name] = frozenset({init.name})
            weights.append(init)
        else:
            st.origin[init.name] = frozenset()
    arrays = {}
    for w in weights:
        try:
            arrays[w.name] = numpy_helper.to_array(w)
        except ValueError:  # dims without data (a model built for its shapes alone): no values to compare
            pass
    filled = {n for n, a in arrays.items() if a.size > 1 and bool((a == a.flat[0]).all())}
    # an exporter that records parameters (torch's dynamo) names every merged copy a parameter: a
    # constant-filled initializer it does not name one is a constant (DeBERTa's mask of ones), unless a
    # product or convolution reads it (a zero-initialised weight of a fresh model, transposed and folded)
    weights_of_products = {x for node in g.node if node.op_type in _PRODUCT_TYPES for x in node.input[1:]}
    constants = {n for n in filled if kinds and kinds.get(n) != "PARAMETER" and n not in weights_of_products}
    st.copies.update(filled - constants)
    distinct = {n: a for n, a in arrays.items() if n not in filled}
    # position encodings the exporter computed from buffers and folded: rotary cos / sin tables, ALiBi slopes
    for n in constants | _rotary_tables(distinct) | _alibi_slopes(distinct):
        del st.param_elems[n]
        distinct.pop(n, None)
        st.origin[n] = frozenset()
    for alias, owner in {**_broadcasts(distinct), **_same_values(distinct)}.items():
        if owner == alias:   # a broadcast whose source was folded away: one row is the parameter
            st.param_elems[alias] = int(arrays[alias][0].size)
            continue
        del st.param_elems[alias]
        st.origin[alias] = frozenset({owner})


#: the metadata key under which torch's dynamo exporter records what an initializer was
_EXPORT_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"


def _export_kinds(g: Any) -> dict[str, str]:
    """{initializer name: 'PARAMETER', 'BUFFER', 'CONSTANT_TENSOR'}: what torch.export's
    graph signature said of the tensors the dynamo exporter kept under their own names
    (recorded in the metadata of their value infos); empty for other exporters."""
    out: dict[str, str] = {}
    for vi in list(g.value_info) + list(g.input) + list(g.initializer):
        for prop in getattr(vi, "metadata_props", ()):
            if prop.key == _EXPORT_KIND:
                out[vi.name] = prop.value
    return out


def _rotary_tables(arrays: dict[str, Any]) -> set[str]:
    """Initializers that are the cosine and sine tables of rotary position embeddings
    (Llama, Mistral, Qwen2, ...): the exporter computed them from the ``inv_freq`` buffer
    and the fixed positions and folded them. Pairs of equal shape whose ``cos**2 + sin**2``
    is one value K everywhere (1, or the square of the model's attention scaling) while
    ``cos**2`` is not (two sign patterns of one magnitude, as Hadamard rotations, are
    weights); trained weights never are such a pair. Screened first per array by its sum
    of squares and largest magnitude (``max(c**2) <= K``, with ``K`` the mean of
    ``c**2 + s**2``), so the element-wise check runs only on candidates."""
    import numpy as np  # noqa: PLC0415

    tol = 1e-2   # fp16 tables round cos**2 + sin**2 to about 1e-3
    stats: dict[tuple, list[tuple[str, float, float]]] = defaultdict(list)
    for n, a in arrays.items():
        if a.ndim >= 2 and a.size > 1 and a.dtype.kind == "f":
            x = a.ravel() if a.dtype.itemsize >= 4 else a.ravel().astype(np.float32)   # no copy of a large weight
            with np.errstate(over="ignore"):   # a mask's finfo.min squared: inf, never a rotary table
                stats[a.shape].append((n, float(np.dot(x, x)), max(float(x.max()), -float(x.min()))))
    out: set[str] = set()
    for shape, group in stats.items():
        size = math.prod(shape)
        for i, (c, ssq_c, max_c) in enumerate(group):
            for s, ssq_s, max_s in group[i + 1:]:
                k = (ssq_c + ssq_s) / size
                if not 0 < k < math.inf or max(max_c, max_s) ** 2 > k * (1 + tol) or c in out or s in out:
                    continue
                x2, y2 = np.square(arrays[c], dtype=np.float64), np.square(arrays[s], dtype=np.float64)
                if np.allclose(x2 + y2, k, rtol=tol, atol=0) and not np.allclose(x2, k / 2, rtol=tol):
                    out.update((c, s))
    return out


def _alibi_slopes(arrays: dict[str, Any]) -> set[str]:
    """Initializers that are the per-head slopes of ALiBi attention biases (BLOOM, MPT,
    Falcon with ``alibi``), which the exporter computed from the head count and folded:
    one axis of n > 1 heads (the others 1), n distinct slopes in (0, 1), each a power of
    two whose exponent is a multiple of 4 / p, p the largest power of two <= n (the
    slopes ``2**(-8 k / p)``, and ``2**(-4 j / p)`` for the heads beyond p)."""
    import numpy as np  # noqa: PLC0415

    out: set[str] = set()
    for n, a in arrays.items():
        if a.size < 2 or sum(1 for d in a.shape if d > 1) != 1 or a.dtype.kind != "f":
            continue
        v = a.astype(np.float64).ravel()
        if not bool(np.all((v > 0) & (v < 1))) or np.unique(v).size != v.size:
            continue
        e = -np.log2(v) * (2 ** int(math.log2(v.size))) / 4
        if bool(np.all(np.abs(e - np.round(e)) < 1e-3)):
            out.add(n)
    return out


def _broadcasts(arrays: dict[str, Any]) -> dict[str, str]:
    """{initializer: the parameter it repeats along its leading axis (itself when that
    parameter is not stored apart)}: a folded ``Expand(param, batch)`` (ViT's class token
    expanded over the batch)."""
    import numpy as np  # noqa: PLC0415

    by_size: dict[int, list[str]] = defaultdict(list)
    for n, a in arrays.items():
        by_size[a.size].append(n)
    out: dict[str, str] = {}
    for n, a in arrays.items():
        if a.ndim < 2 or a.shape[0] < 2 or not bool((a == a[:1]).all()):
            continue
        row = a[0].reshape(-1)
        owner = next((k for k in by_size.get(row.size, ()) if k != n
                      and np.array_equal(arrays[k].reshape(-1), row)), None)
        out[n] = owner if owner is not None else n
    return out


def _same_values(arrays: dict[str, Any]) -> dict[str, str]:
    """{initializer: the earlier initializer it equals, as is or with its axes permuted}:
    one parameter stored twice (a tied LM head whose ``Transpose(wte)`` the exporter folded
    into an initializer of its own)."""
    import itertools  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    groups: dict[tuple, list[str]] = defaultdict(list)
    for n, a in arrays.items():
        if a.size > 1:
            groups[(a.size, tuple(sorted(a.shape)), a.dtype.str)].append(n)
    out: dict[str, str] = {}
    for names in groups.values():
        if len(names) < 2:
            continue
        fingerprint = {n: (float(np.sum(arrays[n], dtype=np.float64)), float(np.sum(np.abs(arrays[n]), dtype=np.float64)))
                       for n in names}
        kept: list[str] = []
        for n in names:
            b = arrays[n]
            for k in kept:
                if not all(math.isclose(u, v, rel_tol=1e-9, abs_tol=1e-12) for u, v in zip(fingerprint[k], fingerprint[n])):
                    continue
                a = arrays[k]
                perms = [p for p in itertools.permutations(range(a.ndim)) if tuple(a.shape[i] for i in p) == b.shape]
                if any(np.array_equal(a.transpose(p), b) for p in perms[:24]):
                    out[n] = k
                    break
            else:
                kept.append(n)
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


class _NoRule(Exception):
    """No cost rule for this form of the operator: costed as an unknown operator."""


class _GuessedShape(Exception):
    """A cost rule needs the dimensions of a tensor whose size was only guessed."""


def _shape(x: str, st: _State) -> tuple[int, ...]:
    """The static shape of ``x``, whose dimensions (not only its size) a cost rule reads."""
    if x in st.guessed:
        raise _GuessedShape(x)
    return st.shape[x]


def _cost(node: Any, name: str, ins: list[str], param: int, st: _State) -> tuple[Operator, str]:
    """The Operator for one node and its family (see module docstring)."""
    t = node.op_type
    for x in dict.fromkeys(ins):
        if st.shape.get(x) is None:
            raise _no_shape(x, node, name, st)
    has_rule = t in _MATMUL or t in _FAMILY
    try:
        _size_outputs(node, name, ins, st, has_rule)
        in_elems = [_elems(x, st) for x in dict.fromkeys(ins)]
        out_elems = sum(_elems(y, st) for y in node.output if y)
        if t in _MATMUL:
            return _matmul_like(node, name, ins, param, st, in_elems, out_elems)
        fam = _FAMILY.get(t)
        if fam is not None:
            fwd = None
            if fam == "reduce":
                fwd = sum(in_elems[:1])
            elif t in _SCATTERS and _attr(node, "reduction", b"none") not in (b"none", "none"):
                fwd = in_elems[-1] if len(in_elems) == 3 else 0
            elif fam == "pool":
                fwd = _pool_flops(node, ins, st)
            return oc.family_operator(name, fam, param, in_elems, out_elems, fwd), fam
    except _NoRule:
        pass
    except _GuessedShape as e:
        x = e.args[0]
        raise DistplanError(
            f"ONNX import: {t} node {name!r} needs the dimensions of tensor {x!r}, whose size was only "
            f"estimated: shape inference does not know the output of operator {st.guessed[x]!r} of unknown "
            f"type behind it; add the tensor's shape to the model's value_info "
            f"(onnx.helper.make_tensor_value_info) or re-export without that operator") from None
    unknown = t if not node.domain else f"{node.domain}.{t}"
    st.unknown[unknown].append(name)
    return oc.unknown_operator(name, param, in_elems, out_elems), "other"


#: families whose output is as large as their largest input (element-wise, views)
_SIZE_PRESERVING = frozenset({"add", "arith", "compare", "relu", "gelu", "tanh", "transcendental", "silu",
                              "softmax", "layernorm", "rmsnorm", "batchnorm", "view"})


def _size_outputs(node: Any, name: str, ins: list[str], st: _State, has_rule: bool) -> None:
    """Every output of the node gets a shape: shape inference's; for an operator of unknown
    type, or an element-wise one downstream of such a guess, its largest input's (recorded
    in ``st.guessed`` and warned about); otherwise the import stops with an error naming
    the tensor."""
    for y in (y for y in node.output if y):
        if st.shape.get(y) is not None:
            continue
        guessed = next((x for x in ins if x in st.guessed), None)
        behind = st.guessed[guessed] if guessed else None
        if has_rule and guessed and _FAMILY.get(node.op_type) not in _SIZE_PRESERVING:
            raise _GuessedShape(guessed)
        if has_rule and not guessed:
            raise _no_shape(y, node, name, st)
        st.shape[y] = max((st.shape[x] for x in ins), key=oc.numel, default=(1,))
        st.guessed[y] = behind or name


def _no_shape(x: str, node: Any, name: str, st: _State) -> DistplanError:
    """The one-line error for a tensor without a static shape that a cost depends on."""
    where = st.made_by.get(x) or ("a constant" if x in st.origin else "a graph input")
    return DistplanError(
        f"ONNX import: tensor {x!r} ({where}) has no static shape after constant folding and shape "
        f"inference, and the cost of {node.op_type} node {name!r} depends on it; fix the sizes of every "
        f"model input (solve.py --input-shape NAME=D1xD2..., or input_shapes={{...}}), or re-export with "
        f"static shapes (torch.onnx.export without dynamic_axes / dynamic_shapes)")


def _is_shape_query(node: Any, ins: list[str], st: _State) -> bool:
    return (node.op_type in ("Shape", "Size") and not node.domain and len(ins) == 1
            and st.shape.get(ins[0]) is not None and ins[0] not in st.guessed)


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
    if t in ("LSTM", "GRU", "RNN"):
        return mk(name, "matmul", _rnn_flops(node, ins, st), param, in_elems, out_elems), "matmul"
    if t in ("Resize", "Upsample"):
        x, y = _shape(ins[0], st), _shape(node.output[0], st)
        mode = _attr(node, "mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        axes = sum(1 for a, b in zip(x, y) if a != b)
        return oc.family_operator(name, "move", param, in_elems, out_elems,
                                  oc.resize_flops(out_elems, mode, axes)), "move"
    if t in ("Attention", "MultiHeadAttention"):
        fwd = _attention_flops(node, ins, st)
        return mk(name, "attn_score", fwd, param, in_elems, out_elems), "matmul"
    raise _NoRule(t)


def _pool_flops(node: Any, ins: list[str], st: _State) -> int:
    """MaxPool / AveragePool / LpPool: the input elements each window reads, clipped to the
    input (``op_costs.pool_flops``), from ``kernel_shape``, ``strides``, ``dilations`` and
    ``pads`` or ``auto_pad``; the output's size from shape inference (``ceil_mode`` included)."""
    x, y = _shape(ins[0], st), _shape(node.output[0], st)
    kernel = [int(k) for k in _attr(node, "kernel_shape", [])]
    n = len(kernel)
    strides, dilations = _attr(node, "strides", None), _attr(node, "dilations", None)
    auto = _attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = oc.same_pads_begin(x, y, kernel, strides, dilations, auto == "SAME_UPPER")
    else:
        pads = tuple(_attr(node, "pads", None) or (0,) * (2 * n))[:n] if auto != "VALID" else None
    return oc.pool_flops(x, y, kernel, strides, pads, dilations)


def _einsum_flops(node: Any, ins: list[str], st: _State) -> int:
    eq = _attr(node, "equation", b"")
    eq = eq.decode() if isinstance(eq, bytes) else eq
    try:
        return oc.einsum_flops(eq, (_shape(x, st) for x in ins))
    except ValueError:  # an ellipsis: costed as an unknown operator
        raise _NoRule("einsum with ellipsis") from None


def _rnn_flops(node: Any, ins: list[str], st: _State) -> int:
    """ONNX LSTM / GRU / RNN (one layer): X (T, B, I), or (B, T, I) with ``layout=1``;
    W (directions, G*H, I); an optional bias B; the cell from the node type (an RNN's
    first activation tanh or relu)."""
    x, w = _shape(ins[0], st), _shape(ins[1], st)
    steps, batch = (x[1], x[0]) if _attr(node, "layout", 0) else (x[0], x[1])
    hidden = int(_attr(node, "hidden_size", 0)) or w[1] // oc.RNN_GATES[node.op_type.lower()
                                                                       if node.op_type != "RNN" else "rnn_tanh"]
    cell = node.op_type.lower()
    if cell == "rnn":
        acts = _attr(node, "activations", [b"Tanh"])
        first = acts[0].decode() if isinstance(acts[0], bytes) else acts[0]
        cell = "rnn_relu" if first.lower() == "relu" else "rnn_tanh"
    bias = len(ins) > 3 and bool(node.input[3])
    return oc.rnn_flops(cell, steps, batch, x[2], hidden, 1, w[0], bias)


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
