"""The MILP, stated in Pyomo: one ``add_<family>`` function per variable/constraint family.

Stage k runs on device ``path[k]`` (or on lane i's k-th device with r lanes, microbatch m
in lane m % r). Binaries ``y[v,k]`` (stage(v) >= k) and ``prec[v,q]``; continuous
``z[v,k,q]`` (integral at integral y/prec: binaries are never multiplied), boundary
crossings ``xc``/``xq``, casts on the consumer, ``w[k]`` for 1F1B's in-flight count. The
throughput objective minimises the period ``T`` >= every device and link load, the
latency objective ``costs.evaluate.plan_latency_s``, either plus ``sensitivity_weight`` x
sensitivity. Guarantee: at integral points the objective equals ``plan_cost(...).period_s``
(resp. ``plan_latency_s``) of the extracted plan. Times are in model units (seconds x
``m.tscale``, :func:`time_scale`), memory rows in units of device capacity. After the
formulation: ``period_relax``, ``nogood`` and the user's ``extra_constraints``. Under
``comm`` "exposed" transfers add to the device loads (model.exposed_rows). A colocate
group's members share their ``y`` (``colocate``). Every variable and row:
docs/concepts/milp.md, "Variables and rows".
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyomo.environ as pyo

from distplan.costs.collectives import lane_boundary_links, store_forward_coefficients
from distplan.costs.memory import activation_factors, last_reader, stream_copies
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.model.exposed_rows import add_exposed, add_exposed_period
from distplan.workloads.colocate import index_groups


@dataclass(frozen=True)
class ModelSpec:
    """Everything the model depends on besides the Problem.

    ``period_lb_s``: a proven lower bound on every plan's period (throughput objective;
    0: none), added as the cut ``period_relax``. ``excluded``: plans the no-good cuts
    ``nogood`` forbid. ``extra_constraints``: the user's ``f(m, problem, spec)``, called
    after distplan's own families (:func:`add_extra_constraints`)."""

    path: tuple[int, ...]
    objective: str = "throughput"
    sensitivity_budget: float | None = None
    sensitivity_weight: float = 0.0
    lanes: tuple[tuple[int, ...], ...] | None = None   # None: one lane, ``path``
    period_lb_s: float = 0.0
    excluded: tuple[Plan, ...] = field(default=(), compare=False)
    extra_constraints: Callable[..., None] | None = field(default=None, compare=False)

    def all_lanes(self) -> tuple[tuple[int, ...], ...]:
        lanes = self.lanes or (tuple(self.path),)
        if tuple(lanes[0]) != tuple(self.path) or any(len(l) != len(self.path) for l in lanes):
            raise ValueError("lanes must all have the path's length, lane 0 being the path")
        if len(lanes) > 1 and self.objective != "throughput":
            raise ValueError("replicated lanes are modelled for the throughput objective only")
        return tuple(tuple(l) for l in lanes)


def _checked(expr):
    """A rule's relation, or Constraint.Skip when it has no variable and holds
    (Constraint.Infeasible when it has none and fails)."""
    if isinstance(expr, bool):
        return pyo.Constraint.Skip if expr else pyo.Constraint.Infeasible
    return expr


# --------------------------------------------------------------------------- data
def stage_kinds(problem: Problem, path: tuple[int, ...]) -> list[int]:
    return [int(problem.device_kind[d]) for d in path]


def stage_kind_sets(problem: Problem, lanes) -> list[list[int]]:
    """Device kinds of each stage's devices (one per lane), sorted."""
    return [sorted({int(problem.device_kind[lane[k]]) for lane in lanes}) for k in range(len(lanes[0]))]


def allowed_cells(problem: Problem, path: tuple[int, ...], lanes=None) -> list[tuple[int, int, int]]:
    """(v, k, q) where op v may run on stage k at precision q: the precision runs on every
    device of the stage and the op alone fits the smallest one's memory (at one in-flight
    microbatch)."""
    lanes = lanes or (tuple(path),)
    kind_sets = stage_kind_sets(problem, lanes)
    out = []
    for v in range(problem.n_ops):
        for k, cs in enumerate(kind_sets):
            cap = min(problem.device_mem_bytes[lane[k]] for lane in lanes)
            for q in range(len(problem.precisions)):
                if not all(problem.supported[q, c] and math.isfinite(problem.op_time_s(v, q, c)) for c in cs):
                    continue
                if problem.static_bytes[v, q] + problem.act_bytes[v, q] > cap:
                    continue
                out.append((v, k, q))
    return out


def y_of(m, v: int, k: int):
    """Cumulative stage indicator y(v,k) as a constant or a variable."""
    if k <= 0:
        return 1
    if k >= m.K:
        return 0
    return m.y[v, k]


# --------------------------------------------------------------------------- variables
def add_sets(m, problem: Problem, spec: ModelSpec) -> None:
    K = len(spec.path)
    m.K = K
    m.OPS = pyo.RangeSet(0, problem.n_ops - 1)
    m.STAGES = pyo.RangeSet(0, K - 1)
    m.CUTS = pyo.Set(initialize=list(range(1, K)))          # y index: stage >= k
    m.BOUNDS = pyo.Set(initialize=list(range(K - 1)))       # boundary b: stage b -> b+1
    m.PRECS = pyo.RangeSet(0, len(problem.precisions) - 1)
    cells = allowed_cells(problem, spec.path, m.lanes)
    m.CELLS = pyo.Set(initialize=cells, dimen=3, ordered=True)
    e_ok = [e for e in range(len(problem.edges)) if problem.edge_elems[e] > 0]
    m.EDGES = pyo.Set(initialize=e_ok)                       # tensors with bytes
    m.ALL_EDGES = pyo.Set(initialize=list(range(len(problem.edges))))
    bpe = problem.bytes_per_elem
    m.WIDE = pyo.Set(initialize=[q for q in range(len(bpe)) if bpe[q] > bpe.min()])
    m.LINKS = pyo.Set(initialize=list(range(len(problem.topology.links))))


def add_variables(m, problem: Problem, spec: ModelSpec) -> None:
    m.y = pyo.Var(m.OPS, m.CUTS, domain=pyo.Binary)
    m.prec = pyo.Var(m.OPS, m.PRECS, domain=pyo.Binary)
    m.z = pyo.Var(m.CELLS, bounds=(0, 1))
    m.xc = pyo.Var(m.EDGES, m.BOUNDS, bounds=(0, 1))
    m.xq = pyo.Var(m.EDGES, m.BOUNDS, m.WIDE, bounds=(0, 1))
    kind_sets = stage_kind_sets(problem, m.lanes)
    cast_idx = []
    cells = set(m.CELLS)
    for e in m.ALL_EDGES:
        u, v = (int(x) for x in problem.edges[e])
        for k in m.STAGES:
            for b in m.PRECS:
                if (v, k, b) not in cells:
                    continue
                for a in m.PRECS:
                    if a != b and any(problem.cast_time_s(e, a, b, c) > 0 for c in kind_sets[k]):
                        cast_idx.append((e, a, b, k))
    m.CASTS = pyo.Set(initialize=cast_idx, dimen=4, ordered=True)
    m.cast = pyo.Var(m.CASTS, bounds=(0, 1))
    m.w = pyo.Var(m.CUTS, bounds=(0, 1))
    m.T = pyo.Var(domain=pyo.NonNegativeReals)


# --------------------------------------------------------------------------- constraints
def add_stage_order(m, problem: Problem, spec: ModelSpec) -> None:
    """y[v,k] <= y[v,k-1]: the cumulative indicators of one op are non-increasing."""
    m.stage_order = pyo.Constraint(
        m.OPS, m.CUTS, rule=lambda m, v, k: m.y[v, k] <= m.y[v, k - 1] if k >= 2 else pyo.Constraint.Skip)


def add_edge_order(m, problem: Problem, spec: ModelSpec) -> None:
    """y[u,k] <= y[v,k] for every tensor u -> v: a tensor never flows to an earlier stage."""
    m.edge_order = pyo.Constraint(
        m.ALL_EDGES, m.CUTS,
        rule=lambda m, e, k: m.y[int(problem.edges[e][0]), k] <= m.y[int(problem.edges[e][1]), k])


def add_colocation(m, problem: Problem, spec: ModelSpec) -> None:
    """y[a,k] == y[b,k] for consecutive members a, b of a colocate group: one stage each."""
    pairs = [(a, b) for grp in index_groups(problem.graph) for a, b in zip(grp, grp[1:])]
    m.COLOC = pyo.Set(initialize=pairs, dimen=2, ordered=True)
    m.colocate = pyo.Constraint(m.COLOC, m.CUTS, rule=lambda m, a, b, k: m.y[a, k] == m.y[b, k])


def add_assignment(m, problem: Problem, spec: ModelSpec) -> None:
    """sum_q z[v,k,q] = y(v,k) - y(v,k+1); sum_k z[v,k,q] = prec[v,q]; sum_q prec[v,q] = 1."""
    by_vk: dict[tuple[int, int], list] = {}
    by_vq: dict[tuple[int, int], list] = {}
    for (v, k, q) in m.CELLS:
        by_vk.setdefault((v, k), []).append(m.z[v, k, q])
        by_vq.setdefault((v, q), []).append(m.z[v, k, q])
    m.stage_assign = pyo.Constraint(
        m.OPS, m.STAGES,
        rule=lambda m, v, k: _checked(sum(by_vk.get((v, k), [])) == y_of(m, v, k) - y_of(m, v, k + 1)))
    m.prec_assign = pyo.Constraint(
        m.OPS, m.PRECS, rule=lambda m, v, q: sum(by_vq.get((v, q), [])) == m.prec[v, q])
    m.one_prec = pyo.Constraint(m.OPS, rule=lambda m, v: sum(m.prec[v, q] for q in m.PRECS) == 1)


def add_crossings(m, problem: Problem, spec: ModelSpec) -> None:
    """xc[e,b] >= y(v,b+1) - y(u,b+1); xq[e,b,q] >= y(v,b+1) - y(u,b+1) + prec[u,q] - 1."""
    def cross(m, e, b):
        u, v = (int(x) for x in problem.edges[e])
        return y_of(m, v, b + 1) - y_of(m, u, b + 1)
    m.crossing = pyo.Constraint(m.EDGES, m.BOUNDS, rule=lambda m, e, b: m.xc[e, b] >= cross(m, e, b))
    m.crossing_prec = pyo.Constraint(
        m.EDGES, m.BOUNDS, m.WIDE,
        rule=lambda m, e, b, q: m.xq[e, b, q] >= cross(m, e, b) + m.prec[int(problem.edges[e][0]), q] - 1)
    bpe = problem.bytes_per_elem
    lo = float(bpe.min())

    def nbytes(m, b):
        return sum(float(problem.edge_elems[e]) * (lo * m.xc[e, b] + sum(float(bpe[q] - lo) * m.xq[e, b, q]
                                                                      for q in m.WIDE)) for e in m.EDGES)
    m.boundary_bytes = pyo.Expression(m.BOUNDS, rule=nbytes)


def add_casts(m, problem: Problem, spec: ModelSpec) -> None:
    """cast[e,a,b,k] >= z[dst,k,b] + prec[src,a] - 1: tensor e cast from a to b on stage k."""
    m.cast_need = pyo.Constraint(
        m.CASTS, rule=lambda m, e, a, b, k: m.cast[e, a, b, k]
        >= m.z[int(problem.edges[e][1]), k, b] + m.prec[int(problem.edges[e][0]), a] - 1)


def add_stage_load(m, problem: Problem, spec: ModelSpec) -> None:
    """device_load[k,c] = (compute of stage k's ops at their precisions on kind c + the
    casts it performs) / r, for each kind c among the stage's devices; stage_load[k] is
    lane 0's (the stage's load when r = 1)."""
    kind_sets = stage_kind_sets(problem, m.lanes)
    m.STAGE_KINDS = pyo.Set(initialize=[(k, c) for k in range(m.K) for c in kind_sets[k]], dimen=2, ordered=True)
    f = m.tscale / m.R
    terms: dict[tuple[int, int], list] = {kc: [] for kc in m.STAGE_KINDS}
    for (v, k, q) in m.CELLS:
        for c in kind_sets[k]:
            terms[k, c].append(f * problem.op_time_s(v, q, c) * m.z[v, k, q])
    for (e, a, b, k) in m.CASTS:
        for c in kind_sets[k]:
            t = problem.cast_time_s(e, a, b, c)
            if t > 0:
                terms[k, c].append(f * t * m.cast[e, a, b, k])
    m.device_load = pyo.Expression(m.STAGE_KINDS, rule=lambda m, k, c: sum(terms[k, c]))
    kinds0 = stage_kinds(problem, spec.path)
    m.stage_load = pyo.Expression(m.STAGES, rule=lambda m, k: m.device_load[k, kinds0[k]])


def add_link_load(m, problem: Problem, spec: ModelSpec) -> None:
    """link_load[l] = sum over lanes i and boundaries b whose route lane_i[b] -> lane_i[b+1]
    uses l (costs.collectives.lane_boundary_links) of bytes_b / (r bw_l)."""
    users: dict[int, list[int]] = {}
    for lane in m.lanes:
        for b, r in enumerate(lane_boundary_links(problem, lane)):
            for l in r:
                users.setdefault(l, []).append(b)
    m.USED_LINKS = pyo.Set(initialize=sorted(users))
    bw = problem.link_bw_bytes_per_s
    m.link_load = pyo.Expression(
        m.USED_LINKS, rule=lambda m, l: sum(m.boundary_bytes[b] for b in users[l]) * (m.tscale / (m.R * float(bw[l]))))


def mem_unit_bytes(m, problem: Problem, k: int) -> float:
    """Unit of stage k's memory row: the smallest capacity among its devices (one per lane)."""
    return float(min(problem.device_mem_bytes[lane[k]] for lane in m.lanes))


def _stage_rows(m, problem: Problem, with_act: bool = True) -> tuple[dict[int, float], dict[int, list], dict[int, list]]:
    """Per stage k: its memory unit (mem_unit_bytes) and the static and (``with_act``)
    activation terms of its ops' cells, in that unit."""
    cap0 = {k: mem_unit_bytes(m, problem, k) for k in m.STAGES}
    stat: dict[int, list] = {k: [] for k in m.STAGES}
    act: dict[int, list] = {k: [] for k in m.STAGES}
    for (v, k, q) in m.CELLS:
        stat[k].append(float(problem.static_bytes[v, q] / cap0[k]) * m.z[v, k, q])
        if with_act:
            act[k].append(float(problem.act_bytes[v, q] / cap0[k]) * m.z[v, k, q])
    return cap0, stat, act


def add_tied_copies(m, problem: Problem, spec: ModelSpec) -> None:
    """Tied weights: ``tied[v,k]`` >= sum_q tb[v,q] z[v,k,q] - tb_max[v] (y(o,k) - y(o,k+1))
    (``tied_need``), the bytes op v on stage k holds of its owner o's parameters when o is
    elsewhere (in units of the stage's capacity); add_memory adds it to stage k's row."""
    cap0 = {k: mem_unit_bytes(m, problem, k) for k in m.STAGES}
    idx = [(v, k) for v in range(problem.n_ops) if problem.tied_owner[v] >= 0 and problem.tied_bytes[v].max() > 0
           for k in m.STAGES]
    m.TIED = pyo.Set(initialize=idx, dimen=2)
    m.tied = pyo.Var(m.TIED, bounds=(0, None))
    cells = {}
    for (v, k, q) in m.CELLS:
        cells.setdefault((v, k), []).append(q)

    def rule(m, v, k):
        o = int(problem.tied_owner[v])
        mine = sum(float(problem.tied_bytes[v, q] / cap0[k]) * m.z[v, k, q] for q in cells.get((v, k), []))
        if isinstance(mine, (int, float)):
            return pyo.Constraint.Skip
        top = float(problem.tied_bytes[v].max() / cap0[k])
        return m.tied[v, k] >= mine - top * (y_of(m, o, k) - y_of(m, o, k + 1))
    m.tied_need = pyo.Constraint(m.TIED, rule=rule)


def add_used_stages(m, problem: Problem, spec: ModelSpec) -> None:
    """1F1B: w[k] >= y[v,k] for every sink v (``used_stage``): stage k or a later one is used."""
    sinks = [v for v in range(problem.n_ops) if v not in set(int(u) for u in problem.edges[:, 0])]
    m.used_stage = pyo.Constraint(sinks, m.CUTS, rule=lambda m, v, k: m.w[k] >= m.y[v, k])


def sent_stages(m, problem: Problem) -> list[int]:
    """Stages whose ops may hold sent bytes for a later stage: in an inference stream every
    stage but the last (such an op stays alive to the end of its stage, add_live_peak, and
    has extra copies, costs.memory.activation_factors); else those with extra copies."""
    if problem.schedule == "stream":
        return [k for k in m.STAGES if k < m.K - 1]
    return [k for k in m.STAGES if activation_factors(problem.schedule, k, m.K, problem.microbatches)[1] > 0]


def add_sent_copies(m, problem: Problem, spec: ModelSpec) -> None:
    """Stream memory: ``sent[v,k]`` >= sum_q send[v,q] z[v,k,q] - send_max[v] (1 - y(c,k+1))
    for every reader c of v (``sent_need``; every tensor, zero-byte ones too, as
    costs.memory counts): the bytes v on stage k keeps for a later stage (in units of the
    stage's capacity; 0 unless some reader sits on a later stage); add_memory and
    add_live_peak read it."""
    cap0 = {k: mem_unit_bytes(m, problem, k) for k in m.STAGES}
    stages = set(sent_stages(m, problem))
    cons: dict[int, set[int]] = {}
    for u, v in problem.edges:
        cons.setdefault(int(u), set()).add(int(v))
    by_vk: dict[tuple[int, int], list] = {}
    for (v, k, q) in m.CELLS:
        if k in stages and k < m.K - 1 and problem.send_bytes[v, q] > 0 and v in cons:
            by_vk.setdefault((v, k), []).append((float(problem.send_bytes[v, q] / cap0[k]), m.z[v, k, q]))
    m.SENT = pyo.Set(initialize=sorted(by_vk), dimen=2)
    m.sent = pyo.Var(m.SENT, bounds=(0, None))
    rows = [(v, k, c) for (v, k) in by_vk for c in sorted(cons[v])]
    m.SENT_ROWS = pyo.Set(initialize=rows, dimen=3)

    def rule(m, v, k, c):
        terms = by_vk[v, k]
        top = max(a for a, _ in terms)
        return m.sent[v, k] >= sum(a * z for a, z in terms) - top * (1 - y_of(m, c, k + 1))
    m.sent_need = pyo.Constraint(m.SENT_ROWS, rule=rule)


def add_live_peak(m, problem: Problem) -> None:
    """Inference activations by liveness (costs.memory.stream_activation_bytes), in
    units of the stage's capacity: for every op t and stage k (``live_peak``)::

        act_peak[k] >= sum_q act[t,q] z[t,k,q] + sum_{u in A_t} (sum_q send[u,q] z[u,k,q] - sent[u,k])
                       + (1 - n2) before[t,k] - n2 sent[t,k] + (n1 + n2) sent_all[k]

    A_t = {u < t : a reader of u has index >= t}: alive at t whatever the placement when u
    is on k; ``sent`` (add_sent_copies) the bytes an op keeps for a later stage;
    ``sent_all[k]`` >= their sum over the stage (``live_sent``); ``before[t,k]`` >= their
    sum over the ops before t (the chain ``live_before``, built only when n2 = 0, i.e. at
    most 2 microbatches); (n1, n2) = costs.memory.stream_copies. At the least ``sent`` the
    right-hand side is live(t) + n1 S + n2 (S after t), and every ``sent`` has a
    coefficient >= 0 (n1 in A_t and t, 1 + n1 before, n1 + n2 after), so a larger one never
    lowers a row. No big-M: when t is not on stage k its own terms vanish and the row is at
    most that of the stage's last op before t (or its first op, when none is before)."""
    V = problem.n_ops
    n1, n2 = stream_copies(problem.microbatches)
    cap0 = {k: mem_unit_bytes(m, problem, k) for k in m.STAGES}
    last = last_reader(V, problem.edges)
    cells: dict[tuple[int, int], list[int]] = {}
    for (v, k, q) in m.CELLS:
        cells.setdefault((v, k), []).append(q)
    sent = set(m.SENT)
    by_k: dict[int, list] = {}
    for (v, k) in m.SENT:
        by_k.setdefault(k, []).append(m.sent[v, k])
    rows: dict[tuple[int, int], tuple[list, list, tuple[int, int] | None, float]] = {}
    chain: dict[tuple[int, int], tuple[tuple[int, int] | None, int]] = {}   # before[t,k] = before[prev] + sent[u,k]
    for k in m.STAGES:
        ops = sorted(v for v in range(V) if (v, k) in cells)
        prev, pending = None, None
        for t in ops:
            if n2 == 0 and pending is not None:
                chain[t, k] = (prev, pending)
                prev, pending = (t, k), None
            alive = [u for u in ops if u < t and last[u] >= t]
            terms = [(float(problem.act_bytes[t, q] / cap0[k]), t, q) for q in cells[t, k]]
            terms += [(float(problem.send_bytes[u, q] / cap0[k]), u, q) for u in alive for q in cells[u, k]
                      if problem.send_bytes[u, q] > 0]
            signed = [(-1.0, u) for u in alive if (u, k) in sent]
            if n2 and (t, k) in sent:
                signed.append((-float(n2), t))
            rows[t, k] = (terms, signed, prev if n2 == 0 else None, float(n1 + n2) if k in by_k else 0.0)
            if (t, k) in sent:
                pending = t
    m.PEAK_STAGES = pyo.Set(initialize=sorted({k for _, k in rows}))   # stages with a cell
    m.act_peak = pyo.Var(m.PEAK_STAGES, bounds=(0, None))
    m.sent_all = pyo.Var(m.STAGES, bounds=(0, None))
    m.live_sent = pyo.Constraint(m.STAGES, rule=lambda m, k: m.sent_all[k] >= sum(by_k[k]) if k in by_k
                                 else pyo.Constraint.Skip)
    m.BEFORE = pyo.Set(initialize=list(chain), dimen=2, ordered=True)
    m.before = pyo.Var(m.BEFORE, bounds=(0, None))
    m.live_chain, m.live_rows = chain, rows   # read by assign_memory

    def before_rule(m, t, k):
        prev, u = chain[t, k]
        return m.before[t, k] >= (m.before[prev] if prev is not None else 0) + m.sent[u, k]
    m.live_before = pyo.Constraint(m.BEFORE, rule=before_rule)
    m.LIVE = pyo.Set(initialize=list(rows), dimen=2, ordered=True)

    def peak_rule(m, t, k):
        terms, signed, prev, share = rows[t, k]
        rhs = sum(a * m.z[v, k, q] for a, v, q in terms) + sum(c * m.sent[u, k] for c, u in signed)
        if prev is not None:
            rhs = rhs + m.before[prev]
        if share:
            rhs = rhs + share * m.sent_all[k]
        return m.act_peak[k] >= rhs
    m.live_peak = pyo.Constraint(m.LIVE, rule=peak_rule)


def add_memory(m, problem: Problem, spec: ModelSpec) -> None:
    """Resident bytes of stage k's device <= its capacity (``mem_cap``, in units of it).

    n(k) in-flight microbatches (costs.memory.inflight_microbatches). An inference stream
    holds its liveness peak with the older copies of the sent bytes (``act_peak``,
    add_live_peak) and one microbatch of the bytes crossing into it (``boundary_bytes[k-1]``,
    received or relayed; costs.memory.stream_activation_bytes); gpipe holds n x every
    activation. For 1F1B n depends on the used stage count S: the n=1 row always holds,
    and for s = k+2..min(K, k+M) static + min(M, s-k) act <= 1 + (min(M, s-k) - 1)
    (1 - w[s-1]) (``w``, add_used_stages). Tied copies (``tied``, add_tied_copies) count
    as static.
    """
    M, sched, K = problem.microbatches, problem.schedule, m.K
    _, stat, act = _stage_rows(m, problem, with_act=sched != "stream")
    for (v, k) in m.TIED:
        stat[k].append(m.tied[v, k])
    if sched == "1f1b":
        idx = [(k, s) for k in range(K) for s in range(k + 1, min(K, k + M) + 1)]
        m.MEMROWS = pyo.Set(initialize=idx, dimen=2)

        def rule(m, k, s):
            n = min(M, s - k)
            lhs = sum(stat[k]) + n * sum(act[k])
            if s == k + 1:
                return _checked(lhs <= 1.0)
            return _checked(lhs <= 1.0 + (n - 1.0) * (1 - m.w[s - 1]))
        m.mem_cap = pyo.Constraint(m.MEMROWS, rule=rule)
    elif sched == "stream":
        add_live_peak(m, problem)
        cap0 = {k: mem_unit_bytes(m, problem, k) for k in m.STAGES}
        m.mem_cap = pyo.Constraint(m.STAGES, rule=lambda m, k: _checked(
            sum(stat[k]) + (m.act_peak[k] if k in m.PEAK_STAGES else 0.0)
            + (m.boundary_bytes[k - 1] / cap0[k] if k >= 1 and len(m.EDGES) else 0.0) <= 1.0))
    else:
        f_of = {k: activation_factors(sched, k, K, M) for k in m.STAGES}
        sent: dict[int, list] = {}
        for (v, k) in m.SENT:
            sent.setdefault(k, []).append(m.sent[v, k])
        m.mem_cap = pyo.Constraint(
            m.STAGES, rule=lambda m, k: _checked(sum(stat[k]) + f_of[k][0] * sum(act[k])
                                                 + f_of[k][1] * sum(sent.get(k, [])) <= 1.0))


def assign_memory(m, problem: Problem, stage: list[int], q_of: list[int]) -> None:
    """Set the stream memory variables (``sent``, ``sent_all``, ``before``, ``act_peak``) to
    the least values a plan (op -> stage position, op -> precision index) allows;
    model.extract.assign_plan calls it after setting ``z``."""
    if not hasattr(m, "sent"):
        return
    later = [-1] * problem.n_ops      # the latest stage of a reader
    for u, w in problem.edges:
        later[u] = max(later[u], stage[w])
    for (v, k) in m.SENT:
        m.sent[v, k].set_value(float(problem.send_bytes[v, q_of[v]] / mem_unit_bytes(m, problem, k))
                               if stage[v] == k and later[v] > k else 0.0)
    if not hasattr(m, "act_peak"):
        return
    total = {k: 0.0 for k in m.STAGES}
    for (v, k) in m.SENT:
        total[k] += m.sent[v, k].value
    for k in m.STAGES:
        m.sent_all[k].set_value(total[k])
    for (t, k) in m.BEFORE:   # in chain order
        prev, u = m.live_chain[t, k]
        m.before[t, k].set_value((m.before[prev].value if prev is not None else 0.0) + m.sent[u, k].value)
    peak = {k: 0.0 for k in m.PEAK_STAGES}
    for (t, k) in m.LIVE:
        terms, signed, prev, share = m.live_rows[t, k]
        val = math.fsum(a for a, v, q in terms if stage[v] == k and q_of[v] == q) \
            + math.fsum(c * m.sent[u, k].value for c, u in signed) \
            + (m.before[prev].value if prev is not None else 0.0) + share * m.sent_all[k].value
        peak[k] = max(peak[k], val)
    for k in m.PEAK_STAGES:
        m.act_peak[k].set_value(peak[k])


def add_sensitivity(m, problem: Problem, spec: ModelSpec) -> None:
    """sensitivity = sum prec[v,q] s[v,q]; <= budget when one is given."""
    m.sensitivity = pyo.Expression(expr=sum(float(problem.sensitivity[v, q]) * m.prec[v, q]
                                            for v in m.OPS for q in m.PRECS if problem.sensitivity[v, q]))
    if spec.sensitivity_budget is not None:
        m.sens_budget = pyo.Constraint(rule=lambda m: _checked(m.sensitivity <= spec.sensitivity_budget))


def min_op_time_s(problem: Problem, m) -> np.ndarray:
    """Per op, the least load it puts on a lane-0 device of any stage it may run on
    (its time there / r)."""
    best = np.full(problem.n_ops, math.inf)
    kinds = stage_kinds(problem, m.path)
    for (v, k, q) in m.CELLS:
        best[v] = min(best[v], problem.op_time_s(v, q, kinds[k]) / m.R)
    return best


def time_scale(problem: Problem, m) -> float:
    """Model time unit: seconds x tscale ~ 1 at the period's a-priori lower bound, so
    HiGHS's absolute tolerances (1e-7) are relative ones here."""
    best = min_op_time_s(problem, m)
    best = best[np.isfinite(best)]
    if not len(best):
        return 1e6
    ref = max(float(best.max()), float(math.fsum(best)) / m.K)
    return 1.0 / ref if ref > 0 and math.isfinite(ref) else 1e6


def add_period(m, problem: Problem, spec: ModelSpec) -> None:
    """T >= device_load[k,c], T >= link_load[l]; valid bounds T >= max_v min load(v),
    K T >= sum_v min load(v) (min_op_time_s)."""
    m.period_dev = pyo.Constraint(m.STAGE_KINDS, rule=lambda m, k, c: m.T >= m.device_load[k, c])
    m.period_link = pyo.Constraint(m.USED_LINKS, rule=lambda m, l: m.T >= m.link_load[l])
    if hasattr(m, "comm_load"):
        add_exposed_period(m, problem, spec)
    best = min_op_time_s(problem, m)
    if not np.isfinite(best).all():
        return   # an op with no allowed cell: stage_assign makes the model infeasible
    m.period_min = pyo.Constraint(expr=m.T >= m.tscale * float(best.max()))
    m.period_avg = pyo.Constraint(expr=m.K * m.T >= m.tscale * float(math.fsum(best)))


def add_latency(m, problem: Problem, spec: ModelSpec) -> None:
    """latency = sum_k stage_load[k] + sum_b (route latency if boundary b carries a tensor
    + bytes_b x seconds per byte of its links: costs.collectives.store_forward_coefficients);
    ``bused[b] >= xc[e,b]`` marks a used boundary."""
    coef = [store_forward_coefficients(problem, r) for r in lane_boundary_links(problem, spec.path)]
    m.bused = pyo.Var(m.BOUNDS, bounds=(0, 1))
    m.boundary_active = pyo.Constraint(m.EDGES, m.BOUNDS, rule=lambda m, e, b: m.bused[b] >= m.xc[e, b])
    m.latency = pyo.Expression(expr=sum(m.stage_load[k] for k in m.STAGES) + sum(
        m.tscale * coef[b][0] * m.bused[b] + m.tscale * coef[b][1] * m.boundary_bytes[b] for b in m.BOUNDS))


def add_objective(m, problem: Problem, spec: ModelSpec) -> None:
    """min ``obj`` = T (throughput) or latency, + tscale x sensitivity_weight x sensitivity."""
    main = m.T if spec.objective == "throughput" else m.latency
    m.obj = pyo.Objective(expr=main + m.tscale * spec.sensitivity_weight * m.sensitivity, sense=pyo.minimize)


def add_period_bound(m, problem: Problem, spec: ModelSpec) -> None:
    """T >= tscale x period_lb_s x (1 - 1e-9) (``period_relax``): a period bound proven
    without the MILP (model.downsets.relaxation_bound, model.budget) as a cut; throughput
    objective and a positive finite bound only (the objective is >= T)."""
    lb = spec.period_lb_s
    if spec.objective == "throughput" and lb > 0 and math.isfinite(lb):
        m.period_relax = pyo.Constraint(expr=m.T >= m.tscale * lb * (1 - 1e-9))


def add_nogood(m, problem: Problem, spec: ModelSpec) -> None:
    """No-good cuts (``nogood``, a ConstraintList :func:`add_nogood_cut` extends), one per
    plan P of ``spec.excluded``: sum over P's 1-bits of (1 - x) + sum over its 0-bits of
    x >= 1, over the binaries y and prec -- the plan's symmetry-free projection
    (model.extract.projection) must differ from P's."""
    m.nogood = pyo.ConstraintList()
    for plan in spec.excluded:
        add_nogood_cut(m, problem, plan)


def add_nogood_cut(m, problem: Problem, plan: Plan):
    """Append the no-good cut of ``plan`` to ``m.nogood`` (:func:`add_nogood`); returns the
    new constraint, or None when the model has no binaries (the plan is the only one)."""
    terms = []
    for v in range(problem.n_ops):
        for k in m.CUTS:
            terms.append((1 - m.y[v, k]) if plan.op_stage[v] >= k else m.y[v, k])
        qv = problem.q_index(plan.op_precision[v])
        for q in m.PRECS:
            if len(problem.precisions) > 1:
                terms.append((1 - m.prec[v, q]) if q == qv else m.prec[v, q])
    if not terms:
        return None
    return m.nogood.add(sum(terms) >= 1)


def add_extra_constraints(m, problem: Problem, spec: ModelSpec) -> None:
    """The user's constraints: ``spec.extra_constraints(m, problem, spec)`` (PyPSA's
    ``extra_functionality``), called after every distplan family on every model built.

    It may add constraints (any name not taken), variables, and tighter bounds or fixings
    over distplan's components (m.y, m.prec, m.z, m.T, m.stage_load, m.boundary_bytes,
    ...; module docstring; index sets m.OPS, m.STAGES, m.CUTS, m.PRECS). Restrictions
    only: removing or deactivating one of distplan's constraints, changing the objective,
    or widening a variable's bounds or domain raises DistplanError, because every bound
    distplan proves without the MILP (heuristic relaxation, budget knapsacks) is a
    minimum over a superset of the constrained plans -- valid only while the hook
    restricts. What it added is recorded for model.admission: ``m.user_rows`` (its active
    constraints), ``m.user_bounds`` ((var, lb, ub) of the variables it bounded or fixed)
    and ``m.user_vars`` (variables it declared)."""
    m.user_rows, m.user_bounds, m.user_vars = (), (), ()
    f = spec.extra_constraints
    if f is None:
        return
    rows0 = list(m.component_data_objects(pyo.Constraint, active=True))
    vars0 = {id(v): (v, _var_state(v)) for v in m.component_data_objects(pyo.Var)}
    obj0 = (m.obj.expr, m.obj.sense)
    f(m, problem, spec)
    name = getattr(f, "__name__", repr(f))
    rows = list(m.component_data_objects(pyo.Constraint, active=True))
    kept = {id(c) for c in rows}
    lost = [c.name for c in rows0 if id(c) not in kept]
    if lost:
        raise DistplanError(f"extra_constraints {name} removed or deactivated distplan's constraint {lost[0]!r}"
                            f"{f' and {len(lost) - 1} more' if len(lost) > 1 else ''}; it may only add "
                            "restrictions (add a constraint of your own instead)")
    objs = list(m.component_data_objects(pyo.Objective, active=True))
    obj = getattr(m, "obj", None)
    if len(objs) != 1 or objs[0] is not obj or obj.expr is not obj0[0] or obj.sense != obj0[1]:
        raise DistplanError(f"extra_constraints {name} changed the objective; it may only add restrictions "
                            "(distplan reports and bounds its own objective)")
    old = {id(c) for c in rows0}
    bounds, new_vars = [], []
    for v in m.component_data_objects(pyo.Var):
        if id(v) not in vars0:
            new_vars.append(v)
            continue
        st0, st = vars0[id(v)][1], _var_state(v)
        if st == st0:
            continue
        if st[0] < st0[0] or st[1] > st0[1] or (st0[2] and not st[2]):
            raise DistplanError(f"extra_constraints {name} relaxed variable {v.name} (bounds [{st0[0]}, {st0[1]}]"
                                f"{' integer' if st0[2] else ''} -> [{st[0]}, {st[1]}]{' integer' if st[2] else ''}); "
                                "it may only add restrictions")
        bounds.append((v, st[0], st[1]))
    m.user_rows = tuple(c for c in rows if id(c) not in old)
    m.user_bounds = tuple(bounds)
    m.user_vars = tuple(new_vars)


def _var_state(v) -> tuple[float, float, bool]:
    """(lower, upper, integral) of a variable, a fixed one at its value."""
    if v.fixed:
        x = float(v.value) if v.value is not None else math.nan
        return x, x, v.is_integer()
    lo, hi = v.lb, v.ub
    return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi)), v.is_integer()


def build_model(problem: Problem, spec: ModelSpec) -> pyo.ConcreteModel:
    """Sets and variables, then the constraint families, the objective, the cuts
    (period bound, no-goods) and last the user's constraints (add_extra_constraints)."""
    m = pyo.ConcreteModel(name="distplan")
    m.path = tuple(spec.path)
    m.lanes = spec.all_lanes()
    m.R = len(m.lanes)
    add_sets(m, problem, spec)
    m.tscale = time_scale(problem, m)
    add_variables(m, problem, spec)
    add_stage_order(m, problem, spec)
    add_edge_order(m, problem, spec)
    add_colocation(m, problem, spec)
    add_assignment(m, problem, spec)
    add_crossings(m, problem, spec)
    add_casts(m, problem, spec)
    add_stage_load(m, problem, spec)
    if problem.exposed and spec.objective == "throughput":
        add_exposed(m, problem, spec)   # transfers on the device loads, direct sends (model.exposed_rows)
    else:
        add_link_load(m, problem, spec)
    add_tied_copies(m, problem, spec)
    if problem.schedule == "1f1b":
        add_used_stages(m, problem, spec)
    else:
        add_sent_copies(m, problem, spec)
    add_memory(m, problem, spec)
    add_sensitivity(m, problem, spec)
    if spec.objective == "throughput":
        add_period(m, problem, spec)
    else:
        add_latency(m, problem, spec)
    add_objective(m, problem, spec)
    add_nogood(m, problem, spec)
    add_period_bound(m, problem, spec)
    add_extra_constraints(m, problem, spec)
    return m
