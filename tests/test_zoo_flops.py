"""Zoo FLOP counts: exact closed forms, the 2 x params x tokens rule for decoders,
training backward factors, and scaling with batch size and sequence length."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from distplan.workloads.zoo import get_config, get_workload

MATMUL_LIKE = ("matmul", "attn_score", "attn_context", "head")


def kind_sum(g, kinds, attr="fwd_flops"):
    return sum(getattr(op, attr) for op in g.ops if op.kind in kinds)


def gpt_fwd_closed_form(L, h, V, B, s, heads):
    """Every forward FLOP of a GPT-2/3 graph, term by term (constants from the zoo docs:
    layernorm 8, softmax 5, gelu 8, add 1 per element)."""
    T = B * s
    matmul = T * L * (2 * 12 * h * h + 9 * h)     # weights 12h^2, biases 3h + h + 4h + h
    attention = L * 4 * B * s * s * h
    head = 2 * T * h * V
    elementwise = L * (2 * 8 * T * h + 5 * B * heads * s * s + 8 * T * 4 * h + 2 * T * h)
    return matmul + attention + head + elementwise + 8 * T * h + T * h  # final norm, embed add


@pytest.mark.parametrize("name,L,h,heads", [("gpt2", 12, 768, 12), ("gpt2-xl", 48, 1600, 25),
                                            ("gpt3-175b", 96, 12288, 96)])
@pytest.mark.parametrize("B,s", [(1, 1024), (3, 100)])
def test_gpt_forward_flops_exact(name, L, h, heads, B, s):
    g = get_workload(name, batch_size=B, seq_len=s)
    assert g.fwd_flops == gpt_fwd_closed_form(L, h, 50257, B, s, heads)


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-1.3b", "llama-7b"])
def test_decoder_forward_is_two_params_per_token_plus_attention(name):
    """fwd = 2 x (non-embedding params) x tokens + 4 L B s^2 h (QK^T and PV) + 2 T h V (head).
    Exact for the products; the rest (biases, norms, softmax, activations) is under 1.5 %."""
    cfg = get_config(name)
    g = get_workload(name, batch_size=2)
    B, s, h, L = 2, cfg.default_seq_len, cfg.hidden, cfg.layers
    T = B * s
    non_embedding = cfg.param_elems - cfg.embedding_params - cfg.head_params
    weights = non_embedding - L * 2 * cfg.norm_params - cfg.norm_params  # matmul weights (+ biases)
    biases = L * (3 * h + h + 4 * h + h) if cfg.bias else 0
    assert kind_sum(g, ("matmul",)) == 2 * (weights - biases) * T + biases * T
    assert kind_sum(g, ("attn_score", "attn_context")) == 4 * L * B * s * s * h
    assert g.op("head").fwd_flops == 2 * T * h * cfg.vocab
    approx = 2 * non_embedding * T + 4 * L * B * s * s * h + 2 * T * h * cfg.vocab
    assert g.fwd_flops == pytest.approx(approx, rel=0.015)
    assert g.fwd_flops > approx  # the elementwise work only adds


def test_bert_base_forward_by_hand():
    B, s, h, L, a = 1, 128, 768, 12, 12
    T = B * s
    embed = 2 * T * h + 8 * T * h                   # two adds, LayerNorm
    layer = (2 * T * h * 3 * h + 3 * T * h          # qkv + bias
             + 2 * 2 * B * s * s * h                # scores + context
             + 5 * B * a * s * s                    # softmax
             + 2 * T * h * h + T * h                # out proj
             + 2 * T * h + 2 * 8 * T * h            # two adds, two LayerNorms
             + 2 * T * h * 4 * h + 4 * T * h + 8 * T * 4 * h + 2 * T * 4 * h * h + T * h)
    pooler = 2 * B * h * h + B * h + 4 * B * h
    assert get_workload("bert-base").fwd_flops == embed + L * layer + pooler


def test_llama_swiglu_and_rmsnorm_flops():
    g = get_workload("llama-4096x1x32", seq_len=16)
    T, h, ff = 16, 4096, 11008
    assert g.op("l0.ffn1").fwd_flops == 2 * T * h * 2 * ff
    assert g.op("l0.act").fwd_flops == 5 * T * ff
    assert g.op("l0.norm1").fwd_flops == 4 * T * h
    assert g.op("l0.qkv").fwd_flops == 2 * T * h * 3 * h


def test_gqa_narrows_k_and_v():
    g = get_workload("llama2-70b", seq_len=8)
    T, h, kv = 8, 8192, 1024
    assert g.op("l0.qkv").out_elems == T * (h + 2 * kv)
    assert dict(((t.src, t.dst), t.elems) for t in g.tensors)[("l0.qkv", "l0.attn_context")] == T * kv


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "llama-7b", "mlp-xs", "gpt3-256x2x4"])
def test_training_backward(name):
    inf = get_workload(name, seq_len=None if name.startswith("mlp") else 64)
    tr = get_workload(name, seq_len=None if name.startswith("mlp") else 64, mode="training")
    assert inf.mode == "inference" and tr.mode == "training"
    assert inf.bwd_flops == 0
    for a, b in zip(inf.ops, tr.ops):
        assert a.fwd_flops == b.fwd_flops and b.bwd_flops > 0
        if b.kind in MATMUL_LIKE:
            assert b.bwd_flops == 2 * b.fwd_flops
        elif b.kind != "embedding":
            assert b.fwd_flops <= b.bwd_flops <= 2 * b.fwd_flops
    assert 1.9 * tr.fwd_flops < tr.bwd_flops < 2.0 * tr.fwd_flops + 1


def test_embedding_touches_gathered_rows_only():
    g = get_workload("bert-base", batch_size=2, seq_len=64)
    T, h = 128, 768
    # token and type ids, three gathered rows per token, output, LayerNorm parameters
    assert g.op("embed").touched_elems == 2 * T + 3 * T * h + T * h + 2 * h
    assert g.op("embed").touched_elems < g.op("embed").param_elems


MODELS = ["bert-base", "gpt2", "gpt3-64x2x4", "llama-96x3x6", "llama2-70b"]


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS + ["mlp-xs"]), batch=st.integers(1, 16), k=st.integers(2, 5),
       seq=st.integers(1, 256), mode=st.sampled_from(["inference", "training"]))
def test_flops_and_activations_linear_in_batch(name, batch, k, seq, mode):
    s = None if name.startswith("mlp") else seq
    g1 = get_workload(name, batch_size=batch, seq_len=s, mode=mode)
    gk = get_workload(name, batch_size=k * batch, seq_len=s, mode=mode)
    for a, b in zip(g1.ops, gk.ops):
        assert a.name == b.name
        assert b.fwd_flops == k * a.fwd_flops and b.bwd_flops == k * a.bwd_flops
        assert b.out_elems == k * a.out_elems and b.param_elems == a.param_elems
    assert [t.elems * k for t in g1.tensors] == [t.elems for t in gk.tensors]


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(MODELS), batch=st.integers(1, 8), seq=st.integers(1, 256))
def test_seq_scaling_per_operator(name, batch, seq):
    """Doubling seq: attention terms x4, the BERT pooler x1, everything else x2."""
    g1 = get_workload(name, batch_size=batch, seq_len=seq)
    g2 = get_workload(name, batch_size=batch, seq_len=2 * seq)
    for a, b in zip(g1.ops, g2.ops):
        if a.kind in ("attn_score", "attn_context", "softmax"):
            factor = 4
        elif a.name == "head" and get_config(name).pooler_head:
            factor = 1
        else:
            factor = 2
        assert b.fwd_flops == factor * a.fwd_flops, a.name
