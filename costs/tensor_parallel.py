"""Megatron-style tensor parallelism, the rules both the analytic model and the simulator
follow (Shoeybi et al. 2019; Narayanan et al. 2021): which ops all-reduce their output
after the forward (row-parallel matmuls, the vocabulary-parallel embedding) or their input
gradient after the backward (column-parallel matmuls, the vocabulary-parallel head), whose
work divides over the group, and what share of an output a rank holds. Ops without a
``tp_role`` follow the generic rule: every matmul and head all-reduces both ways.
"""
from __future__ import annotations

TP_ALLREDUCE_KINDS = ("matmul", "head")   # the generic rule, for ops without a tp_role


def tp_forward_allreduce(op) -> bool:
    """Does a tensor-parallel op all-reduce its output after the forward? (Megatron: the
    row-parallel matmuls and the vocabulary-parallel embedding.)"""
    if op.tp_role is None:
        return op.kind in TP_ALLREDUCE_KINDS
    return op.tp_role in ("row", "vocab_embedding")


def tp_backward_allreduce(op) -> bool:
    """Does it all-reduce its input gradient after the backward? (Megatron: the
    column-parallel matmuls and the vocabulary-parallel head.)"""
    if op.tp_role is None:
        return op.kind in TP_ALLREDUCE_KINDS
    return op.tp_role in ("column", "vocab_head")


def tp_divides(op, sequence_parallel: bool = False) -> bool:
    """Does the op's work divide over the group? (Not for replicated norms and adds,
    unless sequence parallelism shards them along the sequence.)"""
    return op.tp_role != "replicated" or sequence_parallel


def tp_output_share(op, tv: int, sequence_parallel: bool = False) -> float:
    """Share of the op's output one rank holds: 1/t for outputs that stay sharded
    (column-parallel, sharded work, the vocabulary-parallel head; with sequence
    parallelism also the norms, adds and row-parallel outputs, which are reduce-
    scattered), else all of it."""
    if op.tp_role in ("column", "sharded", "vocab_head"):
        return 1.0 / tv
    if sequence_parallel and op.tp_role in ("replicated", "row"):
        return 1.0 / tv
    return 1.0
