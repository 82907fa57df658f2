"""The named models of the zoo and the shape generators behind ``gpt3-HxLxA`` and
``llama-HxLxA`` names. Configs only; graphs are built in ``mlp.py`` / ``transformer.py``.

Sources: BERT (Devlin et al. 2018; HF bert-base-uncased: vocab 30522, 512 positions,
2 token types); GPT-2 (HF gpt2*: vocab 50257, 1024 positions, tied head); GPT-3
(Brown et al. 2020, Table 2.1: vocab 50257, 2048 positions, ffn 4h, tied head, dense
attention everywhere — the paper's alternating locally banded layers are not modelled);
Llama (Touvron et al. 2023: vocab 32000, RMSNorm, SwiGLU with ffn = 8h/3 rounded up to a
multiple of 256, no biases, untied head, RoPE so no position table); Llama 3 (Llama Team,
"The Llama 3 Herd of Models", 2024, Table 3: 8B / 70B / 405B with 32 / 80 / 126 layers,
model dimension 4096 / 8192 / 16384, FFN dimension 14336 / 28672 / 53248, 32 / 64 / 128
attention heads, 8 key/value heads (grouped-query attention), vocabulary 128,000 (the
released tokenizer: 128,256 entries), trained at 8,192 tokens; the same Llama block).
"""
from __future__ import annotations

import re

from distplan.core.errors import DistplanError
from distplan.workloads.zoo.mlp import MLPConfig
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
)}

GENERATORS = {
    "gpt3": (gpt3, "gpt3-<hidden>x<layers>x<heads>", "GPT-3-shaped decoder of any size (e.g. gpt3-4096x32x32)"),
    "llama": (llama, "llama-<hidden>x<layers>x<heads>", "Llama-style decoder of any size (e.g. llama-4096x32x32)"),
}
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
    patterns = ", ".join(p for _, p, _ in GENERATORS.values())
    raise DistplanError(f"unknown workload {name!r}; valid names: {', '.join(NAMED)}; or the patterns "
                        f"{patterns}; or a graph file (.json)")
