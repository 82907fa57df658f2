"""Llama 3 8B / 70B / 405B (Llama Team 2024, Table 3): grouped-query attention with 8 KV
heads, the 128,256-entry vocabulary, SwiGLU; one layer of the 8B model by hand."""
from __future__ import annotations

import pytest

from distplan.workloads.zoo import get_config, get_workload

SHAPES = {   # hidden, layers, heads, ffn (Table 3)
    "llama3-8b": (4096, 32, 32, 14336), "llama3-70b": (8192, 80, 64, 28672),
    "llama3-405b": (16384, 126, 128, 53248),
}
PUBLISHED = {"llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "llama3-405b": 405e9}
V = 128_256


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_and_parameters(name):
    h, L, a, ff = SHAPES[name]
    c = get_config(name)
    assert (c.hidden, c.layers, c.heads, c.ffn, c.kv_heads, c.vocab) == (h, L, a, ff, 8, V)
    assert c.default_seq_len == 8192 and not c.bias and not c.tied_head and c.max_positions == 0
    kv = 8 * h // a
    closed = 2 * V * h + L * (2 * h * h + 2 * h * kv + 3 * h * ff + 2 * h) + h
    assert c.param_elems == closed
    assert c.param_elems == pytest.approx(PUBLISHED[name], rel=0.01)


def test_llama3_8b_total_is_8_03_billion():
    assert get_workload("llama3-8b", seq_len=8).param_elems == 8_030_261_248


def test_one_llama3_8b_layer_by_hand():
    """B = 2 sequences of s = 16 tokens: T = 32; h 4096, 32 heads of 128, 8 KV heads (K and V
    1,024 wide), SwiGLU 14,336."""
    B, s = 2, 16
    g = get_workload("llama3-8b", batch_size=B, seq_len=s)
    T, h, a, dh, kv, ff = B * s, 4096, 32, 128, 1024, 14336
    layer = {op.name.split(".", 1)[1]: op for op in g.ops if op.name.startswith("l0.")}
    params = {n: op.param_elems for n, op in layer.items() if op.param_elems}
    assert params == {"norm1": h, "qkv": h * (h + 2 * kv), "proj": h * h, "norm2": h,
                      "ffn1": h * 2 * ff, "ffn2": ff * h}
    assert sum(params.values()) == 218_112_000   # 25.2 M q/k/v + 16.8 M o + 176.2 M SwiGLU + norms
    flops = {n: op.fwd_flops for n, op in layer.items()}
    assert flops == {
        "norm1": 4 * T * h, "qkv": 2 * T * h * (h + 2 * kv),
        "attn_score": 2 * B * a * s * s * dh, "softmax": 5 * B * a * s * s,
        "attn_context": 2 * B * a * s * s * dh, "proj": 2 * T * h * h, "add1": T * h,
        "norm2": 4 * T * h, "ffn1": 2 * T * h * 2 * ff, "act": 5 * T * ff, "ffn2": 2 * T * ff * h, "add2": T * h}
    # 2 T x 218,103,808 matmul weights = 13,958,643,712; Q K^T and P V 8,388,608; softmax
    # 81,920; two RMSNorms 1,048,576; two adds 262,144; SwiGLU 2,293,760
    assert sum(flops.values()) == 13_970_718_720
    # K and V are 8 heads wide: the context reads T x 1,024 of the projection's output
    edges = {(t.src, t.dst): t.elems for t in g.tensors}
    assert edges[("l0.qkv", "l0.attn_context")] == T * kv
    assert edges[("l0.qkv", "l0.attn_score")] == T * (h + kv)
