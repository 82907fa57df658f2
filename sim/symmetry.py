"""Exact symmetry reduction: identical data-parallel replicas and identical tensor-parallel
ranks simulated once.

A training plan whose stages all have ``r`` replicas of ``t`` ranks runs ``r x t`` copies
of the same work. When the topology maps those copies onto each other, so that shifting
every replica by one (and every rank by one) maps each route the plan uses onto a route
with the same links' bandwidths and latencies, and no link carries traffic of two copies,
every copy runs the same timeline: the run is symmetric. Then one copy is simulated
(replica 0, rank 0), on one representative link per orbit of links, its ring steps
waiting for its own previous step (which by symmetry is when its neighbour's arrives),
and the full run's figures are the copy's, repeated over the orbits.

Conditions checked (otherwise the plan is simulated in full): training, 1F1B, not ideal
mode, no trace, every stage the same replica count ``r`` dividing the microbatch count
and the same tensor-parallel degree, one device kind, replicas alike (replica groups:
equal ``shares`` if any, the same precision overrides on every replica if any; the
reduced plan then has no shares and the overrides folded into its op precisions), a flat ring gradient reduction (a
hierarchical one only where it is a flat ring: one replica per node), and the shift maps
above exist and act freely on the links used. A shift that fails is dropped (replicas
only, or ranks only, are tried).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.costs.collectives import hierarchical_groups


@dataclass(frozen=True)
class Symmetry:
    """How a plan collapses: ``replicas`` data-parallel copies and ``ranks`` tensor-parallel
    copies simulated as one; ``reduced`` is the plan run (replica 0's devices, M / r
    microbatches); ``device_rep`` / ``link_rep`` map every device / link to the one whose
    timeline it repeats (itself when unused)."""

    replicas: int
    ranks: int
    reduced: Plan
    device_rep: np.ndarray
    link_rep: np.ndarray

    @property
    def factor(self) -> int:
        return self.replicas * self.ranks

    def route(self, topology, a: int, b: int) -> tuple[int, ...]:
        """The route a -> b on representative links."""
        return tuple(int(self.link_rep[l]) for l in topology.route(a, b))


def find_symmetry(problem: Problem, plan: Plan, ideal: bool, trace: bool) -> Symmetry | None:
    """The largest exact reduction of ``plan`` (module docstring), or None."""
    if not problem.training or plan.schedule != "1f1b" or ideal or trace or plan.device_order is not None:
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
    devs = [d for s in plan.stages for d in s.devices]
    if len(set(devs)) != len(devs) or len({int(problem.device_kind[d]) for d in devs}) != 1:
        return None
    if r > 1 and not flat_ring(problem, plan):
        return None
    for use_r, use_t in ((r > 1, t > 1), (r > 1, False), (False, t > 1)):
        if not (use_r or use_t):
            continue
        link_rep = _link_representatives(problem, plan, r, t, use_r, use_t)
        if link_rep is not None:
            return _symmetry(problem, plan, r if use_r else 1, t if use_t else 1, link_rep)
    return None


def flat_ring(problem: Problem, plan: Plan) -> bool:
    """Whether every stage's gradient reduction is a flat ring over its replicas."""
    if plan.dp_allreduce != "hierarchical":
        return True
    topo = problem.topology
    for st in plan.stages:
        for j in range(st.tensor_parallel):
            ring = [st.devices[i * st.tensor_parallel + j] for i in range(st.replicas)]
            if hierarchical_groups(topo, ring) is not None:
                return False
    return True


def _dev(plan: Plan, k: int, i: int, j: int) -> int:
    st = plan.stages[k]
    return st.devices[i * st.tensor_parallel + j]


def _pairs(plan: Plan, r: int, t: int) -> list[tuple[int, int, int, int, int, int]]:
    """Every (stage, replica, rank) -> (stage, replica, rank) pair the program routes:
    pipeline hops both ways, tensor-parallel ring hops, data-parallel ring hops."""
    K = plan.n_stages
    out = []
    for k in range(K):
        for i in range(r):
            for j in range(t):
                if k + 1 < K:
                    out += [(k, i, j, k + 1, i, j), (k + 1, i, j, k, i, j)]
                if t > 1:
                    out.append((k, i, j, k, i, (j + 1) % t))
                if r > 1:
                    out.append((k, i, j, k, (i + 1) % r, j))
    return out


def _link_representatives(problem: Problem, plan: Plan, r: int, t: int, use_r: bool,
                          use_t: bool) -> np.ndarray | None:
    """Link -> representative link when the shifts act freely on the used links, else None."""
    topo = problem.topology
    links = topo.links
    pairs = _pairs(plan, r, t)
    shifts = []
    if use_r:
        shifts.append(lambda k, i, j: (k, (i + 1) % r, j))
    if use_t:
        shifts.append(lambda k, i, j: (k, i, (j + 1) % t))
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
    size = (r if use_r else 1) * (t if use_t else 1)
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
            return None   # a link shared by two copies: they contend, the run is not symmetric
        m = min(orbit)
        for x in orbit:
            rep[x] = m
        seen |= orbit
    return rep


def _symmetry(problem: Problem, plan: Plan, rr: int, tt: int, link_rep: np.ndarray) -> Symmetry:
    dev_rep = np.arange(problem.n_devices, dtype=np.int64)
    for k, st in enumerate(plan.stages):
        for i in range(st.replicas):
            for j in range(st.tensor_parallel):
                dev_rep[_dev(plan, k, i, j)] = _dev(plan, k, 0 if rr > 1 else i, 0 if tt > 1 else j)
    precs = list(plan.op_precision)
    for st in plan.stages:   # alike replicas (find_symmetry): the overrides of replica 0
        for v, p in st.overrides(0).items():
            precs[v] = p
    stages = tuple(dataclasses.replace(st, devices=tuple(st.devices[:st.tensor_parallel]), shares=None,
                                       replica_precision=None) if rr > 1 else st
                   for st in plan.stages)
    reduced = dataclasses.replace(plan, stages=stages, microbatches=plan.microbatches // rr,
                                  op_precision=tuple(precs) if rr > 1 else plan.op_precision)
    return Symmetry(rr, tt, reduced, dev_rep, link_rep)


__all__ = ["Symmetry", "find_symmetry", "flat_ring"]
