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
from distplan.workloads.zoo.attention import flash_block
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
    def qk_head_dim(self) -> int:
        """Width of a query or key head (an MoE config's MLA stand-in widens it)."""
        return self.head_dim

    @property
    def v_head_dim(self) -> int:
        """Width of a value head."""
        return self.head_dim

    @property
    def qkv_param_elems(self) -> int:
        """Weights of the fused QKV projection when it is not one dense matmul (0: it is)."""
        return 0

    @property
    def norm_params(self) -> int:
        return 2 * self.hidden if self.norm == "layernorm" else self.hidden

    @property
    def attention_params(self) -> int:
        """Parameters of one layer's QKV and output projections."""
        h, kv, bias = self.hidden, self.kv_dim, int(self.bias)
        return h * (h + 2 * kv) + bias * (h + 2 * kv) + h * h + bias * h

    def mlp_params(self, ffn: int) -> int:
        """Parameters of one dense FFN of width ``ffn`` (SwiGLU: gate, up and down)."""
        h, bias = self.hidden, int(self.bias)
        up = 2 * ffn if self.activation == "swiglu" else ffn
        return h * up + bias * up + ffn * h + bias * h

    @property
    def layer_params(self) -> int:
        return self.attention_params + self.mlp_params(self.ffn) + 2 * self.norm_params

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
         "ffn2": "row", "head": "vocab_head", "router": "replicated", "flash_attn": "sharded"}


def with_roles(g: Graph, pooler_head: bool) -> Graph:
    """The graph with each op's Megatron role (a BERT pooler is replicated: a small dense
    layer on the first token, not worth splitting)."""
    def role(name: str) -> str:
        base = name.rsplit(".", 1)[-1]
        return "replicated" if (base == "head" and pooler_head) else ROLES[base]
    return dataclasses.replace(g, ops=tuple(dataclasses.replace(op, tp_role=role(op.name)) for op in g.ops))


def embed_block(g: GraphBuilder, cfg: TransformerConfig, tokens: int, training: bool) -> str:
    """The embedding lookups (BERT: plus its LayerNorm); returns the op's name."""
    tables = (cfg.vocab,) + ((cfg.max_positions,) if cfg.max_positions else ()) + \
        ((cfg.type_vocab,) if cfg.type_vocab else ())
    return g.add(costs.embedding("embed", tokens, cfg.hidden, tables, 1 + bool(cfg.type_vocab),
                                 cfg.norm if cfg.post_norm else None, training))


def attention_block(g: GraphBuilder, cfg: TransformerConfig, p: str, x: str, batch_size: int, seq_len: int,
                    training: bool, attention: str = "explicit", cp: int = 1) -> tuple[str, str]:
    """Layer ``p``'s attention half fed by ``x``: (the residual stream after it, the
    MLP's input). Q is ``heads x qk_head_dim`` wide, K ``kv_heads x qk_head_dim``, V
    ``kv_heads x v_head_dim``; ``qkv_param_elems`` (an MoE config's MLA stand-in) replaces
    the one dense projection's weights. ``seq_len`` tokens are one context-parallel
    rank's of ``cp x seq_len``; ``attention``: the core (``zoo.attention``)."""
    B, s, h = batch_size, seq_len, cfg.hidden
    T, a, dqk, dv = B * s, cfg.heads, cfg.qk_head_dim, cfg.v_head_dim
    kvh = cfg.kv_heads or cfg.heads
    q_w, k_w, v_w = a * dqk, kvh * dqk, kvh * dv
    scores = B * a * s * s * cp
    attn_in = x if cfg.post_norm else g.add(costs.norm(p + "norm1", cfg.norm, T, h, training), (x, T * h))
    if cfg.qkv_param_elems:
        qkv_op = costs.projection(p + "qkv", T, h, q_w + k_w + v_w, cfg.qkv_param_elems, training)
    else:
        qkv_op = costs.matmul(p + "qkv", T, h, q_w + k_w + v_w, cfg.bias, training)
    qkv = g.add(qkv_op, (attn_in, T * h))
    if attention == "flash":
        ctx, _ = flash_block(g, p, qkv, B, s, s * cp, a, dqk, dv, kvh, not cfg.pooler_head, training)
    else:
        sc = g.add(costs.attn_score(p + "attn_score", B, s, a, dqk, k_w, training, s * cp), (qkv, T * (q_w + k_w)))
        sm = g.add(costs.softmax(p + "softmax", scores, training), (sc, scores))
        ctx = g.add(costs.attn_context(p + "attn_context", B, s, a, dv, v_w, training, s * cp), (sm, scores),
                    (qkv, T * v_w))
    proj = g.add(costs.matmul(p + "proj", T, a * dv, h, cfg.bias, training), (ctx, T * a * dv))
    add1 = g.add(costs.add(p + "add1", T * h, training), (x, T * h), (proj, T * h))
    if cfg.post_norm:
        mid = g.add(costs.norm(p + "norm1", cfg.norm, T, h, training), (add1, T * h))
        return mid, mid
    return add1, g.add(costs.norm(p + "norm2", cfg.norm, T, h, training), (add1, T * h))


def dense_mlp_block(g: GraphBuilder, cfg: TransformerConfig, p: str, mlp_in: str, tokens: int, ffn: int,
                    training: bool) -> str:
    """Layer ``p``'s dense FFN of width ``ffn`` (``ffn1``, ``act``, ``ffn2``); returns ``ffn2``."""
    T, h = tokens, cfg.hidden
    act_in = 2 * ffn if cfg.activation == "swiglu" else ffn
    f1 = g.add(costs.matmul(p + "ffn1", T, h, act_in, cfg.bias, training), (mlp_in, T * h))
    act = g.add(costs.activation(p + "act", cfg.activation, T * ffn, training), (f1, T * act_in))
    return g.add(costs.matmul(p + "ffn2", T, ffn, h, cfg.bias, training), (act, T * ffn))


def residual_end(g: GraphBuilder, cfg: TransformerConfig, p: str, mid: str, mlp_out: str, tokens: int,
                 training: bool) -> str:
    """The layer's second residual add (BERT: and its norm); returns the layer's output."""
    T, h = tokens, cfg.hidden
    x = g.add(costs.add(p + "add2", T * h, training), (mid, T * h), (mlp_out, T * h))
    if cfg.post_norm:
        x = g.add(costs.norm(p + "norm2", cfg.norm, T, h, training), (x, T * h))
    return x


def head_block(g: GraphBuilder, cfg: TransformerConfig, x: str, batch_size: int, tokens: int,
               training: bool) -> None:
    """BERT's pooler, or the final norm and the LM head (tied: reads the word table)."""
    T, h = tokens, cfg.hidden
    if cfg.pooler_head:
        g.add(costs.pooler("head", batch_size, h, training), (x, batch_size * h))
        return
    x = g.add(costs.norm("final_norm", cfg.norm, T, h, training), (x, T * h))
    head = costs.matmul("head", T, h, cfg.vocab, False, training, kind="head", weight_is_param=not cfg.tied_head)
    if cfg.tied_head:   # reads the embedding's word table: held again when on another stage
        head = dataclasses.replace(head, tied_to="embed", tied_elems=cfg.vocab * h)
    g.add(head, (x, T * h))


def build_transformer(cfg: TransformerConfig, batch_size: int, seq_len: int, mode: str,
                      attention: str = "explicit", cp: int = 1) -> Graph:
    """One microbatch of ``batch_size`` sequences of ``seq_len`` tokens; with ``cp`` > 1
    one context-parallel rank's ``seq_len / cp`` of them (``zoo.attention``)."""
    training = mode == "training"
    s = seq_len // cp
    T = batch_size * s
    g = GraphBuilder()
    x = embed_block(g, cfg, T, training)
    for i in range(cfg.layers):
        p = f"l{i}."
        mid, mlp_in = attention_block(g, cfg, p, x, batch_size, s, training, attention, cp)
        x = residual_end(g, cfg, p, mid, dense_mlp_block(g, cfg, p, mlp_in, T, cfg.ffn, training), T, training)
    head_block(g, cfg, x, batch_size, T, training)
    return with_roles(g.build(cfg.name, mode, batch_size, s, cfg.dropout), cfg.pooler_head)
