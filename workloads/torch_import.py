"""``torch.nn.Module`` -> Graph: ``torch.export`` (non-strict; the ATen graph with the
shapes of the example inputs), or ``torch.fx`` symbolic tracing plus shape propagation
when export fails or ``tracer='fx'``; then the costs of ``workloads/op_costs.py`` per node
and kernel fusion (``workloads/fuse.py``).

Inputs: a tensor, a tuple of tensors (positional) or a dict (keyword arguments). The same
rules as the ONNX importer: a node producing a tensor from a per-microbatch tensor is an
operator (a ``torch.nn`` leaf module is one), nodes computed from parameters and buffers
alone are folded, parameters are counted once by identity (tied weights shared, buffers
not parameters), unknown operations get a pessimistic cost and an
``UnknownOperatorWarning``.

Rules: docs/IMPORT.md, "PyTorch: what becomes what".
"""
from __future__ import annotations

import math
import operator
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from distplan.core.errors import DistplanError
from distplan.workloads import op_costs as oc
from distplan.workloads.fuse import fuse_graph
from distplan.workloads.graph import Graph, Operator
from distplan.workloads.import_common import HEAD_TAIL, Walk, build_graph, check_mode, family_table

# function / method names (lower case) -> family
_FN_FAMILY: dict[str, str] = family_table({
    "add": "add iadd add_ radd",
    "arith": "sub isub rsub mul imul rmul truediv itruediv rtruediv div floordiv neg pow sqrt rsqrt abs "
             "maximum minimum clamp clip where masked_fill masked_fill_ reciprocal mod square addcmul "
             "lerp fmod sign mul_ div_ sub_ floor_divide remainder clamp_ clamp_min clamp_max pow_ neg_",
    "compare": "eq ne lt gt le ge logical_and logical_or logical_not logical_xor isnan isinf bitwise_and "
               "bitwise_or bitwise_xor bitwise_not __and__ __or__ __xor__ __invert__ and_ or_ xor invert",
    "relu": "relu relu_ leaky_relu hardtanh relu6 hardtanh_",
    "gelu": "gelu",
    "tanh": "tanh",
    "transcendental": "exp log sigmoid erf sin cos softplus elu selu celu mish hardswish hardsigmoid log1p "
                      "logsigmoid log_sigmoid",
    "silu": "silu",
    "softmax": "softmax log_softmax _softmax _log_softmax _safe_softmax",
    "layernorm": "layer_norm group_norm instance_norm native_layer_norm native_group_norm",
    "rmsnorm": "rms_norm",
    "batchnorm": "batch_norm _native_batch_norm_legit_no_training native_batch_norm",
    "view": "view transpose permute split chunk getitem flatten unflatten unsqueeze squeeze expand "
            "expand_as narrow select t dropout detach unbind movedim swapaxes view_as getattr "
            "detach_ alias slice _unsafe_view split_with_sizes feature_dropout alpha_dropout native_dropout "
            "lift_fresh_copy",
    "move": "reshape contiguous cat concat stack repeat float half bfloat16 to type_as type clone "
            "index_select gather tril triu zeros_like ones_like full_like new_zeros new_ones flip roll pad "
            "_to_copy copy copy_ index masked_select constant_pad_nd scatter index_put index_put_ "
            "repeat_interleave upsample_nearest1d upsample_nearest2d upsample_nearest3d pixel_shuffle "
            "pixel_unshuffle one_hot full fill fill_ empty_like new_full new_empty",
    "reduce": "mean sum amax amin var std argmax argmin cumsum logsumexp norm max min var_mean "
              "topk sort argsort histc bincount "
              "adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool2d "
              "scatter_add scatter_reduce index_add",
    "pool": "max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d max_pool2d_with_indices",
})

# torch.nn module class names -> family (the matmul family is costed per type below)
_MOD_FAMILY: dict[str, str] = {
    "ReLU": "relu", "ReLU6": "relu", "LeakyReLU": "relu", "GELU": "gelu", "Tanh": "tanh",
    "Sigmoid": "transcendental", "ELU": "transcendental", "SELU": "transcendental",
    "Softplus": "transcendental", "Mish": "transcendental", "Hardswish": "transcendental",
    "SiLU": "silu", "Softmax": "softmax", "LogSoftmax": "softmax",
    "LayerNorm": "layernorm", "GroupNorm": "layernorm", "InstanceNorm1d": "layernorm",
    "InstanceNorm2d": "layernorm", "RMSNorm": "rmsnorm",
    "BatchNorm1d": "batchnorm", "BatchNorm2d": "batchnorm", "BatchNorm3d": "batchnorm",
    "Dropout": "view", "Dropout1d": "view", "Dropout2d": "view", "Identity": "view",
    "Flatten": "view", "Unflatten": "view",
    "MaxPool1d": "pool", "MaxPool2d": "pool", "MaxPool3d": "pool",
    "AvgPool1d": "pool", "AvgPool2d": "pool", "AvgPool3d": "pool",
    "AdaptiveAvgPool1d": "reduce", "AdaptiveAvgPool2d": "reduce", "AdaptiveMaxPool2d": "reduce",
}


def _require_torch() -> Any:
    try:
        import torch  # noqa: PLC0415
        import torch.fx  # noqa: PLC0415, F401
        from torch.fx.passes.shape_prop import ShapeProp  # noqa: PLC0415, F401
    except ImportError:
        raise DistplanError("importing an nn.Module needs PyTorch: pip install -e .[torch]") from None
    return torch


def _shapes(meta: Any) -> list[tuple[int, ...]]:
    """Shapes of every tensor in a (possibly nested) ShapeProp ``tensor_meta`` (or
    export's ``val``)."""
    if meta is None:
        return []
    if hasattr(meta, "shape"):
        return [tuple(int(d) for d in meta.shape)]
    if isinstance(meta, (list, tuple)):
        return [s for m in meta for s in _shapes(m)]
    if isinstance(meta, dict):
        return [s for m in meta.values() for s in _shapes(m)]
    return []


def _meta(node: Any) -> Any:
    """What a node records of its output tensors: fx's ``tensor_meta``, else export's ``val``."""
    m = node.meta.get("tensor_meta")
    return m if m is not None else node.meta.get("val")


def _target_name(node: Any) -> str:
    """The operation's name in lower case: a method or module name, a function's name, an
    ATen overload's packet name (``aten.add.Tensor`` -> ``add``)."""
    t = node.target
    if isinstance(t, str):
        return t.rsplit(".", 1)[-1].lower()
    name = getattr(t, "__name__", str(t))
    return name.split(".", 1)[0].lower()


#: how the model is traced: ``auto`` tries torch.export, then torch.fx
TRACERS = ("auto", "export", "fx")


def import_module(module: Any, example_inputs: Any, mode: str = "inference", name: str | None = None,
                  fuse: bool = True, tracer: str = "auto") -> Graph:
    """Trace ``module`` on ``example_inputs`` (a tensor, a tuple of tensors, or a dict of
    keyword arguments) with ``torch.export`` (``tracer='export'``), ``torch.fx``
    (``'fx'``), or export falling back to fx (``'auto'``), and build its Graph (fused
    into kernels unless ``fuse=False``)."""
    return _import(module, example_inputs, mode, name, fuse, tracer, None)


def import_module_with_paths(module: Any, example_inputs: Any, mode: str = "inference", name: str | None = None,
                             fuse: bool = True, tracer: str = "auto",
                             ) -> tuple[Graph, dict[str, list[tuple[str, str, float]]]]:
    """:func:`import_module`, and for each operator of the Graph the traced nodes it
    holds, as (node name, module path, weight) in order: the path of the innermost
    module whose forward ran the node (``encoder.layer.0.attention.self.query``; "" for
    the root module's own code), and the node's forward FLOPs plus touched elements (0
    for a view). A profile measured per module (workloads/torch_profile.py) maps onto
    the Graph's operators through it."""
    paths: dict[str, tuple[str, float]] = {}
    members: dict[str, list[str]] = {}
    g = _import(module, example_inputs, mode, name, fuse, tracer, (paths, members))

    def info(node: str) -> tuple[str, float]:
        base = node.split("~", 1)[0]           # a rematerialised copy: <op>~<reader>
        return paths.get(base, paths.get(base.split("#", 1)[0], ("", 0.0)))

    return g, {op.name: [(m, *info(m)) for m in members.get(op.name, [op.name])] for op in g.ops}


def _module_path(node: Any) -> str:
    """The dotted path of the innermost module that ran ``node`` ("" for the root)."""
    if node.op == "call_module":
        return str(node.target)
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    entry = list(stack.values())[-1]
    p = str(entry[0] if isinstance(entry, tuple) else entry)
    p = re.sub(r"^L\['self'\]\.?|^L__self__\.?|^self\.?", "", p)   # older exporters' spelling
    p = re.sub(r"\[(\d+)\]", r".\1", p).replace("['", ".").replace("']", "")
    return p.strip(".")


def _import(module: Any, example_inputs: Any, mode: str, name: str | None, fuse: bool, tracer: str,
            record: tuple[dict, dict] | None) -> Graph:
    torch = _require_torch()
    check_mode(mode)
    if tracer not in TRACERS:
        raise DistplanError(f"tracer {tracer!r} unknown; use one of {TRACERS}")
    if not isinstance(module, torch.nn.Module):
        raise DistplanError(f"import_module needs a torch.nn.Module, got {type(module).__name__}")
    if isinstance(example_inputs, dict):
        args, kwargs = (), dict(example_inputs)
    else:
        args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        kwargs = {}
    label = name or type(module).__name__
    first = args[0] if args else next(iter(kwargs.values()), None)
    errors: list[str] = []
    if tracer in ("auto", "export"):
        try:
            gm, lifted = _export(torch, module, args, kwargs)
        except Exception as e:  # export raises many types; the fallback or the error names it
            errors.append(f"torch.export: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}")
        else:
            built = _build(gm, torch, first, mode, label, lifted, record)
            if record is not None:   # export traced the TensorOutputs wrapper: the model is its child "m"
                for k, (p, wt) in record[0].items():
                    record[0][k] = ("" if p == "m" else p[2:] if p.startswith("m.") else p, wt)
            return _finish(*built, fuse, record)
        if tracer == "export" or kwargs:
            raise DistplanError(f"could not trace {label!r} ({errors[0]})"
                                + ("; torch.fx needs positional inputs (a tensor or a tuple)" if kwargs else ""))
    gm = _fx(torch, module, args, label, errors)
    return _finish(*_build(gm, torch, first, mode, label, {}, record), fuse, record)


def _finish(g: Graph, scalings: list[str], fuse: bool, record: tuple[dict, dict] | None = None) -> Graph:
    members = record[1] if record is not None else None
    return fuse_graph(g, scalings, members) if fuse else g


#: operations that scale their input: ``x * c``, ``c * x``, ``x / c``, ``-x``
_SCALES = frozenset({"mul", "mul_", "div", "div_", "truediv", "true_divide", "neg"})


def _is_scaling(node: Any, w: _Walk, deps: list[Any]) -> bool:
    """The node multiplies (or divides) its one activation input by a constant scalar (a
    Python number or a one-element constant)."""
    t = _target_name(node)
    if t not in _SCALES or node.kwargs.get("rounding_mode") is not None:
        return False
    acts = [d for d in deps if d not in w.origin]
    if len(acts) != 1 or any(w.elems(d) != 1 for d in deps if d in w.origin):
        return False
    if t == "neg":
        return len(node.args) == 1
    if len(node.args) != 2 or not all(a is acts[0] or isinstance(a, (int, float)) or a in w.origin
                                      for a in node.args):
        return False
    return t.startswith("mul") or node.args[0] is acts[0]


def _tensor_outputs(torch: Any, module: Any) -> Any:
    """``module`` wrapped so that only its tensor outputs leave it (a ``transformers``
    model returns a ModelOutput holding a key/value cache object export cannot return)."""

    class TensorOutputs(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *a: Any, **k: Any) -> Any:
            out = self.m(*a, **k)
            if isinstance(out, torch.Tensor):
                return out
            if hasattr(out, "to_tuple"):
                out = out.to_tuple()
            elif isinstance(out, dict):
                out = tuple(out.values())
            items = out if isinstance(out, (tuple, list)) else (out,)
            return tuple(x for x in items if isinstance(x, torch.Tensor))

    return TensorOutputs(module)


def _export(torch: Any, module: Any, args: tuple, kwargs: dict) -> tuple[Any, dict[str, Any]]:
    """(the graph module of ``torch.export.export(..., strict=False)``, {placeholder name:
    the parameter, buffer or constant it lifts}); its nodes carry their shapes."""
    import warnings  # noqa: PLC0415

    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        ep = torch.export.export(_tensor_outputs(torch, module), args, kwargs=kwargs, strict=False)
    lifted: dict[str, Any] = {}
    for spec in ep.graph_signature.input_specs:
        if str(spec.kind).rsplit(".", 1)[-1] != "USER_INPUT":
            lifted[spec.arg.name] = ep.state_dict.get(spec.target, ep.constants.get(spec.target))
    return ep.graph_module, lifted


def _fx(torch: Any, module: Any, inputs: tuple, label: str, errors: list[str]) -> Any:
    """``torch.fx.symbolic_trace`` and shape propagation on ``inputs``."""
    from torch.fx.passes.shape_prop import ShapeProp  # noqa: PLC0415

    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception as e:
        also = f"; {errors[0]}" if errors else ""
        raise DistplanError(
            f"torch.fx could not trace {label!r} ({type(e).__name__}: {e}){also}; data-dependent control "
            "flow must be removed or the model exported to ONNX instead"
        ) from None
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*inputs)
    except Exception as e:
        raise DistplanError(
            f"running {label!r} on the example inputs failed ({type(e).__name__}: {e}); "
            "pass inputs of the shapes and dtypes the model expects"
        ) from None
    return gm


class _Walk(Walk):
    """The walk's state (values are fx nodes, parameters their ``id``) and the traced module."""

    def __init__(self, gm: Any, torch: Any) -> None:
        super().__init__()
        self.gm, self.torch = gm, torch

    def elems(self, node: Any) -> int:
        return sum(oc.numel(s) for s in _shapes(_meta(node)))

    def shape(self, node: Any) -> tuple[int, ...]:
        s = _shapes(_meta(node))
        if not s:
            raise DistplanError(f"no shape recorded for traced node {node.name!r}")
        return s[0]

    def params_of(self, tensors: Sequence[Any]) -> frozenset[int]:
        out = set()
        for p in tensors:
            if isinstance(p, self.torch.nn.Parameter):
                out.add(id(p))
                self.param_elems[id(p)] = int(p.numel())
        return frozenset(out)


def _build(gm: Any, torch: Any, first: Any, mode: str, label: str,
           lifted: dict[str, Any], record: tuple[dict, dict] | None = None) -> tuple[Graph, list[str]]:
    """The Graph of a traced module and its scalings by a constant (names, for fusion);
    ``lifted``: export's placeholders that hold a parameter, buffer or constant (by
    placeholder name), not a user input."""
    w = _Walk(gm, torch)
    scalings: list[str] = []
    ops: list[Operator] = []
    edges: dict[tuple[int, int], int] = defaultdict(int)
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name in lifted:
            w.origin[node] = w.params_of([lifted[node.name]])
            continue
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "get_attr":
            w.origin[node] = w.params_of([_fetch_attr(gm, node.target)])
            continue
        deps = list(dict.fromkeys(node.all_input_nodes))
        is_tensor = bool(_shapes(_meta(node)))
        if not is_tensor or all(d in w.origin for d in deps):
            # a shape query, or a function of parameters / buffers alone: folded
            w.origin[node] = frozenset().union(*(w.origin.get(d, frozenset()) for d in deps))
            continue
        v = len(ops)
        param_ids = frozenset().union(*(w.origin.get(d, frozenset()) for d in deps))
        if node.op == "call_module":
            param_ids |= w.params_of(list(gm.get_submodule(node.target).parameters()))
        param, tied = w.claim(sorted(param_ids), node.name)
        op, fam = _cost(node, w, deps, param)
        op = oc.tie_operator(op, tied)
        ops.append(op)
        if record is not None:
            record[0][op.name] = (_module_path(node), float(op.fwd_flops + op.touched_elems))
        if _is_scaling(node, w, deps):
            scalings.append(op.name)
        w.family.append(fam)
        w.op_inputs.append(deps)
        for d in deps:
            if d in w.producer:
                n = w.elems(node) if _target_name(node) == "getitem" else w.elems(d)
                edges[(w.producer[d], v)] += n
        w.producer[node] = v
    if not ops:
        raise DistplanError(f"module {label!r} traced to no tensor operation")
    said = w.warn_unknown("torch import", "node(s)", "operation", stacklevel=3)
    ops = _label_heads(gm, w, ops)
    b, s = 1, None
    if isinstance(first, torch.Tensor) and first.dim() >= 1:
        b = int(first.shape[0])
        if first.dim() == 2 and not first.is_floating_point():
            s = int(first.shape[1])
    return build_graph(label, ops, edges, mode, b, s, said), scalings


def _fetch_attr(gm: Any, target: str) -> Any:
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def _label_heads(gm: Any, w: _Walk, ops: list[Operator]) -> list[Operator]:
    out = list(ops)
    for node in gm.graph.nodes:
        if node.op != "output":
            continue
        for d in node.all_input_nodes:
            v = w.producer_through(d, through=HEAD_TAIL)
            if v is not None and out[v].kind == "matmul" and w.family[v] == "matmul_w":
                out[v] = replace(out[v], kind="head")
    return out


def _arg(node: Any, i: int, key: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(key, default)


def _cost(node: Any, w: _Walk, deps: list[Any], param: int) -> tuple[Operator, str]:
    in_elems = [w.elems(d) for d in deps]
    out = w.elems(node)
    mk = oc.make_operator
    name = node.name
    if node.op == "call_module":
        mod = w.gm.get_submodule(node.target)
        cls = type(mod).__name__
        x = deps[0] if deps else None
        in_elems = in_elems + [int(p.numel()) for p in mod.parameters()]  # weights are read too
        if cls == "Linear":
            return mk(name, "matmul", oc.matmul_flops(out, mod.in_features, mod.bias is not None), param,
                      in_elems, out), "matmul_w"
        if cls in ("Conv1d", "Conv2d", "Conv3d"):
            return mk(name, "conv", oc.conv_flops(out, tuple(mod.weight.shape), mod.bias is not None),
                      param, in_elems, out), "conv"
        if cls in ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
            fwd = 2 * w.elems(x) * oc.numel(tuple(mod.weight.shape)[1:]) + (out if mod.bias is not None else 0)
            return mk(name, "conv", fwd, param, in_elems, out), "conv"
        if cls == "Embedding":
            return mk(name, "embedding", 0, param, in_elems, out, bwd_flops=out,
                      reads=w.elems(x) + out), "embedding"
        if cls in ("LSTM", "GRU", "RNN"):
            cell = cls.lower() if cls != "RNN" else f"rnn_{mod.nonlinearity}"
            xs = w.shape(x)
            steps, batch = (xs[-2], xs[0] if len(xs) == 3 else 1) if mod.batch_first or len(xs) == 2 \
                else (xs[0], xs[1])
            fwd = oc.rnn_flops(cell, steps, batch, mod.input_size, mod.hidden_size, mod.num_layers,
                               2 if mod.bidirectional else 1, mod.bias)
            return mk(name, "matmul", fwd, param, in_elems, out), "matmul_w"
        if cls == "MultiheadAttention":
            return mk(name, "attn_score", _mha_flops(node, mod, w), param, in_elems, out), "matmul"
        fam = _MOD_FAMILY.get(cls)
        if fam is not None:
            return _family_op(node, fam, name, param, in_elems, out, mod), fam
        return _unknown(node, f"nn.{cls}", w, name, param, in_elems, out)
    t = _target_name(node)
    if node.target is operator.matmul or t in ("matmul", "bmm", "mm", "baddbmm", "addmm", "linear"):
        return _matmul(node, t, w, deps, name, param, in_elems, out)
    if t in _GROUPED_MM:   # mixture of experts: each token's rows times its expert's (K, N) weight
        k = w.shape(node.args[0])[-1]
        has_weight = any(d in w.origin for d in deps)
        return mk(name, "matmul", oc.matmul_flops(out, k, _arg(node, 3, "bias") is not None), param, in_elems,
                  out), ("matmul_w" if has_weight else "matmul")
    if t in ("scaled_dot_product_attention",):
        q, k, v = (w.shape(a) for a in node.args[:3])
        bh = oc.numel(q[:-2])
        fwd = oc.attention_flops(bh, 1, q[-2], k[-2], q[-1], v[-1])
        return mk(name, "attn_score", fwd, param, in_elems, out), "matmul"
    if t == "einsum":
        return mk(name, "matmul", _einsum_flops(node, w), param, in_elems, out), "matmul"
    if t in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
        return mk(name, "matmul", _aten_rnn_flops(node, t, w), param, in_elems, out), "matmul_w"
    if t in ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "conv_transpose1d",
             "conv_transpose2d", "conv_transpose3d"):
        x, wt = node.args[0], node.args[1]
        bias = _arg(node, 2, "bias") is not None
        transposed = t.startswith("conv_transpose") or (t in ("convolution", "_convolution") and bool(_arg(node, 6, "transposed")))
        if transposed:  # every input element meets (C_out / groups) * prod(kernel) weights
            fwd = 2 * w.elems(x) * oc.numel(w.shape(wt)[1:]) + (out if bias else 0)
        else:
            fwd = oc.conv_flops(out, w.shape(wt), bias)
        return mk(name, "conv", fwd, param, in_elems, out), "conv"
    if t.startswith("upsample_") or t == "interpolate":
        mode = "nearest" if "nearest" in t else "cubic" if "cubic" in t else "linear"
        if t == "interpolate":
            m = str(_arg(node, 3, "mode", "nearest"))
            mode = "nearest" if "nearest" in m else "cubic" if "cubic" in m else "linear"
        dims = max(1, len(w.shape(node)) - 2)
        return oc.family_operator(name, "move", param, in_elems, out, oc.resize_flops(out, mode, dims)), "move"
    if t == "embedding":
        return mk(name, "embedding", 0, param, in_elems, out, bwd_flops=out,
                  reads=w.elems(node.args[0]) + out), "embedding"
    fam = _FN_FAMILY.get(t) or _in_place_family(t)
    if fam is not None:
        return _family_op(node, fam, name, param, in_elems, out, None), fam
    return _unknown(node, t, w, name, param, in_elems, out)


def _in_place_family(t: str) -> str | None:
    """An in-place variant (``scatter_``, ``index_add_``: torch's trailing underscore)
    costs what its out-of-place operation does (DeepSeek-V3's group-limited routing
    calls ``scatter_``)."""
    if t.endswith("_") and not t.startswith("_") and len(t) > 1:
        return _FN_FAMILY.get(t[:-1])
    return None


#: grouped matrix products of a mixture of experts: ``aten._grouped_mm(a, b, offs, bias)``
#: (torch >= 2.9; ``F.grouped_mm``) and the custom op ``transformers.grouped_mm_fallback(input,
#: weight, offs)`` transformers 5 runs its experts with where that has no kernel (CPU, fp32):
#: ``a`` (tokens, K) sorted by expert, ``b`` (experts, K, N), the output (tokens, N)
_GROUPED_MM = frozenset({"_grouped_mm", "grouped_mm", "grouped_mm_fallback"})


def _family_op(node: Any, fam: str, name: str, param: int, in_elems: list[int], out: int,
               mod: Any) -> Operator:
    if fam == "reduce":
        fwd = in_elems[0] if in_elems else out
    elif fam == "pool":
        fwd = _pool_flops(node, mod, out)
    else:
        fwd = None
    return oc.family_operator(name, fam, param, in_elems, out, fwd)


def _pool_flops(node: Any, mod: Any, out: int) -> int:
    """max / avg pooling (module or function): the input elements each window reads,
    clipped to the input (``op_costs.pool_flops``); ``out`` x kernel where the input's
    shape is not recorded."""
    y = _shapes(_meta(node))[0]
    dims = max(1, len(y) - 2)

    def per_axis(v: Any, default: int) -> tuple[int, ...]:
        v = default if v is None or (isinstance(v, (tuple, list)) and not v) else v
        return tuple(int(a) for a in v) if isinstance(v, (tuple, list)) else (int(v),) * dims

    if mod is not None:
        k, stride, pad, dil = (getattr(mod, a, None) for a in ("kernel_size", "stride", "padding", "dilation"))
    else:
        avg = "avg" in _target_name(node)
        k, stride, pad = _arg(node, 1, "kernel_size", 1), _arg(node, 2, "stride"), _arg(node, 3, "padding", 0)
        dil = None if avg else _arg(node, 4, "dilation", 1)
    ks = per_axis(k, 1)
    x = node.args[0] if node.args else None
    xs = _shapes(_meta(x)) if hasattr(x, "meta") else []
    if not xs:
        return out * math.prod(ks)
    return oc.pool_flops(xs[0], y, ks, per_axis(stride, 0) if stride else ks, per_axis(pad, 0), per_axis(dil, 1))


def _unknown(node: Any, what: str, w: _Walk, name: str, param: int, in_elems: list[int],
             out: int) -> tuple[Operator, str]:
    w.unknown[what].append(name)
    return oc.unknown_operator(name, param, in_elems, out), "other"


def _matmul(node: Any, t: str, w: _Walk, deps: list[Any], name: str, param: int, in_elems: list[int],
            out: int) -> tuple[Operator, str]:
    if t == "linear":
        x = node.args[0]
        bias = _arg(node, 2, "bias") is not None
        return oc.make_operator(name, "matmul", oc.matmul_flops(out, w.shape(x)[-1], bias), param, in_elems,
                                out), "matmul_w"
    if t in ("addmm", "baddbmm"):  # bias/input first, then the two factors
        a, bias = node.args[1], True
    else:
        a, bias = node.args[0], False
    k = w.shape(a)[-1]
    has_weight = any(d in w.origin for d in deps)
    kind = "matmul" if has_weight else w.attn_kind(deps)
    return oc.make_operator(name, kind, oc.matmul_flops(out, k, bias), param, in_elems, out), \
        ("matmul_w" if has_weight else "matmul")


def _einsum_flops(node: Any, w: _Walk) -> int:
    operands = node.args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    try:
        return oc.einsum_flops(str(node.args[0]), (w.shape(x) for x in operands))
    except ValueError:
        raise DistplanError(f"einsum node {node.name!r}: equations with '...' are not supported; "
                            "spell out the indices") from None


def _aten_rnn_flops(node: Any, cell: str, w: _Walk) -> int:
    """``aten.lstm/gru/rnn_*.input(input, hx, params, has_biases, num_layers, dropout,
    train, bidirectional, batch_first)``; the hidden size from the output's last axis."""
    xs = w.shape(node.args[0])
    has_biases, layers, bidir, batch_first = (bool(node.args[3]), int(node.args[4]), bool(node.args[7]),
                                              bool(node.args[8]))
    dirs = 2 if bidir else 1
    hidden = w.shape(node)[-1] // dirs
    if len(xs) == 2:
        steps, batch = xs[0], 1
    else:
        steps, batch = (xs[1], xs[0]) if batch_first else (xs[0], xs[1])
    return oc.rnn_flops(cell, steps, batch, xs[-1], hidden, layers, dirs, has_biases)


def _mha_flops(node: Any, mod: Any, w: _Walk) -> int:
    """nn.MultiheadAttention: Q/K/V projections, attention, output projection."""
    q, k, v = (w.shape(a) for a in node.args[:3])
    if getattr(mod, "batch_first", False):
        (n, lq, e), lk = q, k[1]
    else:
        (lq, n, e), lk = q, k[0]
    h = mod.num_heads
    bias = mod.in_proj_bias is not None
    proj = (oc.matmul_flops(n * lq * e, q[-1], bias) + oc.matmul_flops(n * lk * e, k[-1], bias)
            + oc.matmul_flops(n * lk * e, v[-1], bias))
    out = oc.matmul_flops(n * lq * e, e, mod.out_proj.bias is not None)
    return proj + oc.attention_flops(n, h, lq, lk, e // h, e // h) + out
