"""Mixture-of-experts decoders (Mixtral, DeepSeek-V3, Qwen3-MoE): a Llama-style block whose FFN is
``experts`` SwiGLU experts of width ``expert_ffn``, each token routed to ``top_k`` of them,
plus ``shared_experts`` every token goes through; the first ``dense_layers`` keep a dense FFN.

An MoE layer is a dense layer's 12 operators plus ``router`` (a bias-free
``hidden x experts`` matmul, tp role ``replicated``). ``ffn1`` / ``act`` / ``ffn2`` are
the experts (roles column / sharded / row): ``param_elems`` holds every expert, FLOPs
and activations only the ``top_k + shared`` a token goes through (``costs.experts``), so
tensor parallelism splits every expert over the group (expert-tensor-parallel = tp,
expert-parallel 1; ``expert_param_elems`` marks the routed experts' parameters).
Expert parallelism and its all-to-alls: ``ExpertShare`` and ``costs.expert_parallel``.
Not modelled: load imbalance, the gate's selection and token permutation, grouped-GEMM
efficiency, MLA's KV-cache compression (MLA is standard attention over its published
weights), Qwen3's QK-norm.

Details: docs/guides/own-model.md, "Mixture-of-experts layers".
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from distplan.workloads.graph import Graph
from distplan.workloads.zoo import costs
from distplan.workloads.zoo.builder import GraphBuilder
from distplan.workloads.zoo.transformer import (TransformerConfig, attention_block, dense_mlp_block,
                                                embed_block, head_block, residual_end, with_roles)


@dataclass(frozen=True)
class MoEConfig(TransformerConfig):
    """A transformer whose layers after the first ``dense_layers`` are MoE layers."""

    experts: int = 8             # routed experts per MoE layer
    top_k: int = 2               # routed experts per token
    shared_experts: int = 0      # experts every token goes through (DeepSeek: 1)
    expert_ffn: int = 0          # width of one expert (0: = ffn)
    dense_layers: int = 0        # leading layers with a dense FFN of width ffn
    mla_qkv_params: int = 0      # MLA stand-in: the fused qkv's weights (0: standard attention)
    mla_qk_head_dim: int = 0     # MLA: query/key head width (nope + rope)
    mla_v_head_dim: int = 0      # MLA: value head width
    head_width: int = 0          # every head's width where it is not hidden / heads (Qwen3: 128)

    @property
    def head_dim(self) -> int:
        return self.head_width or self.hidden // self.heads

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.ffn

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    def is_moe_layer(self, i: int) -> bool:
        return i >= self.dense_layers

    @property
    def qk_head_dim(self) -> int:
        return self.mla_qk_head_dim or self.head_dim

    @property
    def v_head_dim(self) -> int:
        return self.mla_v_head_dim or self.head_dim

    @property
    def qkv_param_elems(self) -> int:
        return self.mla_qkv_params

    @property
    def attention_params(self) -> int:
        """QKV (or MLA's projections) and the output projection of one layer."""
        kvh = self.kv_heads or self.heads
        h, a, dqk, dv = self.hidden, self.heads, self.qk_head_dim, self.v_head_dim
        qkv = self.mla_qkv_params or h * (a * dqk + kvh * dqk + kvh * dv)
        return qkv + a * dv * h

    @property
    def router_params(self) -> int:
        return self.hidden * self.experts

    @property
    def moe_mlp_params(self) -> int:
        """Router plus every expert (routed and shared) of one MoE layer."""
        return self.router_params + (self.experts + self.shared_experts) * self.mlp_params(self.expert_width)

    @property
    def layer_params(self) -> int:
        """Parameters of one MoE layer (a dense leading layer: ``dense_layer_params``)."""
        return self.attention_params + self.moe_mlp_params + 2 * self.norm_params

    @property
    def dense_layer_params(self) -> int:
        return self.attention_params + self.mlp_params(self.ffn) + 2 * self.norm_params

    def _total(self, experts_per_layer: int) -> int:
        final = 0 if self.post_norm else self.norm_params
        moe = self.attention_params + 2 * self.norm_params + self.router_params + \
            experts_per_layer * self.mlp_params(self.expert_width)
        return self.embedding_params + self.dense_layers * self.dense_layer_params + \
            self.moe_layers * moe + final + self.head_params

    @property
    def param_elems(self) -> int:
        """Total parameters: every expert of every MoE layer."""
        return self._total(self.experts + self.shared_experts)

    @property
    def active_param_elems(self) -> int:
        """Parameters one token goes through: the ``top_k`` routed and the shared experts
        of each MoE layer, all the rest (embedding table and head included, as Mixtral's
        12.9 B counts them)."""
        return self._total(self.top_k + self.shared_experts)

    @property
    def n_ops(self) -> int:
        return 12 * self.layers + self.moe_layers + (2 if self.post_norm else 3)


@dataclass(frozen=True)
class ExpertShare:
    """One expert-parallel rank's experts (``costs.expert_parallel``): ``held`` routed
    experts a layer, each padded to ``capacity`` times its even share of the tokens, at
    ``weight_scale`` times the tensor-parallel split's weights (tp / etp)."""

    held: int | None = None
    capacity: float = 1.0
    weight_scale: int = 1


def _routed(op, elems: int):
    """``op`` with its routed experts' ``elems`` parameters marked (the shared ones are dense)."""
    return dataclasses.replace(op, expert_param_elems=int(elems))


def moe_mlp_block(g: GraphBuilder, cfg: MoEConfig, p: str, mlp_in: str, tokens: int, training: bool,
                  share: ExpertShare = ExpertShare()) -> str:
    """Layer ``p``'s router and experts (module docstring); returns ``ffn2``."""
    T, h, E, k, S, ff = tokens, cfg.hidden, cfg.experts, cfg.top_k, cfg.shared_experts, cfg.expert_width
    held = E if share.held is None else share.held
    f1_op = _routed(costs.experts(p + "ffn1", T, h, 2 * ff, E, k, S, training, share.capacity,
                                  held * share.weight_scale), held * share.weight_scale * h * 2 * ff)
    rows = f1_op.out_elems // (2 * ff)   # routed (padded) and shared rows
    router = g.add(costs.matmul(p + "router", T, h, E, False, training), (mlp_in, T * h))
    f1 = g.add(f1_op, (mlp_in, T * h), (router, T * E))
    act = g.add(costs.activation(p + "act", cfg.activation, rows * ff, training), (f1, rows * 2 * ff))
    # the combine reads each token's top-k gate weights
    f2_op = _routed(costs.expert_combine(p + "ffn2", T, ff, h, E, k, S, training, share.capacity,
                                         held * share.weight_scale), held * share.weight_scale * ff * h)
    return g.add(f2_op, (act, rows * ff), (router, T * k))


def build_moe(cfg: MoEConfig, batch_size: int, seq_len: int, mode: str, attention: str = "explicit",
              cp: int = 1, share: ExpertShare = ExpertShare()) -> Graph:
    """Graph of one microbatch of ``batch_size`` sequences of ``seq_len`` tokens (one
    context-parallel rank's ``seq_len / cp``: ``build_transformer``; one expert-parallel
    rank's experts: ``share``)."""
    training = mode == "training"
    seq_len //= cp
    T = batch_size * seq_len
    g = GraphBuilder()
    x = embed_block(g, cfg, T, training)
    for i in range(cfg.layers):
        p = f"l{i}."
        mid, mlp_in = attention_block(g, cfg, p, x, batch_size, seq_len, training, attention, cp)
        if cfg.is_moe_layer(i):
            out = moe_mlp_block(g, cfg, p, mlp_in, T, training, share)
        else:
            out = dense_mlp_block(g, cfg, p, mlp_in, T, cfg.ffn, training)
        x = residual_end(g, cfg, p, mid, out, T, training)
    head_block(g, cfg, x, batch_size, T, training)
    return with_roles(g.build(cfg.name, mode, batch_size, seq_len, cfg.dropout), cfg.pooler_head)
