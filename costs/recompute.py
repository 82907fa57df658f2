"""Which operators a training plan recomputes in the backward pass instead of stashing
their outputs (``Stage.recompute``); ``zero_saved_bytes`` (costs.sharding) is re-exported.

- ``selective`` (Korthikanti et al. 2022): the attention core's big intermediates,
  operators of kind ``attn_score`` and ``softmax``;
- ``full``: every operator but the checkpoints, each layer's output (an operator read by
  an operator of another ``l<i>.`` layer, or one with no layer name, such as the
  embedding);
- never an operator that sends to a later stage (the tensor must be held for the send).
A recomputed operator's forward runs again before its backward (time), and its output
is held only until its consumers on the stage have run (memory), like inference.
"""
from __future__ import annotations

import numpy as np

from distplan.core.plan import Plan
from distplan.costs.problem import Problem
from distplan.costs.sharding import zero_saved_bytes  # noqa: F401  (re-exported)
from distplan.workloads.graph import layer_index

SELECTIVE_KINDS = ("attn_score", "softmax")
def recomputed(problem: Problem, plan: Plan) -> np.ndarray:
    """Per operator: True when its stage recomputes it (module docstring)."""
    V = problem.n_ops
    out = np.zeros(V, dtype=bool)
    if not problem.training or all(s.recompute == "none" for s in plan.stages):
        return out
    ops = problem.graph.ops
    layer = [layer_index(op.name) for op in ops]
    sends_later = np.zeros(V, dtype=bool)
    leaves_layer = np.zeros(V, dtype=bool)
    for u, v in problem.edges:
        if plan.op_stage[v] != plan.op_stage[u]:
            sends_later[u] = True
        if layer[v] != layer[u]:
            leaves_layer[u] = True
    for v, op in enumerate(ops):
        mode = plan.stages[plan.op_stage[v]].recompute
        if sends_later[v] or mode == "none":
            continue
        if mode == "selective":
            out[v] = op.kind in SELECTIVE_KINDS
        else:
            out[v] = layer[v] is not None and not leaves_layer[v]
    return out
