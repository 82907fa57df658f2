"""Mixture-of-experts zoo models: Mixtral 8x7B (Jiang et al. 2024) and DeepSeek-V3
(DeepSeek-AI 2024) at the published sizes, one MoE layer of each by hand, and the
tensor-parallel roles of the expert ops."""
from __future__ import annotations

import pytest

from distplan.core.errors import DistplanError
from distplan.costs.tensor_parallel import tp_backward_allreduce, tp_divides, tp_forward_allreduce
from distplan.workloads.zoo import MoEConfig, get_config, get_workload, list_workloads


def test_mixtral_total_and_active_parameters():
    c = get_config("mixtral-8x7b")
    h, L, V, ff, kv = 4096, 32, 32000, 14336, 1024
    attn = h * (h + 2 * kv) + h * h
    layer = attn + 2 * h + h * 8 + 8 * 3 * h * ff
    assert c.param_elems == 2 * V * h + L * layer + h == 46_702_792_704
    assert c.active_param_elems == 2 * V * h + L * (layer - 6 * 3 * h * ff) + h == 12_879_925_248
    assert c.param_elems == pytest.approx(46.7e9, rel=0.01)         # published 46.7 B
    assert c.active_param_elems == pytest.approx(12.9e9, rel=0.01)  # published 12.9 B active
    assert get_workload("mixtral-8x7b", seq_len=8).param_elems == c.param_elems
    assert c.default_seq_len == 32768 and c.n_ops == 13 * 32 + 3


def test_deepseek_v3_total_and_active_parameters():
    c = get_config("deepseek-v3")
    h, V = 7168, 129_280
    mla = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
    assert c.qkv_param_elems == mla == 69_666_816
    attn = mla + 128 * 128 * h                                        # + the output projection
    expert = 3 * h * 2048
    dense, moe = attn + 3 * h * 18432 + 2 * h, attn + 257 * expert + 256 * h + 2 * h
    assert c.param_elems == 2 * V * h + 3 * dense + 58 * moe + h == 671_026_404_352
    assert c.param_elems == pytest.approx(671e9, rel=0.01)           # published 671 B
    # 37.55 B counting the embedding table and the head as Mixtral's 12.9 B does; the
    # published "37 B" is rounded (36.63 B without the embedding table)
    assert c.active_param_elems == c.param_elems - 58 * 248 * expert == 37_552_282_624
    assert c.active_param_elems == pytest.approx(37e9, rel=0.015)
    assert (c.dense_layers, c.default_seq_len, c.n_ops) == (3, 4096, 13 * 61 - 3 + 3)


def test_qwen3_30b_a3b_total_and_active_parameters():
    """Heads of 128 (4,096 wide over hidden 2,048), 4 KV heads, 128 experts of 768, top 8."""
    c = get_config("qwen3-30b-a3b")
    h, V, L, ff = 2048, 151_936, 48, 768
    attn = h * (32 * 128 + 2 * 4 * 128) + 32 * 128 * h
    expert = 3 * h * ff
    layer = attn + 2 * h + h * 128 + 128 * expert
    assert c.param_elems == 2 * V * h + L * layer + h == 30_532_110_336
    assert c.active_param_elems == c.param_elems - L * 120 * expert == 3_353_020_416
    assert c.param_elems == pytest.approx(30.5e9, rel=0.01)          # published 30.5 B
    assert c.active_param_elems == pytest.approx(3.3e9, rel=0.02)    # published 3.3 B active
    g = get_workload("qwen3-30b-a3b", batch_size=2, seq_len=16, mode="training")
    assert g.param_elems == c.param_elems and len(g.ops) == c.n_ops == 13 * L + 3
    qkv, ffn1, ffn2 = g.op("l0.qkv"), g.op("l0.ffn1"), g.op("l0.ffn2")
    assert qkv.param_elems == h * 5120 and qkv.fwd_flops == 2 * 32 * h * 5120
    assert ffn1.param_elems == ffn1.expert_param_elems == 128 * h * 2 * ff   # no shared expert
    assert ffn2.expert_param_elems == 128 * ff * h and ffn1.fwd_flops == 2 * 32 * 8 * h * 2 * ff
    assert c.default_seq_len == 4096


def test_shared_experts_are_not_routed_parameters():
    """DeepSeek's shared expert reduces with the dense rest: ffn1 marks only its routed experts."""
    op = get_workload("deepseek-v3", seq_len=8).op("l5.ffn1")
    assert op.param_elems - op.expert_param_elems == 7168 * 2 * 2048 and op.expert_param_elems == 256 * 7168 * 4096


def test_deepseek_generator_at_v3_shape_is_v3():
    v3, gen = get_config("deepseek-v3"), get_config("deepseek-7168x61x128x256")
    assert gen.param_elems == v3.param_elems and gen.active_param_elems == v3.active_param_elems
    small = get_config("deepseek-1024x4x8x16")
    assert isinstance(small, MoEConfig)
    assert (small.experts, small.top_k, small.shared_experts, small.dense_layers) == (16, 8, 1, 0)
    assert small.expert_width == 384 and small.ffn == 9 * 384      # 2h/7 = 292.6 -> 384
    assert "deepseek-<hidden>x<layers>x<heads>x<experts>" in [n for n, _ in list_workloads()]
    with pytest.raises(DistplanError, match="at least one layer"):
        get_config("deepseek-1024x0x8x16")


def test_one_mixtral_layer_by_hand():
    """B = 2 sequences of s = 16 tokens: T = 32 tokens, each through 2 of 8 experts."""
    B, s = 2, 16
    g = get_workload("mixtral-8x7b", batch_size=B, seq_len=s, mode="training")
    T, h, a, dh, kv, ff, E, k = B * s, 4096, 32, 128, 1024, 14336, 8, 2
    layer = {op.name.split(".", 1)[1]: op for op in g.ops if op.name.startswith("l0.")}
    params = {n: op.param_elems for n, op in layer.items() if op.param_elems}
    assert params == {"norm1": h, "qkv": h * (h + 2 * kv), "proj": h * h, "norm2": h, "router": h * E,
                      "ffn1": E * h * 2 * ff, "ffn2": E * ff * h}
    assert sum(params.values()) == 1_451_270_144   # = (46,702,792,704 - 2 x 131,072,000 - 4,096) / 32
    flops = {n: op.fwd_flops for n, op in layer.items()}
    assert flops == {
        "norm1": 4 * T * h, "qkv": 2 * T * h * (h + 2 * kv),
        "attn_score": 2 * B * a * s * s * dh, "softmax": 5 * B * a * s * s,
        "attn_context": 2 * B * a * s * s * dh, "proj": 2 * T * h * h, "add1": T * h, "norm2": 4 * T * h,
        "router": 2 * T * h * E, "ffn1": 2 * T * k * h * 2 * ff, "act": 5 * T * k * ff,
        "ffn2": 2 * T * k * ff * h + 2 * T * k * h, "add2": T * h}
    # 2 T x 394,297,344 active matmul weights (q/k/v/o 41.9 M, router 32,768, two experts
    # 352.3 M) = 25,235,030,016; Q K^T and P V 8,388,608; softmax, norms, SwiGLU, adds and
    # the gate-weighted sum 6,504,448
    assert sum(flops.values()) == 25_249_923_072
    assert all(op.bwd_flops == (1 if op.kind == "add" else 2) * op.fwd_flops for op in layer.values())
    assert (layer["ffn1"].out_elems, layer["act"].out_elems, layer["ffn2"].out_elems) == \
        (T * k * 2 * ff, T * k * ff, T * h)
    # the experts read every expert's weights once T x k >= 8
    assert layer["ffn1"].touched_elems == T * k * h + E * h * 2 * ff + T * k * 2 * ff
    edges = {(t.src, t.dst): t.elems for t in g.tensors}
    assert edges[("l0.norm2", "l0.router")] == edges[("l0.norm2", "l0.ffn1")] == T * h
    assert edges[("l0.router", "l0.ffn1")] == T * E and edges[("l0.router", "l0.ffn2")] == T * k
    assert edges[("l0.add1", "l0.add2")] == edges[("l0.ffn2", "l0.add2")] == T * h


def test_one_deepseek_v3_moe_layer_by_hand():
    """Layer 3, the first MoE one: MLA as 128 heads of 192 (query, key) and 128 (value);
    T = 8 tokens, each through 8 of 256 routed experts and the shared one."""
    B, s = 1, 8
    g = get_workload("deepseek-v3", batch_size=B, seq_len=s)
    T, h, a, E, k, ff = B * s, 7168, 128, 256, 8, 2048
    mla = 69_666_816
    layer = {op.name.split(".", 1)[1]: op for op in g.ops if op.name.startswith("l3.")}
    assert {n: op.param_elems for n, op in layer.items() if op.param_elems} == {
        "norm1": h, "qkv": mla, "proj": a * 128 * h, "norm2": h, "router": h * E,
        "ffn1": 257 * h * 2 * ff, "ffn2": 257 * ff * h}
    flops = {n: op.fwd_flops for n, op in layer.items()}
    assert flops == {
        "norm1": 4 * T * h, "qkv": 2 * T * mla, "attn_score": 2 * B * a * s * s * 192,
        "softmax": 5 * B * a * s * s, "attn_context": 2 * B * a * s * s * 128, "proj": 2 * T * a * 128 * h,
        "add1": T * h, "norm2": 4 * T * h, "router": 2 * T * h * E, "ffn1": 2 * T * 9 * h * 2 * ff,
        "act": 5 * T * 9 * ff, "ffn2": 2 * T * 9 * ff * h + 2 * T * 9 * h, "add2": T * h}
    # 8 tokens x 8 = 64 routed experts hit, + the shared one: the weights read at decode
    assert layer["ffn1"].touched_elems == T * 9 * h + 65 * h * 2 * ff + T * 9 * 2 * ff
    edges = {(t.src, t.dst): t.elems for t in g.tensors}
    assert edges[("l3.qkv", "l3.attn_score")] == T * a * 384 and edges[("l3.qkv", "l3.attn_context")] == T * a * 128
    dense = {op.name.split(".", 1)[1]: op for op in g.ops if op.name.startswith("l2.")}
    assert "router" not in dense and dense["ffn1"].param_elems == h * 2 * 18432


def test_expert_ops_split_like_megatron_ffn():
    """Expert tensor parallelism = tp: ffn1 column, act sharded, ffn2 row; the router is
    replicated."""
    g = get_workload("mixtral-8x7b", seq_len=8)
    roles = {op.name: op.tp_role for op in g.ops if op.name.startswith("l0.")}
    assert (roles["l0.ffn1"], roles["l0.act"], roles["l0.ffn2"], roles["l0.router"]) == \
        ("column", "sharded", "row", "replicated")
    router, f1, f2 = g.op("l0.router"), g.op("l0.ffn1"), g.op("l0.ffn2")
    assert not tp_divides(router) and not tp_forward_allreduce(router) and not tp_backward_allreduce(router)
    assert tp_backward_allreduce(f1) and not tp_forward_allreduce(f1)
    assert tp_forward_allreduce(f2) and not tp_backward_allreduce(f2)
