"""What ``distplan.solve`` returns: ranked, simulated plans beside the solver's figures,
as a table, a JSON document, plan/trace files and plots."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distplan.core.atomic import write_json_atomic
from distplan.core.errors import DistplanError
from distplan.core.validate import check_instance, check_int, check_path, is_int
from distplan.core.plan import Plan, plan_to_dict
from distplan.core.space import BoundKind
from distplan.costs.plan_file import save_plan
from distplan.costs.problem import Problem
from distplan.model import SolveOptions, SolveResult
from distplan.sim import SimResult


@dataclass(frozen=True)
class RankedPlan:
    """One plan with its MILP period, ideal-mode and realistic simulations; ``sim`` is
    None when the time limit allowed no simulation (the plan's figures are then the
    model's: ``milp_period_s``, ``plan.predicted['model_iteration_s']``)."""

    rank: int
    plan: Plan
    milp_period_s: float
    ideal_period_s: float
    sim: SimResult | None  # realistic settings

    @property
    def simulated(self) -> bool:
        return self.sim is not None


def _sim_figures(r: RankedPlan) -> dict[str, Any]:
    """The ``--json`` fields read from the realistic simulation (None when not simulated)."""
    x = r.sim
    return {"simulated": x is not None,
            "sim_period_s": x.period_s if x else None, "sim_ideal_period_s": r.ideal_period_s,
            "throughput_per_s": x.throughput_per_s if x else None, "makespan_s": x.makespan_s if x else None,
            "iteration_s": x.iteration_s if x else None, "step_throughput_per_s": x.step_throughput_per_s if x else None,
            "optimizer_s": x.optimizer_s if x else None,
            "peak_memory_bytes": float(max(x.peak_memory_bytes)) if x else None}


def _cell(x: float | None, width: int, fmt: str = ".5g", sign: str = "") -> str:
    """A table cell: ``-`` for a figure that is not there (a plan not simulated)."""
    return f"{'-':>{width}}" if x is None or not math.isfinite(x) else f"{x:>{sign}{width}{fmt}}"


def lanes(plan: Plan) -> int:
    """Replicas of the pipeline (1: a single pipeline)."""
    return max(s.replicas for s in plan.stages)


def precision_counts(plan: Plan) -> dict[str, int]:
    """Op count per precision, in order of first use."""
    counts: dict[str, int] = {}
    for p in plan.op_precision:
        counts[p] = counts.get(p, 0) + 1
    return counts


def precision_mix(plan: Plan) -> str:
    """``int8:120 fp16:26``: op count per precision, most used first."""
    return " ".join(f"{k}:{v}" for k, v in sorted(precision_counts(plan).items(), key=lambda kv: -kv[1]))


def _cluster_precisions(plan: Plan) -> str:
    """One precision, or each with its op count, least used first ("fp8 on 96 ops, bf16
    on 195 ops")."""
    counts = precision_counts(plan)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{p} on {n} ops" for p, n in sorted(counts.items(), key=lambda x: x[1]))


def plan_difference(problem: Problem, winner: Plan, plan: Plan, max_names: int = 2) -> str:
    """What ``plan`` changes against ``winner``, in words a user compares plans by:
    stage/lane shape, the ops that move to another stage, the ops at another precision."""
    check_instance("problem", problem, Problem)
    check_instance("winner", winner, Plan)
    check_instance("plan", plan, Plan)
    check_int("max_names", max_names, 0)
    if plan == winner:
        return "winner" if plan is winner else "same as the winner"
    names = [op.name for op in problem.graph.ops]
    parts = []
    ws, ps = len(winner.used_stages()), len(plan.used_stages())
    if ws != ps:
        parts.append(f"{ps} stages (winner {ws})")
    if lanes(winner) != lanes(plan):
        parts.append(f"{lanes(plan)} lanes (winner {lanes(winner)})")
    moved = [v for v in range(len(names)) if plan.op_stage[v] != winner.op_stage[v]]
    if moved and ws == ps:
        shown = ", ".join(f"{names[v]} {winner.op_stage[v]}->{plan.op_stage[v]}" for v in moved[:max_names])
        parts.append(f"{len(moved)} op{'s' if len(moved) > 1 else ''} moved ({shown}"
                     + (", ..." if len(moved) > max_names else "") + ")")
    prec = [v for v in range(len(names)) if plan.op_precision[v] != winner.op_precision[v]]
    if prec:
        shown = ", ".join(f"{names[v]} {plan.op_precision[v]}" for v in prec[:max_names])
        parts.append(f"{len(prec)} op{'s' if len(prec) > 1 else ''} at another precision ({shown}"
                     + (", ..." if len(prec) > max_names else "") + ")")
    if not parts and [s.devices for s in plan.stages] != [s.devices for s in winner.stages]:
        parts.append("same stages on other devices")
    return "; ".join(parts) or "same assignment"


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def _path(name: str, value: object) -> str | Path:
    """A file or folder argument: a str or a Path (an open file, None or a NUL byte is refused)."""
    return check_path(name, value)


@dataclass(frozen=True)
class SolveReport:
    """Ranked plans (best simulated throughput first) and the solver's outcome.

    ``solver``: status, objective, proven bound and gap (``model.SolveResult``; for a
    coarsened solve they are the coarse problem's). ``coarse_ops``: the coarse op count,
    None when the graph was solved as it is. ``dropped``: plans the solver returned that
    were not ranked (simulated memory overflow, or a budget broken on the original
    graph), each with the reason. ``cut_short``: what the time limit or a Ctrl-C left
    undone, one line each (the solver's, then the ranking's: plans not simulated).
    ``interrupted``: a Ctrl-C stopped the run (the plans are the best found so far)."""

    problem: Problem
    solver: SolveResult
    plans: tuple[RankedPlan, ...]
    coarse_ops: int | None = None
    options: SolveOptions | None = None
    dropped: tuple[tuple[Plan, str], ...] = ()
    cut_short: tuple[str, ...] = ()
    interrupted: bool = False
    interrupted_by: str = ""   # the signal that interrupted ("Ctrl-C" or "SIGTERM")

    @property
    def best(self) -> RankedPlan:
        return self.plans[0]

    @property
    def gap(self) -> float:
        return self.solver.gap

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: ``solver.{status,objective_s,bound_s,gap,...}`` and
        ``plans[]`` with the simulated figures and the full plan."""
        p, g, s = self.problem, self.problem.graph, self.solver
        winner = self.best.plan
        return _json_safe({
            "workload": g.name, "mode": g.mode, "topology": p.topology.name,
            "precisions_allowed": list(p.precisions), "microbatches": p.microbatches,
            **({"comm": p.comm} if p.exposed else {}),
            "solver": {"space": s.space, "status": s.status, "objective_s": s.objective_s, "bound_s": s.bound_s,
                       "gap": s.gap, "seconds": s.seconds, "build_seconds": s.build_seconds,
                       "binaries": s.n_binaries, "constraints": s.n_constraints, "coarse_ops": self.coarse_ops,
                       "time_limit_s": self.options.time_limit_s if self.options is not None else None,
                       "cut_short": list(self.cut_short), "interrupted": self.interrupted},
            "plans": [{
                "rank": r.rank, "milp_period_s": r.milp_period_s, **_sim_figures(r),
                "stages": len(r.plan.used_stages()), "lanes": lanes(r.plan),
                "sensitivity": r.plan.predicted.get("sensitivity"),
                "differs_from_winner": plan_difference(p, winner, r.plan),
                "precisions": {op.name: r.plan.op_precision[v] for v, op in enumerate(g.ops)},
                "model_iteration_s": r.plan.predicted.get("model_iteration_s"),
                "configuration": r.plan.predicted.get("cluster_point"),
                "plan": plan_to_dict(r.plan, p),
            } for r in self.plans],
            "dropped": [{"reason": why, "plan": plan_to_dict(plan, p)} for plan, why in self.dropped],
            "warnings": list(g.import_warnings),
        })

    def table(self) -> str:
        """The human-readable table: one row per plan, what each differs in from the
        winner, then the solver's line."""
        p, g, s = self.problem, self.problem.graph, self.solver
        if s.analytic:
            return self._cluster_table()
        winner = self.best.plan
        lines = [f"{g.name} ({g.mode}) on {p.topology.name}: {len(g.ops)} ops, "
                 f"{p.topology.n_devices} devices, precisions {','.join(p.precisions)}"
                 + (", exposed communication" if p.exposed else ""),
                 f"{'rank':>4} {'MILP period':>12} {'sim period':>12} {'ideal sim':>12} {'samples/s':>11} "
                 + (f"{'per step/s':>11} " if p.training else "")
                 + f"{'stages':>6} {'lanes':>5} {'peak MiB':>9}  precision mix / differs from the winner in"]
        for r in self.plans:
            note = precision_mix(r.plan) if r.rank == 1 else plan_difference(p, winner, r.plan)
            x = r.sim
            lines.append(f"{r.rank:>4} {r.milp_period_s:>12.5g} {_cell(x and x.period_s, 12)} "
                         f"{_cell(r.ideal_period_s, 12)} {_cell(x and x.throughput_per_s, 11)} "
                         + (f"{_cell(x and x.step_throughput_per_s, 11)} " if p.training else "")
                         + f"{len(r.plan.used_stages()):>6} {lanes(r.plan):>5} "
                         f"{_cell(x and max(x.peak_memory_bytes) / 2**20, 9, '.1f')}  {note}")
        gap = "n/a" if s.gap is None else f"{100 * s.gap:.2f} %"
        size = (f"{s.n_binaries} binaries, {s.n_constraints} constraints" if s.n_constraints
                 else "no MILP built (the heuristics' plan and bounds)")
        lines.append(f"solver: {s.status}, objective {s.objective_s:.6g} s, proven bound "
                     f"{s.bound_s:.6g} s, gap {gap}, {s.seconds:.1f} s solve + {s.build_seconds:.1f} s build, {size}")
        if s.hook_objective_s is not None:
            hb = f"{s.hook_bound_s:.6g} s" if s.hook_bound_s is not None else "none proven"
            lines.append(f"note: under the extra_constraints the MILP's own objective is {s.hook_objective_s:.6g} s "
                         f"(its bound {hb}); the objective, bound and periods above re-score the plan by "
                         "distplan's model, which leaves those rows out")
        if self.interrupted:
            lines.append(self._interrupted_note())
        elif s.status != "optimal":
            lines.append(f"note: the solver stopped at '{s.status}' before proving its gap target; "
                         "the plans above are the best found, with the gap shown")
        for what in self.cut_short:
            lines.append(f"note: cut short: {what}")
        if not self.best.simulated:
            lines.append("note: not simulated: '-' marks the simulated figures the time limit (or an interruption) left out; "
                         "the MILP period is the model's")
        if self.coarse_ops is not None:
            lines.append(f"note: solved on a {self.coarse_ops}-op coarsening of the {p.n_ops}-op graph; the bound "
                         "and gap above are for the coarse problem, periods are for the expanded plans on the "
                         "original graph")
        if p.training:
            lines.append("note: samples/s is the steady rate; per step/s counts one optimizer step over all "
                         f"{p.microbatches} microbatches (fill, drain, exposed all-reduce, optimizer update)")
        for _, why in self.dropped:
            lines.append(f"note: a plan the solver returned was dropped: {why}")
        for what in g.import_warnings:
            lines.append(f"warning: {what}")
        return "\n".join(lines)

    def _interrupted_note(self) -> str:
        return (f"note: interrupted ({self.interrupted_by or 'Ctrl-C'}): the plans above are the best found so "
                "far, with the bound proven so far")

    def _cluster_table(self) -> str:
        """The table of a cluster-space solve (model.cluster): configuration, the analytic
        and the simulated iteration, step and steady throughput, peak memory."""
        p, g, s = self.problem, self.problem.graph, self.solver
        # a cp plan's problem is one context rank's: seq / cp tokens, microbatches x cp
        cp = int(self.plans[0].plan.predicted.get("context_parallel", 1)) if self.plans else 1
        shape = (f"{p.microbatches // cp} microbatches of {g.batch_size} (global batch "
                 f"{p.microbatches * g.batch_size // cp})")
        if cp > 1:
            shape += (f", {g.seq_len * cp:,} tokens a sequence, split over cp {cp} (the table's problem is one "
                      f"context rank's: {g.seq_len:,} tokens, {p.microbatches} microbatches; samples/s count "
                      "whole sequences)")
        lines = [f"{g.name} ({g.mode}) on {p.topology.name}: {len(g.ops)} ops, {p.topology.n_devices} devices, "
                 + shape,
                 (f"{'rank':>4} {'model iter s':>12} {'sim iter s':>12} {'error':>7} {'per step/s':>11} "
                  if p.training else f"{'rank':>4} {'model lat s':>12} {'sim lat s':>12} {'error':>7} {'per req/s':>11} ")
                 + f"{'samples/s':>11} {'peak MiB':>9}  configuration"]
        for r in self.plans:
            model = float(r.plan.predicted.get("model_iteration_s", float("nan")))
            x = r.sim
            err = model / x.iteration_s - 1 if x is not None and x.iteration_s > 0 else None
            how = [r.plan.predicted.get("cluster_point", "?")]
            if s.space == "cluster":
                how.append(_cluster_precisions(r.plan))
            elif any(st.shares for st in r.plan.stages):
                how.append("shares " + " / ".join(",".join(map(str, st.shares)) for st in r.plan.stages if st.shares))
            if r.plan.stages[0].replicas > 1 and r.plan.stages[0].zero == 3:   # no reduction after the run
                how.append("layers gathered and reduce-scattered one by one")
            elif r.plan.stages[0].replicas > 1:
                how.append(f"{r.plan.dp_allreduce} reduction" + (", overlapped" if r.plan.overlap_grad_reduce else ""))
            lines.append(f"{r.rank:>4} {model:>12.5g} {_cell(x and x.iteration_s, 12)} {_cell(err, 7, '.2%', '+')} "
                         f"{_cell(x and x.step_throughput_per_s / cp, 11)} {_cell(x and x.throughput_per_s / cp, 11)} "
                         f"{_cell(x and max(x.peak_memory_bytes) / 2**20, 9, '.1f')}  {'; '.join(how)}")
        gap = "n/a" if s.gap is None else f"{100 * s.gap:.2f} %"
        ex = s.explored[0] if s.explored else {}
        lines.append(f"solver: {s.space} space, {s.status}, best analytic {'iteration' if p.training else 'latency'} "
                     f"{s.objective_s:.6g} s, proven "
                     f"bound {s.bound_s:.6g} s, gap {gap}, {s.seconds:.1f} s; {ex.get('points', 0):,} points: "
                     f"{ex.get('visited', 0):,} visited ({ex.get('infeasible', 0):,} over memory), "
                     f"{ex.get('pruned', 0):,} pruned by bound")
        ranked_by = ("simulated " + ("iteration" if p.training else "latency of one microbatch")
                     if self.best.simulated else "analytic " + ("iteration" if p.training else "latency")
                     + " (not simulated)")
        lines.append("note: the bound holds over the declared space (README: the cluster plan space) under the "
                     f"analytic model; plans are ranked by the {ranked_by}"
                     if s.bound_kind == BoundKind.ANALYTIC else
                     "note: the bound is the fleet's ideal (all work spread over every device by speed, no bubble, "
                     f"no communication; README: the fleet plan space); plans are ranked by the {ranked_by}")
        if self.interrupted:
            lines.append(self._interrupted_note())
        for what in self.cut_short:
            lines.append(f"note: cut short: {what}")
        if not self.best.simulated:
            model = float(self.best.plan.predicted.get("model_iteration_s", float("nan")))
            unit = (f"{p.microbatches * g.batch_size / cp / model:.5g} samples per step" if p.training
                    else f"{model:.5g} s per request")
            lines.append("note: not simulated: '-' marks the simulated figures the time limit (or an interruption) left out; under the "
                         f"analytic model rank 1 runs {unit} (not checked against the device memory by the "
                         "simulator)")
        for _, why in self.dropped:
            lines.append(f"note: a plan the solver returned was dropped: {why}")
        for what in g.import_warnings:
            lines.append(f"warning: {what}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def write_plan(self, path: str | Path, rank: int = 1) -> None:
        """The plan of ``rank`` (1: the winner) as a self-contained plan file (it embeds
        the graph and topology; ``python -m distplan.sim FILE`` replays it)."""
        save_plan(self.ranked(rank).plan, self.problem, _path("path", path))

    def write_json(self, path: str | Path) -> None:
        """The ``--json`` document (:meth:`to_json`) as a file, written atomically."""
        write_json_atomic(_path("path", path), self.to_json(), "report JSON file", indent=1, default=float)

    def write_trace(self, path: str | Path, rank: int = 1) -> None:
        """Chrome/Perfetto trace of a plan's realistic simulation (needs ``solve(trace=True)``)."""
        from distplan.sim.trace import write_chrome_trace

        out = _path("path", path)   # the arguments first, then what the plan needs
        self._simulated(rank, "a trace")
        write_chrome_trace(self.plans[rank - 1].sim, self.problem, out)

    def write_report(self, folder: str | Path, rank: int = 1) -> list[Path]:
        """placement.png, trace.json and timeline.png of a plan; returns the paths."""
        from distplan.api.plots import write_report

        out = Path(_path("folder", folder))   # the arguments first, then what the plan needs
        try:
            if out.exists() and not out.is_dir():
                raise DistplanError(f"folder {str(out)!r} is a file, not a folder; give write_report a folder name")
        except OSError as e:   # a name too long, no permission...
            raise DistplanError(f"folder {str(out)[:80]!r} cannot be made: {e.strerror or e}") from None
        self._simulated(rank, "a report")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:   # a name too long, no permission...
            raise DistplanError(f"folder {str(out)[:80]!r} cannot be made: {e.strerror or e}") from None
        return write_report(self.problem, self.plans[rank - 1], out)

    def ranked(self, rank: int) -> RankedPlan:
        """The plan of ``rank``: 1 (the winner) to ``len(plans)``; anything else (0, -1,
        past the last, not a whole number) is a DistplanError saying the ranks there are."""
        if not is_int(rank) or not 1 <= rank <= len(self.plans):
            raise DistplanError(f"rank must be a whole number from 1 (the winner) to {len(self.plans)} (the plans "
                                f"this report ranked), got {rank!r}")
        return self.plans[rank - 1]

    def _simulated(self, rank: int, what: str) -> None:
        """Raise DistplanError when the plan of ``rank`` was not simulated, or simulated
        without its events (``what`` needs them)."""
        r = self.ranked(rank)
        if r.simulated and getattr(r.sim, "events", None) is None:
            raise DistplanError(f"{what} needs the simulation's events, which this report did not keep; solve with "
                                "distplan.solve(problem, options, trace=True)")
        if not r.simulated:
            why = next((c for c in self.cut_short if "simulation skipped" in c), "the time limit")
            raise DistplanError(f"{what} needs the simulated plan, and the plan of rank {rank} was not simulated "
                                f"({why.split(';')[0].removeprefix('ranking: ')}); give a longer --time-limit")
