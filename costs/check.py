"""Independent feasibility check of a Plan against a Problem (no MILP code involved).

Checks: every op has a stage and an allowed precision; stage devices exist; each
op's precision runs on every device of its stage (on each replica: the replica's own
precision when ``Stage.replica_precision`` overrides it); replica groups are well formed
(``Stage.shares``: one per replica, each >= 1, summing to the plan's microbatches;
``Stage.replica_precision``: one mapping per replica, naming ops of that stage, at
precisions the problem allows, the low-bit policy lets the op use and every device of
the replica runs); offloading on training stages with a host link (costs.offload); tensor-
parallel overlap on stages with tp >= 2 and sequence parallelism (costs.tp_overlap); no tensor flows to an earlier stage; a colocate group on one
stage; memory per device
(costs.evaluate.plan_memory_bytes) fits its capacity; under exposed communication,
only the plans it is modelled for (``exposed_violations``).
"""
from __future__ import annotations

from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.offload import offload_violations
from distplan.costs.problem import Problem
from distplan.costs.sharding import ZERO_HELP, ZERO_LEVELS
from distplan.costs.tp_overlap import tp_overlap_violations
from distplan.core.errors import DistplanError
from distplan.core.plan import DP_ALLREDUCE, PHASES, RECOMPUTE, Plan
from distplan.core.schedules import PLAN_SCHEDULES
from distplan.workloads.colocate import split_groups


class InfeasiblePlan(DistplanError):
    """A plan that breaks a constraint; the message names what and by how much."""


def plan_violations(problem: Problem, plan: Plan, memory_bound: bool = True) -> list[str]:
    """Every violated constraint, as one human-readable line each (empty if feasible).
    ``memory_bound=False`` leaves out the static memory bound (``plan_memory_bytes``,
    which counts a tensor-parallel stage's activations unsharded and all at once); the
    simulated peak is then the judge (the cluster space's plans)."""
    g, topo = problem.graph, problem.topology
    out: list[str] = []
    V = len(g.ops)
    if len(plan.op_stage) != V or len(plan.op_precision) != V:
        return [f"plan covers {len(plan.op_stage)} ops but graph {g.name!r} has {V}"]
    if plan.schedule not in PLAN_SCHEDULES:
        out.append(f"schedule {plan.schedule!r} unknown; use one of {PLAN_SCHEDULES}")
    if plan.microbatches < 1:
        out.append(f"microbatches must be >= 1, got {plan.microbatches}")
    if not plan.stages:
        return out + ["plan has no stages"]
    for k, s in enumerate(plan.stages):
        if not s.devices:
            out.append(f"stage {k} has no devices")
        if s.tensor_parallel < 1 or len(s.devices) % s.tensor_parallel:
            out.append(f"stage {k}: {len(s.devices)} devices not a multiple of tensor_parallel {s.tensor_parallel}")
        for d in s.devices:
            if not 0 <= d < topo.n_devices:
                out.append(f"stage {k}: device index {d} outside 0..{topo.n_devices - 1}")
        if len(set(s.devices)) != len(s.devices):
            out.append(f"stage {k}: a device is listed twice")
        if s.recompute not in RECOMPUTE:
            out.append(f"stage {k}: recompute {s.recompute!r} unknown; use one of {', '.join(RECOMPUTE)}")
        if s.zero not in ZERO_LEVELS:
            out.append(f"stage {k}: zero {s.zero!r} unknown; use {ZERO_HELP}")
        elif s.zero >= 2 and s.replicas < 2:
            out.append(f"stage {k}: zero {s.zero} shards over the stage's data-parallel replicas, but it has one")
        elif s.zero == 3 and plan.device_order is not None:
            out.append(f"stage {k}: zero 3 (FSDP) gathers around each unit in the schedule's order; it does not "
                       "combine with an explicit device order")
        if (s.recompute != "none" or s.zero) and not problem.training:
            out.append(f"stage {k}: recompute and zero apply to training only")
        out += _share_violations(plan, k)
    out += offload_violations(problem, plan)   # costs.offload
    out += tp_overlap_violations(plan)         # costs.tp_overlap
    if plan.dp_allreduce not in DP_ALLREDUCE:
        out.append(f"dp_allreduce {plan.dp_allreduce!r} unknown; use one of {', '.join(DP_ALLREDUCE)}")
    if out:
        return out
    for v, (k, p) in enumerate(zip(plan.op_stage, plan.op_precision)):
        name = g.ops[v].name
        if not 0 <= k < plan.n_stages:
            out.append(f"op {name!r}: stage {k} outside 0..{plan.n_stages - 1}")
            continue
        if p not in problem.precisions:
            out.append(f"op {name!r}: precision {p!r} not allowed (allowed: {', '.join(problem.precisions)})")
            continue
        allowed = getattr(problem, "op_allowed", None)
        if allowed is not None and not allowed[v, problem.q_index(p)]:
            out.append(f"op {name!r}: precision {p} not allowed for a {g.ops[v].kind} op by the low-bit policy "
                       f"({getattr(problem, 'low_bit_ops', 'matmul')!r})")
            continue
        st = plan.stages[k]
        for i in range(st.replicas):
            if v in st.overrides(i):
                continue   # checked with the overrides
            for d in st.replica_group(i):
                kind = topo.kind_of(d)
                if not kind.supports(p):
                    out.append(f"op {name!r}: precision {p} not supported by device {topo.devices[d].name} "
                               f"({kind.name})")
    if out:
        return out
    out += _override_violations(problem, plan)
    if out:
        return out
    for u, v in problem.edges:
        if plan.op_stage[u] > plan.op_stage[v]:
            a, b = g.ops[u].name, g.ops[v].name
            out.append(f"tensor {a!r}->{b!r} flows from stage {plan.op_stage[u]} back to stage "
                       f"{plan.op_stage[v]}; move {b!r} to stage >= {plan.op_stage[u]} or {a!r} to stage "
                       f"<= {plan.op_stage[v]}")
    out += split_groups(g, plan.op_stage)   # the graph's colocate groups, each on one stage
    if getattr(problem, "comm", "overlapped") == "exposed":
        out += exposed_violations(plan)
    if plan.schedule == "explicit":
        out += _order_violations(problem, plan)
    if plan.schedule == "interleaved":
        out += interleaved_violations(problem, plan)
        if out:
            return out
    mem = plan_memory_bytes(problem, plan) if memory_bound else []
    for d, used in enumerate(mem):
        cap = problem.device_mem_bytes[d]
        if used > cap * (1 + 1e-12):
            out.append(f"device {topo.devices[d].name}: needs {used / 2**20:.2f} MiB but holds "
                       f"{cap / 2**20:.2f} MiB (short by {(used - cap) / 2**20:.2f} MiB)")
    return out


def exposed_violations(plan: Plan) -> list[str]:
    """Exposed communication (costs.exposed) is modelled for pipelines of whole-op stages
    in the schedules' own order: no tensor parallelism, no explicit or interleaved order."""
    out = [f"stage {k}: tensor_parallel {s.tensor_parallel} is not modelled with exposed communication "
           "(comm 'exposed'); use tensor_parallel 1" for k, s in enumerate(plan.stages) if s.tensor_parallel > 1]
    if plan.schedule in ("explicit", "interleaved"):
        out.append(f"schedule {plan.schedule!r} is not modelled with exposed communication (comm 'exposed'); "
                   "use stream, 1f1b or gpipe")
    return out


def _share_violations(plan: Plan, k: int) -> list[str]:
    """What is wrong with stage k's ``shares`` and the shape of its ``replica_precision``."""
    s, out = plan.stages[k], []
    if s.shares is not None:
        if len(s.shares) != s.replicas:
            out.append(f"stage {k}: {len(s.shares)} shares for {s.replicas} replicas; give one share per replica")
        elif min(s.shares) < 1:
            i = min(range(len(s.shares)), key=s.shares.__getitem__)
            out.append(f"stage {k}: replica {i} has share {s.shares[i]}; every replica needs >= 1 microbatch "
                       "(leave its devices out of the stage instead)")
        elif sum(s.shares) != plan.microbatches:
            out.append(f"stage {k}: shares {list(s.shares)} sum to {sum(s.shares)}, not the plan's "
                       f"{plan.microbatches} microbatches")
    if s.replica_precision is not None and len(s.replica_precision) != s.replicas:
        out.append(f"stage {k}: replica_precision lists {len(s.replica_precision)} replicas, the stage has "
                   f"{s.replicas}; give one mapping (possibly empty) per replica")
    return out


def _override_violations(problem: Problem, plan: Plan) -> list[str]:
    """Each precision override names an op of its stage, an allowed precision the
    low-bit policy lets the op use, and one every device of its replica runs."""
    g, topo, out = problem.graph, problem.topology, []
    allowed = getattr(problem, "op_allowed", None)
    for k, st in enumerate(plan.stages):
        for i in range(st.replicas):
            for v, p in st.overrides(i).items():
                where = f"stage {k} replica {i}"
                if not 0 <= v < len(g.ops):
                    out.append(f"{where}: precision override for op index {v} outside 0..{len(g.ops) - 1}")
                    continue
                name = g.ops[v].name
                if plan.op_stage[v] != k:
                    out.append(f"{where}: op {name!r} has a precision override but runs on stage {plan.op_stage[v]}")
                    continue
                if p not in problem.precisions:
                    out.append(f"op {name!r} on {where}: precision {p!r} not allowed (allowed: "
                               f"{', '.join(problem.precisions)})")
                    continue
                q = problem.q_index(p)
                if allowed is not None and not allowed[v, q]:
                    out.append(f"op {name!r} on {where}: precision {p} not allowed for a {g.ops[v].kind} op by the "
                               f"low-bit policy ({getattr(problem, 'low_bit_ops', 'matmul')!r})")
                    continue
                for d in st.replica_group(i):
                    kind = topo.kind_of(d)
                    if not kind.supports(p):
                        out.append(f"op {name!r} on {where}: precision {p} not supported by device "
                                   f"{topo.devices[d].name} ({kind.name})")
    return out


def _order_violations(problem: Problem, plan: Plan) -> list[str]:
    if plan.device_order is None:
        return ["schedule 'explicit' needs a device_order"]
    phases = PHASES if problem.training else ("F",)
    want = set()
    for m in range(plan.microbatches):
        for v, k in enumerate(plan.op_stage):
            for dev in plan.stages[k].replica_devices(m):
                for ph in phases:
                    want.add((dev, m, v, ph))
    have = [(dev, m, v, ph) for dev, seq in plan.device_order.items() for m, v, ph in seq]
    out = []
    if len(have) != len(set(have)) or set(have) != want:
        out.append(f"device_order lists {len(set(have))} distinct tasks but the plan has {len(want)} "
                   f"({len(want - set(have))} missing, {len(set(have) - want)} unexpected)")
    return out


def interleaved_violations(problem: Problem, plan: Plan) -> list[str]:
    """Megatron's interleaved schedule (``core.schedules.interleaved_order``): training;
    the stages are pp x vp chunks, chunk c on the devices of chunk c mod pp with pp >= 2
    (``Plan.pipeline_ranks``), no device in two ranks; every chunk the same replicas,
    round-robin (no shares), and each replica's microbatches a multiple of pp."""
    out: list[str] = []
    if not problem.training:
        return ["schedule 'interleaved' is for training"]
    pp, vp = plan.pipeline_ranks, plan.virtual_stages
    if pp < 2 or vp < 1:
        return [f"schedule 'interleaved' needs the stages to repeat the devices of pp >= 2 pipeline ranks "
                f"(chunk c on the devices of chunk c mod pp); these {plan.n_stages} stages give pp {pp}"]
    seen: dict[int, int] = {}
    for k in range(pp):
        for d in plan.stages[k].devices:
            if seen.setdefault(d, k) != k:
                out.append(f"schedule 'interleaved': device {problem.topology.devices[d].name} is on pipeline ranks "
                           f"{seen[d]} and {k}")
    rs = {st.replicas for st in plan.stages}
    if len(rs) != 1 or any(not st.even() for st in plan.stages):
        out.append("schedule 'interleaved' needs every chunk to have the same replicas, microbatches round-robin "
                   "(no uneven shares)")
        return out
    r = rs.pop()
    if plan.microbatches % r or (plan.microbatches // r) % pp:
        out.append(f"schedule 'interleaved': {plan.microbatches} microbatches over {r} replica(s) is not a "
                   f"multiple of pp {pp} per replica (Megatron's rule)")
    return out


def check_plan(problem: Problem, plan: Plan, memory_bound: bool = True) -> None:
    """Raise :class:`InfeasiblePlan` listing every violation; return None if feasible."""
    bad = plan_violations(problem, plan, memory_bound)
    if bad:
        more = f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""
        raise InfeasiblePlan("infeasible plan: " + "; ".join(bad[:5]) + more)
