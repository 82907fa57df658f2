"""The mixed-fleet training space: pipelines of data-parallel stages whose replicas may be
of different device kinds, each kind with its own precision per operator and each
replica with its own share of the microbatches (replica groups, ``core.plan``).

Declared space (training, 1F1B, tensor parallelism 1, no recomputation, no ZeRO): the
kinds in every order, every pipeline depth dividing the device count, a precision policy
per kind ("wide", "fast", "fast50"), balanced shares per stage, the least-bottleneck layer
split and its neighbours (every split on small graphs), ring or hierarchical overlapped
reduction; small instances are enumerated whole. Every point is scored by the analytic
iteration (``costs.iteration.estimate_iteration``) and the simulator judges the best.
The reported bound is the fleet's ideal (seconds: the step's work at each kind's fastest
precisions spread over all devices by speed); it holds over every plan of every space,
so the status is "searched", never "optimal", unless the best plan reaches it. The space in full: docs/guides/mixed-fleets.md ("The declared space").
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from distplan.core.clock import Clock
from distplan.core.gap import gap
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage, balanced_shares, round_robin_shares
from distplan.costs.evaluate import plan_memory_bytes, plan_sensitivity
from distplan.costs.iteration import estimate_iteration, replica_microbatch_s
from distplan.costs.problem import Problem, low_bit
from distplan.model.cluster import _units
from distplan.model.fleet_precision import Group, choose_precisions

PRECISION_POLICIES = ("wide", "fast50", "fast")
#: "fastX": the X % of the ops that "fast" would lower with the most time saved per unit
#: of sensitivity added, lowered; the rest wide (QSync's trade: the cheapest ops first)
PARTIAL = {"fast50": 0.5}
#: enumerate splits, per-op precisions and shares exhaustively up to this many each
EXACT_LIMIT = 64
#: layer counts up to which every split is enumerated; above, the min-max split and the
#: splits one cut away from it (each estimate of a mixed fleet replays the pipeline)
EXACT_UNITS = 8
#: gradient reductions tried: overlapped with the backward (Megatron's bucketed overlap;
#: reducing after the backward only adds exposed time to the same transfers)
REDUCTIONS = (("ring", True), ("hierarchical", True))


@dataclass(frozen=True)
class FleetPoint:
    """One outer point: device order, depth and each kind's precision policy."""

    order: tuple[int, ...]
    pp: int
    policy: tuple[tuple[str, str], ...]   # (kind name, policy)

    def label(self, problem: Problem) -> str:
        kinds = [problem.topology.kind_of(d).name for d in self.order]
        first = ">".join(dict.fromkeys(kinds))
        pol = ", ".join(f"{k} {p}" for k, p in self.policy)
        return f"pp {self.pp} x dp {len(self.order) // self.pp} ({first}; {pol})"


@dataclass(frozen=True)
class FleetPlan:
    point: FleetPoint
    plan: Plan
    iteration_s: float
    sensitivity: float = 0.0


@dataclass
class FleetResult:
    plans: list[FleetPlan]
    bound_s: float
    gap: float
    points: int
    solved: int
    infeasible: int
    seconds: float
    cut_short: list[str] = field(default_factory=list)


def _runs(problem: Problem, v: int, c: int) -> list[int]:
    """The precisions kind ``c`` runs and op ``v`` may use, highest fidelity first."""
    return [q for q in range(len(problem.precisions)) if problem.supported[q, c] and problem.op_allowed[v, q]]


def idle_kind_error(problem: Problem) -> str | None:
    """The error for a device kind that cannot run some op at any allowed precision (the
    fleet space gives every device work, whatever the microbatch size), or None."""
    for c in sorted({int(c) for c in problem.device_kind.tolist()}):
        if any(not _runs(problem, v, c) for v in range(problem.n_ops)):
            name = problem.kind_names[c]
            runs = ", ".join(problem.topology.kinds[name].peak_flops_per_s)
            return (f"device kind {name!r} runs none of the allowed precisions ({', '.join(problem.precisions)}) "
                    f"for some ops, and the fleet space gives every device work; allow one it runs ({runs}) "
                    "with --precisions, or use --space pipeline, which may leave it idle")
    return None


def _slowest_replica_s(t: list[float], microbatches: int) -> float:
    """A stage's slowest replica under balanced shares: its share x seconds per microbatch
    (``t``: each replica's seconds per microbatch)."""
    if min(t) == max(t):   # replicas alike: balanced shares are round-robin's, the largest ceil(M / r)
        return -(-microbatches // len(t)) * t[0]
    n = balanced_shares(t, microbatches) if min(t) > 0 else [microbatches] * len(t)
    return max(a * b for a, b in zip(n, t))


def kind_precisions(problem: Problem, c: int, policy: str) -> list[int] | None:
    """Per op, the precision index kind ``c`` computes it at under ``policy`` (None when
    the kind cannot run some op at any allowed precision)."""
    out = []
    for v in range(problem.n_ops):
        ok = _runs(problem, v, c)
        if not ok:
            return None
        if policy == "wide":
            out.append(ok[0])
        else:
            out.append(min(ok, key=lambda q: (problem.op_time_s(v, q, c), q)))
    if policy in PARTIAL:
        wide = kind_precisions(problem, c, "wide")
        moved = [v for v in range(problem.n_ops) if out[v] != wide[v]]

        def ratio(v: int) -> float:
            saved = problem.op_time_s(v, wide[v], c) - problem.op_time_s(v, out[v], c)
            added = problem.sensitivity[v, out[v]] - problem.sensitivity[v, wide[v]]
            return saved / added if added > 0 else math.inf

        keep = set(sorted(moved, key=ratio, reverse=True)[:int(round(PARTIAL[policy] * len(moved)))])
        out = [out[v] if v in keep else wide[v] for v in range(problem.n_ops)]
    return out


def fleet_ideal_s(problem: Problem) -> float:
    """The step's work at each kind's fastest precisions spread over every device by
    speed (no bubble, no communication, no optimizer): a bound on every plan."""
    speed = 0.0
    for d in range(problem.n_devices):
        c = int(problem.device_kind[d])
        qs = kind_precisions(problem, c, "fast")
        if qs is None:
            continue
        work = math.fsum(problem.op_time_s(v, q, c) for v, q in enumerate(qs))
        speed += 1.0 / work if work > 0 else 0.0
    return problem.microbatches / speed if speed > 0 else math.inf


def _orders(problem: Problem) -> list[tuple[int, ...]]:
    by_kind: dict[int, list[int]] = {}
    for d in range(problem.n_devices):
        by_kind.setdefault(int(problem.device_kind[d]), []).append(d)
    kinds = sorted(by_kind)
    return [tuple(d for c in perm for d in by_kind[c]) for perm in itertools.permutations(kinds)]


def _bottleneck_s(problem: Problem, blocks: list[list[int]], unit_s: dict[int, np.ndarray],
                  split: list[int]) -> float:
    """The split's slowest stage: its slowest replica's share x seconds per microbatch."""
    worst = 0.0
    for k, devs in enumerate(blocks):
        us = [u for u, s in enumerate(split) if s == k]
        t = [float(unit_s[int(problem.device_kind[d])][us].sum()) for d in devs]
        worst = max(worst, _slowest_replica_s(t, problem.microbatches))
    return worst


#: neighbours of the min-max split are estimated when their bottleneck is within this
NEIGHBOUR_SLACK = 0.03


def _split(problem: Problem, units: list[list[int]], blocks: list[list[int]],
           unit_s: dict[int, np.ndarray]) -> list[int] | None:
    """Stage of each unit: the split with the least bottleneck (DP over the units)."""
    U, K, M = len(units), len(blocks), problem.microbatches
    if K > U:
        return None
    pre = {c: np.concatenate([[0.0], np.cumsum(unit_s[c])]) for c in unit_s}

    def stage_s(k: int, i: int, j: int) -> float:
        t = [pre[int(problem.device_kind[d])][j] - pre[int(problem.device_kind[d])][i] for d in blocks[k]]
        return _slowest_replica_s(t, M)

    INF = math.inf
    best = [[INF] * (U + 1) for _ in range(K + 1)]
    arg = [[0] * (U + 1) for _ in range(K + 1)]
    best[0][0] = 0.0
    for k in range(1, K + 1):
        for j in range(k, U - (K - k) + 1):
            for i in range(k - 1, j):
                if best[k - 1][i] == INF:
                    continue
                x = max(best[k - 1][i], stage_s(k - 1, i, j))
                if x < best[k][j]:
                    best[k][j], arg[k][j] = x, i
    if best[K][U] == INF:
        return None
    stage_of_unit = [0] * U
    j = U
    for k in range(K, 0, -1):
        i = arg[k][j]
        for u in range(i, j):
            stage_of_unit[u] = k - 1
        j = i
    return stage_of_unit


def _all_splits(U: int, K: int) -> list[list[int]] | None:
    """Every split of U units into K non-empty contiguous stages (None: more than
    EXACT_LIMIT, or a graph of more than EXACT_UNITS layers)."""
    if K > U or U > EXACT_UNITS or math.comb(U - 1, K - 1) > EXACT_LIMIT:
        return None
    out = []
    for cuts in itertools.combinations(range(1, U), K - 1):
        b = (0, *cuts, U)
        out.append([k for k in range(K) for _ in range(b[k], b[k + 1])])
    return out


def _neighbours(split: list[int]) -> list[list[int]]:
    """The splits with one stage boundary moved by one unit (stages stay non-empty)."""
    out = []
    bounds = [i for i in range(1, len(split)) if split[i] != split[i - 1]]
    for b in bounds:
        for nb in (b - 1, b + 1):
            s = list(split)
            if nb < b:
                s[nb] = split[b]          # the unit before the boundary joins the next stage
            else:
                s[b] = split[b - 1]       # the first unit after it joins the previous stage
            if len(set(s)) == len(set(split)) and s != split:
                out.append(s)
    return out


def _compositions(total: int, parts: int) -> list[tuple[int, ...]] | None:
    """Every way to give ``parts`` replicas >= 1 of ``total`` (None: more than EXACT_LIMIT)."""
    if parts < 1 or total < parts or math.comb(total - 1, parts - 1) > EXACT_LIMIT:
        return None
    return [tuple(b - a for a, b in zip((0, *c), (*c, total)))
            for c in itertools.combinations(range(1, total), parts - 1)]


def _per_op_assignments(problem: Problem, c: int) -> list[list[int]]:
    """Every per-op precision assignment of kind ``c`` (empty: more than EXACT_LIMIT)."""
    choices = [_runs(problem, v, c) for v in range(problem.n_ops)]
    if any(not x for x in choices) or math.prod(len(x) for x in choices) > EXACT_LIMIT:
        return []
    return [list(x) for x in itertools.product(*choices)]


def _with_shares(problem: Problem, plan: Plan) -> list[Plan]:
    """``plan`` with balanced shares on every data-parallel stage, and on small instances
    with every combination of share vectors too."""
    balanced, every = [], []
    for k, st in enumerate(plan.stages):
        if st.replicas == 1:
            balanced.append(st)
            every.append([st])
            continue
        t = [replica_microbatch_s(problem, plan, k, i) for i in range(st.replicas)]
        balanced.append(dataclasses.replace(st, shares=balanced_shares(t, problem.microbatches)))
        comp = _compositions(problem.microbatches, st.replicas)
        every.append([dataclasses.replace(st, shares=s) for s in comp] if comp else [balanced[-1]])
    out = [dataclasses.replace(plan, stages=tuple(balanced))]
    if math.prod(len(e) for e in every) <= EXACT_LIMIT:
        out += [dataclasses.replace(plan, stages=tuple(c)) for c in itertools.product(*every)]
    return out


def _unit_seconds(problem: Problem, units: list[list[int]], qs: dict[int, list[int]]) -> dict[int, np.ndarray]:
    """Each kind's seconds per microbatch of every layer at its per-op precisions ``qs``."""
    return {c: np.array([math.fsum(problem.op_time_s(v, q[v], c) for v in u) for u in units])
            for c, q in qs.items()}


def _op_shares(problem: Problem, units: list[list[int]], blocks: list[list[int]], split: list[int],
               qs: dict[int, list[int]]) -> list[tuple[int, ...]]:
    """Per stage, the replicas' shares balanced on their ops' seconds at ``qs``."""
    out = []
    for k, devs in enumerate(blocks):
        ops = [v for u, s in zip(units, split) if s == k for v in u]
        t = [math.fsum(problem.op_time_s(v, qs[int(problem.device_kind[d])][v], int(problem.device_kind[d]))
                       for v in ops) for d in devs]
        out.append(balanced_shares(t, problem.microbatches) if min(t) > 0 else round_robin_shares(len(devs), problem.microbatches))
    return out


def _groups(problem: Problem, units: list[list[int]], blocks: list[list[int]], split: list[int],
            qs: dict[int, list[int]]) -> list[Group]:
    """The replica groups (``model.fleet_precision``) of a split: per stage and kind, the
    largest share and the part of the step's microbatches, shares balanced on ``qs``."""
    M, out = problem.microbatches, []
    for k, (devs, n) in enumerate(zip(blocks, _op_shares(problem, units, blocks, split, qs))):
        ops = tuple(v for u, s in zip(units, split) if s == k for v in u)
        kinds = [int(problem.device_kind[d]) for d in devs]
        for c in dict.fromkeys(kinds):
            mine = [a for a, b in zip(n, kinds) if b == c]
            out.append(Group(k, c, ops, max(mine), math.fsum(mine) / M))
    return out


#: rounds of (split, shares) -> per-op precisions -> split, from each start
ROUNDS = 4


def per_op_choice(problem: Problem, units: list[list[int]], blocks: list[list[int]],
                  starts: list[dict[int, list[int]]], budget: float | None
                  ) -> tuple[dict[int, list[int]], list[int]] | None:
    """Per kind, per op, a precision for this device order and depth, and its split: from
    each start, the least-bottleneck split and balanced shares, then the exact per-op
    choice for them (``fleet_precision.choose_precisions``, within ``budget``), then the
    split again, until the split and shares repeat; the best by the MILP's rule."""
    best, seen = None, set()
    for qs in starts:
        for _ in range(ROUNDS):
            split = _split(problem, units, blocks, _unit_seconds(problem, units, qs))
            if split is None:
                break
            groups = _groups(problem, units, blocks, split, qs)
            key = (tuple(split), tuple((g.stage, g.kind, g.share) for g in groups))
            if key in seen:
                break
            seen.add(key)
            got = choose_precisions(problem, groups, problem.microbatches, budget)
            if got is None:
                break
            qs = {c: list(q) for c, q in got.qs.items()}
            if best is None or (got.objective_s, got.sensitivity) < best[0]:
                best = ((got.objective_s, got.sensitivity), qs, split)
    return None if best is None else (best[1], best[2])


def _per_op_label(problem: Problem, c: int, qs: list[int], policies: dict[str, list[int] | None]) -> str:
    """A kind's precision choice in a point's label: the policy it equals, or how many of
    the ops that have a faster precision it lowers."""
    for p, q in policies.items():
        if q is not None and list(q) == list(qs):
            return p
    wide = policies["wide"]
    low = sorted({problem.precisions[q] for q, w in zip(qs, wide) if q != w})
    n = sum(q != w for q, w in zip(qs, wide))
    m = sum(f != w for f, w in zip(policies["fast"], wide))
    return f"per-op {n}/{m} {'/'.join(low) or 'lowered'}"


def _plan(problem: Problem, point: FleetPoint, units: list[list[int]], split: list[int],
          qs: dict[int, list[int]], allreduce: str, overlap: bool) -> Plan:
    D = len(point.order)
    size = D // point.pp
    op_stage = [0] * problem.n_ops
    for u, k in zip(units, split):
        for v in u:
            op_stage[v] = k
    first_kind = int(problem.device_kind[point.order[0]])
    base = [problem.precisions[q] for q in qs[first_kind]]
    stages = []
    for k in range(point.pp):
        devs = point.order[k * size:(k + 1) * size]
        ops = [v for v in range(problem.n_ops) if op_stage[v] == k]
        over = []
        for d in devs:
            c = int(problem.device_kind[d])
            over.append({v: problem.precisions[qs[c][v]] for v in ops if problem.precisions[qs[c][v]] != base[v]})
        stages.append(Stage(tuple(devs), replica_precision=tuple(over) if any(over) else None))
    return Plan(tuple(op_stage), tuple(base), tuple(stages), problem.microbatches, "1f1b",
                dp_allreduce=allreduce, overlap_grad_reduce=overlap)


def _plan_key(plan: Plan) -> tuple:
    """What a plan runs: the split, each replica's devices, share and precision of each op
    (two spellings of one plan, base precisions or overrides, are one key)."""
    M = plan.microbatches
    runs = tuple(tuple(plan.precision_of(v, i) for i in range(plan.stages[k].replicas))
                 for v, k in enumerate(plan.op_stage))
    stages = tuple((st.devices, st.replica_counts(M)) for st in plan.stages)
    return plan.op_stage, runs, stages, plan.dp_allreduce, plan.overlap_grad_reduce


def plan_fleet(problem: Problem, top_k: int = 5, progress: Callable[[str], None] | None = None,
               deadline: float | None = None, stop=None, sensitivity_budget: float | None = None,
               clock: Clock | None = None, per_op: bool = True) -> FleetResult:
    """The best plans of the declared space (module docstring) under the analytic
    iteration; ``clock`` (core.clock: its limit and Ctrl-C) cuts the search short
    (without one: ``deadline``, a perf_counter instant, and ``stop``); ``per_op`` False
    leaves out the per-op precision MILP's points (the three policies alone)."""
    if not problem.training:
        raise DistplanError("the fleet space plans training; inference on a mixed fleet uses the pipeline space")
    t0 = time.perf_counter()
    if clock is None:
        clock = Clock.until(deadline if deadline is not None else math.inf, stop)
    stop = clock.stop
    say = progress or (lambda _m: None)
    units = _units(problem)
    kinds = sorted({int(c) for c in problem.device_kind.tolist()})
    names = {c: problem.kind_names[c] for c in kinds}
    per_kind = {c: {p: kind_precisions(problem, c, p) for p in PRECISION_POLICIES} for c in kinds}
    idle = idle_kind_error(problem)
    if idle:
        raise DistplanError(idle)
    combos, seen = [], set()
    for choice in itertools.product(PRECISION_POLICIES, repeat=len(kinds)):
        qs = {c: per_kind[c][p] for c, p in zip(kinds, choice)}
        if any(q is None for q in qs.values()):
            continue
        key = tuple(tuple(qs[c]) for c in kinds)
        if key in seen:
            continue   # "fast" that changes nothing on a kind (a V100 runs only fp16): same point
        seen.add(key)
        combos.append((tuple((names[c], p) for c, p in zip(kinds, choice)), qs))
    exact = {c: _per_op_assignments(problem, c) for c in kinds}
    if all(exact.values()):   # small: every per-op assignment of every kind
        for assign in itertools.product(*(exact[c] for c in kinds)):
            qs = dict(zip(kinds, assign))
            key = tuple(tuple(qs[c]) for c in kinds)
            if key not in seen:
                seen.add(key)
                combos.append((tuple((names[c], "ops " + ",".join(problem.precisions[q] for q in qs[c]))
                                     for c in kinds), qs))
    orders = _orders(problem)
    D = problem.n_devices
    depths = [pp for pp in range(1, D + 1) if D % pp == 0 and pp <= len(units)]
    # each kind's seconds per microbatch of every layer: per precision choice, not per point
    layer_s = [_unit_seconds(problem, units, qs) for _, qs in combos]
    starts = [qs for (pol, qs) in combos if all(p in ("wide", "fast") for _, p in pol)]
    # per (order, depth): the policies' points, then the per-op MILP's (None: chosen when visited)
    points = [x for o in orders for pp in depths
              for x in [(FleetPoint(o, pp, pol), qs, us, None) for (pol, qs), us in zip(combos, layer_s)]
              + [(FleetPoint(o, pp, ()), None, None, None)] * per_op]
    say(f"fleet space: {len(points)} points ({len(orders)} device orders x depths {depths} x "
        f"{len(combos)} precision choices per kind + the per-op precision MILP's) x {len(REDUCTIONS)} "
        f"gradient reductions, {len(units)} layers")
    found: list[FleetPlan] = []
    fits: dict[tuple, bool] = {}   # plan key -> within memory and budget
    solved = infeasible = same = 0
    cut: list[str] = []
    cap = np.asarray(problem.device_mem_bytes)
    for i, (pt, qs, unit_s, forced) in enumerate(points):
        stopped = stop.requested
        if clock.expired():
            cut.append(f"fleet space: {len(points) - i} of {len(points)} points not visited "
                       f"({'interrupted' if stopped else 'time'})")
            break
        if found:
            stop.arm()   # a plan exists: a first Ctrl-C/SIGTERM now keeps the best so far
        size = D // pt.pp
        blocks = [list(pt.order[k * size:(k + 1) * size]) for k in range(pt.pp)]
        if qs is None:   # the per-op precision MILP's point
            got = per_op_choice(problem, units, blocks, starts, sensitivity_budget)
            key = None if got is None else tuple(tuple(got[0][c]) for c in kinds)
            if got is None or key in seen:
                same += 1
                continue   # no choice within the budget, or one of the policies' (visited already)
            qs, forced = got
            pt = FleetPoint(pt.order, pt.pp, tuple((names[c], _per_op_label(problem, c, qs[c], per_kind[c]))
                                                   for c in kinds))
            unit_s = _unit_seconds(problem, units, qs)
        splits = _all_splits(len(units), pt.pp)
        if splits is None:
            one = _split(problem, units, blocks, unit_s)
            splits = []
            if one is not None and forced is not None:   # the MILP's: its own split and this one
                splits = [one]
            elif one is not None:
                lim = _bottleneck_s(problem, blocks, unit_s, one) * (1 + NEIGHBOUR_SLACK)
                splits = [one] + [s for s in _neighbours(one) if _bottleneck_s(problem, blocks, unit_s, s) <= lim]
        if forced is not None and forced not in splits:
            splits.append(forced)   # the split the MILP chose for (its sensitivity is the budget's)
        solved += 1
        fits_any = False
        for split in splits:
            for allreduce, overlap in (REDUCTIONS if size > 1 else REDUCTIONS[:1]):   # dp 1: no reduction
                plans = _with_shares(problem, _plan(problem, pt, units, split, qs, allreduce, overlap))
                if split == forced and pt.pp < D:   # and with the shares the MILP weighed sensitivity by
                    ns = _op_shares(problem, units, blocks, split, qs)
                    plans.append(dataclasses.replace(plans[0], stages=tuple(
                        dataclasses.replace(st, shares=n if st.replicas > 1 else None)
                        for st, n in zip(plans[0].stages, ns))))
                for plan in plans:
                    key = _plan_key(plan)
                    if key not in fits:   # a plan met before (another spelling, another point) is judged once
                        sens = plan_sensitivity(problem, plan)
                        fits[key] = (bool((plan_memory_bytes(problem, plan) <= cap * (1 + 1e-9)).all())
                                     and (sensitivity_budget is None or sens <= sensitivity_budget * (1 + 1e-9)))
                        if fits[key]:
                            found.append(FleetPlan(pt, plan, estimate_iteration(problem, plan).iteration_s, sens))
                    fits_any |= fits[key]
        infeasible += not fits_any
    if not found:
        raise DistplanError("no plan of the fleet space fits the devices' memory"
                            + (" within the sensitivity budget" if sensitivity_budget is not None else ""))
    found.sort(key=lambda f: f.iteration_s)
    bound = min(fleet_ideal_s(problem), found[0].iteration_s)
    gap_ = gap(found[0].iteration_s, bound)
    say(f"fleet space: {solved} visited ({infeasible} infeasible by memory or budget); best "
        f"{found[0].iteration_s:.6g} s ({found[0].point.label(problem)}, {found[0].plan.dp_allreduce}"
        f"{', overlapped' if found[0].plan.overlap_grad_reduce else ''}), fleet ideal {bound:.6g} s, gap {gap_:.2%}")
    return FleetResult(found[:top_k], bound, gap_, len(points) - same, solved, infeasible, time.perf_counter() - t0, cut)


__all__ = ["FleetPoint", "FleetPlan", "FleetResult", "plan_fleet", "fleet_ideal_s", "kind_precisions",
           "PRECISION_POLICIES"]
