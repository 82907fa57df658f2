"""The search space the baselines share with the MILP: device paths, plans built from
an op -> stage assignment along a path, and the precisions each device may run.

Stages follow a device path (``model.paths.device_paths``, the MILP's own path
families): used stage k runs on ``path[k]``. An assignment is *acyclic* when no tensor
flows to an earlier stage; ``compact`` renumbers the used stages 0..K-1 in order, which
keeps it acyclic. Since operators are stored in topological order, every
non-decreasing assignment (a contiguous partition of that order) is acyclic.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.costs.problem import Problem
from distplan.core.plan import Plan, Stage


def device_paths(problem: Problem) -> list[tuple[str, tuple[int, ...]]]:
    """The MILP's named device path families for the problem's topology, without the
    devices that run none of the problem's precisions (they can host no operator)."""
    from distplan.topologies.paths import device_paths as paths

    fams = paths(problem.topology) or [("natural", tuple(range(problem.n_devices)))]
    out, seen = [], set()
    for name, path in fams:
        p = tuple(d for d in path if allowed_precisions(problem, d))
        if p and p not in seen:
            seen.add(p)
            out.append((name, p))
    return out


def allowed_precisions(problem: Problem, device: int, v: int | None = None) -> tuple[str, ...]:
    """The problem's precisions that ``device`` can run (and op ``v`` may use under the
    low-bit policy, when given), highest fidelity first."""
    c = problem.device_kind[device]
    return tuple(p for q, p in enumerate(problem.precisions)
                 if problem.supported[q, c] and (v is None or problem.op_allowed[v, q]))


def fastest_precision(problem: Problem, v: int, device: int) -> str | None:
    """The precision that runs op ``v`` fastest on ``device`` (ties: highest fidelity);
    None when the device runs none that the op may use (an int8-only device and a softmax)."""
    c = problem.device_kind[device]
    best, best_t = None, float("inf")
    for q, p in enumerate(problem.precisions):
        if problem.supported[q, c]:
            t = problem.op_time_s(v, q, c)
            if t < best_t:
                best, best_t = p, t
    return best


def compact(op_stage: Sequence[int]) -> tuple[int, ...]:
    """Renumber the used stages 0..K-1 keeping their order."""
    used = {s: i for i, s in enumerate(sorted(set(op_stage)))}
    return tuple(used[s] for s in op_stage)


def is_acyclic(problem: Problem, op_stage: Sequence[int]) -> bool:
    return all(op_stage[u] <= op_stage[v] for u, v in problem.edges)


def contiguous_stages(cuts: Sequence[int], n_ops: int) -> tuple[int, ...]:
    """Stage of every op when stage k holds ops ``cuts[k-1] .. cuts[k]-1`` (cuts sorted, in 1..n-1)."""
    out = np.zeros(n_ops, dtype=np.int64)
    for c in cuts:
        out[c:] += 1
    return tuple(int(s) for s in out)


def build_plan(problem: Problem, op_stage: Sequence[int], op_precision: Sequence[str],
               path: Sequence[int], microbatches: int | None = None) -> Plan:
    """Plan with the used stages compacted onto ``path[0..K-1]``, one device each."""
    st = compact(op_stage)
    k = max(st) + 1
    return Plan(op_stage=st, op_precision=tuple(op_precision),
                stages=tuple(Stage((int(path[i]),)) for i in range(k)),
                microbatches=microbatches or problem.microbatches, schedule=problem.schedule)


def repair_precisions(problem: Problem, op_stage: Sequence[int], op_precision: Sequence[str],
                      path: Sequence[int]) -> tuple[str, ...]:
    """Replace every precision a stage's device cannot run, or the op may not use, by the
    fastest one allowed."""
    st = compact(op_stage)
    out = list(op_precision)
    for v, p in enumerate(out):
        d = int(path[st[v]])
        if p not in allowed_precisions(problem, d, v):
            out[v] = fastest_precision(problem, v, d) or p   # none: the checker rejects the plan
    return tuple(out)


def neighbours(problem: Problem) -> tuple[list[list[int]], list[list[int]]]:
    """Predecessor and successor lists of every op (from the problem's edges)."""
    preds: list[list[int]] = [[] for _ in range(problem.n_ops)]
    succs: list[list[int]] = [[] for _ in range(problem.n_ops)]
    for u, v in problem.edges:
        preds[int(v)].append(int(u))
        succs[int(u)].append(int(v))
    return preds, succs
