"""A small accumulator of operators and tensors that ends as a validated ``Graph``."""
from __future__ import annotations

from distplan.workloads.graph import Graph, Operator, Tensor


class GraphBuilder:
    """Collects operators and tensors in order; ``build`` validates them as a Graph."""

    def __init__(self) -> None:
        self._ops: list[Operator] = []
        self._tensors: list[Tensor] = []

    def add(self, op: Operator, *inputs: tuple[str, int]) -> str:
        """Append ``op`` fed by ``(source op name, elems)`` tensors; returns its name."""
        self._ops.append(op)
        for src, elems in inputs:
            self._tensors.append(Tensor(src=src, dst=op.name, elems=int(elems)))
        return op.name

    def build(self, name: str, mode: str, batch_size: int, seq_len: int | None, dropout: bool = False) -> Graph:
        return Graph(name=name, ops=tuple(self._ops), tensors=tuple(self._tensors), mode=mode,
                     batch_size=batch_size, seq_len=seq_len, dropout=dropout)
