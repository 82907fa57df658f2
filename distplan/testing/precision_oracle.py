"""Brute force for the fleet space's per-op precision rule (docs/guides/mixed-fleets.md,
"Per-op precision per kind"), written from that text: every assignment of a precision
to every (kind, op) of the groups, each precision one the kind runs and the op may use
(in training, fp8 only where ``costs.fp8.is_fp8_linear`` says the recipe lowers an op).

A group is (stage, kind, ops, share, weight). An assignment's objective is
(1 - 1/M) x the largest share x seconds per microbatch of any group, plus, per stage,
its slowest group's seconds per microbatch; its sensitivity is the weighted sum of its
ops' sensitivities. ``all_values`` lists (objective, sensitivity) of every assignment
within the budget; the rule's answer is the least objective and, among assignments with
that objective, the least sensitivity.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from distplan.costs.fp8 import is_fp8_linear
from distplan.costs.problem import Problem

GroupSpec = tuple[int, int, Sequence[int], int, float]


def all_values(problem: Problem, groups: Sequence[GroupSpec], microbatches: int,
               budget: float | None = None) -> list[tuple[float, float]]:
    """(objective s, sensitivity) of every assignment whose sensitivity is <= ``budget``."""
    pairs = sorted({(c, v) for _, c, ops, _, _ in groups for v in ops})
    def may(c: int, v: int, q: int) -> bool:
        fp8_pinned = problem.training and problem.precisions[q] == "fp8" and not is_fp8_linear(problem.graph.ops[v])
        return bool(problem.supported[q, c] and problem.op_allowed[v, q]) and not fp8_pinned

    choices = [[q for q in range(len(problem.precisions)) if may(c, v, q)] for c, v in pairs]
    out = []
    for pick in itertools.product(*choices):
        at = dict(zip(pairs, pick))
        secs, sens, per_stage = [], 0.0, {}
        for stage, c, ops, share, weight in groups:
            t = sum(float(problem.fwd_time_s[v, at[c, v], c] + problem.bwd_time_s[v, at[c, v], c]) for v in ops)
            secs.append(share * t)
            per_stage[stage] = max(per_stage.get(stage, 0.0), t)
            sens += weight * sum(float(problem.sensitivity[v, at[c, v]]) for v in ops)
        if budget is not None and sens > budget:
            continue
        out.append(((1 - 1 / microbatches) * max(secs) + sum(per_stage.values()), sens))
    return out


def rule_answer(problem: Problem, groups: Sequence[GroupSpec], microbatches: int,
                budget: float | None = None, rel: float = 1e-12) -> tuple[float, float] | None:
    """The least objective and the least sensitivity at it (within ``rel``), or None."""
    vals = all_values(problem, groups, microbatches, budget)
    if not vals:
        return None
    best = min(o for o, _ in vals)
    return best, min(s for o, s in vals if o <= best * (1 + rel))


__all__ = ["all_values", "rule_answer"]
