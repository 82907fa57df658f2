"""The named models of the zoo and the shape generators behind ``gpt3-HxLxA`` and
``llama-HxLxA`` names. Configs only; graphs are built in ``mlp.py`` / ``transformer.py``
(``moe.py`` for mixture-of-experts layers).

Every config is a published one: BERT (Devlin et al. 2018, HF bert-base-uncased),
GPT-2 (HF gpt2*), GPT-3 (Brown et al. 2020, Table 2.1; dense attention everywhere),
Llama (Touvron et al. 2023; ffn = 8h/3 rounded up to 256), Llama 3 (2024, Table 3),
Mixtral 8x7B (Jiang et al. 2024, Table 1), DeepSeek-V3 (technical report 2024 and its
released config.json) and Qwen3-30B-A3B (its released config.json). Left out: GPT-3's alternating banded attention layers and
DeepSeek's multi-token-prediction module (not in its 671 B either).

Shapes and sources, model by model: docs/guides/own-model.md (the zoo table and
"Sources of the shapes").
"""
from __future__ import annotations

import re

from distplan.core.errors import DistplanError
from distplan.workloads.zoo.mlp import MLPConfig
from distplan.workloads.zoo.moe import MoEConfig
from distplan.workloads.zoo.transformer import TransformerConfig

GPT2_VOCAB = 50257
LLAMA_VOCAB = 32000
#: the Llama 3 tokenizer's entries (128,000 BPE tokens + 256 special tokens)
LLAMA3_VOCAB = 128_256
#: key/value heads of every Llama 3 model (grouped-query attention)
LLAMA3_KV_HEADS = 8


def bert(name: str, hidden: int, layers: int, heads: int, description: str) -> TransformerConfig:
    return TransformerConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=4 * hidden,
                             vocab=30522, max_positions=512, type_vocab=2, default_seq_len=128,
                             post_norm=True, pooler_head=True, description=description, dropout=True)


def gpt2(name: str, hidden: int, layers: int, heads: int, description: str) -> TransformerConfig:
    return TransformerConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=4 * hidden,
                             vocab=GPT2_VOCAB, max_positions=1024, default_seq_len=1024,
                             description=description, dropout=True)


def gpt3(name: str, hidden: int, layers: int, heads: int, description: str = "") -> TransformerConfig:
    _check_heads(name, hidden, heads)
    return TransformerConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=4 * hidden,
                             vocab=GPT2_VOCAB, max_positions=2048, default_seq_len=2048,
                             description=description or f"GPT-3-shaped decoder, h={hidden} L={layers} A={heads}",
                             dropout=True)


def llama_ffn(hidden: int) -> int:
    """Llama's SwiGLU width: int(8h/3) rounded up to a multiple of 256 (4096 -> 11008)."""
    return -(-(8 * hidden // 3) // 256) * 256


def llama(name: str, hidden: int, layers: int, heads: int, description: str = "",
          kv_heads: int | None = None, ffn: int | None = None, seq_len: int = 2048,
          vocab: int = LLAMA_VOCAB) -> TransformerConfig:
    _check_heads(name, hidden, heads)
    return TransformerConfig(name=name, hidden=hidden, layers=layers, heads=heads,
                             ffn=ffn or llama_ffn(hidden), vocab=vocab, max_positions=0,
                             default_seq_len=seq_len, kv_heads=kv_heads, norm="rmsnorm",
                             activation="swiglu", bias=False, tied_head=False,
                             description=description or f"Llama-style decoder, h={hidden} L={layers} A={heads}")


def llama3(name: str, hidden: int, layers: int, heads: int, ffn: int, description: str) -> TransformerConfig:
    """A Llama 3 model: 8 KV heads, the 128,256-entry vocabulary, sequence 8,192."""
    return llama(name, hidden, layers, heads, description, kv_heads=LLAMA3_KV_HEADS, ffn=ffn, seq_len=8192,
                 vocab=LLAMA3_VOCAB)


def mixtral(name: str, hidden: int, layers: int, heads: int, experts: int, top_k: int, expert_ffn: int,
            description: str, kv_heads: int = 8, seq_len: int = 32768) -> MoEConfig:
    """A Mixtral-style MoE: the Llama block (32,000 vocabulary, untied head) with every
    FFN ``experts`` SwiGLU experts of ``expert_ffn``, ``top_k`` per token, no shared expert."""
    _check_heads(name, hidden, heads)
    return MoEConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=expert_ffn, vocab=LLAMA_VOCAB,
                     max_positions=0, default_seq_len=seq_len, kv_heads=kv_heads, norm="rmsnorm",
                     activation="swiglu", bias=False, tied_head=False, description=description,
                     experts=experts, top_k=top_k, expert_ffn=expert_ffn)


#: DeepSeek-V3's tokenizer entries, and its per-head MLA widths (query/key: 128 + 64 RoPE; value 128)
DEEPSEEK_VOCAB = 129_280
DEEPSEEK_NOPE, DEEPSEEK_ROPE, DEEPSEEK_V = 128, 64, 128


def mla_qkv_params(hidden: int, heads: int, q_rank: int, kv_rank: int) -> int:
    """MLA's per-layer projections but the output one (DeepSeek-V2/V3): Q down (h x q_rank)
    + its RMSNorm + Q up (q_rank x heads x 192); joint KV down (h x (kv_rank + 64 RoPE))
    + its RMSNorm + KV up (kv_rank x heads x (128 + 128)). 69,666,816 for DeepSeek-V3."""
    q = hidden * q_rank + q_rank + q_rank * heads * (DEEPSEEK_NOPE + DEEPSEEK_ROPE)
    kv = hidden * (kv_rank + DEEPSEEK_ROPE) + kv_rank + kv_rank * heads * (DEEPSEEK_NOPE + DEEPSEEK_V)
    return q + kv


def _round_up(x: float, to: int) -> int:
    return max(to, -(-int(x) // to) * to)


def deepseek(name: str, hidden: int, layers: int, heads: int, experts: int, description: str = "",
             top_k: int | None = None, expert_ffn: int | None = None, dense_ffn: int | None = None,
             dense_layers: int | None = None, q_rank: int | None = None, kv_rank: int | None = None,
             seq_len: int = 4096) -> MoEConfig:
    """A DeepSeek-V3-style fine-grained MoE of any size; unset shapes follow V3's ratios:
    expert width 2h/7 and MLA ranks 3h/14 (query) and h/14 (KV), each rounded up to a
    multiple of 128 / 64 / 64 (7168 -> 2048, 1536, 512); dense FFN 9 experts wide; top
    min(8, experts) routed + 1 shared expert; the first floor(3 L / 61) layers dense
    (V3: 3 of 61); MLA as standard attention of the same weights (``moe.py``)."""
    if heads < 1 or experts < 1 or hidden < 1:
        raise DistplanError(f"workload {name!r}: hidden size, heads and experts must be positive")
    eff = expert_ffn or _round_up(2 * hidden / 7, 128)
    qr, kvr = q_rank or _round_up(3 * hidden / 14, 64), kv_rank or _round_up(hidden / 14, 64)
    return MoEConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=dense_ffn or 9 * eff,
                     vocab=DEEPSEEK_VOCAB, max_positions=0, default_seq_len=seq_len, norm="rmsnorm",
                     activation="swiglu", bias=False, tied_head=False,
                     description=description or f"DeepSeek-V3-style MoE, h={hidden} L={layers} A={heads} "
                                                f"E={experts}",
                     experts=experts, top_k=top_k or min(8, experts), shared_experts=1, expert_ffn=eff,
                     dense_layers=3 * layers // 61 if dense_layers is None else dense_layers,
                     mla_qkv_params=mla_qkv_params(hidden, heads, qr, kvr),
                     mla_qk_head_dim=DEEPSEEK_NOPE + DEEPSEEK_ROPE, mla_v_head_dim=DEEPSEEK_V)


#: Qwen3's tokenizer entries (config.json ``vocab_size``)
QWEN3_VOCAB = 151_936


def qwen3_moe(name: str, hidden: int, layers: int, heads: int, kv_heads: int, experts: int, top_k: int,
              expert_ffn: int, description: str, head_width: int = 128, seq_len: int = 4096) -> MoEConfig:
    """A Qwen3-MoE decoder: the Llama block (RMSNorm, SwiGLU, no biases, untied head) with
    heads of ``head_width`` (not hidden / heads), every FFN ``experts`` SwiGLU experts of
    ``expert_ffn``, ``top_k`` per token, no shared expert; QK-norm (two RMSNorms of
    ``head_width`` weights a layer over Q and K) is left out, as RoPE is."""
    if hidden < 1 or heads < 1 or kv_heads < 1 or heads % kv_heads:
        raise DistplanError(f"workload {name!r}: {heads} heads must be a positive multiple of {kv_heads} KV heads")
    return MoEConfig(name=name, hidden=hidden, layers=layers, heads=heads, ffn=expert_ffn, vocab=QWEN3_VOCAB,
                     max_positions=0, default_seq_len=seq_len, kv_heads=kv_heads, norm="rmsnorm",
                     activation="swiglu", bias=False, tied_head=False, description=description,
                     experts=experts, top_k=top_k, expert_ffn=expert_ffn, head_width=head_width)


def _check_heads(name: str, hidden: int, heads: int) -> None:
    if hidden < 1 or heads < 1 or hidden % heads:
        raise DistplanError(f"workload {name!r}: hidden size {hidden} must be a positive multiple of "
                            f"the head count {heads}; pick heads that divide it")


NAMED: dict[str, MLPConfig | TransformerConfig] = {c.name: c for c in (
    MLPConfig("mlp-xs", 8, 4096, "DistIR MLP: 8 square matmul+ReLU layers, width 4096"),
    MLPConfig("mlp-small", 16, 8192, "DistIR MLP: 16 layers, width 8192"),
    MLPConfig("mlp-medium", 64, 16384, "DistIR MLP: 64 layers, width 16384"),
    MLPConfig("mlp-large", 128, 32768, "DistIR MLP: 128 layers, width 32768"),
    bert("bert-base", 768, 12, 12, "BERT-base encoder with pooler (110 M params), seq 128"),
    bert("bert-large", 1024, 24, 16, "BERT-large encoder with pooler (335 M params), seq 128"),
    gpt2("gpt2", 768, 12, 12, "GPT-2 small decoder (124 M params), seq 1024"),
    gpt2("gpt2-medium", 1024, 24, 16, "GPT-2 medium decoder (355 M params), seq 1024"),
    gpt2("gpt2-large", 1280, 36, 20, "GPT-2 large decoder (774 M params), seq 1024"),
    gpt2("gpt2-xl", 1600, 48, 25, "GPT-2 XL decoder (1.56 B params), seq 1024"),
    # GPT-3 Table 2.1. XL lists 24 heads of 128 (3072 != 2048): we use 16 x 128; 13B lists
    # d_model 5140 with 40 heads of 128: we use 5120. Heads only change softmax sizes.
    gpt3("gpt3-125m", 768, 12, 12, "GPT-3 Small (125 M), seq 2048"),
    gpt3("gpt3-350m", 1024, 24, 16, "GPT-3 Medium (350 M), seq 2048"),
    gpt3("gpt3-760m", 1536, 24, 16, "GPT-3 Large (760 M), seq 2048"),
    gpt3("gpt3-1.3b", 2048, 24, 16, "GPT-3 XL (1.3 B), seq 2048"),
    gpt3("gpt3-2.7b", 2560, 32, 32, "GPT-3 2.7B, seq 2048"),
    gpt3("gpt3-6.7b", 4096, 32, 32, "GPT-3 6.7B, seq 2048"),
    gpt3("gpt3-13b", 5120, 40, 40, "GPT-3 13B, seq 2048"),
    gpt3("gpt3-175b", 12288, 96, 96, "GPT-3 175B, seq 2048"),
    llama("llama-7b", 4096, 32, 32, "Llama 7B (6.74 B params), seq 2048"),
    llama("llama-13b", 5120, 40, 40, "Llama 13B (13.0 B params), seq 2048"),
    llama("llama-65b", 8192, 80, 64, "Llama 65B (65.3 B params), seq 2048"),
    llama("llama2-70b", 8192, 80, 64, "Llama 2 70B (69.0 B params, 8 KV heads), seq 4096",
          kv_heads=8, ffn=28672, seq_len=4096),
    llama3("llama3-8b", 4096, 32, 32, 14336, "Llama 3 8B (8.03 B params, 8 KV heads, 128K vocab), seq 8192"),
    llama3("llama3-70b", 8192, 80, 64, 28672, "Llama 3 70B (70.6 B params, 8 KV heads, 128K vocab), seq 8192"),
    llama3("llama3-405b", 16384, 126, 128, 53248,
           "Llama 3 405B (405.9 B params, 8 KV heads, 128K vocab), seq 8192"),
    mixtral("mixtral-8x7b", 4096, 32, 32, 8, 2, 14336,
            "Mixtral 8x7B MoE (46.7 B params, 12.9 B active: 8 experts, top-2; 8 KV heads), seq 32768"),
    deepseek("deepseek-v3", 7168, 61, 128, 256, "DeepSeek-V3 MoE (671.0 B params, 37.6 B active: 1 shared "
             "+ top-8 of 256 experts; MLA as standard attention), seq 4096",
             top_k=8, expert_ffn=2048, dense_ffn=18432, dense_layers=3, q_rank=1536, kv_rank=512),
    qwen3_moe("qwen3-30b-a3b", 2048, 48, 32, 4, 128, 8, 768, "Qwen3-30B-A3B MoE (30.5 B params, 3.35 B active: "
              "top-8 of 128 experts; 4 KV heads of 128), seq 4096"),
)}

GENERATORS = {
    "gpt3": (gpt3, "gpt3-<hidden>x<layers>x<heads>", "GPT-3-shaped decoder of any size (e.g. gpt3-4096x32x32)"),
    "llama": (llama, "llama-<hidden>x<layers>x<heads>", "Llama-style decoder of any size (e.g. llama-4096x32x32)"),
    "deepseek": (deepseek, "deepseek-<hidden>x<layers>x<heads>x<experts>",
                 "DeepSeek-V3-style MoE of any size: 1 shared + top-8 routed experts (e.g. deepseek-2048x16x16x64)"),
}
_GENERATED_MOE = re.compile(r"^(deepseek)-(\d+)x(\d+)x(\d+)x(\d+)$")
_GENERATED = re.compile(r"^(gpt3|llama)-(\d+)x(\d+)x(\d+)$")


def lookup(name: str) -> MLPConfig | TransformerConfig:
    """The config a workload name stands for; DistplanError listing valid names if none."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key in NAMED:
        return NAMED[key]
    m = _GENERATED.match(key) if isinstance(key, str) else None
    if m:
        family, hidden, layers, heads = m.group(1), *(int(g) for g in m.groups()[1:])
        if layers < 1:
            raise DistplanError(f"workload {name!r}: needs at least one layer")
        return GENERATORS[family][0](key, hidden, layers, heads)
    m = _GENERATED_MOE.match(key) if isinstance(key, str) else None
    if m:
        hidden, layers, heads, experts = (int(x) for x in m.groups()[1:])
        if layers < 1:
            raise DistplanError(f"workload {name!r}: needs at least one layer")
        return GENERATORS[m.group(1)][0](key, hidden, layers, heads, experts)
    patterns = ", ".join(p for _, p, _ in GENERATORS.values())
    raise DistplanError(f"unknown workload {name!r}; valid names: {', '.join(NAMED)}; or the patterns "
                        f"{patterns}; or a graph file (.json)")
