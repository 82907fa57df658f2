"""Per-op precision per device kind in a mixed-fleet plan, chosen exactly by a small
HiGHS MILP for a fixed layer split and shares (``model.fleet`` iterates the three).

The rule (docs/guides/mixed-fleets.md, "Per-op precision per kind"): group g = the
replicas of kind c in stage k, each with ``share`` microbatches per step; x[v, c] is a
precision kind c runs and op v may use (in training fp8 only where the fp8 recipe
lowers the op, ``costs.fp8.is_fp8_linear``: embedding, head, attention, norms stay
16-bit); t_g = sum over the stage's ops of ``op_time_s(v, x[v, c], c)``;
  objective = (1 - 1/M) max_g share_g t_g + sum_k max_{g in k} t_g   (1F1B: busiest
              replica's step, plus the pipeline's fill and drain);
  sensitivity = sum_g weight_g sum_{v in k} s(v, x[v, c])   (``plan_sensitivity``'s sum,
              weight_g = the part of the step's microbatches g computes).
Minimise the objective with sensitivity <= budget, then the least sensitivity at that
optimum (a second solve). Options beaten in both time and sensitivity are dropped first.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import highspy
import numpy as np

from distplan.core.errors import InternalError
from distplan.costs.fp8 import is_fp8_linear
from distplan.costs.problem import Problem

#: relative slack of the second solve's objective row
OBJECTIVE_SLACK = 1e-7
#: HiGHS's relative gap, and the seconds each of the two solves may take (past them the
#: incumbent is taken; ``PrecisionChoice.proven`` says whether both closed their gap)
REL_GAP = 1e-4
SOLVE_LIMIT_S = 1.0


@dataclass(frozen=True)
class Group:
    """The replicas of one device kind in one stage: their ops, each replica's
    microbatches per step (``share``: the largest of them) and the part of the step's
    microbatches they compute together (``weight``, for the sensitivity)."""

    stage: int
    kind: int
    ops: tuple[int, ...]
    share: int
    weight: float


@dataclass(frozen=True)
class PrecisionChoice:
    """Per kind, per op, the precision index chosen (ops of no group of the kind: their
    widest); the rule's objective (seconds) and sensitivity of the choice; ``proven``:
    both solves closed their gap (False: a solve hit ``SOLVE_LIMIT_S``)."""

    qs: dict[int, tuple[int, ...]]
    objective_s: float
    sensitivity: float
    proven: bool = True


def options(problem: Problem, v: int, c: int) -> list[int]:
    """The precisions kind ``c`` may compute op ``v`` at (in training, fp8 only on the
    linear layers the fp8 recipe lowers, ``costs.fp8.is_fp8_linear``) that no other
    beats in both seconds and sensitivity."""
    fp8_ok = not problem.training or is_fp8_linear(problem.graph.ops[v])
    runs = [q for q in range(len(problem.precisions)) if problem.supported[q, c] and problem.op_allowed[v, q]
            and (fp8_ok or problem.precisions[q] != "fp8")]
    pts = [(problem.op_time_s(v, q, c), float(problem.sensitivity[v, q]), q) for q in runs]
    return [q for t, s, q in pts
            if not any(t2 <= t and s2 <= s and (t2 < t or s2 < s or q2 < q) for t2, s2, q2 in pts)]


def rule_value(problem: Problem, groups: Sequence[Group], qs: dict[int, Sequence[int]], microbatches: int
               ) -> tuple[float, float]:
    """(objective seconds, sensitivity) of the choice ``qs`` under the rule (module docstring)."""
    t = {g: math.fsum(problem.op_time_s(v, qs[g.kind][v], g.kind) for v in g.ops) for g in groups}
    stages = sorted({g.stage for g in groups})
    busiest = max(g.share * t[g] for g in groups)
    fill = math.fsum(max(t[g] for g in groups if g.stage == k) for k in stages)
    sens = math.fsum(g.weight * float(problem.sensitivity[v, qs[g.kind][v]]) for g in groups for v in g.ops)
    return (1 - 1 / microbatches) * busiest + fill, sens


def _widest(problem: Problem, c: int) -> tuple[int, ...]:
    out = []
    for v in range(problem.n_ops):
        runs = options(problem, v, c)
        out.append(min(runs, key=lambda q: (float(problem.sensitivity[v, q]), q)) if runs else 0)
    return tuple(out)


def choose_precisions(problem: Problem, groups: Sequence[Group], microbatches: int,
                      budget: float | None = None) -> PrecisionChoice | None:
    """The rule's choice (module docstring) for ``groups`` (each op in the groups of one
    stage only); None when no choice meets ``budget``. A choice HiGHS's tolerances let
    over the budget (summed exactly) is solved again with the budget row lowered by it."""
    row_budget = budget
    for _ in range(3):
        got = _choose(problem, groups, microbatches, row_budget)
        if got is None or budget is None or got.sensitivity <= budget * (1 + 1e-12):
            return got
        row_budget -= got.sensitivity - budget
    raise InternalError(f"the precision MILP's choice stays over the budget {budget}")


def _choose(problem: Problem, groups: Sequence[Group], microbatches: int,
            budget: float | None) -> PrecisionChoice | None:
    kinds = sorted({g.kind for g in groups})
    base = {c: list(_widest(problem, c)) for c in kinds}
    # columns: one binary per (group, op, option) where the op has a choice; then T, then r_k
    cols: list[tuple[int, int, int]] = []          # (group index, op, q)
    const_t = [0.0] * len(groups)
    const_s = 0.0
    for gi, g in enumerate(groups):
        for v in g.ops:
            opts = options(problem, v, g.kind)
            if not opts:
                return None
            if len(opts) == 1:
                base[g.kind][v] = opts[0]
                const_t[gi] += problem.op_time_s(v, opts[0], g.kind)
                const_s += g.weight * float(problem.sensitivity[v, opts[0]])
            else:
                cols += [(gi, v, q) for q in opts]
    stages = sorted({g.stage for g in groups})
    n_x, n_t = len(cols), 1 + len(stages)
    scale_t = max([g.share * (const_t[gi] + sum(problem.op_time_s(v, max(options(problem, v, g.kind),
                   key=lambda q: problem.op_time_s(v, q, g.kind)), g.kind) for v in g.ops))
                   for gi, g in enumerate(groups)] + [0.0]) or 1.0   # rows and costs of order 1
    tx = np.array([problem.op_time_s(v, q, groups[gi].kind) for gi, v, q in cols]) / scale_t
    sx = np.array([groups[gi].weight * float(problem.sensitivity[v, q]) for gi, v, q in cols])
    scale_s = float(sx.max()) if n_x and sx.max() > 0 else 1.0
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", REL_GAP)
    h.setOptionValue("mip_abs_gap", 1e-12)
    h.setOptionValue("time_limit", SOLVE_LIMIT_S)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    h.setOptionValue("primal_feasibility_tolerance", 1e-9)
    M = microbatches
    cost = np.concatenate([np.zeros(n_x), [1 - 1 / M], np.ones(len(stages))])
    h.addVars(n_x + n_t, np.zeros(n_x + n_t), np.concatenate([np.ones(n_x), np.full(n_t, highspy.kHighsInf)]))
    if n_x:
        h.changeColsIntegrality(n_x, np.arange(n_x, dtype=np.int32),
                                np.full(n_x, highspy.HighsVarType.kInteger))
    rows: list[tuple[float, float, list[int], list[float]]] = []
    by_op: dict[tuple[int, int], list[int]] = {}
    for j, (gi, v, _) in enumerate(cols):
        by_op.setdefault((gi, v), []).append(j)
    rows += [(1.0, 1.0, js, [1.0] * len(js)) for js in by_op.values()]
    for gi, g in enumerate(groups):
        js = [j for j, c in enumerate(cols) if c[0] == gi]
        ct = const_t[gi] / scale_t
        rows.append((-highspy.kHighsInf, -g.share * ct, js + [n_x], [g.share * tx[j] for j in js] + [-1.0]))
        rows.append((-highspy.kHighsInf, -ct, js + [n_x + 1 + stages.index(g.stage)],
                     [tx[j] for j in js] + [-1.0]))
    if budget is not None:
        left = (budget - const_s) / scale_s
        if left < -1e-12:
            return None
        rows.append((-highspy.kHighsInf, max(left, 0.0), list(range(n_x)), list(sx / scale_s)))
    for lo, up, idx, val in rows:
        h.addRow(lo, up, len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=float))
    h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)
    x, proven = _solve(h)
    if x is None:
        return None
    if n_x:   # second solve: the least sensitivity at (near) the least objective
        obj = float(cost @ x)
        h.addRow(-highspy.kHighsInf, obj * (1 + OBJECTIVE_SLACK) + 1e-12, len(cost),
                 np.arange(len(cost), dtype=np.int32), cost)
        h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32),
                         np.concatenate([sx / scale_s, np.zeros(n_t)]))
        start = highspy.HighsSolution()
        start.col_value = list(x)
        h.setSolution(start)   # the first solve's: feasible, so a timed-out second solve still has it
        x2, proven2 = _solve(h)
        if x2 is None:
            raise InternalError("the least-sensitivity solve lost the first solve's solution")
        x, proven = x2, proven and proven2
    qs = {c: list(base[c]) for c in kinds}
    for j, (gi, v, q) in enumerate(cols):
        if x[j] > 0.5:
            qs[groups[gi].kind][v] = q
    out = {c: tuple(q) for c, q in qs.items()}
    value, sens = rule_value(problem, groups, out, M)
    return PrecisionChoice(out, value, sens, proven)


def _solve(h: "highspy.Highs") -> tuple[np.ndarray | None, bool]:
    """The solution (None: infeasible) and whether HiGHS closed its gap."""
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None, True
    timed_out = status == highspy.HighsModelStatus.kTimeLimit and h.getInfo().primal_solution_status == 2
    if status != highspy.HighsModelStatus.kOptimal and not timed_out:
        raise InternalError(f"the precision MILP ended {h.modelStatusToString(status)}")
    return np.array(h.getSolution().col_value), not timed_out


__all__ = ["Group", "PrecisionChoice", "choose_precisions", "options", "rule_value"]
