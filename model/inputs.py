"""What a solve may explore, and inputs no plan can satisfy: ``check_inputs`` raises
DistplanError naming the op or constraint at fault; ``replica_counts`` and
``layouts_to_explore`` list the replication factors and lane layouts to try."""
from __future__ import annotations

import math

from distplan.costs.memory import activation_factors
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.model.options import SolveOptions
from distplan.topologies.paths import divisors, lane_layouts

MIB = 2.0**20
Lanes = tuple[tuple[int, ...], ...]


def check_inputs(problem: Problem, options: SolveOptions) -> None:
    """Raise DistplanError for inputs no plan can satisfy, naming the op or constraint."""
    g, topo = problem.graph, problem.topology
    kinds = problem.device_kind
    D = problem.n_devices
    # fewest copies of an output any stage holds (1F1B's last stage holds one microbatch;
    # a stream holds an output once when its consumers share its stage)
    n1 = 1.0 if problem.schedule == "1f1b" else float(activation_factors(problem.schedule, 0, 1,
                                                                          problem.microbatches)[0])
    for v, op in enumerate(g.ops):
        best = None
        for q, p in enumerate(problem.precisions):
            devs = [d for d in range(D) if problem.supported[q, kinds[d]]]
            if not devs or not problem.op_allowed[v, q]:
                continue
            need = problem.static_bytes[v, q] + n1 * problem.act_bytes[v, q]
            cap = max(problem.device_mem_bytes[d] for d in devs)
            if best is None or need - cap < best[0] - best[1]:
                best = (need, cap, p)
            if need <= cap:
                best = None
                break
        if best is not None:
            need, cap, p = best
            raise DistplanError(
                f"op {op.name!r} does not fit on any device: it needs {need / MIB:.2f} MiB even at {p} "
                f"(parameters {problem.static_bytes[v, problem.q_index(p)] / MIB:.2f} MiB + output "
                f"{problem.act_bytes[v, problem.q_index(p)] / MIB:.2f} MiB x {n1:g} in-flight {'copy' if n1 == 1 else 'copies'}) "
                f"but the largest device holds {cap / MIB:.2f} MiB (short by {(need - cap) / MIB:.2f} MiB); "
                "use a lower precision, a smaller batch or sequence, fewer in-flight microbatches, "
                "or devices with more memory")
    _check_tied(problem, n1)
    if options.sensitivity_budget is not None:
        # per op: the least sensitivity among precisions some device runs and has room for
        lo_terms, forced = [], []
        for v, op in enumerate(g.ops):
            fits = [q for q in range(len(problem.precisions)) if problem.op_allowed[v, q]
                    and any(problem.supported[q, kinds[d]] and problem.static_bytes[v, q] + n1 * problem.act_bytes[v, q]
                           <= problem.device_mem_bytes[d] for d in range(D))]
            best_q = min(fits, key=lambda q: problem.sensitivity[v, q])
            lo_terms.append(problem.sensitivity[v, best_q])
            if problem.sensitivity[v, best_q] > 0:
                forced.append(f"{op.name} ({problem.precisions[best_q]})")
        lo = math.fsum(lo_terms)
        if options.sensitivity_budget < lo - 1e-12:
            why = (f"; ops that fit only at a lower precision: {', '.join(forced[:4])}"
                   + (f" and {len(forced) - 4} more" if len(forced) > 4 else "")) if forced else ""
            raise DistplanError(
                f"sensitivity budget {options.sensitivity_budget:.6g} is below the minimum any plan achieves "
                f"({lo:.6g}: every op at the highest precision that some device runs and holds{why}); "
                f"short by {lo - options.sensitivity_budget:.6g}: raise the budget to at least {lo:.6g}")
    K = options.n_stages or D
    if K > D:
        raise DistplanError(f"n_stages {K} exceeds the {D} devices of topology {topo.name!r}; use at most {D}")


def _check_tied(problem: Problem, n1: float) -> None:
    """An op reading tied weights needs them on its device: beside their owner (both ops'
    bytes) or as its own copy. Raise when neither fits the largest device."""
    cap = float(problem.device_mem_bytes.max())
    need = problem.static_bytes + n1 * problem.act_bytes   # (V, Q), each op alone
    for v, o in enumerate(problem.tied_owner):
        if o < 0:
            continue
        apart = float((need[v] + problem.tied_bytes[v]).min())
        together = float(need[v].min() + need[o].min())
        if min(apart, together) > cap:
            g = problem.graph
            raise DistplanError(
                f"op {g.ops[v].name!r} reads the weights of {g.ops[o].name!r} (tied): beside it the two need "
                f"{together / MIB:.2f} MiB, apart it needs its own copy, {apart / MIB:.2f} MiB, but the largest "
                f"device holds {cap / MIB:.2f} MiB (short by {(min(apart, together) - cap) / MIB:.2f} MiB); "
                "use a smaller batch or sequence, or devices with more memory")


def replica_counts(problem: Problem, options: SolveOptions) -> list[int]:
    """Replication factors to explore: every divisor of the device count for an inference
    stream under the throughput objective, else 1 (``options.replicas`` forces one)."""
    D = problem.n_devices
    free = problem.schedule == "stream" and options.objective == "throughput"
    if options.replicas is not None:
        r = options.replicas
        if D % r:
            raise DistplanError(f"replicas {r} does not divide the {D} devices of topology "
                                f"{problem.topology.name!r}; use one of {', '.join(map(str, divisors(D)))}")
        if r > 1 and not free:
            raise DistplanError("replicated lanes are modelled for inference streams under the throughput "
                                "objective only; use replicas 1 (training: the gradient all-reduce is not modelled)")
        return [r]
    return divisors(D) if free else [1]


def layouts_to_explore(problem: Problem, options: SolveOptions) -> list[tuple[int, str, Lanes]]:
    """(r, layout name, lanes) for every replication factor of ``replica_counts`` and
    every lane layout of it (topologies.paths.lane_layouts), only ``options.path`` when set."""
    rs = replica_counts(problem, options)
    layouts = [(r, n, lanes) for r in rs for n, lanes in lane_layouts(problem.topology, r)]
    if options.path is not None:
        layouts = [x for x in layouts if x[1] == options.path]
        if not layouts:
            names = ", ".join(n for r in rs for n, _ in lane_layouts(problem.topology, r))
            raise DistplanError(f"path family {options.path!r} not available here; use one of {names}")
    return layouts
