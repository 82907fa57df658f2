"""Simulated annealing over stage assignments and precisions.

State: a device path family, an acyclic op -> stage assignment (stages compacted onto
the path's first K devices) and a precision per op. Moves: ``shift`` a stage boundary,
``move`` or ``swap`` ops between neighbouring stages, change one op's or a stage's
``precision``, ``split`` / ``merge`` stages, switch ``path``. A move that would send a
tensor backwards or split a colocate group is not proposed; precisions a device cannot run are repaired to its
fastest one; a neighbour that breaks memory or the sensitivity budget is rejected
before scoring. Metropolis acceptance on the relative change of 1/throughput, the
temperature falling geometrically from ``t_start`` to ``t_end`` over the budget. Starts
from a random feasible partition (``init="random"``) or the DP's best plan
(``init="dp"``). Returns only feasible plans.

The baselines side by side: docs/guides/optimality-studies.md.
"""
from __future__ import annotations

import math

import numpy as np

from distplan.baselines.random_search import sample_plan
from distplan.baselines.result import BaselineResult, Tracker
from distplan.core.clock import Clock
from distplan.baselines.scoring import Scorer
from distplan.baselines.space import allowed_precisions, build_plan, compact, device_paths, neighbours, repair_precisions
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.workloads.colocate import split_groups

MOVES = ("shift", "move", "swap", "precision", "split", "merge", "path")
MOVE_WEIGHTS = (0.3, 0.2, 0.1, 0.25, 0.06, 0.06, 0.03)


class _Space:
    """Neighbour proposals for one problem (pre-computed predecessors/successors)."""

    def __init__(self, problem: Problem, paths, rng: np.random.Generator) -> None:
        self.problem, self.paths, self.rng = problem, paths, rng
        self.preds, self.succs = neighbours(problem)
        self.D = len(paths[0][1])  # usable devices
        self.groups = bool(problem.graph.colocate)

    def can_move(self, st: list[int], v: int, target: int) -> bool:
        if target > st[v]:
            return all(st[w] >= target for w in self.succs[v])
        return all(st[u] <= target for u in self.preds[v])

    def propose(self, st: list[int], prec: list[str], pi: int):
        """A neighbour (stages, precisions, path index) or None if the drawn move does not apply."""
        rng = self.rng
        K = max(st) + 1
        move = MOVES[int(rng.choice(len(MOVES), p=MOVE_WEIGHTS))]
        st, prec = list(st), list(prec)
        if move == "shift":
            if K < 2:
                return None
            b = int(rng.integers(K - 1))
            if rng.random() < 0.5:  # stage b gives its last movable op to b+1
                ops = sorted((v for v in range(len(st)) if st[v] == b), reverse=True)
                v = next((v for v in ops if self.can_move(st, v, b + 1)), None)
                if v is None:
                    return None
                st[v] = b + 1
            else:  # stage b+1 gives its first movable op to b
                ops = sorted(v for v in range(len(st)) if st[v] == b + 1)
                v = next((v for v in ops if self.can_move(st, v, b)), None)
                if v is None:
                    return None
                st[v] = b
        elif move == "move":
            v = int(rng.integers(len(st)))
            target = st[v] + (1 if rng.random() < 0.5 else -1)
            if target < 0:
                if K >= self.D or sum(1 for s in st if s == st[v]) == 1:
                    return None
                st = [s + 1 for s in st]
                target = 0
            if target >= K and K >= self.D:
                return None
            if not self.can_move(st, v, target):
                return None
            st[v] = target
        elif move == "swap":
            if K < 2:
                return None
            b = int(rng.integers(K - 1))
            a_ops = [v for v in range(len(st)) if st[v] == b]
            b_ops = [v for v in range(len(st)) if st[v] == b + 1]
            v, w = int(rng.choice(a_ops)), int(rng.choice(b_ops))
            st[v], st[w] = b + 1, b
            if any(st[x] > st[y] for x in (v, w) for y in self.succs[x]) or \
                    any(st[x] < st[y] for x in (v, w) for y in self.preds[x]):
                return None
        elif move == "precision":
            path = self.paths[pi][1]
            if rng.random() < 0.5:
                v = int(rng.integers(len(st)))
                opts = [p for p in allowed_precisions(self.problem, path[st[v]], v) if p != prec[v]]
                if not opts:
                    return None
                prec[v] = opts[int(rng.integers(len(opts)))]
            else:
                b = int(rng.integers(K))
                opts = allowed_precisions(self.problem, path[b])
                p = opts[int(rng.integers(len(opts)))]
                prec = list(self.problem.effective_precisions([p if st[v] == b else prec[v] for v in range(len(st))]))
        elif move == "split":
            if K >= self.D:
                return None
            b = int(rng.integers(K))
            ops = [v for v in range(len(st)) if st[v] == b]
            if len(ops) < 2:
                return None
            pivot = ops[int(rng.integers(1, len(ops)))]
            st = [s + 1 if (s > b or (s == b and v >= pivot)) else s for v, s in enumerate(st)]
        elif move == "merge":
            if K < 2:
                return None
            b = int(rng.integers(K - 1))
            st = [s - 1 if s > b else s for s in st]
        else:  # path
            if len(self.paths) < 2:
                return None
            pi = int((pi + 1 + rng.integers(len(self.paths) - 1)) % len(self.paths))
        st = list(compact(st))
        if self.groups and split_groups(self.problem.graph, st):
            return None   # splits a colocate group: not proposed
        prec = list(repair_precisions(self.problem, st, prec, self.paths[pi][1]))
        return st, prec, pi


def _dp_starts(problem: Problem, sensitivity_budget: float | None):
    """The DP partitioner's plans, best estimate first (single-device stages on a path)."""
    from distplan.baselines.dp import partitions, precision_pass
    from distplan.baselines.space import contiguous_stages

    for part in partitions(problem):
        st = contiguous_stages(part.cuts, problem.n_ops)
        prec = tuple(part.precision[int(problem.device_kind[part.path[s]])][v] for v, s in enumerate(st))
        prec = precision_pass(problem, st, prec, part.path, sensitivity_budget)
        if prec is not None:
            yield build_plan(problem, st, prec, part.path)


def search(problem: Problem, budget_s: float, seed: int = 0, scorer: Scorer | None = None,
           sensitivity_budget: float | None = None, max_candidates: int | None = None,
           t_start: float = 0.1, t_end: float = 1e-3, init: str = "random",
           clock: Clock | None = None) -> BaselineResult:
    """Anneal from a random feasible partition (or the DP's best plan) until the budget
    ends; return the best plan."""
    if init not in ("random", "dp"):
        raise DistplanError(f"annealing init {init!r} unknown; use 'random' or 'dp'")
    rng = np.random.default_rng(seed)
    tr = Tracker(problem, "sa", budget_s, scorer, sensitivity_budget, max_candidates, clock)
    paths = device_paths(problem)
    space = _Space(problem, paths, rng)
    cur = None
    starts = iter(_dp_starts(problem, sensitivity_budget) if init == "dp" else ())
    while cur is None and not tr.expired():  # a feasible start
        plan = next(starts, None) or sample_plan(problem, rng, paths)
        score = tr.evaluate(plan)
        if score is not None and score > 0:
            pi = next(i for i, (_, p) in enumerate(paths) if p[:plan.n_stages] == tuple(s.devices[0] for s in plan.stages))
            cur = (list(plan.op_stage), list(plan.op_precision), pi, score)
    while cur is not None and not tr.expired():
        prop = space.propose(cur[0], cur[1], cur[2])
        if prop is None:
            tr.idle()
            continue
        st, prec, pi = prop
        score = tr.evaluate(build_plan(problem, st, prec, paths[pi][1]))
        if score is None or score <= 0:
            continue
        temp = t_start * (t_end / t_start) ** tr.fraction()
        worse = cur[3] / score - 1.0  # relative increase of 1/throughput
        if worse <= 0 or rng.random() < math.exp(-worse / temp):
            cur = (st, prec, pi, score)
    return tr.result()
