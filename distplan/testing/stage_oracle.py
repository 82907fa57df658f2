"""An independent oracle for the stage MILP (docs/concepts/stage-milp.md): every plan of
its declared space written out from the page's rules, scored by the page's objective
computed stage by stage from ``costs`` (nothing here reads ``model.stage_*``), the
memory checker (``costs.check.plan_violations``) the judge of feasibility.

Declared space: the layers (``cluster_oracle.layer_groups``) split into 1..max_stages
contiguous non-empty stages; each stage its own tp (a divisor of the node size in the
chain 1 | t1 | t2 ...), dp (dividing the microbatches, not increasing along the
pipeline), recomputation, ZeRO 0-2 (dp > 1), sequence parallelism (tp > 1), a recipe
(every op at the training precision, or with "fp8" among the recipes Transformer
Engine's: fp8 linear layers, the rest at the training precision); sum of tp x dp <=
devices; stages laid out in pipeline order when each block starts at a multiple of its
tp, else by decreasing tp.
Objective (F_k, B_k on rank 0, c_k the boundary into k over the route from device 0
to the first device of node 1, R_k the stage's gradients streamed over the busiest link
of its flat rings or, where the replicas share nodes, of its hierarchical reduction,
whichever rate is lower (``costs.reduction_bound.stage_stream``: every tp rank's rings
where they share links), R1_k that reduction's chain for its first parameter op's gradients, O_k the optimizer step, ZeRO gather and fp8 weight
cast): sum_k (F_k
+ B_k) + 2 sum_k c_k + max_k (n_k - 1)(F_k + B_k) + max(0, max_k (max(R_k - B_k, R1_k)
- sum_{j<k} (B_j + c_{j+1}))) + max_k O_k.
"""
from __future__ import annotations

import itertools

from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.collectives import all_gather_s, gradient_reduction_parts
from distplan.costs.compute import optimizer_step_s
from distplan.costs.fp8 import is_fp8_linear, weight_cast_s
from distplan.costs.megatron import fp8_training_precisions
from distplan.costs.iteration import op_rank_times
from distplan.costs.problem import Problem
from distplan.costs.recompute import recomputed
from distplan.costs.reduction_bound import stage_stream
from distplan.costs.routes import route_s
from distplan.testing.cluster_oracle import RECOMPUTE, layer_groups


def _tp_chain(problem: Problem) -> list[int]:
    nodes = [d.node for d in problem.topology.devices]
    g = nodes.count(nodes[0])
    out: list[int] = []
    for d in range(1, g + 1):
        if g % d == 0 and (not out or d % out[-1] == 0):
            out.append(d)
    return out


def configs(problem: Problem, recipes=("",)) -> list[tuple[int, int, str, int, bool, str]]:
    """(tp, dp, recompute, zero, sequence parallel, recipe) a stage may take."""
    M, N = problem.microbatches, problem.n_devices
    return [(tp, dp, rc, z, sp, r) for tp in _tp_chain(problem) for dp in range(1, M + 1)
            if M % dp == 0 and tp * dp <= N for rc in RECOMPUTE for z in ((0, 1, 2) if dp > 1 else (0,))
            for sp in ((False, True) if tp > 1 else (False,)) for r in recipes]


def _devices(cfgs) -> list[tuple[int, ...]]:
    sizes = [tp * dp for tp, dp, *_ in cfgs]
    order = list(range(len(cfgs)))
    at, aligned = 0, True
    for k in order:
        aligned &= at % cfgs[k][0] == 0
        at += sizes[k]
    if not aligned:
        order.sort(key=lambda k: -cfgs[k][0])
    out, at = [()] * len(cfgs), 0
    for k in order:
        out[k] = tuple(range(at, at + sizes[k]))
        at += sizes[k]
    return out


def stage_objective_s(problem: Problem, plan: Plan) -> float:
    """The page's objective of a 1F1B plan (module docstring), stage by stage."""
    K, M = plan.n_stages, plan.microbatches
    qs = [problem.q_index(p) for p in plan.op_precision]
    kind = problem.topology.kind_of(0)
    nodes = [d.node for d in problem.topology.devices]
    far = nodes.index(nodes[0] + 1) if nodes[0] + 1 in nodes else min(1, problem.n_devices - 1)
    again = recomputed(problem, plan)
    fused = problem.low_bit_ops == "matmul" and "fp8" in problem.precisions
    t, b, c, red, red1, opt = [], [], [], [], [], []
    for k, st in enumerate(plan.stages):
        ops = plan.ops_in_stage(k)
        f_op, b_op = op_rank_times(problem, list(range(st.tensor_parallel)), qs, ops, st.sequence_parallel, again)
        t.append(float(f_op.sum() + b_op.sum()))
        b.append(float(b_op.sum()))
        cut = sum(float(problem.edge_elems[e] * problem.bytes_per_elem[qs[u]])
                  for e, (u, v) in enumerate(problem.edges.tolist()) if plan.op_stage[u] < k <= plan.op_stage[v])
        c.append(route_s(problem, 0, far, cut / st.tensor_parallel) if cut > 0 else 0.0)
        elems = sum(problem.graph.ops[v].param_elems for v in ops)
        nbytes = sum(problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[qs[v]]) for v in ops)
        tp, r = st.tensor_parallel, st.replicas
        ring = [i * tp for i in range(r)]
        share = r if st.zero and r > 1 else 1
        first = next((problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[qs[v]]) for v in ops
                      if problem.graph.ops[v].param_elems > 0), 0.0)
        hier, lat, rate = stage_stream(problem, tp, r, st.zero) if r > 1 else (False, 0.0, 0.0)
        red.append(lat + rate * nbytes / tp if r > 1 else 0.0)
        red1.append(gradient_reduction_parts(problem, ring, first / tp, hier, st.zero)[0] if r > 1 else 0.0)
        w8 = [v for v in ops if fused and plan.op_precision[v] == "fp8" and is_fp8_linear(problem.graph.ops[v])]
        cast = weight_cast_s(sum(problem.graph.ops[v].param_elems for v in w8) / tp, len(w8), kind.mem_bw_bytes_per_s,
                             kind.launch_overhead_s)
        opt.append(optimizer_step_s(elems / (tp * share), 0, kind) + nbytes / (tp * share) * 2 / kind.mem_bw_bytes_per_s
                   + (all_gather_s(problem, ring, nbytes / tp) if st.zero and r > 1 else 0.0) + cast)
    pipe = sum(t) + 2 * sum(c) + max((M // st.replicas - 1) * t[k] for k, st in enumerate(plan.stages))
    exposed = max(0.0, max(max(red[k] - b[k], red1[k]) - sum(b[j] + c[j + 1] for j in range(k)) for k in range(K)))
    return pipe + exposed + max(opt)


def declared_plans(problem: Problem, precision: str, max_stages: int, recipes=("",)):
    """Every plan of the declared space (module docstring)."""
    groups = layer_groups(problem)
    L, N = len(groups), problem.n_devices
    q = problem.q_index(precision)
    at = {"": [problem.precisions[problem.fallback_q(v, q)] for v in range(problem.n_ops)]}
    if "fp8" in recipes:
        at["fp8"] = list(fp8_training_precisions(problem, precision))
    cs = configs(problem, recipes)
    for K in range(1, min(L, max_stages) + 1):
        for cut in itertools.combinations(range(1, L), K - 1):
            edges = (0, *cut, L)
            op_stage = [0] * problem.n_ops
            for k, (a, b) in enumerate(zip(edges, edges[1:])):
                for g in groups[a:b]:
                    for v in g:
                        op_stage[v] = k
            for cfgs in itertools.product(cs, repeat=K):
                if sum(tp * dp for tp, dp, *_ in cfgs) > N or any(x[1] < y[1] for x, y in zip(cfgs, cfgs[1:])):
                    continue
                stages = tuple(Stage(devs, tp, rc, sp, z)
                               for devs, (tp, dp, rc, z, sp, _) in zip(_devices(cfgs), cfgs))
                op_precision = tuple(at[cfgs[k][5]][v] for v, k in enumerate(op_stage))
                yield Plan(tuple(op_stage), op_precision, stages, problem.microbatches, "1f1b")


def stage_optimum(problem: Problem, precision: str, max_stages: int, recipes=("",)) -> float:
    """The least objective over the feasible plans of the declared space (inf: none)."""
    return min((stage_objective_s(problem, p) for p in declared_plans(problem, precision, max_stages, recipes)
                if not plan_violations(problem, p)), default=float("inf"))
