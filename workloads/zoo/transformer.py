"""Transformer graphs (BERT encoders, GPT-2/GPT-3 and Llama decoders) from one config.

Per layer 12 operators. Pre-norm (GPT, Llama):
    norm1, qkv, attn_score, softmax, attn_context, proj, add1, norm2, ffn1, act, ffn2, add2
post-norm (BERT):
    qkv, attn_score, softmax, attn_context, proj, add1, norm1, ffn1, act, ffn2, add2, norm2
plus ``embed`` (lookups summed, BERT's embedding LayerNorm folded in), a final norm for
pre-norm models, and ``head`` (the LM head over every position, or BERT's pooler).
Residual connections are real edges. ``qkv`` is one fused projection; with grouped-query
attention (``kv_heads < heads``) K and V are ``kv_heads * head_dim`` wide. SwiGLU fuses the
gate and up projections into ``ffn1`` (output ``2 * ffn``). RoPE and dropout cost no time
here (a few FLOPs per element of Q/K or of an activation); dropout's masks count in memory
(``Graph.dropout``, costs.memory).
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass

from distplan.workloads.graph import Graph
from distplan.workloads.zoo import costs
from distplan.workloads.zoo.builder import GraphBuilder


@dataclass(frozen=True)
class TransformerConfig:
    """Shape of a transformer; ``ffn`` is the intermediate width (4h for GPT/BERT)."""

    name: str
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int           # learned position table rows (0: none, e.g. RoPE)
    default_seq_len: int
    type_vocab: int = 0          # BERT token-type table rows
    kv_heads: int | None = None  # None: = heads (multi-head attention)
    norm: str = "layernorm"      # or "rmsnorm"
    activation: str = "gelu"     # or "swiglu"
    bias: bool = True
    tied_head: bool = True       # LM head shares the word embedding (parameters counted once)
    post_norm: bool = False      # BERT: norm after each residual add, embedding norm, no final norm
    pooler_head: bool = False    # BERT: head = pooler (dense + tanh on the first token)
    description: str = ""
    default_batch_size: int = 1
    dropout: bool = False        # trained with dropout (GPT-2/3, BERT: 0.1; Llama: none): memory only

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return (self.kv_heads or self.heads) * self.head_dim

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def layer_params(self) -> int:
        h, ff, kv, bias = self.hidden, self.ffn, self.kv_dim, int(self.bias)
        qkv = h * (h + 2 * kv) + bias * (h + 2 * kv)
        proj = h * h + bias * h
        if self.activation == "swiglu":
            mlp = h * 2 * ff + bias * 2 * ff + ff * h + bias * h
        else:
            mlp = h * ff + bias * ff + ff * h + bias * h
        return qkv + proj + mlp + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        emb = (self.vocab + self.max_positions + self.type_vocab) * self.hidden
        return emb + (self.norm_params if self.post_norm else 0)

    @property
    def head_params(self) -> int:
        if self.pooler_head:
            return self.hidden * self.hidden + self.hidden
        return 0 if self.tied_head else self.vocab * self.hidden

    @property
    def param_elems(self) -> int:
        """Total parameters (tied head counted once; final norm for pre-norm models)."""
        final = 0 if self.post_norm else self.norm_params
        return self.embedding_params + self.layers * self.layer_params + final + self.head_params

    @property
    def n_ops(self) -> int:
        return 12 * self.layers + (2 if self.post_norm else 3)


#: Megatron-style tensor-parallel role of each op of a layer (workloads.graph.TP_ROLES)
ROLES = {"embed": "vocab_embedding", "norm1": "replicated", "norm2": "replicated", "final_norm": "replicated",
         "qkv": "column", "attn_score": "sharded", "softmax": "sharded", "attn_context": "sharded",
         "proj": "row", "add1": "replicated", "add2": "replicated", "ffn1": "column", "act": "sharded",
         "ffn2": "row", "head": "vocab_head"}


def with_roles(g: Graph, pooler_head: bool) -> Graph:
    """The graph with each op's Megatron role (a BERT pooler is replicated: a small dense
    layer on the first token, not worth splitting)."""
    def role(name: str) -> str:
        base = name.rsplit(".", 1)[-1]
        return "replicated" if (base == "head" and pooler_head) else ROLES[base]
    return dataclasses.replace(g, ops=tuple(dataclasses.replace(op, tp_role=role(op.name)) for op in g.ops))


def build_transformer(cfg: TransformerConfig, batch_size: int, seq_len: int, mode: str) -> Graph:
    training = mode == "training"
    B, s, h = batch_size, seq_len, cfg.hidden
    T, a, dh, kv, ff = B * s, cfg.heads, cfg.head_dim, cfg.kv_dim, cfg.ffn
    scores = B * a * s * s
    act_in = 2 * ff if cfg.activation == "swiglu" else ff
    g = GraphBuilder()

    tables = (cfg.vocab,) + ((cfg.max_positions,) if cfg.max_positions else ()) + \
        ((cfg.type_vocab,) if cfg.type_vocab else ())
    x = g.add(costs.embedding("embed", T, h, tables, 1 + bool(cfg.type_vocab),
                              cfg.norm if cfg.post_norm else None, training))
    for i in range(cfg.layers):
        p = f"l{i}."
        if cfg.post_norm:
            attn_in = x
        else:
            attn_in = g.add(costs.norm(p + "norm1", cfg.norm, T, h, training), (x, T * h))
        qkv = g.add(costs.matmul(p + "qkv", T, h, h + 2 * kv, cfg.bias, training), (attn_in, T * h))
        sc = g.add(costs.attn_score(p + "attn_score", B, s, a, dh, kv, training), (qkv, T * (h + kv)))
        sm = g.add(costs.softmax(p + "softmax", scores, training), (sc, scores))
        ctx = g.add(costs.attn_context(p + "attn_context", B, s, a, dh, kv, training),
                    (sm, scores), (qkv, T * kv))
        proj = g.add(costs.matmul(p + "proj", T, h, h, cfg.bias, training), (ctx, T * h))
        add1 = g.add(costs.add(p + "add1", T * h, training), (x, T * h), (proj, T * h))
        if cfg.post_norm:
            mid = mlp_in = g.add(costs.norm(p + "norm1", cfg.norm, T, h, training), (add1, T * h))
        else:
            mid = add1
            mlp_in = g.add(costs.norm(p + "norm2", cfg.norm, T, h, training), (add1, T * h))
        f1 = g.add(costs.matmul(p + "ffn1", T, h, act_in, cfg.bias, training), (mlp_in, T * h))
        act = g.add(costs.activation(p + "act", cfg.activation, T * ff, training), (f1, T * act_in))
        f2 = g.add(costs.matmul(p + "ffn2", T, ff, h, cfg.bias, training), (act, T * ff))
        x = g.add(costs.add(p + "add2", T * h, training), (mid, T * h), (f2, T * h))
        if cfg.post_norm:
            x = g.add(costs.norm(p + "norm2", cfg.norm, T, h, training), (x, T * h))
    if cfg.pooler_head:
        g.add(costs.pooler("head", B, h, training), (x, B * h))
    else:
        x = g.add(costs.norm("final_norm", cfg.norm, T, h, training), (x, T * h))
        head = costs.matmul("head", T, h, cfg.vocab, False, training, kind="head", weight_is_param=not cfg.tied_head)
        if cfg.tied_head:   # reads the embedding's word table: held again when on another stage
            head = dataclasses.replace(head, tied_to="embed", tied_elems=cfg.vocab * h)
        g.add(head, (x, T * h))
    return with_roles(g.build(cfg.name, mode, batch_size, seq_len, cfg.dropout), cfg.pooler_head)
