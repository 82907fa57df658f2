"""DistIR-style MLP: ``layers`` square (hidden x hidden) matmuls without bias, each
followed by a ReLU (the shape of ``examples/mlp.py`` in microsoft/dist-ir, whose
grid search used mlp-xs = 8 x 4096, mlp-small = 16 x 8192, mlp-medium = 64 x 16384,
mlp-large = 128 x 32768). ``batch_size`` is rows per microbatch; no sequence length.
"""
from __future__ import annotations

from dataclasses import dataclass

from distplan.workloads.graph import Graph
from distplan.workloads.zoo import costs
from distplan.workloads.zoo.builder import GraphBuilder


@dataclass(frozen=True)
class MLPConfig:
    name: str
    layers: int
    hidden: int
    description: str = ""
    default_batch_size: int = 1024  # DistIR's smallest grid-search batch; batch 1 is a degenerate GEMV

    @property
    def param_elems(self) -> int:
        return self.layers * self.hidden * self.hidden


def build_mlp(cfg: MLPConfig, batch_size: int, mode: str) -> Graph:
    training = mode == "training"
    b = GraphBuilder()
    act_elems = batch_size * cfg.hidden
    prev: str | None = None
    for i in range(cfg.layers):
        fc = costs.matmul(f"l{i}.fc", batch_size, cfg.hidden, cfg.hidden, bias=False, training=training)
        b.add(fc, *([(prev, act_elems)] if prev else []))
        prev = b.add(costs.activation(f"l{i}.relu", "relu", act_elems, training), (fc.name, act_elems))
    return b.build(cfg.name, mode, batch_size, None)
