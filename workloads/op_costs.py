"""Cost rules shared by the ONNX and torch importers: one canonical operator family per
framework operator, and the zoo's FLOP / backward / kind conventions for each
(``workloads/zoo/costs.py``), so an imported graph and a zoo graph of the same model agree.

Per family: forward FLOPs (matrix products ``2 * out_elems * K`` plus a fused bias,
convolutions, ``FLOPS_PER_ELEM`` for element-wise families, one per input element for
reductions, 0 for data movement and views, ``rnn_flops``, ``pool_flops``,
``resize_flops``), backward FLOPs ``BWD_FACTOR`` x forward (2, adds 1; a lookup's
backward scatter-adds its rows), and ``touched_elems`` (every input and output; a lookup
reads only the gathered rows; views touch nothing). Unknown operators cost
``UNKNOWN_FLOPS_PER_ELEM`` per touched element, kind ``other``, deliberately pessimistic.
Every count is an integer, so sums over operators stay exact.

The table of families and formulas: docs/IMPORT.md, "Cost rules".
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from distplan.workloads.graph import Operator
from distplan.workloads.zoo.costs import (
    ACT_FLOPS_PER_ELEM,
    BWD_FACTOR,
    LAYERNORM_FLOPS_PER_ELEM,
    RMSNORM_FLOPS_PER_ELEM,
    SOFTMAX_FLOPS_PER_ELEM,
)

#: Forward FLOPs per output element of the element-wise and normalisation families.
FLOPS_PER_ELEM: dict[str, int] = {
    "add": 1, "arith": 1, "compare": 1, "relu": ACT_FLOPS_PER_ELEM["relu"],
    "gelu": ACT_FLOPS_PER_ELEM["gelu"], "tanh": ACT_FLOPS_PER_ELEM["tanh"],
    "transcendental": 4, "silu": 5, "softmax": SOFTMAX_FLOPS_PER_ELEM,
    "layernorm": LAYERNORM_FLOPS_PER_ELEM, "rmsnorm": RMSNORM_FLOPS_PER_ELEM,
    "batchnorm": 2,  # inference batch norm: one multiply-add per element
    "move": 0,       # data movement that copies: reads its inputs, writes its output
    "view": 0,       # a new view of the same storage: no traffic, no new activation
}
UNKNOWN_FLOPS_PER_ELEM = 4
#: kinds whose operators are (batched) matrix products: they absorb bias adds and layouts
GEMM_KINDS = frozenset({"matmul", "attn_score", "attn_context", "head"})
#: kinds a compiler fuses into one element-wise kernel (workloads/fuse.py)
FUSIBLE_KINDS = frozenset({"elementwise", "activation", "add", "reshape", "softmax", "layernorm"})

#: Graph ``kind`` of each family (drives the sensitivity factor and coarsening).
FAMILY_KIND: dict[str, str] = {
    "add": "add", "arith": "elementwise", "compare": "elementwise", "relu": "activation",
    "gelu": "activation", "tanh": "activation", "transcendental": "activation",
    "silu": "activation", "softmax": "softmax", "layernorm": "layernorm", "rmsnorm": "layernorm",
    "batchnorm": "layernorm", "move": "reshape", "view": "reshape", "reduce": "elementwise", "pool": "elementwise",
    "matmul": "matmul", "conv": "conv", "embedding": "embedding", "other": "other",
}


def numel(shape: Sequence[int]) -> int:
    """Element count of a fully known shape (a scalar has one element)."""
    return math.prod(int(d) for d in shape)


def bwd_factor(kind: str) -> float:
    """Backward FLOPs per forward FLOP for an operator of graph ``kind``."""
    if kind == "add":
        return BWD_FACTOR["add"]
    return 2.0


def make_operator(name: str, kind: str, fwd_flops: int, param_elems: int, in_elems: Iterable[int],
                  out_elems: int, bwd_flops: int | None = None, reads: int | None = None) -> Operator:
    """An Operator with the conventions above; ``reads`` overrides the input elements read
    (a lookup reads only its output's rows, not the whole table)."""
    read = sum(int(x) for x in in_elems) if reads is None else int(reads)
    if kind == "view":  # family name passed as kind: a view of its input
        kind, read, out_elems = "reshape", 0, 0
    fwd = int(fwd_flops)
    bwd = int(round(bwd_factor(kind) * fwd)) if bwd_flops is None else int(bwd_flops)
    return Operator(name=name, kind=kind, fwd_flops=float(fwd), bwd_flops=float(bwd),
                    param_elems=int(param_elems), out_elems=int(out_elems),
                    touched_elems=float(read + int(out_elems)))


def matmul_flops(out_elems: int, contracted: int, bias: bool = False) -> int:
    """``2 * out * K`` plus one add per output element for a fused bias."""
    return 2 * int(out_elems) * int(contracted) + (int(out_elems) if bias else 0)


def conv_flops(out_elems: int, weight_shape: Sequence[int], bias: bool) -> int:
    """Every output element is a dot product over ``C_in/groups * prod(kernel)`` inputs;
    ``weight_shape`` = (C_out, C_in/groups, k1, k2, ...)."""
    return matmul_flops(out_elems, numel(weight_shape[1:]), bias)


def attention_flops(batch: int, heads: int, q_len: int, kv_len: int, qk_dim: int, v_dim: int) -> int:
    """Scores Q K^T, softmax, context P V of dense multi-head attention."""
    scores = batch * heads * q_len * kv_len
    return 2 * scores * qk_dim + SOFTMAX_FLOPS_PER_ELEM * scores + 2 * scores * v_dim


def family_operator(name: str, family: str, param_elems: int, in_elems: Iterable[int], out_elems: int,
                    fwd_flops: int | None = None) -> Operator:
    """An operator of an element-wise, normalisation, data-movement, reduction or pooling
    ``family``; ``fwd_flops`` defaults to ``FLOPS_PER_ELEM[family]`` per output element."""
    fwd = FLOPS_PER_ELEM[family] * out_elems if fwd_flops is None else fwd_flops
    kind = "view" if family == "view" else FAMILY_KIND[family]
    return make_operator(name, kind, fwd, param_elems, in_elems, out_elems)


def unknown_operator(name: str, param_elems: int, in_elems: Sequence[int], out_elems: int) -> Operator:
    """An operator without a cost rule: ``UNKNOWN_FLOPS_PER_ELEM`` per touched element, kind 'other'."""
    touched = sum(in_elems) + out_elems
    return make_operator(name, "other", UNKNOWN_FLOPS_PER_ELEM * touched, param_elems, in_elems, out_elems)


def einsum_flops(equation: str, shapes: Iterable[Sequence[int]]) -> int:
    """``2 x`` the product of every index's size (a multiply-add per point of the joint index
    space); ``shapes`` are the operands' (read lazily, one per input term). An ellipsis
    stands for the leading axes a term does not name (broadcast: the larger size wins)."""
    lhs = equation.replace(" ", "").split("->")[0]
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), shapes):
        shape = tuple(shape)
        if "..." in term:  # ellipsis axes align from the right across operands (broadcasting)
            head, tail = term.split("...")
            n = len(shape) - len(head) - len(tail)
            term = head + "".join(chr(0x100 + j) for j in range(n - 1, -1, -1)) + tail
        for c, d in zip(term, shape):
            sizes[c] = max(sizes.get(c, 1), d)
    return 2 * math.prod(sizes.values())


#: point-wise FLOPs per hidden unit and step of a recurrent cell (see the module docstring)
RNN_POINTWISE_PER_HIDDEN = {"lstm": 24, "gru": 18, "rnn_tanh": 4, "rnn_relu": 1}
RNN_GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def rnn_flops(cell: str, steps: int, batch: int, input_size: int, hidden: int, layers: int = 1,
              directions: int = 1, bias: bool = True) -> int:
    """Forward FLOPs of a (multi-layer, possibly bidirectional) LSTM / GRU / RNN over
    ``steps`` time steps; layer l > 0 reads the ``directions * hidden`` outputs of l - 1."""
    g, total = RNN_GATES[cell], 0
    for layer in range(layers):
        i = input_size if layer == 0 else directions * hidden
        per = 2 * g * hidden * (i + hidden) + g * hidden + (2 * g * hidden if bias else 0) \
            + RNN_POINTWISE_PER_HIDDEN[cell] * hidden
        total += per * steps * batch * directions
    return int(total)


def pool_flops(in_shape: Sequence[int], out_shape: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int] | None = None, pads_begin: Sequence[int] | None = None,
               dilations: Sequence[int] | None = None) -> int:
    """FLOPs of a max / average / Lp pooling over the trailing ``len(kernel)`` axes: one per
    input element each window reads, the window clipped to the input (padding is read as
    nothing: a ``kernel_size`` larger than the map, EfficientNet's ``AvgPool2d(1280)`` on a
    7 x 7 map with ``ceil_mode``, reads its 49 elements, not 1,280 x 1,280). Windows are
    boxes, so the taps of all outputs are the product over axes of each axis's taps."""
    n = len(kernel)
    strides = tuple(strides or (1,) * n)
    pads_begin = tuple(pads_begin or (0,) * n)
    dilations = tuple(dilations or (1,) * n)
    size_in, size_out = tuple(in_shape[-n:]), tuple(out_shape[-n:])
    taps = 1
    for i, o, k, s, p, d in zip(size_in, size_out, kernel, strides, pads_begin, dilations):
        axis = 0
        for j in range(int(o)):
            start = j * int(s) - int(p)   # the window's first position; tap t reads start + t * d
            lo = (-start + int(d) - 1) // int(d) if start < 0 else 0   # the first tap inside
            hi = min(int(k) - 1, (int(i) - 1 - start) // int(d))
            axis += max(0, hi - lo + 1)
        taps *= axis
    return int(numel(out_shape[:-n]) * taps) if n else int(numel(out_shape))


def same_pads_begin(in_shape: Sequence[int], out_shape: Sequence[int], kernel: Sequence[int],
                    strides: Sequence[int] | None, dilations: Sequence[int] | None, upper: bool) -> tuple[int, ...]:
    """The leading padding of ONNX ``auto_pad`` SAME_UPPER (``upper``) / SAME_LOWER: the total
    padding ``(O - 1) s + (k - 1) d + 1 - I`` split, the odd one at the end (upper) or start."""
    n = len(kernel)
    strides, dilations = tuple(strides or (1,) * n), tuple(dilations or (1,) * n)
    out = []
    for i, o, k, s, d in zip(in_shape[-n:], out_shape[-n:], kernel, strides, dilations):
        total = max(0, (int(o) - 1) * int(s) + (int(k) - 1) * int(d) + 1 - int(i))
        out.append(total // 2 if upper else total - total // 2)
    return tuple(out)


def resize_flops(out_elems: int, mode: str, resized_axes: int) -> int:
    """FLOPs of an interpolating resize: a multiply-add per tap (2 taps per axis for
    linear, 4 for cubic); nearest neighbour copies."""
    taps = {"nearest": 0, "linear": 2, "cubic": 4}.get(mode, 2)
    return 0 if taps == 0 else int(2 * out_elems * taps ** max(resized_axes, 1))


def tie_operator(op: Operator, tied: dict[str, int]) -> Operator:
    """``op`` reading parameters other operators own (owner name -> elements): tied to the
    owner it reads most from (the memory model holds one owner's weights per operator)."""
    if not tied:
        return op
    owner = max(tied, key=lambda n: (tied[n], n))
    return dataclasses.replace(op, tied_to=owner, tied_elems=int(tied[owner]))
