"""Between MILP solutions and Plans: read a Plan off variable values, and write a Plan's
values onto every variable (a complete warm start)."""
from __future__ import annotations

import pyomo.environ as pyo

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.model.lanes import lane_stages
from distplan.model.build import assign_memory, mem_unit_bytes
from distplan.model.exposed_rows import assign_sends, exposed_loads


def make_plan(problem: Problem, path: tuple[int, ...], op_stage, op_prec_idx, predicted=None,
              lanes: tuple[tuple[int, ...], ...] | None = None) -> Plan:
    """Stages as Stage((path[k],)), or with ``lanes`` Stage((lane_0[k], ..., lane_{r-1}[k]))
    (model.lanes); empty intermediate stages stay as relays, trailing empty stages are
    dropped."""
    S = max(op_stage) + 1
    lanes = lanes or (tuple(path),)
    return Plan(op_stage=tuple(int(k) for k in op_stage),
                op_precision=tuple(problem.precisions[q] for q in op_prec_idx),
                stages=lane_stages(lanes, S),
                microbatches=problem.microbatches, schedule=problem.schedule,
                predicted=dict(predicted or {}))


def plan_from_values(m, problem: Problem, value) -> Plan:
    """``value(var) -> float``; rounds the binaries y and prec."""
    V, Q = problem.n_ops, len(problem.precisions)
    stage = [sum(1 for k in m.CUTS if value(m.y[v, k]) > 0.5) for v in range(V)]
    prec = [max(range(Q), key=lambda q: value(m.prec[v, q])) for v in range(V)]
    return make_plan(problem, m.path, stage, prec, lanes=m.lanes)


def projection(plan: Plan) -> tuple:
    """Symmetry-free identity of a plan: op stages, precisions and replica count (not
    device labels)."""
    return (plan.op_stage, plan.op_precision, plan.stages[0].replicas if plan.stages else 1)


def assign_plan(m, problem: Problem, plan: Plan) -> None:
    """Set every model variable to the values ``plan`` implies (plan stages are positions
    on ``m.path``, replicated on ``m.lanes``)."""
    V = problem.n_ops
    stage = list(plan.op_stage)
    q_of = [problem.q_index(p) for p in plan.op_precision]
    for v in range(V):
        for k in m.CUTS:
            m.y[v, k].set_value(1 if stage[v] >= k else 0)
        for q in m.PRECS:
            m.prec[v, q].set_value(1 if q_of[v] == q else 0)
    for (v, k, q) in m.CELLS:
        m.z[v, k, q].set_value(1 if (stage[v] == k and q_of[v] == q) else 0)
    for e in m.EDGES:
        u, v = (int(x) for x in problem.edges[e])
        for b in m.BOUNDS:
            c = 1 if stage[u] <= b < stage[v] else 0
            m.xc[e, b].set_value(c)
            for q in m.WIDE:
                m.xq[e, b, q].set_value(1 if c and q_of[u] == q else 0)
    for (e, a, b, k) in m.CASTS:
        u, v = (int(x) for x in problem.edges[e])
        m.cast[e, a, b, k].set_value(1 if (q_of[u] == a and q_of[v] == b and stage[v] == k) else 0)
    last = max(stage)
    for k in m.CUTS:
        m.w[k].set_value(1 if k <= last else 0)
    if hasattr(m, "tied"):   # tied weights held where their owner is not (model.build)
        for (v, k) in m.TIED:
            o = int(problem.tied_owner[v])
            m.tied[v, k].set_value(float(problem.tied_bytes[v, q_of[v]] / mem_unit_bytes(m, problem, k))
                                   if stage[v] == k and stage[o] != k else 0.0)
    assign_memory(m, problem, stage, q_of)   # stream memory: sent bytes, liveness peak (model.build)
    if hasattr(m, "bused"):
        for b in m.BOUNDS:
            m.bused[b].set_value(max([m.xc[e, b].value for e in m.EDGES], default=0))
    if hasattr(m, "send"):
        assign_sends(m, problem, stage, q_of)
    loads = [pyo.value(m.device_load[k, c]) for (k, c) in m.STAGE_KINDS]
    if hasattr(m, "comm_load"):
        loads += exposed_loads(m, problem)
    if hasattr(m, "link_load"):
        loads += [pyo.value(m.link_load[l]) for l in m.USED_LINKS]
    m.T.set_value(max(loads + [0.0]))

