"""Phase 1 of a solve: per replication factor r, a lane layout, heuristic plans and a
proven period bound, all without the MILP.

Each layout is judged on its single-lane surrogate (model.lanes): the topological-order
DP (model.heuristic) and, for throughput, the exact downset DP (model.downsets) give
plans, lifted and re-scored exactly; the downset relaxation gives the bound. Layouts with
equal surrogates (``surrogate_key``) are evaluated once; every other layout stays a
candidate, so the reported bound covers every layout explored. Plans are filtered by
model.admission under user constraints. When the clock expires, unevaluated layouts
keep only ``floor_bound`` and the clock's status, never optimal unless it settles them.

Details: docs/concepts/milp.md, "Phases 1 and 4 in detail".
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distplan.costs.check import plan_violations
from distplan.costs.collectives import boundary_links
from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.admission import PlanGate
from distplan.model.downsets import enumerate_downsets, fixed_precision_plan, relaxation_bound
from distplan.model.extract import make_plan
from distplan.model.heuristic import heuristic_plan, precision_candidates, score
from distplan.model.inputs import Lanes, layouts_to_explore
from distplan.model.lanes import lane_problem, lift_plan
from distplan.model.options import SolveOptions
from distplan.model.progress import Clock, Log, fmt


@dataclass(frozen=True)
class Candidate:
    """One (replication factor, lane layout) and what is known of it without the MILP:
    ``bound_s``, a proven period bound on the layout (via its surrogate; inf: no plan
    fits), and ``scored``, the plans found outside the MILP (on all lanes) with their
    exact scores (model.heuristic.score), in the order found."""

    r: int
    name: str
    lanes: Lanes
    bound_s: float
    scored: tuple[tuple[Plan, float], ...] = ()

    @property
    def best(self) -> tuple[Plan, float] | None:
        """The first best-scored plan."""
        out = None
        for x in self.scored:
            if out is None or x[1] < out[1]:
                out = x
        return out

    @property
    def score(self) -> float:
        b = self.best
        return b[1] if b is not None else math.inf

    @property
    def plans(self) -> tuple[Plan, ...]:
        return tuple(p for p, _ in self.scored)


@dataclass(frozen=True, eq=False)
class FastPhase:
    """Every layout explored (one per surrogate), in the order of the r's, and the
    downsets of the graph (model.downsets.enumerate_downsets; None: too many) the later
    phases reuse."""

    candidates: tuple[Candidate, ...]
    downsets: np.ndarray | None
    unevaluated: tuple[tuple[int, str], ...] = ()   # (r, name) of the layouts the clock left out


def with_plans(problem: Problem, options: SolveOptions, c: Candidate, singles: list[Plan],
               admits: Callable[[Lanes, Plan], bool] | None = None) -> Candidate:
    """``c`` with single-lane surrogate plans lifted onto its lanes, checked, scored
    exactly and appended (only those ``admits`` accepts, when given)."""
    added = []
    for x in singles:
        plan = lift_plan(x, c.lanes) if c.r > 1 else x
        if c.r > 1 and plan_violations(problem, plan):
            continue
        if admits is not None and not admits(c.lanes, plan):
            continue
        added.append((plan, score(problem, plan, options.objective, options.sensitivity_weight)))
    return dataclasses.replace(c, scored=c.scored + tuple(added))


def downset_plans(problem: Problem, path: tuple[int, ...], mat: np.ndarray, budget: float | None,
                  weight: float) -> tuple[Plan, float] | None:
    """Exact best stage assignment for each candidate precision vector (downset DP)."""
    best = None
    for prec in precision_candidates(problem, path, budget):
        if budget is not None and math.fsum(problem.sensitivity[v, q] for v, q in enumerate(prec)) > budget:
            continue
        stage = fixed_precision_plan(problem, path, mat, prec)
        if stage is None:
            continue
        plan = make_plan(problem, path, stage, prec)
        if plan_violations(problem, plan):
            continue
        s = score(problem, plan, "throughput", weight)
        if best is None or s < best[1]:
            best = (plan, s)
    return best


def surrogate_key(problem: Problem, r: int, lanes: Lanes,
                  expired: Callable[[], bool] | None = None) -> tuple | None:
    """What a layout's plans and bound depend on, up to a relabelling of devices: r and,
    lane by lane, the device kinds and memories and per boundary the route's links'
    bandwidths, plus how often the boundaries reuse a link. Layouts with equal keys are
    evaluated (and solved) once. Every lane counts: on a mixed fleet two layouts whose
    lane 0 agree can differ in their other lanes, and so in their exact MILP.
    None once ``expired()`` (checked between routes: a 4,096-device chain's round-robin
    layouts route thousands of boundaries of up to 2,048 hops, minutes in all)."""
    out: list = [r]
    used: list[int] = []
    for p in lanes:
        routes = []
        for a, b in zip(p, p[1:]):
            if expired is not None and expired():
                return None
            routes.append(boundary_links(problem, a, b))
        used += [l for x in routes for l in x]
        out.append((tuple(int(problem.device_kind[d]) for d in p), tuple(float(problem.device_mem_bytes[d]) for d in p),
                    tuple(tuple(sorted(float(problem.link_bw_bytes_per_s[l]) for l in x)) for x in routes)))
        if problem.exposed:   # direct sends between any two stages, and their latencies (costs.exposed)
            out.append(tuple(tuple(sorted((float(problem.link_bw_bytes_per_s[l]), float(problem.link_latency_s[l]))
                                          for l in boundary_links(problem, a, b)))
                             for i, a in enumerate(p) for b in p[i + 1:]))
    out.append(len(used) - len(set(used)))
    return tuple(out)


#: seconds per pair of downsets in one downset DP (model.downsets.partition_dp), measured
#: on this project's 2-core machine (2,160 downsets: 0.4-0.75 s a call), for graphs of up
#: to ``DP_OPS`` ops; beyond, its (downsets x ops) matrices grow with the ops too (a
#: 2,000-op chain, 2,001 downsets: 6.7 s a call, where the pairs alone said 0.64 s)
DP_S_PER_PAIR = 1.6e-7
DP_OPS = 200


def downset_dp_s(problem: Problem, mat: np.ndarray, path: tuple[int, ...], budget: float | None) -> float:
    """A forecast of the downset DPs of one layout: the relaxation bound and one DP per
    candidate precision vector."""
    calls = 1 + len(precision_candidates(problem, path, budget))
    return calls * DP_S_PER_PAIR * float(mat.shape[0]) ** 2 * max(1.0, mat.shape[1] / DP_OPS)


#: seconds per op**3 of the first heuristic plan of an inference stream (its DP reads the
#: stream memory of every contiguous run, costs.memory.contiguous_stream_bytes, cubic in
#: the ops), measured on this project's 2-core machine: chains of 1,000 ops 1.8 s, 2,000
#: ops 23 s (memory-bound there; the forecast says 14 s)
STREAM_PLAN_S_PER_OP3 = 1.8e-9


def first_plan_s(problem: Problem) -> float:
    """A forecast of the fast phase's first plan (its first layout's heuristic), the
    part that grows fastest with the graph; 0 where it is not the bottleneck."""
    return STREAM_PLAN_S_PER_OP3 * float(problem.n_ops) ** 3 if problem.schedule == "stream" else 0.0


def max_dp_ops(seconds: float) -> int:
    """The most ops for which enumerating the downsets (up to 3,000 of them,
    ``enumerate_downsets``: 1.2-2 s on a 2,000-op chain) and one DP (``downset_dp_s`` at
    as many downsets as ops) fit ``seconds``."""
    n = DP_OPS
    while n < 4_000 and 2 * DP_S_PER_PAIR * (2 * n) ** 2 * (2 * n / DP_OPS) <= seconds:
        n *= 2
    return n


def max_ops_for(seconds: float) -> int:
    """The most ops whose first plan's forecast fits ``seconds`` (``first_plan_s``, stream)."""
    return int((max(seconds, 0.0) / STREAM_PLAN_S_PER_OP3) ** (1 / 3))


def evaluate_layout(problem: Problem, options: SolveOptions, r: int, name: str, lanes: Lanes,
                    mat: np.ndarray | None, time_left_s: float = math.inf,
                    expired: Callable[[], bool] | None = None, cut: list[str] | None = None) -> Candidate:
    """Heuristic plans and the proven bound of one layout, via its single-lane surrogate.
    The downset DPs (exact plans, relaxation bound) run only when their forecast fits
    ``time_left_s``; else the layout keeps the heuristic's plans and the floor bound.
    ``expired``/``cut``: the heuristic's clock and what it left undone
    (model.heuristic.heuristic_plan)."""
    budget, weight, obj = options.sensitivity_budget, options.sensitivity_weight, options.objective
    sp = lane_problem(problem, r)
    p = lanes[0]
    singles = []
    h = heuristic_plan(sp, p, obj, budget, weight, expired=expired, cut=cut)
    if h is not None:
        singles.append(h[0])
    use_dp = mat is not None and obj == "throughput" and downset_dp_s(sp, mat, p, budget) <= time_left_s
    if use_dp:
        d = downset_plans(sp, p, mat, budget, weight)
        if d is not None:
            singles.append(d[0])
    lb = relaxation_bound(sp, p, mat) if use_dp else (floor_bound(problem) if mat is not None
                                                      and obj == "throughput" else 0.0)
    return with_plans(problem, options, Candidate(r, name, lanes, lb), singles)


def admitted(problem: Problem, options: SolveOptions, gate: PlanGate, c: Candidate) -> Candidate:
    """``c`` with only the plans ``gate`` admits (all of them without user constraints)."""
    if not gate.active:
        return c
    return dataclasses.replace(c, scored=tuple(x for x in c.scored if gate.admits(c.lanes, x[0])))


def floor_bound(problem: Problem) -> float:
    """A bound on every plan's objective, on any layout (period, latency or weighted):
    every op at its fastest, the work spread evenly over all devices."""
    return problem.period_lower_bound_s()


#: once the clock has expired, the remaining layouts' surrogate keys (which drop duplicates
#: of layouts already seen) get this long in all, at most this share of the limit; past it
#: the rest are left unevaluated, in their order, without routing their boundaries
KEY_GRACE_S = 0.5
KEY_GRACE_SHARE = 0.02


def fast_phase(problem: Problem, options: SolveOptions, gate: PlanGate, clock: Clock, say: Log) -> FastPhase:
    """Phase 1 (module docstring)."""
    D = problem.n_devices
    layouts = layouts_to_explore(problem, options)
    # the downsets serve the DPs only; a graph too large for them within the limit skips both
    mat = enumerate_downsets(problem) if problem.n_ops <= max_dp_ops(clock.left_s()) else None
    found: list[Candidate] = []
    left: list[Candidate] = []
    keys: set[tuple] = set()
    grace_end: float | None = None
    for r, name, lanes in layouts:
        K = min(options.n_stages or D // r, D // r)
        lanes = tuple(tuple(lane[:K]) for lane in lanes)
        late = bool(found) and clock.expired()
        if late and grace_end is None:   # keys past the limit: a short grace, then none
            grace_end = time.perf_counter() + min(KEY_GRACE_S, KEY_GRACE_SHARE * clock.limit_s)
        key = surrogate_key(problem, r, lanes, expired=(lambda: time.perf_counter() > grace_end) if late
                            else clock.expired if found else None)
        if key is None:   # the clock expired while routing its boundaries: the rest stay in order
            left.append(Candidate(r, name, lanes, floor_bound(problem)))
            continue
        if key in keys:
            continue   # same surrogate as an evaluated layout: same heuristics and bound
        keys.add(key)
        if late:
            left.append(Candidate(r, name, lanes, floor_bound(problem)))
            continue
        cut: list[str] = []
        c = admitted(problem, options, gate, evaluate_layout(problem, options, r, name, lanes, mat,
                                                             time_left_s=clock.left_s(),
                                                             expired=clock.expired, cut=cut))
        for line in cut:
            clock.cut(f"fast phase: layout {name} (r={r}): {line}", say)
        found.append(c)
        if c.scored:
            clock.stop.arm()   # a plan exists: a Ctrl-C from now on keeps the best
        say(f"path {name} (r={r}, {K} stages): heuristic objective {fmt(c.score)}, relaxation bound {fmt(c.bound_s)}")
    if left:
        clock.cut(f"fast phase: {len(left)} of {len(found) + len(left)} layouts not evaluated "
                  f"({', '.join(c.name for c in left[:3])}{', ...' if len(left) > 3 else ''}); their bound is "
                  f"the floor {fmt(floor_bound(problem))} every plan obeys", say)
    return FastPhase(tuple(found + left), mat, tuple((c.r, c.name) for c in left))
