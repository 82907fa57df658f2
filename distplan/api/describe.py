"""One-screen summaries: the zoo and preset listing, and ``--describe`` of a problem."""
from __future__ import annotations

from distplan.costs.problem import Problem


def listing() -> str:
    """Every workload and topology preset, one line each."""
    from distplan.topologies.presets import list_presets
    from distplan.workloads.zoo import list_workloads

    lines = ["workloads:"]
    lines += [f"  {name:<32} {desc}" for name, desc in list_workloads()]
    lines.append("topologies:")
    lines += [f"  {name:<32} {desc}" for name, desc in list_presets()]
    return "\n".join(lines)


def _si(x: float, unit: str) -> str:
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def describe(problem: Problem) -> str:
    """Op count, FLOPs, parameters, devices, aggregate peak and the period lower bound."""
    g, t = problem.graph, problem.topology
    kinds: dict[str, int] = {}
    for d in t.devices:
        kinds[d.kind] = kinds.get(d.kind, 0) + 1
    peaks = []
    for prec in problem.precisions:
        total = sum(n * t.kinds[k].peak_flops_per_s.get(prec, 0.0) for k, n in kinds.items())
        if total:
            peaks.append(f"{prec} {_si(total, 'FLOP/s')}")
    lb = problem.period_lower_bound_s()
    lines = [
        f"workload   {g.name} ({g.mode}, batch {g.batch_size}"
        + (f", seq {g.seq_len}" if g.seq_len else "") + ")",
        f"operators  {len(g.ops)} ops, {len(g.tensors)} tensors"
        + (f"; {len(g.colocate)} colocate group(s) of {sum(map(len, g.colocate))} ops, each on one stage"
           if g.colocate else ""),
        f"flops      forward {_si(g.fwd_flops, 'FLOP')}"
        + (f", backward {_si(g.bwd_flops, 'FLOP')}" if problem.training else "") + " per microbatch",
        f"params     {g.param_elems:,} ({g.param_elems / 1e6:.1f} M)",
        f"topology   {t.name}: {t.n_devices} devices ("
        + ", ".join(f"{n} x {k}" for k, n in sorted(kinds.items())) + f"), {len(t.links)} links",
        f"peak       {', '.join(peaks) or 'none for the allowed precisions'}",
        f"precisions {', '.join(problem.precisions)}; {problem.microbatches} microbatches, schedule {problem.schedule}"
        + ("; exposed communication (transfers on the device loads)" if problem.exposed else ""),
        f"period lower bound (fastest total compute / devices): {lb:.4g} s "
        f"-> at most {g.batch_size / lb:.4g} samples/s" if lb > 0 else "period lower bound: 0 s",
    ]
    return "\n".join(lines)
