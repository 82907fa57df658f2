"""The MILP's rows for exposed communication (``ProblemOptions.comm`` "exposed", the
rules of costs.exposed), throughput objective.

``send[u,a,b,q]`` (in [0, 1], integral at integral y/prec) >= z[u,a,q] + y(v,b) -
y(v,b+1) - 1 for every tensor u -> v with bytes and stages a < b (``send_need``): op u
at precision q on stage a sends to stage b, once however many of its readers sit there.
Stage k's device on lane i carries, on top of its compute, ``transfer_s(lane_i[a],
lane_i[b], send_bytes[u,q]) / r`` of every transfer it ends (``comm_load[k,i]``; row
``period_comm``: T >= device_load + comm_load), and link l ``send_bytes / (r bw_l)`` of
every transfer routed over it (``link_load``, in place of the relayed boundary loads).
At integral points these are plan_cost's loads term by term.
"""
from __future__ import annotations

import pyomo.environ as pyo

from distplan.costs.collectives import boundary_links
from distplan.costs.exposed import transfer_s
from distplan.costs.problem import Problem


def add_exposed(m, problem: Problem, spec) -> None:
    """``send`` variables and rows, ``comm_load`` and the direct-send ``link_load``."""
    K = m.K
    cells = {}
    for (v, k, q) in m.CELLS:
        cells.setdefault(v, {}).setdefault(k, []).append(q)
    rows, idx = [], set()
    for e in m.EDGES:
        u, v = (int(x) for x in problem.edges[e])
        for a, qs in cells.get(u, {}).items():
            for b in range(a + 1, K):
                if b not in cells.get(v, {}):
                    continue
                for q in qs:
                    rows.append((e, a, b, q))
                    idx.add((u, a, b, q))
    m.SENDS = pyo.Set(initialize=sorted(idx), dimen=4, ordered=True)
    m.send = pyo.Var(m.SENDS, bounds=(0, 1))
    m.SEND_ROWS = pyo.Set(initialize=rows, dimen=4, ordered=True)

    def need(m, e, a, b, q):
        u, v = (int(x) for x in problem.edges[e])
        on_b = m.y[v, b] - (m.y[v, b + 1] if b + 1 < K else 0)
        return m.send[u, a, b, q] >= m.z[u, a, q] + on_b - 1
    m.send_need = pyo.Constraint(m.SEND_ROWS, rule=need)
    f = m.tscale / m.R
    bw = problem.link_bw_bytes_per_s
    comm: dict[tuple[int, int], list] = {(k, i): [] for k in range(K) for i in range(m.R)}
    users: dict[int, list] = {}
    for i, lane in enumerate(m.lanes):
        routes = {(a, b): boundary_links(problem, lane[a], lane[b]) for a in range(K) for b in range(a + 1, K)}
        for (u, a, b, q) in m.SENDS:
            if lane[a] == lane[b]:
                continue
            nbytes = float(problem.send_bytes[u, q])
            t = f * transfer_s(problem, lane[a], lane[b], nbytes)
            comm[a, i].append(t * m.send[u, a, b, q])
            comm[b, i].append(t * m.send[u, a, b, q])
            for l in routes[a, b]:
                users.setdefault(l, []).append((nbytes / (m.R * float(bw[l])), (u, a, b, q)))
    m.COMM = pyo.Set(initialize=sorted(comm), dimen=2, ordered=True)
    m.comm_load = pyo.Expression(m.COMM, rule=lambda m, k, i: sum(comm[k, i]))
    m.USED_LINKS = pyo.Set(initialize=sorted(users))
    m.link_load = pyo.Expression(
        m.USED_LINKS, rule=lambda m, l: m.tscale * sum(c * m.send[s] for c, s in users[l]))


def add_exposed_period(m, problem: Problem, spec) -> None:
    """T >= device_load[k, kind of lane i's device] + comm_load[k, i] (``period_comm``)."""
    kind = {(k, i): int(problem.device_kind[lane[k]]) for i, lane in enumerate(m.lanes) for k in range(m.K)}
    m.period_comm = pyo.Constraint(m.COMM, rule=lambda m, k, i: m.T >= m.device_load[k, kind[k, i]]
                                   + m.comm_load[k, i])


def exposed_loads(m, problem: Problem) -> list:
    """The period rows' right-hand sides (device_load + comm_load) per (stage, lane)."""
    kind = {(k, i): int(problem.device_kind[lane[k]]) for i, lane in enumerate(m.lanes) for k in range(m.K)}
    return [pyo.value(m.device_load[k, kind[k, i]] + m.comm_load[k, i]) for (k, i) in m.COMM]


def assign_sends(m, problem: Problem, stage: list[int], q_of: list[int]) -> None:
    """Set ``send`` to what a plan (op -> stage position, op -> precision index) implies."""
    on = set()
    for u, v in problem.sending_edges().tolist():
        if stage[v] > stage[u]:
            on.add((u, stage[u], stage[v], q_of[u]))
    for s in m.SENDS:
        m.send[s].set_value(1 if s in on else 0)
