"""The attention core of a transformer layer (after ``qkv``, before ``proj``), on one
context-parallel rank: its ``seq_len / cp`` queries against all ``seq_len`` keys.

- ``explicit``: ``attn_score`` (Q K^T), ``softmax``, ``attn_context`` (P V), the score
  matrix (``s/cp x s`` per head) materialised and kept for the backward; dense (a causal
  mask does not halve the work: zoo convention, workloads/zoo/costs.py).
- ``flash`` (FlashAttention-2, Dao 2023): one op, ``flash_attn``, that keeps only its
  inputs Q, K, V, its output and the row log-sum-exp (fp32: two 16-bit elements per
  row) and recomputes the scores in its backward (``FLASH_BWD_FACTOR`` x its forward
  FLOPs). A causal decoder skips the masked blocks: ``s (s + 1) / 2`` query-key pairs
  per head, split evenly over the cp ranks (Megatron-Core's load-balanced chunks).
A cp rank's received K/V chunks (ring attention) are not kept: the backward passes them
round again (``costs.context_parallel``).
"""
from __future__ import annotations

from distplan.workloads.graph import Operator
from distplan.workloads.zoo.builder import GraphBuilder

ATTENTION = ("explicit", "flash")
#: FlashAttention's backward: dQ, dK, dV, dP and the recomputed S = 5 products to the forward's 2
FLASH_BWD_FACTOR = 2.5
#: base names of the attention core's ops (one layer's), in order
CORE_NAMES = ("attn_score", "softmax", "attn_context", "flash_attn")
LSE_ELEMS_PER_ROW = 2   # the fp32 log-sum-exp, counted in 16-bit elements


def query_key_pairs(batch: int, q_len: int, kv_len: int, causal: bool) -> float:
    """Query-key pairs per head one rank computes: ``q_len x kv_len``, or for a causal
    model its even share ``q_len (kv_len + 1) / 2`` of the triangle (``q_len = kv_len / cp``)."""
    return batch * q_len * (kv_len + 1) / 2 if causal else float(batch * q_len * kv_len)


def flash_attention(name: str, batch: int, q_len: int, kv_len: int, heads: int, qk_dim: int, v_dim: int,
                    kv_width: int, causal: bool, training: bool) -> Operator:
    """The FlashAttention op (module docstring). ``kv_width``: K and V elements per token
    (``kv_heads x (qk_dim + v_dim)``); its output is the context, then the log-sum-exp."""
    pairs = query_key_pairs(batch, q_len, kv_len, causal) * heads
    fwd = 2.0 * pairs * (qk_dim + v_dim)
    ctx = batch * q_len * heads * v_dim
    lse = batch * q_len * heads * LSE_ELEMS_PER_ROW
    touched = batch * q_len * heads * qk_dim + batch * kv_len * kv_width + ctx + lse
    return Operator(name=name, kind="attn_context", fwd_flops=fwd,
                    bwd_flops=FLASH_BWD_FACTOR * fwd if training else 0.0,
                    out_elems=ctx + lse, touched_elems=float(touched))


def flash_recompute_flops(op: Operator) -> float:
    """FLOPs of a flash op's backward beyond the usual 2x forward (its recomputed scores),
    which model FLOPs leave out; 0 for any other op."""
    if op.name.rsplit(".", 1)[-1] != "flash_attn" or not op.bwd_flops:
        return 0.0
    return op.bwd_flops - 2.0 * op.fwd_flops


def flash_block(g: GraphBuilder, p: str, qkv: str, batch: int, q_len: int, kv_len: int, heads: int,
                qk_dim: int, v_dim: int, kv_heads: int, causal: bool, training: bool) -> tuple[str, int]:
    """Layer ``p``'s flash attention fed by ``qkv``: (op name, context elements to ``proj``)."""
    q_w, kv_w = heads * qk_dim, kv_heads * (qk_dim + v_dim)
    op = flash_attention(p + "flash_attn", batch, q_len, kv_len, heads, qk_dim, v_dim, kv_w, causal, training)
    name = g.add(op, (qkv, batch * q_len * (q_w + kv_w)))
    return name, batch * q_len * heads * v_dim
