"""Per-operator cost conventions of the zoo: FLOPs per element, backward factors, and
small constructors that turn a shape into an ``Operator``.

Forward FLOPs per microbatch: a matmul (m x k) by (k x n) ``2*m*n*k`` plus ``m*n`` for a
bias; attention score and context ``2*B*s*s*h`` each (dense: a causal mask does not halve
the work); element-wise ops ``*_FLOPS_PER_ELEM`` per output element (memory-bound
everywhere we model, so the constant barely matters). Backward FLOPs
``BWD_FACTOR[kind] * fwd``: 2 for the matmul family (input and weight gradients),
softmax, norms and activations, 1 for adds; embeddings scatter-add their gradient rows
(plus twice their norm's FLOPs). ``touched_elems`` = elements read + written by the
forward (inputs, weights even when tied, outputs); an embedding reads only its rows.

The importers share these rules: docs/IMPORT.md, "Cost rules".
"""
from __future__ import annotations

import math

from distplan.workloads.graph import Operator

LAYERNORM_FLOPS_PER_ELEM = 8   # mean, variance, normalise, scale, shift
RMSNORM_FLOPS_PER_ELEM = 4     # square, mean, multiply by rsqrt, scale
SOFTMAX_FLOPS_PER_ELEM = 5     # scale (1/sqrt(d)) and mask, max, exp, sum, divide
ADD_FLOPS_PER_ELEM = 1
ACT_FLOPS_PER_ELEM = {"relu": 1, "gelu": 8, "tanh": 4, "swiglu": 5}  # swiglu: silu(g) * u
NORM_FLOPS_PER_ELEM = {"layernorm": LAYERNORM_FLOPS_PER_ELEM, "rmsnorm": RMSNORM_FLOPS_PER_ELEM}

BWD_FACTOR = {
    "matmul": 2.0, "attn_score": 2.0, "attn_context": 2.0, "head": 2.0,
    "softmax": 2.0, "layernorm": 2.0, "activation": 2.0, "add": 1.0,
}


def _op(name: str, kind: str, fwd: int, training: bool, params: int, out: int, touched: int,
        bwd: float | None = None) -> Operator:
    if bwd is None:
        bwd = BWD_FACTOR[kind] * fwd
    return Operator(name=name, kind=kind, fwd_flops=float(fwd), bwd_flops=float(bwd) if training else 0.0,
                    param_elems=int(params), out_elems=int(out), touched_elems=float(touched))


def matmul(name: str, m: int, k: int, n: int, bias: bool, training: bool, kind: str = "matmul",
           weight_is_param: bool = True) -> Operator:
    """(m x k) @ (k x n) [+ bias n]; ``weight_is_param=False`` for a tied weight."""
    weights = k * n + (n if bias else 0)
    fwd = 2 * m * n * k + (m * n if bias else 0)
    return _op(name, kind, fwd, training, weights if weight_is_param else 0, m * n, m * k + weights + m * n)


def attn_score(name: str, batch: int, seq: int, heads: int, head_dim: int, kv_dim: int,
               training: bool, kv_seq: int | None = None) -> Operator:
    """Scores Q K^T for every head: (s x d) @ (d x s') per sequence and head (``kv_seq``
    keys s', default s: a context-parallel rank's local queries against every key)."""
    kv_seq = seq if kv_seq is None else kv_seq
    tokens, scores = batch * seq, batch * heads * seq * kv_seq
    return _op(name, "attn_score", 2 * scores * head_dim, training, 0, scores,
               tokens * heads * head_dim + batch * kv_seq * kv_dim + scores)


def attn_context(name: str, batch: int, seq: int, heads: int, head_dim: int, kv_dim: int,
                 training: bool, kv_seq: int | None = None) -> Operator:
    """Context P V for every head: (s x s') @ (s' x d) per sequence and head (``kv_seq``
    values s', default s)."""
    kv_seq = seq if kv_seq is None else kv_seq
    tokens, scores = batch * seq, batch * heads * seq * kv_seq
    out = tokens * heads * head_dim
    return _op(name, "attn_context", 2 * scores * head_dim, training, 0, out, scores + batch * kv_seq * kv_dim + out)


def softmax(name: str, elems: int, training: bool) -> Operator:
    return _op(name, "softmax", SOFTMAX_FLOPS_PER_ELEM * elems, training, 0, elems, 2 * elems)


def norm(name: str, norm_kind: str, tokens: int, hidden: int, training: bool) -> Operator:
    """LayerNorm (scale and shift: 2h parameters) or RMSNorm (scale: h parameters)."""
    params = 2 * hidden if norm_kind == "layernorm" else hidden
    elems = tokens * hidden
    return _op(name, "layernorm", NORM_FLOPS_PER_ELEM[norm_kind] * elems, training, params, elems,
               2 * elems + params)


def activation(name: str, act: str, out_elems: int, training: bool) -> Operator:
    """Elementwise activation; swiglu reads two inputs (gate and up) per output element."""
    reads = 2 * out_elems if act == "swiglu" else out_elems
    return _op(name, "activation", ACT_FLOPS_PER_ELEM[act] * out_elems, training, 0, out_elems,
               reads + out_elems)


def add(name: str, elems: int, training: bool) -> Operator:
    return _op(name, "add", ADD_FLOPS_PER_ELEM * elems, training, 0, elems, 3 * elems)


def embedding(name: str, tokens: int, hidden: int, table_rows: tuple[int, ...], id_inputs: int,
              norm_kind: str | None, training: bool) -> Operator:
    """Sum of one lookup per table (word, position, token type), then an optional norm.

    ``table_rows`` are the tables' sizes (parameters only: each lookup gathers ``tokens``
    rows); ``id_inputs`` counts the integer id tensors read (token ids, type ids).
    """
    elems = tokens * hidden
    n = len(table_rows)
    norm_params = 0 if norm_kind is None else (2 * hidden if norm_kind == "layernorm" else hidden)
    norm_flops = 0 if norm_kind is None else NORM_FLOPS_PER_ELEM[norm_kind] * elems
    fwd = (n - 1) * ADD_FLOPS_PER_ELEM * elems + norm_flops
    bwd = n * elems + 2 * norm_flops  # scatter-add into each table, norm backward
    params = sum(table_rows) * hidden + norm_params
    touched = id_inputs * tokens + n * elems + elems + norm_params
    return _op(name, "embedding", fwd, training, params, elems, touched, bwd=bwd)


def pooler(name: str, batch: int, hidden: int, training: bool) -> Operator:
    """BERT pooler as the head: dense + tanh on the first token of each sequence."""
    fwd = 2 * batch * hidden * hidden + batch * hidden + ACT_FLOPS_PER_ELEM["tanh"] * batch * hidden
    params = hidden * hidden + hidden
    return _op(name, "head", fwd, training, params, batch * hidden, batch * hidden + params + batch * hidden)


def projection(name: str, tokens: int, hidden: int, out_width: int, params: int, training: bool) -> Operator:
    """A projection of ``tokens`` rows of width ``hidden`` to ``out_width`` through
    ``params`` weights that are not one dense ``hidden x out_width`` matrix (DeepSeek's
    low-rank MLA projections): ``2 * tokens * params`` FLOPs, like a matmul of as many weights."""
    out = tokens * out_width
    return _op(name, "matmul", 2 * tokens * params, training, params, out, tokens * hidden + params + out)


def experts(name: str, tokens: int, k_in: int, n_out: int, routed: int, top_k: int, shared: int,
            training: bool, capacity: float = 1.0, held: int | None = None) -> Operator:
    """One matmul of a mixture-of-experts FFN: every token through ``top_k`` of ``routed``
    experts and all ``shared`` ones, each a bias-free ``(k_in x n_out)`` matrix.

    Parameters: all ``routed + shared`` matrices. FLOPs: only the active ones,
    ``2 * tokens * (top_k + shared) * k_in * n_out`` (tokens spread evenly, no capacity
    factor, no dropped tokens). Output: ``tokens * (top_k + shared)`` rows of ``n_out``
    (one per token and active expert). Memory traffic reads the input rows of every
    active (token, expert) pair, the weights of the experts that get a token (at most
    ``min(routed, tokens * top_k)`` routed ones: a small decode batch reads few), and
    writes the output. Expert parallelism (``costs.expert_parallel``): ``held`` routed
    experts on this rank (default all), each padded to ``capacity`` times its even share,
    so ``capacity * tokens * top_k`` routed rows (rounded up) whoever's tokens they are.
    """
    held = routed if held is None else held
    routed_rows = math.ceil(capacity * tokens * top_k - 1e-9)
    rows = routed_rows + tokens * shared
    weights = (held + shared) * k_in * n_out
    hit = min(held, routed_rows) + shared
    out = rows * n_out
    return _op(name, "matmul", 2 * rows * k_in * n_out, training, weights, out,
               rows * k_in + hit * k_in * n_out + out)


def expert_combine(name: str, tokens: int, k_in: int, hidden: int, routed: int, top_k: int, shared: int,
                   training: bool, capacity: float = 1.0, held: int | None = None) -> Operator:
    """The experts' down projections (``k_in`` -> ``hidden``) and the gate-weighted sum of
    each token's ``top_k + shared`` outputs, one op: ``experts`` FLOPs plus
    ``2 * tokens * (top_k + shared) * hidden`` for the weighted sum; output ``tokens x hidden``."""
    op = experts(name, tokens, k_in, hidden, routed, top_k, shared, training, capacity, held)
    rows = op.out_elems // hidden
    fwd = op.fwd_flops + 2 * rows * hidden
    out = tokens * hidden
    touched = op.touched_elems - op.out_elems + rows * hidden + out
    return _op(name, "matmul", int(fwd), training, op.param_elems, out, int(touched))
