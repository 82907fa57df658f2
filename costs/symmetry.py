"""Exact symmetry reduction: identical data-parallel replicas and identical tensor-parallel
ranks simulated once.

When shifting every replica by ``s`` (and every rank by ``u``) maps each route the plan
uses onto a route with the same bandwidths and latencies, and permutes the links used
without fixing any, every copy runs the same timeline: one copy (replicas 0..s-1, ranks
0..u-1) is simulated on one representative link per orbit (so contention between copies
on a link is kept) and the full run's figures are rebuilt from it, exactly. ``s`` is the
smallest divisor of the replica count whose shift works (``u`` likewise for ranks); the
largest merge is tried first. Plans that do not meet the conditions (training, 1F1B or
interleaved, not ideal, no trace, equal replicas and degrees, one device kind, alike
replicas, hierarchical groups of whole nodes) are simulated in full.

Conditions and examples: docs/concepts/simulator.md, "Cluster scale by exact symmetry".
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.costs.collectives import hierarchical_groups
from distplan.costs.sharding import expert_data_groups, expert_reduces


@dataclass(frozen=True)
class Symmetry:
    """How a plan collapses: ``replicas`` data-parallel copies of ``group`` replicas each
    and ``ranks`` tensor-parallel copies of ``rank_group`` ranks each simulated as one;
    ``reduced`` is the plan run (the devices of replicas 0..group-1, M / replicas
    microbatches; the task graph keeps ranks 0..rank_group-1 of each group);
    ``device_rep`` / ``link_rep`` map every device / link to the one whose timeline it
    repeats (itself when unused)."""

    replicas: int
    ranks: int
    reduced: Plan
    device_rep: np.ndarray
    link_rep: np.ndarray
    group: int = 1
    rank_group: int = 1

    @property
    def factor(self) -> int:
        return self.replicas * self.ranks

    def route(self, topology, a: int, b: int) -> tuple[int, ...]:
        """The route a -> b on representative links."""
        return tuple(int(self.link_rep[l]) for l in topology.route(a, b))

    def copy_microbatch(self, microbatches: int) -> np.ndarray:
        """For each of the full run's microbatches, the reduced run's that it repeats:
        microbatch m runs on replica m mod r (round-robin), as that replica's (m // r)-th,
        and replica i repeats the copy's replica i mod group, whose (m // r)-th is the
        copy's microbatch (m mod group) + (m // r) x group."""
        m = np.arange(microbatches)
        r = self.group * self.replicas
        return m % self.group + (m // r) * self.group


def _degrees(problem: Problem, plan: Plan) -> tuple[int, int] | None:
    """(replicas, tp) of a plan the reduction may apply to (module docstring), else None."""
    if not problem.training or plan.schedule not in ("1f1b", "interleaved") or plan.device_order is not None:
        return None
    if not plan.stages:
        return None
    rs = {s.replicas for s in plan.stages}
    ts = {s.tensor_parallel for s in plan.stages}
    if len(rs) != 1 or len(ts) != 1:
        return None
    r, t = rs.pop(), ts.pop()
    if plan.microbatches % r:
        return None
    if not all(s.uniform for s in plan.stages):
        return None   # replicas differ in share or precision: they do not run alike
    devs = [d for s in plan.stages[:plan.pipeline_ranks] for d in s.devices]   # interleaved: chunks repeat ranks
    if len(set(devs)) != len(devs) or len({int(problem.device_kind[d]) for d in devs}) != 1:
        return None
    return r, t


def replica_copy(problem: Problem, plan: Plan) -> tuple[int, np.ndarray] | None:
    """The smallest block of replicas whose shift is an exact symmetry with no rank
    merged (every rank's traffic on its own links): (replicas in the block, link ->
    representative), or None. The analytic iteration times one rank's overlapped
    gradient buckets on it (costs.iteration)."""
    deg = _degrees(problem, plan)
    if deg is None or deg[0] < 2:
        return None
    r, t = deg
    groups = reduction_groups(problem, plan)
    step = _node_block(groups)
    if step is None or any(expert_reduces(st) for st in plan.stages):
        return None
    return _smallest_block(problem, plan, r, t, step, _pairs(problem, plan, r, t, groups))


def _smallest_block(problem: Problem, plan: Plan, r: int, t: int, step: int,
                    pairs) -> tuple[int, np.ndarray] | None:
    """The smallest multiple of ``step`` dividing r (below r) whose replica shift is exact
    on ``pairs`` with no rank merged: (it, link -> representative), or None."""
    for s in range(step, r, step):
        if r % s == 0:
            rep = _link_representatives(problem, plan, r, t, s, t, pairs)
            if rep is not None:
                return s, rep
    return None


def expert_replica_copy(problem: Problem, plan: Plan) -> tuple[int, np.ndarray] | None:
    """``replica_copy`` for plans whose routed experts reduce over their groups (ep with
    r / ep >= 2, flat rings): a shift by a multiple of every such stage's ep x stride maps
    each expert-data group onto itself in ring order (``sharding.expert_data_groups``),
    so the smallest such block whose shift is exact on the dense and expert rings' links
    (and the pipeline's, the tensor-parallel rings'), with no rank merged, or None. The
    analytic iteration times the expert-data-parallel reductions of that block only
    (``costs.iteration._expert_reduction_s``)."""
    deg = _degrees(problem, plan)
    if deg is None or deg[0] < 2 or plan.dp_allreduce == "hierarchical":
        return None
    if not any(expert_reduces(st) for st in plan.stages):
        return None
    r, t = deg
    step = 1
    for st in plan.stages:
        if expert_reduces(st):
            step = math.lcm(step, st.expert_parallel * st.expert_stride)
    return _smallest_block(problem, plan, r, t, step, _pairs(problem, plan, r, t, reduction_groups(problem, plan)))


def find_symmetry(problem: Problem, plan: Plan, ideal: bool, trace: bool) -> Symmetry | None:
    """The largest exact reduction of ``plan`` (module docstring), or None."""
    deg = None if ideal or trace else _degrees(problem, plan)
    if deg is None:
        return None
    r, t = deg
    groups = reduction_groups(problem, plan) if r > 1 else None
    ranks_alike = groups is None or all(len(set(map(_key, per_rank))) == 1 for per_rank in groups)
    step = _node_block(groups) if groups is not None else 1
    if plan.n_stages > 1 and any(st.zero >= 3 and st.replicas > 1 for st in plan.stages):
        step = None   # ZeRO-3 pipelines: reduced runs were 0.02-5.4 % off the full run (gpt2, dp 2-4, pp 2-4)
    for st in plan.stages:   # expert-data-parallel groups map onto themselves under shifts by ep x stride
        if step is not None and expert_reduces(st):   # (their ZeRO-3 gathers: no replica merge proven)
            step = None if st.zero >= 3 else math.lcm(step, st.expert_parallel * st.expert_stride)
    tries = []
    rank_groups = [1] + [u for u in range(2, t) if t % u == 0] + [t] if t > 1 and ranks_alike else [t]
    for s in range(1, r + 1):
        if r % s or (s < r and (step is None or s % step)):
            continue
        for u in rank_groups:
            if s < r or u < t:
                tries.append(((r // s) * (t // u), s, u))
    # the largest merge first; on a tie the smaller replica group, then all ranks merged,
    # then no rank merged, then rank groups (u > 1, the largest merge of ranks first)
    tries.sort(key=lambda x: (-x[0], x[2] not in (1, t)))
    pairs = _pairs(problem, plan, r, t, groups)
    for _, s, u in tries:
        link_rep = _link_representatives(problem, plan, r, t, s, u, pairs)
        if link_rep is not None:
            return _symmetry(problem, plan, r, s, t, u, link_rep)
    return None


def reduction_groups(problem: Problem, plan: Plan) -> list[list[list[list[int]] | None]]:
    """Per stage, per tensor-parallel rank, the node groups (indices into the stage's
    replicas) of its hierarchical gradient reduction, or None where it is a flat ring
    (``plan.dp_allreduce`` 'ring', or ``costs.collectives.hierarchical_groups`` finds
    none)."""
    topo = problem.topology
    out = []
    for st in plan.stages:
        tp = st.tensor_parallel
        per_rank = []
        for j in range(tp):
            ring = [st.devices[i * tp + j] for i in range(st.replicas)]
            per_rank.append(hierarchical_groups(topo, ring) if plan.dp_allreduce == "hierarchical" else None)
        out.append(per_rank)
    return out


def _node_block(groups: list[list[list[list[int]] | None]]) -> int | None:
    """The replica count a replica shift must be a multiple of for the hierarchical
    reductions' node groups to map onto each other alike (1 for flat rings; the lcm of
    the group sizes where every group is a block of consecutive replicas), or None where
    some groups interleave (then no replica shift is taken)."""
    step = 1
    for per_rank in groups:
        for members in per_rank:
            if members is None:
                continue
            g = len(members[0])
            if any(m != list(range(b * g, (b + 1) * g)) for b, m in enumerate(members)):
                return None
            step = math.lcm(step, g)
    return step


def _key(members: list[list[int]] | None):
    return None if members is None else tuple(map(tuple, members))


def _dev(plan: Plan, k: int, i: int, j: int) -> int:
    st = plan.stages[k]
    return st.devices[i * st.tensor_parallel + j]


def _pairs(problem: Problem, plan: Plan, r: int, t: int,
           groups: list[list[list[list[int]] | None]] | None) -> list[tuple[int, int, int, int, int, int]]:
    """Every (stage, replica, rank) -> (stage, replica, rank) pair the program routes:
    pipeline hops both ways, tensor-parallel ring hops, data-parallel ring hops (the flat
    ring's, or a hierarchical reduction's rings inside each node and across nodes)."""
    K = plan.n_stages
    out = []
    for k in range(K):
        for i in range(r):
            for j in range(t):
                if k + 1 < K:
                    out += [(k, i, j, k + 1, i, j), (k + 1, i, j, k, i, j)]
                if t > 1:
                    out.append((k, i, j, k, i, (j + 1) % t))
        if r < 2:
            continue
        for j in range(t):
            members = groups[k][j]
            if members is not None and plan.stages[k].zero >= 3:   # ZeRO-3 gathers on the flat ring
                out += [(k, i, j, k, (i + 1) % r, j) for i in range(r)]
            if expert_reduces(plan.stages[k]):   # the experts' gathers (ZeRO-3) or reductions on their groups
                for g in expert_data_groups(plan.stages[k]):
                    out += [(k, g[a], j, k, g[(a + 1) % len(g)], j) for a in range(len(g))]
            if members is None:
                out += [(k, i, j, k, (i + 1) % r, j) for i in range(r)]
                continue
            g, n = len(members[0]), len(members)
            for grp in members:   # inside each node
                out += [(k, grp[a], j, k, grp[(a + 1) % g], j) for a in range(g)]
            for x in range(g):    # across nodes, shard x
                out += [(k, members[b][x], j, k, members[(b + 1) % n][x], j) for b in range(n)]
    return out


def _link_representatives(problem: Problem, plan: Plan, r: int, t: int, s: int, u: int,
                          pairs: list[tuple[int, int, int, int, int, int]]) -> np.ndarray | None:
    """Link -> representative link when shifting replicas by ``s`` (none when s == r)
    and ranks by ``u`` (none when u == t) act freely on the used links, else None."""
    topo = problem.topology
    links = topo.links
    shifts = []
    if s < r:
        shifts.append(lambda k, i, j: (k, (i + s) % r, j))
    if u < t:
        shifts.append(lambda k, i, j: (k, i, (j + u) % t))
    maps: list[dict[int, int]] = []
    for shift in shifts:
        lam: dict[int, int] = {}
        for k, i, j, k2, i2, j2 in pairs:
            src, dst = topo.route(_dev(plan, k, i, j), _dev(plan, k2, i2, j2)), \
                topo.route(_dev(plan, *shift(k, i, j)), _dev(plan, *shift(k2, i2, j2)))
            if len(src) != len(dst):
                return None
            for a, b in zip(src, dst):
                la, lb = links[a], links[b]
                if la.bw_bytes_per_s != lb.bw_bytes_per_s or la.latency_s != lb.latency_s:
                    return None
                if lam.setdefault(a, b) != b:
                    return None
        if len(set(lam.values())) != len(lam) or set(lam.values()) != set(lam):
            return None   # not a permutation of the used links
        maps.append(lam)
    size = (r // s) * (t // u)
    rep = np.arange(len(links), dtype=np.int64)
    seen: set[int] = set()
    for l0 in maps[0]:
        if l0 in seen:
            continue
        orbit, todo = {l0}, [l0]
        while todo:
            x = todo.pop()
            for lam in maps:
                y = lam[x]
                if y not in orbit:
                    orbit.add(y)
                    todo.append(y)
        if len(orbit) != size:
            return None   # a shift fixes a link: its copies' traffic could not be told apart
        m = min(orbit)
        for x in orbit:
            rep[x] = m
        seen |= orbit
    return rep


def _symmetry(problem: Problem, plan: Plan, r: int, s: int, t: int, u: int, link_rep: np.ndarray) -> Symmetry:
    rr, tt = r // s, t // u
    dev_rep = np.arange(problem.n_devices, dtype=np.int64)
    for k, st in enumerate(plan.stages):
        for i in range(st.replicas):
            for j in range(st.tensor_parallel):
                dev_rep[_dev(plan, k, i, j)] = _dev(plan, k, i % s, j % u)
    precs = list(plan.op_precision)
    for st in plan.stages:   # alike replicas (find_symmetry): the overrides of replica 0
        for v, p in st.overrides(0).items():
            precs[v] = p
    stages = tuple(dataclasses.replace(st, devices=tuple(st.devices[:s * st.tensor_parallel]), shares=None,
                                       replica_precision=None) if rr > 1 else st
                   for st in plan.stages)
    reduced = dataclasses.replace(plan, stages=stages, microbatches=plan.microbatches // rr,
                                  op_precision=tuple(precs) if rr > 1 else plan.op_precision)
    return Symmetry(rr, tt, reduced, dev_rep, link_rep, s, u)


__all__ = ["Symmetry", "find_symmetry", "reduction_groups"]
