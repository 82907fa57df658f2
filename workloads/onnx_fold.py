"""Static shapes of every tensor of an ONNX model whose inputs have fixed sizes: ONNX shape
inference, with the model's constant sub-graphs evaluated first by ONNX's own reference
evaluator (``onnx.reference.ReferenceEvaluator``), repeated until nothing changes.

This module decides only *which* nodes to evaluate (initializers, ``Constant``,
``Shape`` / ``Size`` of a static shape, nodes whose inputs are all known constants); the
evaluation is the reference evaluator's. Constants of more than ``VALUE_LIMIT`` elements
are carried by shape only, and a node the evaluator cannot run is left to shape
inference. The model itself is not changed; only the shapes come from here.

Why and how: docs/IMPORT.md, "Constant folding".
"""
from __future__ import annotations

import warnings
from typing import Any

from distplan.core.errors import DistplanError

#: constants with at most this many elements are evaluated and carried by value
VALUE_LIMIT = 1 << 16
_MAX_ROUNDS = 32


def static_dims(type_proto: Any) -> tuple[int, ...] | None:
    """Static shape of a tensor type, or None if any dimension is unknown."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    out = []
    for d in type_proto.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        out.append(int(d.dim_value))
    return tuple(out)


def _has_subgraph(node: Any) -> bool:
    return any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute)


def _static_shape_value(node: Any, shape: tuple[int, ...]) -> Any:
    """The value of ``Shape(x)`` (with its ``start``/``end``) or ``Size(x)`` for a static ``shape``."""
    import numpy as np  # noqa: PLC0415

    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    start, end = 0, None
    for a in node.attribute:
        if a.name == "start":
            start = a.i
        elif a.name == "end":
            end = a.i
    return np.array(shape[slice(start, end)], dtype=np.int64)


class _Folder:
    """The constants known so far and the nodes not yet evaluated."""

    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper  # noqa: PLC0415

        self.model = model
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.functions = list(model.functions)
        self.values: dict[str, Any] = {}                      # name -> numpy array (small constants)
        self.const: dict[str, tuple[tuple[int, ...], int]] = {}  # name -> (shape, elem type), every constant
        for init in model.graph.initializer:
            dims = tuple(int(d) for d in init.dims)
            self.const[init.name] = (dims, init.data_type)
            if _numel(dims) <= VALUE_LIMIT and init.data_location != init.EXTERNAL:
                try:
                    self.values[init.name] = numpy_helper.to_array(init)
                except ValueError:  # dims without data: known by shape only
                    pass
        self.pending = list(model.graph.node)

    def fold(self, shapes: dict[str, tuple[int, ...] | None]) -> bool:
        """Evaluate every pending node whose inputs are now constants; True if any was."""
        progress, rest = False, []
        for node in self.pending:
            if self._evaluate(node, shapes):
                progress = True
            else:
                rest.append(node)
        self.pending = rest
        return progress

    def _evaluate(self, node: Any, shapes: dict[str, tuple[int, ...] | None]) -> bool:
        ins = [x for x in node.input if x]
        if _has_subgraph(node) or not node.output:
            return False
        if node.op_type in ("Shape", "Size") and (node.domain or "") == "" and len(ins) == 1:
            shape = self.const[ins[0]][0] if ins[0] in self.const else shapes.get(ins[0])
            if shape is None:
                return False
            outs = [_static_shape_value(node, shape)]
        elif all(x in self.values for x in ins) and (ins or node.op_type == "Constant"):
            try:
                import numpy as np  # noqa: PLC0415
                from onnx.reference import ReferenceEvaluator  # noqa: PLC0415

                # log(0) = -inf in T5's position buckets is meant; numpy's warnings are noise here
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    ev = ReferenceEvaluator(node, opsets=self.opsets, functions=self.functions or None)
                    outs = ev.run(None, {x: self.values[x] for x in ins})
            except Exception:  # an operator the evaluator does not know or cannot run here
                return False
        else:
            return False
        import numpy as np  # noqa: PLC0415
        from onnx.helper import np_dtype_to_tensor_dtype  # noqa: PLC0415

        for y, v in zip(node.output, outs):
            if not y:
                continue
            v = np.asarray(v)
            try:
                et = np_dtype_to_tensor_dtype(v.dtype)
            except Exception:
                return False
            self.const[y] = (tuple(int(d) for d in v.shape), et)
            if v.size <= VALUE_LIMIT:
                self.values[y] = v
        return True

    def working_model(self) -> Any:
        """The model shape inference runs on: evaluated constants as initializers (small)
        or as inputs of their static shape (large), the nodes still pending."""
        g = self.model.graph
        from onnx import helper, numpy_helper  # noqa: PLC0415

        inits = {i.name for i in g.initializer}
        inputs = [i for i in g.input if i.name not in inits]
        taken = {i.name for i in inputs}
        small = [numpy_helper.from_array(v, name=n) for n, v in self.values.items() if n not in taken]
        large = [helper.make_tensor_value_info(n, et, list(dims)) for n, (dims, et) in self.const.items()
                 if n not in self.values and n not in taken]
        known = [vi for vi in g.value_info if vi.name not in self.const]  # the exporter's own annotations
        graph = helper.make_graph(self.pending, g.name or "m", inputs + large, list(g.output),
                                  initializer=small, value_info=known)
        return helper.make_model(graph, opset_imports=list(self.model.opset_import),
                                 functions=self.functions, ir_version=self.model.ir_version)


def _numel(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def fold_and_infer(onnx: Any, model: Any, name: str) -> tuple[dict[str, tuple[int, ...] | None], dict[str, int]]:
    """({tensor name: static shape or None}, {tensor name: element type}) for every tensor
    of ``model`` that has a type (see the module docstring)."""
    folder = _Folder(model)
    shapes: dict[str, tuple[int, ...] | None] = {}
    types: dict[str, int] = {}
    for _ in range(_MAX_ROUNDS):
        try:
            inferred = onnx.shape_inference.infer_shapes(folder.working_model(), check_type=False,
                                                         strict_mode=False, data_prop=True)
        except Exception as e:
            raise DistplanError(f"ONNX shape inference failed on model {name!r}: {e}") from None
        ig = inferred.graph
        shapes, types = {}, {}
        for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
            shapes[vi.name] = static_dims(vi.type)
            types[vi.name] = vi.type.tensor_type.elem_type
        for n, (dims, et) in folder.const.items():
            shapes[n], types[n] = dims, et
        if not folder.fold(shapes):
            break
    return shapes, types
