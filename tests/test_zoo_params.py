"""Zoo parameter counts and op counts: exact closed forms and published model sizes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from distplan.workloads.zoo import get_config, get_workload, list_workloads


def bert_params(L: int, h: int, V: int = 30522, P: int = 512, types: int = 2) -> int:
    """Embeddings (+ LayerNorm), L layers of 12h^2 + 13h, pooler h^2 + h."""
    return (V + P + types) * h + 2 * h + L * (12 * h * h + 13 * h) + h * h + h


def gpt2_params(L: int, h: int, V: int = 50257, P: int = 1024) -> int:
    """Tied embeddings counted once, L layers of 12h^2 + 13h, final LayerNorm."""
    return (V + P) * h + L * (12 * h * h + 13 * h) + 2 * h


def llama_params(L: int, h: int, ff: int, V: int = 32000, kv: int | None = None) -> int:
    """Untied embedding and head, q/o (h^2 each), k/v (h*kv each), SwiGLU (3h*ff), 2 RMSNorms."""
    kv = h if kv is None else kv
    return 2 * V * h + L * (2 * h * h + 2 * h * kv + 3 * h * ff + 2 * h) + h


EXACT = {
    "bert-base": bert_params(12, 768), "bert-large": bert_params(24, 1024),
    "gpt2": gpt2_params(12, 768), "gpt2-medium": gpt2_params(24, 1024),
    "gpt2-large": gpt2_params(36, 1280), "gpt2-xl": gpt2_params(48, 1600),
    "gpt3-125m": gpt2_params(12, 768, P=2048), "gpt3-175b": gpt2_params(96, 12288, P=2048),
    "llama-7b": llama_params(32, 4096, 11008), "llama-13b": llama_params(40, 5120, 13824),
    "llama-65b": llama_params(80, 8192, 22016), "llama2-70b": llama_params(80, 8192, 28672, kv=1024),
    "mlp-xs": 8 * 4096**2, "mlp-small": 16 * 8192**2, "mlp-medium": 64 * 16384**2,
    "mlp-large": 128 * 32768**2,
}

# Published sizes (BERT paper; HF model cards for GPT-2 — "1.5B" for XL is 1558 M counted;
# GPT-3 Table 2.1; Llama paper / HF). Tolerance 2 %.
PUBLISHED = {
    "bert-base": 110e6, "bert-large": 340e6, "gpt2": 124e6, "gpt2-medium": 355e6,
    "gpt2-large": 774e6, "gpt2-xl": 1558e6, "gpt3-125m": 125e6, "gpt3-350m": 350e6,
    "gpt3-760m": 760e6, "gpt3-1.3b": 1.3e9, "gpt3-2.7b": 2.7e9, "gpt3-6.7b": 6.7e9,
    "gpt3-13b": 13e9, "gpt3-175b": 175e9, "llama-7b": 6.74e9, "llama-13b": 13.0e9,
    "llama-65b": 65.2e9, "llama2-70b": 69.0e9,
}


@pytest.mark.parametrize("name", sorted(EXACT))
def test_params_match_closed_form_exactly(name):
    g = get_workload(name)
    assert g.param_elems == EXACT[name] == get_config(name).param_elems


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_params_match_published_sizes(name):
    assert get_workload(name).param_elems == pytest.approx(PUBLISHED[name], rel=0.02)


def test_well_known_exact_counts():
    assert get_workload("bert-base").param_elems == 109_482_240
    assert get_workload("gpt2").param_elems == 124_439_808
    assert get_workload("llama-7b").param_elems == 6_738_415_616


def test_op_counts():
    assert len(get_workload("bert-base").ops) == 146          # 12 x 12 + embed + pooler head
    assert len(get_workload("bert-large").ops) == 24 * 12 + 2
    assert len(get_workload("gpt2").ops) == 12 * 12 + 3         # + final norm
    assert len(get_workload("llama-7b").ops) == 32 * 12 + 3
    assert len(get_workload("mlp-xs").ops) == 16
    for name, _ in list_workloads():
        if "<" not in name and not name.startswith("mlp"):
            assert len(get_workload(name, seq_len=8).ops) == get_config(name).n_ops


def test_tied_and_untied_heads():
    assert get_workload("gpt2").op("head").param_elems == 0
    head = get_workload("gpt2").op("head")   # reads the word table embed owns
    assert (head.tied_to, head.tied_elems) == ("embed", 50257 * 768)
    assert get_workload("llama-7b").op("head").tied_to is None
    assert get_workload("gpt2").op("embed").param_elems == (50257 + 1024) * 768
    assert get_workload("llama-7b").op("head").param_elems == 32000 * 4096
    assert get_workload("llama-7b").op("embed").param_elems == 32000 * 4096
    assert get_workload("bert-base").op("head").param_elems == 768 * 768 + 768


def test_generators_match_named_shapes():
    assert get_workload("gpt3-768x12x12").param_elems == get_workload("gpt3-125m").param_elems
    assert get_workload("llama-4096x32x32", seq_len=16).param_elems == 6_738_415_616
    assert get_config("llama-8192x80x64").ffn == 22016


def test_llama_has_no_biases():
    g = get_workload("llama-4096x2x32", seq_len=4)
    h, ff = 4096, 11008
    assert g.op("l0.qkv").param_elems == 3 * h * h
    assert g.op("l0.ffn1").param_elems == 2 * h * ff
    assert g.op("l0.ffn2").param_elems == ff * h
    assert g.op("l0.norm1").param_elems == h


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["bert-base", "gpt2", "gpt3-64x2x4", "llama-96x3x6", "mlp-xs"]),
       batch=st.integers(1, 64), seq=st.integers(1, 512))
def test_params_do_not_depend_on_batch_or_seq(name, batch, seq):
    g = get_workload(name, batch_size=batch, seq_len=None if name.startswith("mlp") else seq)
    closed = {"gpt3-64x2x4": gpt2_params(2, 64, P=2048), "llama-96x3x6": llama_params(3, 96, 256)}
    assert g.param_elems == {**EXACT, **closed}[name]
