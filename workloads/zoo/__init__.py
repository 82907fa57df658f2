"""The built-in workload zoo: graphs generated from model configs, parameterised by
batch size (sequences, or rows for an MLP, per microbatch) and sequence length.

Defaults: batch 1 for transformers, 1024 rows for the DistIR MLPs (the smallest batch of
DistIR's grid search); sequence length 128 for BERT, 1024 for GPT-2, 2048 for GPT-3 and
Llama (4096 for llama2-70b, 8192 for Llama 3, 32768 for Mixtral, 4096 for DeepSeek).
``costs.py`` counts FLOPs and elements, ``catalog.py`` holds the shapes and their
sources, ``moe.py`` says what a mixture-of-experts layer models. Approximations: a tied
LM head (GPT-2, GPT-3) counts its weight once, on ``embed``; BERT's head is its pooler
(counted, as in the published 110 M / 340 M), the MLM head is not modelled.

Every model, its shape and defaults: docs/guides/own-model.md.
"""
from __future__ import annotations

import dataclasses

from distplan.core.errors import DistplanError
from distplan.workloads.graph import MODES, Graph
from distplan.workloads.zoo.attention import ATTENTION
from distplan.workloads.zoo.catalog import GENERATORS, NAMED, lookup
from distplan.workloads.zoo.mlp import MLPConfig, build_mlp
from distplan.workloads.zoo.moe import MoEConfig, build_moe
from distplan.workloads.zoo.transformer import TransformerConfig, build_transformer

__all__ = ["get_workload", "list_workloads", "get_config", "MLPConfig", "TransformerConfig", "MoEConfig",
           "build_mlp", "build_transformer", "build_moe"]


def get_config(name: str) -> MLPConfig | TransformerConfig:
    """The frozen config behind a workload name (DistplanError listing names if unknown)."""
    return lookup(name)


def _check_size(value: object, what: str, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise DistplanError(f"workload {name!r}: {what} must be a positive integer, got {value!r}")


def get_workload(name: str, batch_size: int | None = None, seq_len: int | None = None,
                 mode: str = "inference", attention: str = "explicit", cp: int = 1) -> Graph:
    """Graph of zoo model ``name`` for one microbatch of ``batch_size`` sequences of
    ``seq_len`` tokens (None: the model's default); ``mode='training'`` fills bwd_flops.
    ``attention``: the attention core, explicit or flash (``zoo.attention``); ``cp`` > 1:
    one context-parallel rank's ``seq_len / cp`` tokens of each sequence."""
    cfg = lookup(name)
    if attention not in ATTENTION:
        raise DistplanError(f"--attention {attention!r} unknown; use {' or '.join(ATTENTION)}")
    if mode not in MODES:
        raise DistplanError(f"workload {name!r}: mode {mode!r} unknown; use one of {', '.join(MODES)}")
    batch = cfg.default_batch_size if batch_size is None else batch_size
    _check_size(batch, "batch_size", cfg.name)
    if isinstance(cfg, MLPConfig):
        if seq_len is not None:
            raise DistplanError(f"workload {cfg.name!r} is an MLP and has no sequence length; omit seq_len")
        if cp != 1 or attention != "explicit":
            raise DistplanError(f"workload {cfg.name!r} is an MLP: it has no attention to split (--cp) or fuse "
                                "(--attention)")
        return build_mlp(cfg, batch, mode)
    seq = cfg.default_seq_len if seq_len is None else seq_len
    _check_size(seq, "seq_len", cfg.name)
    if cfg.max_positions and seq > cfg.max_positions:
        raise DistplanError(f"workload {cfg.name!r}: seq_len {seq} exceeds its {cfg.max_positions} "
                            f"learned positions; use seq_len <= {cfg.max_positions}")
    _check_size(cp, "cp", cfg.name)
    if seq % cp:
        raise DistplanError(f"--cp {cp} does not divide the sequence length {seq} of {cfg.name!r} (each "
                            "context-parallel rank takes seq_len / cp tokens)")
    build = build_moe if isinstance(cfg, MoEConfig) else build_transformer
    graph = build(cfg, batch, seq, mode, attention, cp)
    heads = tuple(dict.fromkeys(h for h in (cfg.heads, getattr(cfg, "kv_heads", None)) if h))
    return dataclasses.replace(graph, tp_divides=heads)   # Megatron splits attention by heads


def list_workloads() -> list[tuple[str, str]]:
    """(name, one-line description) of every named model, then the generator patterns."""
    return [(n, c.description) for n, c in NAMED.items()] + \
        [(pattern, desc) for _, pattern, desc in GENERATORS.values()]
